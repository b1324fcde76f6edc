// myapp, ported from plugins/myapp (Rust): a `MyApp` (example.com/v1alpha1)
// becomes a Deployment named `<name>-deploy`; its status reports the phase and
// the available replicas. Every answer (children, status, conditions, errors)
// matches the Rust plugin's: it passes plugins/myapp/fixtures/ (host/kubeplug/tests/plugins.rs).
// Its `mutate` defaults `spec.image` and `spec.replicas` on create and update,
// as the Rust one does. `spec.configRef.name` names a ConfigMap in the MyApp's
// namespace (a reference): the hash of its content goes into the pod template,
// so a change to it rolls the Deployment, and the `ConfigReady` condition says
// whether it was found.
import {
  Condition,
  Context,
  exportPlugin,
  InvalidInput,
  Kinds,
  Manifest,
  Reference,
  Resource,
  Response,
  setCondition,
  time,
  type Plugin,
} from '@kubeplug/sdk';
import { int, isObject, optString, sortedKeys, unexpected } from './serde.js';

/** Image used when `spec.image` is empty: a pinned, widely mirrored tag. */
export const DEFAULT_IMAGE = 'nginx:1.27';
/** The Rust crate's version (CARGO_PKG_VERSION of plugins/myapp). */
const VERSION = '0.1.0';

interface MyApp {
  replicas: number;
  image?: string;
}

/** The pod template annotation that carries the ConfigMap's hash. */
export const CONFIG_HASH = 'example.com/config-hash';

/** A ConfigMap's content, as the Rust `ConfigMapView` reads it. */
interface ConfigMapView {
  data?: Record<string, string>;
  binaryData?: Record<string, string>;
}

/** `spec.configRef.name` when it is a non-empty string, else ''. */
export function configRef(parent: unknown): string {
  const name = (parent as any)?.spec?.configRef?.name;
  return typeof name === 'string' ? name : '';
}

/** UTF-8 bytes of `s` (code point by code point). */
function utf8(s: string): number[] {
  const out: number[] = [];
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (c < 0x80) out.push(c);
    else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
    else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
  }
  return out;
}

/** Byte order of UTF-8 (that of code points; JS's `<` compares UTF-16 units). */
function byCodePoint(a: string, b: string): number {
  const x = Array.from(a, (c) => c.codePointAt(0)!);
  const y = Array.from(b, (c) => c.codePointAt(0)!);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    if (x[i] !== y[i]) return x[i] - y[i];
  }
  return x.length - y.length;
}

const FNV_OFFSET = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;
const U64 = (1n << 64n) - 1n;

/** FNV-1a 64 over `data` then `binaryData` (as the API server serves it:
 * base64), keys in byte order, each entry `section NUL key NUL value NUL`; 16
 * lowercase hex digits. Stable across languages, so every port rolls the
 * Deployment alike. */
export function configHash(configMap: ConfigMapView): string {
  let h = FNV_OFFSET;
  for (const section of ['data', 'binaryData'] as const) {
    const entries = configMap[section] ?? {};
    for (const key of Object.keys(entries).sort(byCodePoint)) {
      for (const part of [section, key, entries[key]]) {
        for (const byte of [...utf8(part), 0]) {
          h = ((h ^ BigInt(byte)) * FNV_PRIME) & U64;
        }
      }
    }
  }
  return h.toString(16).padStart(16, '0');
}

/** A `BTreeMap<String, String>`, or undefined when it does not read. */
function stringMap(v: unknown): Record<string, string> | undefined | null {
  if (v === undefined || v === null) return undefined;
  if (!isObject(v) || !Object.values(v).every((x) => typeof x === 'string')) return null;
  return v as Record<string, string>;
}

/** The referenced ConfigMap as the Rust plugin finds it: the first of that
 * name in the parent's namespace that reads as a ConfigMapView. */
function configMap(ctx: Context, name: string): ConfigMapView | undefined {
  for (const o of ctx.relatedOf(Kinds.ConfigMap)) {
    if (o?.metadata?.name !== name || (o?.metadata?.namespace ?? '') !== ctx.namespace) continue;
    const data = stringMap(o.data);
    const binaryData = stringMap(o.binaryData);
    if (data === null || binaryData === null) continue;
    return { data, binaryData };
  }
  return undefined;
}

