/// <reference path="./interfaces/kubeplug-plugin-admission.d.ts" />
/// <reference path="./interfaces/kubeplug-plugin-conversion.d.ts" />
/// <reference path="./interfaces/kubeplug-plugin-log.d.ts" />
/// <reference path="./interfaces/kubeplug-plugin-reads.d.ts" />
/// <reference path="./interfaces/kubeplug-plugin-reconciler.d.ts" />
/// <reference path="./interfaces/kubeplug-plugin-references.d.ts" />
/// <reference path="./interfaces/kubeplug-plugin-types.d.ts" />
declare module 'kubeplug:plugin/plugin-with-admission@0.1.0' {
  export type * as KubeplugPluginLog010 from 'kubeplug:plugin/log@0.1.0'; // import kubeplug:plugin/log@0.1.0
  export type * as KubeplugPluginTypes010 from 'kubeplug:plugin/types@0.1.0'; // import kubeplug:plugin/types@0.1.0
  export * as references from 'kubeplug:plugin/references@0.1.0'; // export kubeplug:plugin/references@0.1.0
  export * as admission from 'kubeplug:plugin/admission@0.1.0'; // export kubeplug:plugin/admission@0.1.0
  export * as conversion from 'kubeplug:plugin/conversion@0.1.0'; // export kubeplug:plugin/conversion@0.1.0
  export * as reads from 'kubeplug:plugin/reads@0.1.0'; // export kubeplug:plugin/reads@0.1.0
  export * as reconciler from 'kubeplug:plugin/reconciler@0.1.0'; // export kubeplug:plugin/reconciler@0.1.0
}
