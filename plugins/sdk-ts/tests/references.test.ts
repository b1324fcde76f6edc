// References without Wasm: what a plugin declares and names, as the export
// objects exportPlugin makes (what componentize-js binds) answer them on
// WIT-shaped values; Context.relatedNamed; and myapp-ts's configRef. Run by
// plugins/sdk-ts/test.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type * as wit from 'kubeplug:plugin/types@0.1.0';
import {
  Context,
  entryExports,
  exportPlugin,
  InvalidConfig,
  Kinds,
  Manifest,
  Reference,
  Resource,
  Response,
  type Plugin,
} from '@kubeplug/sdk';
import * as myappModule from '../../myapp-ts/src/plugin.js';

const WIDGET = Resource.namespaced('example.com', 'v1', 'Widget', 'widgets');
const PARENT = { apiVersion: 'example.com/v1', kind: 'Widget', metadata: { name: 'w', namespace: 'a' }, spec: {} };

/** Names what `spec.refs` asks for. */
const refers: Plugin<any> = {
  manifest(config) {
    if (config.bad) throw new InvalidConfig('bad config');
    return Manifest.composite('refers', '0.1.0', WIDGET)
      .owns(Kinds.Deployment)
      .references(Kinds.ConfigMap)
      .references(Kinds.Secret);
  },
  references: (parent) =>
    (parent.spec.refs ?? []).map((r: any) =>
      r.labels
        ? Reference.labelled(Kinds.Secret, r.labels, r.namespace)
        : Reference.named(Kinds.ConfigMap, r.name, r.namespace),
    ),
  reconcile: () => new Response(),
};

const plain: Plugin<any> = {
  manifest: () => Manifest.composite('plain', '0.1.0', WIDGET).owns(Kinds.Deployment),
  reconcile: () => new Response(),
};

test('kinds: what the manifest declares; nothing when the config is refused', () => {
  const { references } = exportPlugin(refers);
  assert.deepEqual(references.kinds('{}'), [Kinds.ConfigMap, Kinds.Secret]);
  assert.deepEqual(references.kinds('{"bad": true}'), []);
  assert.deepEqual(exportPlugin(plain).references.kinds('{}'), []);
});

test('references map to the WIT record; none by default', () => {
  const parent = { ...PARENT, spec: { refs: [{ name: 'c' }, { labels: { app: 'w', tier: 'db' }, namespace: 'a' }] } };
  assert.deepEqual(exportPlugin(refers).references.references(JSON.stringify(parent), '{}'), {
    tag: 'ok',
    val: [
      { resource: { ...Kinds.ConfigMap }, namespace: undefined, target: { tag: 'name', val: 'c' } },
      {
        resource: { ...Kinds.Secret },
        namespace: 'a',
        target: { tag: 'labels', val: [['app', 'w'], ['tier', 'db']] },
      },
    ],
  });
  assert.deepEqual(exportPlugin(plain).references.references(JSON.stringify(PARENT), '{}'), { tag: 'ok', val: [] });
});

test('references: errors keep their WIT case, wrong answers are failed', () => {
  const { references } = exportPlugin(refers);
  const bad = references.references('{', '{}');
  assert.equal(bad.tag === 'err' && bad.val.tag, 'invalid-input');
  assert.deepEqual(references.references(JSON.stringify(PARENT), '{not json').tag, 'err');
  const wrong = exportPlugin<any>({ ...plain, references: () => [{ name: 'c' }] as any });
  assert.deepEqual(wrong.references.references(JSON.stringify(PARENT), '{}'), {
    tag: 'err',
    val: { tag: 'failed', val: 'references() must return a list of Reference' },
  });
  const throws = exportPlugin<any>({ ...plain, references: (p) => p.spec.missing.name });
  const thrown = throws.references.references(JSON.stringify(PARENT), '{}');
  assert.equal(thrown.tag === 'err' && thrown.val.tag, 'failed');
});

test('entryExports adds references unless the module exports its own', () => {
  const exported = exportPlugin(refers);
  assert.equal(entryExports({ reconciler: exported.reconciler }).references, exported.references);
  const own = { kinds: () => [] };
  assert.equal(entryExports({ reconciler: exported.reconciler, references: own }).references, own);
});

