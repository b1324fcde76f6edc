// Context: the request of one call, parsed, with typed accessors (mirrors the
// Rust SDK's context.rs).
import type * as wit from 'kubeplug:plugin/types@0.1.0';
import { InvalidInput } from './errors.js';
import { Resource } from './manifest.js';

/** A Kubernetes object as JSON. */
export type KubeObject = Record<string, any>;

/** Something that names a kind: a `Resource`, or `{apiVersion, kind}`. */
export type KindRef = Resource | { apiVersion: string; kind: string };

function apiVersionOf(k: KindRef): string {
  return 'apiVersion' in k ? k.apiVersion : Resource.apiVersion(k);
}

/** True if `object` is of kind `k` (same apiVersion and kind). */
export function isKind(object: KubeObject, k: KindRef): boolean {
  return object?.apiVersion === apiVersionOf(k) && object?.kind === k.kind;
}

function parse(what: string, text: string): KubeObject {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new InvalidInput(`${what} is not JSON: ${(e as Error).message}`);
  }
}

/** What the host observed for one parent, plus the plugin's configuration. */
export class Context<C = unknown> {
  /** The parent object. */
  readonly parent: KubeObject;
  /** Observed children of the parent (all declared child kinds). */
  readonly observed: KubeObject[];
  /** Related objects selected per the manifest, then those the parent's
   * references found. */
  readonly related: KubeObject[];
  /** Current time, RFC 3339 UTC. Use it instead of a clock. */
  readonly now: string;
  /** 32 random bytes from the host, fresh for every call. */
  readonly entropy: Uint8Array;

  constructor(
    request: wit.Request,
    /** The plugin's configuration, as `Plugin.config` returned it. */
    readonly config: C,
  ) {
    this.parent = parse('parent', request.parent);
    this.observed = request.observed.map((o) => parse('observed object', o));
    this.related = request.related.map((o) => parse('related object', o));
    this.now = request.now;
    this.entropy = request.entropy;
  }

  /** The parent's `metadata.name` ('' if none). */
  get name(): string {
    const n = this.parent?.metadata?.name;
    return typeof n === 'string' ? n : '';
  }

  /** The parent's `metadata.namespace` ('' for cluster-scoped parents). */
  get namespace(): string {
    const n = this.parent?.metadata?.namespace;
    return typeof n === 'string' ? n : '';
  }

  /** The parent's `metadata.generation` if it is an integer, for
   * `status.observedGeneration` (like Rust's `as_i64`). */
  get generation(): number | undefined {
    const g = this.parent?.metadata?.generation;
    return typeof g === 'number' && Number.isInteger(g) ? g : undefined;
  }

  /** The parent's current `.status` (undefined when it has none). */
  get status(): unknown {
    return this.parent?.status;
  }

  /** Observed children of kind `k`. */
  observedOf(k: KindRef): KubeObject[] {
    return this.observed.filter((o) => isKind(o, k));
  }

  /** The observed child of kind `k` named `name`, if any. */
  observedNamed(k: KindRef, name: string): KubeObject | undefined {
    return this.observed.find((o) => isKind(o, k) && o?.metadata?.name === name);
  }

  /** Related objects of kind `k`. */
  relatedOf(k: KindRef): KubeObject[] {
    return this.related.filter((o) => isKind(o, k));
  }

  /** The related object of kind `k` named `name` (and in `namespace`, if
   * given), if any: e.g. the one a reference named, which is absent when it
   * does not exist. */
  relatedNamed(k: KindRef, name: string, namespace?: string): KubeObject | undefined {
    return this.related.find(
      (o) =>
        isKind(o, k) &&
        o?.metadata?.name === name &&
        (namespace === undefined || (o?.metadata?.namespace ?? '') === namespace),
    );
  }
}
