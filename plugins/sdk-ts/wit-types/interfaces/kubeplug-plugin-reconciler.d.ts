/// <reference path="./kubeplug-plugin-types.d.ts" />
declare module 'kubeplug:plugin/reconciler@0.1.0' {
  /**
   * Validate `config` (JSON) and describe the plugin. Called once at load;
   * an error refuses the plugin with the plugin's own message.
   */
  export function manifest(config: string): PluginManifest;
  /**
   * Decide the desired children and status for one parent.
   * 
   * When the host calls it: once a parent's changes (its own, its
   * children's, its related objects') have been quiet for a moment
   * (`--debounce-ms`), so a burst of them is one call that sees all of
   * them. The host does not call it for the watch event of the status it
   * just wrote for the parent: everything a plugin could decide from
   * reading its own status back it could decide when it returned it; a
   * plugin that must look again later asks with `requeue-after-seconds`.
   * 
   * When a call is skipped: when its inputs are those of the parent's
   * last successful call and that call wrote nothing (no child created,
   * updated or pruned, no status, no parent patch, no requeue asked). The
   * inputs that count are the request's `parent`, `observed` and `related`
   * objects (each without `metadata.resourceVersion`; the host drops
   * other managers' `managedFields` before caching), `config`, the
   * plugin's digest and its grant. `now` and `entropy` do not count: a
   * plugin that decides by the clock asks for a requeue. A requeue, a
   * resync, a retry after a failure, a new leader, an upgrade and a shadow
   * run always call.
   */
  export function reconcile(request: Request): Response;
  /**
   * Clean up for a parent that is being deleted (only called for plugins
   * that declare a finalizer).
   */
  export function finalize(request: Request): FinalizeResponse;
  export type PluginManifest = import('kubeplug:plugin/types@0.1.0').PluginManifest;
  export type Request = import('kubeplug:plugin/types@0.1.0').Request;
  export type Response = import('kubeplug:plugin/types@0.1.0').Response;
  export type FinalizeResponse = import('kubeplug:plugin/types@0.1.0').FinalizeResponse;
  export type Error = import('kubeplug:plugin/types@0.1.0').Error;
}