/** Name of the Deployment of MyApp `name`. */
export const deploymentName = (name: string) => `${name}-deploy`;

/** Read the parent as the Rust plugin's `MyApp` struct does, with serde's
 * messages (checks `metadata` as the SDK's `Meta`, although only `spec` is
 * used, because serde refuses a parent whose metadata does not read). */
function readParent(parent: unknown): MyApp {
  try {
    if (!isObject(parent)) throw `invalid type: ${unexpected(parent)}, expected struct MyApp`;
    let app: MyApp | undefined;
    for (const key of sortedKeys(parent)) {
      if (key === 'metadata') readMeta(parent.metadata);
      if (key === 'spec') app = readSpec(parent.spec);
    }
    if (!('metadata' in parent)) throw 'missing field `metadata`';
    if (app === undefined) throw 'missing field `spec`';
    return app;
  } catch (e) {
    if (typeof e === 'string') throw new InvalidInput(`parent: ${e}`);
    throw e;
  }
}

function readMeta(meta: unknown): void {
  if (!isObject(meta)) throw `invalid type: ${unexpected(meta)}, expected struct Meta`;
  for (const key of sortedKeys(meta)) {
    const v = meta[key];
    switch (key) {
      case 'name':
      case 'namespace':
      case 'uid':
        optString(v);
        break;
      case 'generation':
        if (v !== null) int(v, 64);
        break;
      case 'labels':
      case 'annotations':
        if (v === null) break;
        if (!isObject(v)) throw `invalid type: ${unexpected(v)}, expected a map`;
        for (const k of sortedKeys(v)) optStringRequired(v[k]);
        break;
      case 'deletionTimestamp':
        if (v === null) break;
        if (typeof v !== 'string') throw `invalid type: ${unexpected(v)}, expected a string`;
        if (time(v) === null) throw 'not an RFC 3339 timestamp';
        break;
    }
  }
}

/** A `String` (not optional): null is refused. */
function optStringRequired(v: unknown): void {
  if (typeof v !== 'string') throw `invalid type: ${unexpected(v)}, expected a string`;
}

function readSpec(spec: unknown): MyApp {
  if (!isObject(spec)) throw `invalid type: ${unexpected(spec)}, expected struct MyAppSpec`;
  const app: MyApp = { replicas: 1 };
  for (const key of sortedKeys(spec)) {
    if (key === 'image') app.image = optString(spec.image);
    if (key === 'replicas') app.replicas = int(spec.replicas, 32);
  }
  return app;
}

/** The Deployment, keys in sorted order as serde_json's `json!` writes them;
 * `config` is the referenced ConfigMap, if found. */
function deployment(ctx: Context, app: MyApp, config?: ConfigMapView) {
  const selector = {
    'app.kubernetes.io/instance': ctx.name,
    'app.kubernetes.io/name': 'myapp',
  };
  const labels = {
    'app.kubernetes.io/instance': ctx.name,
    'app.kubernetes.io/managed-by': 'kubeplug',
    'app.kubernetes.io/name': 'myapp',
  };
  const image = app.image ? app.image : DEFAULT_IMAGE;
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { labels, name: deploymentName(ctx.name), namespace: ctx.namespace },
    spec: {
      replicas: app.replicas,
      selector: { matchLabels: selector },
      template: {
        metadata: {
          ...(config ? { annotations: { [CONFIG_HASH]: configHash(config) } } : {}),
          labels,
        },
        spec: { containers: [{ image, name: 'app' }] },
      },
    },
  };
}

/** `availableReplicas` of the observed Deployment as the Rust
 * `DeploymentView` reads it; `null` when that object does not read (the Rust
 * plugin then skips it, as if not observed). */
function availableOf(d: Record<string, any>): number | undefined | null {
  const status = d.status;
  if (status === undefined || status === null) return undefined;
  if (!isObject(status)) return null;
  const a = status.availableReplicas;
  if (a === undefined || a === null) return undefined;
  try {
    return int(a, 32);
  } catch {
    return null;
  }
}