function request(parent: unknown, related: unknown[] = []): wit.Request {
  return {
    parent: JSON.stringify(parent),
    observed: [],
    related: related.map((o) => JSON.stringify(o)),
    config: '{}',
    now: '2026-11-29T18:00:00Z',
    entropy: new Uint8Array(32),
  };
}

const cm = (name: string, namespace?: string) => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name, ...(namespace === undefined ? {} : { namespace }) },
});

test('relatedNamed: by kind and name, and namespace when given', () => {
  const ctx = new Context(request(PARENT, [cm('c', 'b'), cm('c', 'a'), cm('d')]), {});
  assert.deepEqual(ctx.relatedNamed(Kinds.ConfigMap, 'c'), cm('c', 'b'));
  assert.deepEqual(ctx.relatedNamed(Kinds.ConfigMap, 'c', 'a'), cm('c', 'a'));
  assert.deepEqual(ctx.relatedNamed({ apiVersion: 'v1', kind: 'ConfigMap' }, 'd', ''), cm('d'));
  assert.equal(ctx.relatedNamed(Kinds.Secret, 'c'), undefined);
  assert.equal(ctx.relatedNamed(Kinds.ConfigMap, 'e'), undefined);
});

test('myapp-ts: the config hash, as every port computes it', () => {
  const data = { data: { greeting: 'hello', LOG_LEVEL: 'debug' }, binaryData: { 'logo.png': 'iVBORw0KGgo=' } };
  assert.equal(myappModule.configHash(data), 'fbf2cb315d7bcbdf');
  assert.equal(myappModule.configHash({ ...data, data: { ...data.data, LOG_LEVEL: 'info' } }), '20a651e2c4af4014');
  assert.equal(myappModule.configHash({}), 'cbf29ce484222325');
});

test('myapp-ts: references the ConfigMap spec.configRef names', () => {
  const { references } = exportPlugin(myappModule.myapp);
  assert.deepEqual(references.kinds('{}'), [Kinds.ConfigMap]);
  const named = (spec: unknown) => references.references(JSON.stringify({ ...PARENT, spec }), '{}');
  assert.deepEqual(named({ configRef: { name: 's' } }), {
    tag: 'ok',
    val: [{ resource: { ...Kinds.ConfigMap }, namespace: undefined, target: { tag: 'name', val: 's' } }],
  });
  for (const spec of [{ configRef: { name: '' } }, { configRef: {} }, { configRef: 's' }, {}]) {
    assert.deepEqual(named(spec), { tag: 'ok', val: [] }, JSON.stringify(spec));
  }
});

test('myapp-ts: the ConfigMap found in its namespace rolls the pod template', () => {
  const { reconciler } = exportPlugin(myappModule.myapp);
  const app = {
    apiVersion: 'example.com/v1alpha1',
    kind: 'MyApp',
    metadata: { name: 'web', namespace: 'shop', generation: 2 },
    spec: { replicas: 1, configRef: { name: 'web-settings' } },
  };
  const settings = { ...cm('web-settings', 'shop'), data: { greeting: 'hello' } };
  const answer = (related: unknown[]) => {
    const r = reconciler.reconcile(request(app, related));
    assert.equal(r.tag, 'ok');
    const val = (r as { val: wit.Response }).val;
    const deployment = JSON.parse(val.children[0]);
    const conditions = JSON.parse(val.status!).conditions;
    return { annotations: deployment.spec.template.metadata.annotations, conditions };
  };
  const found = answer([{ ...settings, metadata: { name: 'web-settings', namespace: 'other' } }, settings]);
  assert.deepEqual(found.annotations, { 'example.com/config-hash': myappModule.configHash(settings) });
  assert.deepEqual(
    found.conditions.map((c: any) => [c.type, c.status, c.reason, c.message]),
    [
      ['Available', 'False', 'Pending', '0/1 replicas available'],
      ['ConfigReady', 'True', 'Found', 'ConfigMap web-settings found'],
    ],
  );
  const missing = answer([{ ...settings, metadata: { name: 'web-settings', namespace: 'other' } }]);
  assert.equal(missing.annotations, undefined);
  assert.deepEqual(missing.conditions[1].reason, 'NotFound');
});
