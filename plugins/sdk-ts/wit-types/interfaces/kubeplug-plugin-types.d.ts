declare module 'kubeplug:plugin/types@0.1.0' {
  /**
   * A Kubernetes resource type, as the API server names it.
   */
  export interface ApiResource {
    /**
     * API group; empty for the core group (Pods, Services, Secrets).
     */
    group: string,
    /**
     * API version within the group, e.g. `v1`.
     */
    version: string,
    /**
     * Kind, e.g. `StatefulSet`.
     */
    kind: string,
    /**
     * Plural resource name used in URLs, e.g. `statefulsets`.
     */
    plural: string,
    /**
     * True for namespaced resources, false for cluster-scoped ones.
     */
    namespaced: boolean,
  }
  /**
   * How the plugin acts on its parents.
   * # Variants
   * 
   * ## `"composite"`
   * 
   * Owns child objects: the host applies the desired children with a
   * controller ownerReference to the parent, prunes children the plugin
   * no longer wants, and writes the desired status.
   * ## `"decorator"`
   * 
   * Decorates objects others own: the host merges the labels and
   * annotations of the response's `parent-patch` into the parent, and
   * may attach children to it (of the manifest's child kinds), owned,
   * pruned and fenced as a composite's are; it never writes status.
   */
  export type Mode = 'composite' | 'decorator';
  /**
   * Where the value of a label selector entry comes from.
   */
  export type LabelValue = LabelValueLiteral | LabelValueParentName;
  /**
   * A fixed value.
   */
  export interface LabelValueLiteral {
    tag: 'literal',
    val: string,
  }
  /**
   * The parent's `metadata.name`.
   */
  export interface LabelValueParentName {
    tag: 'parent-name',
  }
  /**
   * One `key=value` entry of a label selector.
   */
  export interface LabelMatch {
    key: string,
    value: LabelValue,
  }
  /**
   * Objects the plugin wants to see but does not own, e.g. the Pods of a
   * Database. They are looked up in the parent's namespace (or cluster-wide
   * for cluster-scoped parents) by an equality label selector.
   */
  export interface RelatedResource {
    resource: ApiResource,
    /**
     * All entries must match (AND). An empty list matches nothing.
     */
    matchLabels: Array<LabelMatch>,
  }
  /**
   * What a plugin is: read by the host once, when it loads the plugin.
   */
  export interface PluginManifest {
    /**
     * Plugin name: lowercase DNS label, used in the field manager
     * (`kubeplug/<name>`), metrics, events and logs.
     */
    name: string,
    /**
     * Plugin version, semver, shown by `inspect` and the host's status.
     */
    version: string,
    /**
     * The parent resource this plugin reconciles. One plugin per parent.
     */
    parent: ApiResource,
    mode: Mode,
    /**
     * Kinds of children the plugin may return (a decorator's are its
     * attachments). Anything else in a response is refused by the host
     * and never written.
     */
    children: Array<ApiResource>,
    /**
     * Objects to observe and pass in `request.related`.
     */
    related: Array<RelatedResource>,
    /**
     * Only reconcile parents in these namespaces; empty means all.
     */
    namespaces: Array<string>,
    /**
     * If set, the host keeps this finalizer on every parent and calls
     * `finalize` when the parent is deleted.
     */
    finalizer?: string,
    /**
     * Reconcile every parent at least this often, even without events.
     */
    resyncSeconds?: number,
  }
  /**
   * A Kubernetes Event to record on the parent.
   */
  export interface Event {
    /**
     * `Normal` or `Warning`.
     */
    warning: boolean,
    /**
     * Short UpperCamelCase reason, e.g. `SecretCreated`.
     */
    reason: string,
    /**
     * Human readable message.
     */
    message: string,
  }
  /**
   * Everything the host observed for one parent.
   */
  export interface Request {
    /**
     * The parent object (JSON).
     */
    parent: string,
    /**
     * The parent's children that the host observed (JSON), i.e. objects of
     * the manifest's child kinds whose controller ownerReference points to
     * the parent and that carry the label `kubeplug.io/plugin: <name>`
     * (the host puts it on every child it writes). Includes children the
     * plugin did not ask for (e.g. from an older version), which lets it
     * adopt or keep them.
     */
    observed: Array<string>,
    /**
     * Related objects (JSON) selected per the manifest, then the objects
     * the parent's references name (see the `references` interface).
     */
    related: Array<string>,
    /**
     * The plugin's configuration document (JSON; `{}` when none is given).
     */
    config: string,
    /**
     * Current time, RFC 3339 UTC (e.g. `2026-11-29T18:00:00Z`). Plugins use
     * this instead of a clock so that they stay deterministic.
     */
    now: string,
    /**
     * 32 random bytes, fresh for every call, for plugins that must create
     * secrets (e.g. a password). The plugin stays a pure function of its
     * inputs: tests pass fixed bytes.
     */
    entropy: Uint8Array,
  }
  /**
   * A patch of the parent's metadata (decorator mode).
   */
  export interface MetadataPatch {
    /**
     * Labels to set (merged; keys not listed are left alone).
     */
    labels: Array<[string, string]>,
    /**
     * Annotations to set (merged; keys not listed are left alone).
     */
    annotations: Array<[string, string]>,
  }
  /**
   * What the plugin wants.
   */
  export interface Response {
    /**
     * The complete set of desired children (JSON). Each must carry
     * apiVersion, kind and metadata.name; the namespace defaults to the
     * parent's. Observed children that are missing here are pruned.
     * 
     * Create-only children: a child annotated
     * `kubeplug.io/create-only: "true"` is created once with a plain
     * create ("already exists" for an object this parent controls counts
     * as created) and never updated or re-applied afterwards, whatever
     * later answers say. Use it for generated credentials and anything
     * else that must not change after creation. It is still pruned when
     * no longer returned.
     */
    children: Array<string>,
    /**
     * Desired `.status` of the parent (JSON object), if any.
     */
    status?: string,
    /**
     * Labels/annotations to merge into the parent (decorator mode).
     */
    parentPatch?: MetadataPatch,
    /**
     * Reconcile again after this many seconds even without events.
     */
    requeueAfterSeconds?: number,
    /**
     * Events to record on the parent.
     */
    events: Array<Event>,
  }
  /**
   * Answer to `finalize`.
   */
  export interface FinalizeResponse {
    /**
     * True once cleanup is complete: the host then removes the finalizer.
     */
    done: boolean,
    /**
     * Ask again after this many seconds while not done.
     */
    requeueAfterSeconds?: number,
    events: Array<Event>,
  }
  /**
   * A failure the plugin reports on purpose (a trap is never one of these).
   */
  export type Error = ErrorInvalidConfig | ErrorInvalidInput | ErrorFailed;
  /**
   * The configuration document is not acceptable.
   */
  export interface ErrorInvalidConfig {
    tag: 'invalid-config',
    val: string,
  }
  /**
   * The parent (or an observed object) is not acceptable.
   */
  export interface ErrorInvalidInput {
    tag: 'invalid-input',
    val: string,
  }
  /**
   * Anything else; the host records it and retries with backoff.
   */
  export interface ErrorFailed {
    tag: 'failed',
    val: string,
  }
}
