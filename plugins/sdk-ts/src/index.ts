// @kubeplug/sdk: write a kubeplug reconcile plugin in TypeScript.
// See ../README.md; the WIT contract is wit/plugin.wit.
export { PluginError, InvalidConfig, InvalidInput, Failed, toWitError, trace, MAX_FRAMES, MAX_TRACE, type LineTable } from './errors.js';
export { Manifest, Resource, Kinds, ParentName, type LabelValue, type Mode } from './manifest.js';
export { Context, isKind, type KubeObject, type KindRef } from './context.js';
export { Reference } from './references.js';
export { Response, FinalizeResponse, Event, CREATE_ONLY } from './response.js';
export { Condition, setCondition, time, isI64, type ConditionFields } from './conditions.js';
export { log } from './log.js';
export {
  AdmissionRequest,
  Verdict,
  allow,
  deny,
  convertNone,
  type Cause,
  type Operation,
  type UserInfo,
} from './admission.js';
export { exportPlugin, entryExports, type Plugin } from './export.js';