/** The conditions of the previous status, read as the Rust `MyAppStatus`
 * (which requires `phase` and `availableReplicas`): none if it does not read. */
function previousConditions(status: unknown): Condition[] {
  if (!isObject(status)) return [];
  if (typeof status.phase !== 'string') return [];
  try {
    int(status.availableReplicas, 32);
    if (status.observedGeneration !== undefined && status.observedGeneration !== null) {
      int(status.observedGeneration, 64);
    }
  } catch {
    return [];
  }
  if (status.conditions === undefined) return [];
  return Condition.parseList(status.conditions) ?? [];
}

/** The status; `ref` is the configRef's name ('' for none), `config` the
 * ConfigMap it names, if found. */
function status(ctx: Context, app: MyApp, ref: string, config?: ConfigMapView) {
  const name = deploymentName(ctx.name);
  // find_map: the first Deployment of that name that reads.
  let observed = false;
  let available = 0;
  for (const d of ctx.observedOf(Kinds.Deployment)) {
    if (d?.metadata?.name !== name) continue;
    const a = availableOf(d);
    if (a === null) continue;
    observed = true;
    available = a ?? 0;
    break;
  }
  const want = app.replicas;
  const phase = !observed ? 'Pending' : available >= want ? 'Running' : 'Progressing';
  let conditions = previousConditions(ctx.status);
  const now = time(ctx.now);
  if (now !== null) {
    setCondition(conditions, {
      type: 'Available',
      status: phase === 'Running' ? 'True' : 'False',
      reason: phase,
      message: `${available}/${want} replicas available`,
      lastTransitionTime: now,
      observedGeneration: ctx.generation,
    });
    if (ref) {
      setCondition(conditions, {
        type: 'ConfigReady',
        status: config ? 'True' : 'False',
        reason: config ? 'Found' : 'NotFound',
        message: `ConfigMap ${ref} ${config ? 'found' : 'not found'}`,
        lastTransitionTime: now,
        observedGeneration: ctx.generation,
      });
    }
  }
  if (!ref) conditions = conditions.filter((c) => c.type !== 'ConfigReady');
  return {
    phase,
    availableReplicas: available,
    ...(ctx.generation !== undefined ? { observedGeneration: ctx.generation } : {}),
    conditions,
  };
}

export const myapp: Plugin = {
  manifest: () =>
    Manifest.composite(
      'myapp',
      VERSION,
      Resource.namespaced('example.com', 'v1alpha1', 'MyApp', 'myapps'),
    )
      .owns(Kinds.Deployment)
      .references(Kinds.ConfigMap),

  /** The ConfigMap `spec.configRef` names, in the MyApp's namespace. */
  references(parent) {
    const name = configRef(parent);
    return name ? [Reference.named(Kinds.ConfigMap, name)] : [];
  },

  reconcile(ctx) {
    const app = readParent(ctx.parent);
    if (app.replicas < 0) {
      throw new InvalidInput(`spec.replicas must not be negative, got ${app.replicas}`);
    }
    const ref = configRef(ctx.parent);
    const config = ref ? configMap(ctx, ref) : undefined;
    return new Response().child(deployment(ctx, app, config)).status(status(ctx, app, ref, config));
  },

  /** Store the defaults reconcile assumes, so that `kubectl get` shows them
   * (reconcile keeps assuming them, for MyApps stored before the webhook):
   * `spec.image` when missing, null or empty, `spec.replicas` when missing.
   * A spec that is not an object is the schema's to refuse. */
  mutate(req) {
    if (req.operation === 'delete') return undefined;
    const spec = req.object?.spec;
    if (!isObject(spec)) return undefined;
    let changed = false;
    if (spec.image === undefined || spec.image === null || spec.image === '') {
      spec.image = DEFAULT_IMAGE;
      changed = true;
    }
    if (!('replicas' in spec)) {
      spec.replicas = 1;
      changed = true;
    }
    return changed ? req.object : undefined;
  },
};

const exported = exportPlugin(myapp);
export const reconciler = exported.reconciler;
export const reads = exported.reads;
export const references = exported.references;
export const admission = exported.admission;
export const conversion = exported.conversion;
