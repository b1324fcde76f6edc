/// <reference path="./kubeplug-plugin-types.d.ts" />
declare module 'kubeplug:plugin/references@0.1.0' {
  /**
   * The kinds this plugin may reference, for `config`. Asked once at
   * load, after `manifest`: each must be allowed by the plugin's grant
   * (`references:`), or the plugin is refused with the reason. The host
   * watches them in the plugin's namespaces.
   */
  export function kinds(config: string): Array<ApiResource>;
  /**
   * What the plugin needs for `parent` (JSON), computed from the parent
   * alone: asked again only when the parent or the plugin changes. The
   * objects found are appended to the request's `related` (each once);
   * one that does not exist is simply absent, never an error. A change
   * to any object a parent references reconciles that parent. At most
   * 32 references per parent; an answer outside these rules fails the
   * reconcile with the reason, like an answer outside the fence.
   */
  export function references(parent: string, config: string): Array<Reference>;
  export type ApiResource = import('kubeplug:plugin/types@0.1.0').ApiResource;
  export type Error = import('kubeplug:plugin/types@0.1.0').Error;
  /**
   * Which objects of a kind a reference names.
   */
  export type Target = TargetName | TargetLabels;
  /**
   * The object with this `metadata.name`.
   */
  export interface TargetName {
    tag: 'name',
    val: string,
  }
  /**
   * Every object whose labels hold all these `key=value` pairs. An
   * empty list is refused: it would select a whole namespace.
   */
  export interface TargetLabels {
    tag: 'labels',
    val: Array<[string, string]>,
  }
  /**
   * One thing the plugin needs for a parent.
   */
  export interface Reference {
    /**
     * Of a kind the plugin named in `kinds`.
     */
    resource: ApiResource,
    /**
     * Where a namespaced kind is looked up: none means the parent's
     * namespace, the only one a namespaced parent may name (as with
     * Kubernetes' own references, a parent reads nothing outside its
     * namespace through them). A cluster-scoped parent names one of
     * the plugin's namespaces. Ignored for cluster-scoped kinds.
     */
    namespace?: string,
    target: Target,
  }
}
