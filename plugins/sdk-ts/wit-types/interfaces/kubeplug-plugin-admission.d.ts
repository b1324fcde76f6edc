/// <reference path="./kubeplug-plugin-types.d.ts" />
declare module 'kubeplug:plugin/admission@0.1.0' {
  /**
   * Which of `validate`, `mutate` and `convert` the plugin implements,
   * for `config`. Asked once at load, after `manifest`: like every other
   * request of a plugin, each must be allowed by its grant (`admission:`,
   * `conversion:`), or the plugin is refused with the reason. A component
   * without this function offers the functions it exports.
   */
  export function offered(config: string): Array<Webhook>;
  /**
   * Allow or deny a create, update or delete of a parent. Called after the
   * API server's own checks and every mutation (the plugin's `mutate`
   * included); use it for what the CRD's schema cannot say: fields that
   * may not change, rules across fields, rules on the old object.
   */
  export function validate(request: AdmissionRequest): Verdict;
  /**
   * Default or normalize a parent on create and update: return the whole
   * object as it should be stored, or none to leave it as it is. The host
   * turns the difference into the JSON patch the API server applies and
   * refuses any change outside `spec`, `metadata.labels` and
   * `metadata.annotations` (and keys under `kubeplug.io/`). Mutations
   * may run more than once for one write: make them idempotent.
   */
  export function mutate(request: AdmissionRequest): string | undefined;
  export type Error = import('kubeplug:plugin/types@0.1.0').Error;
  /**
   * What the write does.
   * # Variants
   * 
   * ## `"create"`
   * 
   * ## `"update"`
   * 
   * ## `"delete"`
   */
  export type Operation = 'create' | 'update' | 'delete';
  /**
   * Who asks, as the API server authenticated them.
   */
  export interface UserInfo {
    username: string,
    groups: Array<string>,
  }
  /**
   * One write of an object of the plugin's parent kind.
   */
  export interface AdmissionRequest {
    operation: Operation,
    /**
     * The object as the write would store it (JSON), at the version of
     * the plugin's manifest; none on delete.
     */
    object?: string,
    /**
     * The stored object before the write (JSON); none on create.
     */
    oldObject?: string,
    user: UserInfo,
    /**
     * True when nothing will be stored (`kubectl --dry-run=server`).
     */
    dryRun: boolean,
    /**
     * The plugin's configuration document (JSON).
     */
    config: string,
    /**
     * Current time, RFC 3339 UTC.
     */
    now: string,
  }
  /**
   * Why one field is refused.
   */
  export interface FieldCause {
    /**
     * The field's path as `kubectl` prints it, e.g. `spec.engine`.
     */
    field: string,
    message: string,
  }
  /**
   * A refusal: the API server answers the write with `message` (HTTP 422)
   * and the causes.
   */
  export interface Denial {
    message: string,
    causes: Array<FieldCause>,
  }
  /**
   * A validation's answer.
   */
  export type Verdict = VerdictAllowed | VerdictDenied;
  /**
   * Allowed, with warnings shown to the client (e.g. by `kubectl`).
   */
  export interface VerdictAllowed {
    tag: 'allowed',
    val: Array<string>,
  }
  export interface VerdictDenied {
    tag: 'denied',
    val: Denial,
  }
  /**
   * A webhook a plugin offers.
   * # Variants
   * 
   * ## `"validate"`
   * 
   * ## `"mutate"`
   * 
   * ## `"convert"`
   */
  export type Webhook = 'validate' | 'mutate' | 'convert';
}
