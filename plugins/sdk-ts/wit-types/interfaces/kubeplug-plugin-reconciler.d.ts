/// <reference path="./kubeplug-plugin-types.d.ts" />
declare module 'kubeplug:plugin/reconciler@0.1.0' {
  /**
   * Validate `config` (JSON) and describe the plugin. Called once at load;
   * an error refuses the plugin with the plugin's own message.
   */
  export function manifest(config: string): PluginManifest;
  /**
   * Decide the desired children and status for one parent.
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
