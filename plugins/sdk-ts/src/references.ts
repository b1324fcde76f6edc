// Reference: an object a parent names (its `spec.configRef`, a selector in
// its spec), which the host looks up and appends to `ctx.related`. What a
// plugin's optional `references(parent, config)` answers (the WIT
// `references` interface); each kind must be declared with
// `Manifest.references`, so that the host watches it and a change to an
// object a parent names reconciles that parent.
import type * as wit from 'kubeplug:plugin/references@0.1.0';
import type { Resource } from './manifest.js';

/** Objects of `resource` a parent names: the one called `name`, or every one
 * whose labels hold all of `labels` (exactly one of the two is set).
 * `namespace` undefined means the parent's; only a cluster-scoped parent
 * names another (one of the plugin's namespaces). Ignored for
 * cluster-scoped kinds. */
export class Reference {
  private constructor(
    readonly resource: Resource,
    readonly name: string | undefined,
    readonly labels: [string, string][] | undefined,
    readonly namespace: string | undefined,
  ) {}

  /** The object of `resource` named `name` (must not be empty). */
  static named(resource: Resource, name: string, namespace?: string): Reference {
    return new Reference(resource, name, undefined, namespace);
  }

  /** Every object of `resource` whose labels hold all of `labels` (must not
   * be empty: that would select a whole namespace). */
  static labelled(resource: Resource, labels: Record<string, string>, namespace?: string): Reference {
    return new Reference(resource, undefined, Object.entries(labels), namespace);
  }

  toWit(): wit.Reference {
    return {
      resource: { ...this.resource },
      namespace: this.namespace,
      target:
        this.labels === undefined
          ? { tag: 'name', val: this.name ?? '' }
          : { tag: 'labels', val: this.labels.map(([k, v]) => [k, v] as [string, string]) },
    };
  }
}
