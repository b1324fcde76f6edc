// Manifest: what a plugin reconciles, as a builder (mirrors the Rust SDK's
// manifest.rs; field meanings in wit/plugin.wit).
import type * as wit from 'kubeplug:plugin/types@0.1.0';

/** A Kubernetes resource type. */
export interface Resource {
  group: string;
  version: string;
  kind: string;
  plural: string;
  namespaced: boolean;
}

export const Resource = {
  /** A namespaced resource type. */
  namespaced(group: string, version: string, kind: string, plural: string): Resource {
    return { group, version, kind, plural, namespaced: true };
  },
  /** A cluster-scoped resource type. */
  cluster(group: string, version: string, kind: string, plural: string): Resource {
    return { group, version, kind, plural, namespaced: false };
  },
  /** `apiVersion` as objects carry it: `group/version`, or `version` for core. */
  apiVersion(r: Resource): string {
    return r.group === '' ? r.version : `${r.group}/${r.version}`;
  },
};

/** Common resource types (the Rust SDK's `Resource::of::<K>()`). */
export const Kinds = {
  Deployment: Resource.namespaced('apps', 'v1', 'Deployment', 'deployments'),
  StatefulSet: Resource.namespaced('apps', 'v1', 'StatefulSet', 'statefulsets'),
  Service: Resource.namespaced('', 'v1', 'Service', 'services'),
  Secret: Resource.namespaced('', 'v1', 'Secret', 'secrets'),
  ConfigMap: Resource.namespaced('', 'v1', 'ConfigMap', 'configmaps'),
  Pod: Resource.namespaced('', 'v1', 'Pod', 'pods'),
} as const;

/** A selector value: a fixed string, or `ParentName` (the parent's name). */
export type LabelValue = string | typeof ParentName;
/** Selector value: the parent's `metadata.name`. */
export const ParentName: unique symbol = Symbol('parent-name');

export type Mode = 'composite' | 'decorator';

/** What a plugin is. Build with `Manifest.composite` / `Manifest.decorator`. */
export class Manifest {
  mode: Mode = 'composite';
  children: Resource[] = [];
  relatedKinds: { resource: Resource; matchLabels: [string, LabelValue][] }[] = [];
  namespaceList: string[] = [];
  finalizerName?: string;
  resyncSeconds?: number;
  /** Kinds read only as metadata (see `metadataOnly`). */
  metadataOnlyKinds: Resource[] = [];
  /** Kinds the plugin's references may name (see `references`). */
  referenceKinds: Resource[] = [];

  private constructor(
    readonly name: string,
    readonly version: string,
    readonly parent: Resource,
  ) {}

  /** A composite plugin (owns children) for `parent`. */
  static composite(name: string, version: string, parent: Resource): Manifest {
    return new Manifest(name, version, parent);
  }

  /** A decorator plugin for `parent`: patches its labels and annotations,
   * and may attach children to it (its attachments, declared with `owns`);
   * it never writes status. */
  static decorator(name: string, version: string, parent: Resource): Manifest {
    const m = new Manifest(name, version, parent);
    m.mode = 'decorator';
    return m;
  }

  /** Declare a child kind the plugin may return. A decorator's are its
   * attachments: owned by the decorated object, labelled, pruned when no
   * longer returned, and fenced as a composite's children are. */
  owns(resource: Resource): this {
    this.children.push(resource);
    return this;
  }

  /** Observe objects of `resource` whose labels match `matchLabels`
   * (`{key: "value"}` or `{key: ParentName}`). */
  related(resource: Resource, matchLabels: Record<string, LabelValue>): this {
    this.relatedKinds.push({ resource, matchLabels: Object.entries(matchLabels) });
    return this;
  }

  /** Restrict the plugin to these namespaces. */
  namespaces(...namespaces: string[]): this {
    this.namespaceList.push(...namespaces);
    return this;
  }

  /** Keep `finalizer` on every parent and call `finalize` on deletion. */
  finalizer(finalizer: string): this {
    this.finalizerName = finalizer;
    return this;
  }

  /** Reconcile every parent at least this often. */
  resync(seconds: number): this {
    this.resyncSeconds = seconds;
    return this;
  }

  /** Read only `apiVersion`, `kind` and `metadata` of `resource` (a related
   * kind, or a decorator's parent): the host then caches it metadata-only. */
  metadataOnly(resource: Resource): this {
    this.metadataOnlyKinds.push(resource);
    return this;
  }

  /** Let the plugin's `references(parent, config)` name objects of
   * `resource` (each kind must be granted, `references:`): the host watches
   * the kind and hands the objects a parent names to `reconcile` and
   * `finalize`. This is what the optional `references.kinds` export answers. */
  references(resource: Resource): this {
    this.referenceKinds.push(resource);
    return this;
  }

  toWit(): wit.PluginManifest {
    return {
      name: this.name,
      version: this.version,
      parent: { ...this.parent },
      mode: this.mode,
      children: this.children.map((r) => ({ ...r })),
      related: this.relatedKinds.map((r) => ({
        resource: { ...r.resource },
        matchLabels: r.matchLabels.map(([key, value]) => ({
          key,
          value:
            value === ParentName
              ? { tag: 'parent-name' as const }
              : { tag: 'literal' as const, val: value as string },
        })),
      })),
      namespaces: [...this.namespaceList],
      finalizer: this.finalizerName,
      resyncSeconds: this.resyncSeconds,
    };
  }
}
