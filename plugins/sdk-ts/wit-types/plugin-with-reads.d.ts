/// <reference path="./interfaces/kubeplug-plugin-log.d.ts" />
/// <reference path="./interfaces/kubeplug-plugin-reads.d.ts" />
/// <reference path="./interfaces/kubeplug-plugin-reconciler.d.ts" />
/// <reference path="./interfaces/kubeplug-plugin-types.d.ts" />
declare module 'kubeplug:plugin/plugin-with-reads@0.1.0' {
  export type * as KubeplugPluginLog010 from 'kubeplug:plugin/log@0.1.0'; // import kubeplug:plugin/log@0.1.0
  export type * as KubeplugPluginTypes010 from 'kubeplug:plugin/types@0.1.0'; // import kubeplug:plugin/types@0.1.0
  export * as reads from 'kubeplug:plugin/reads@0.1.0'; // export kubeplug:plugin/reads@0.1.0
  export * as reconciler from 'kubeplug:plugin/reconciler@0.1.0'; // export kubeplug:plugin/reconciler@0.1.0
}
