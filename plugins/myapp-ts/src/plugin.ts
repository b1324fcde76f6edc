// myapp, ported from plugins/myapp (Rust): a `MyApp` (example.com/v1alpha1)
// becomes a Deployment named `<name>-deploy`; its status reports the phase and
// the available replicas. Every answer (children, status, conditions, errors)
// matches the Rust plugin's: it passes plugins/myapp/fixtures/ (host/kubeplug/tests/plugins.rs).
// Its `mutate` defaults `spec.image` and `spec.replicas` on create and update,
// as the Rust one does.
import {
  Condition,
  Context,
  exportPlugin,
  InvalidInput,
  Kinds,
  Manifest,
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

/** The Deployment, keys in sorted order as serde_json's `json!` writes them. */
function deployment(ctx: Context, app: MyApp) {
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
        metadata: { labels },
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

function status(ctx: Context, app: MyApp) {
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
  const conditions = previousConditions(ctx.status);
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
  }
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
    ).owns(Kinds.Deployment),

  reconcile(ctx) {
    const app = readParent(ctx.parent);
    if (app.replicas < 0) {
      throw new InvalidInput(`spec.replicas must not be negative, got ${app.replicas}`);
    }
    return new Response().child(deployment(ctx, app)).status(status(ctx, app));
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
export const admission = exported.admission;
export const conversion = exported.conversion;
