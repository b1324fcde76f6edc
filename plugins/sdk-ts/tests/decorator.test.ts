// A decorator's attachments without Wasm: it declares child kinds and returns
// children of them beside its parent patch, as the export objects
// exportPlugin makes (what componentize-js binds) answer on WIT-shaped
// values. The host fences them as a composite's children. Run by
// plugins/sdk-ts/test.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type * as wit from 'kubeplug:plugin/types@0.1.0';
import { exportPlugin, Kinds, Manifest, Resource, Response, type Plugin } from '@kubeplug/sdk';

const PDB = Resource.namespaced('policy', 'v1', 'PodDisruptionBudget', 'poddisruptionbudgets');

/** Attaches a budget to each Deployment annotated `example.com/budget`. */
const attacher: Plugin<any> = {
  manifest: () => Manifest.decorator('attacher', '0.1.0', Kinds.Deployment).owns(PDB).metadataOnly(Kinds.Deployment),
  reconcile(ctx) {
    const r = new Response().label('example.com/attached', 'true');
    if (ctx.parent.metadata?.annotations?.['example.com/budget']) {
      r.child({
        apiVersion: 'policy/v1',
        kind: 'PodDisruptionBudget',
        metadata: { name: `${ctx.name}-pdb` },
        spec: { minAvailable: 1 },
      });
    }
    return r;
  },
};

function request(parent: unknown): wit.Request {
  return {
    parent: JSON.stringify(parent),
    observed: [],
    related: [],
    config: '{}',
    now: '2026-11-29T18:00:00Z',
    entropy: new Uint8Array(32),
  };
}

test('a decorator may declare child kinds, its attachments', () => {
  const { reconciler, reads } = exportPlugin(attacher);
  const m = reconciler.manifest('{}');
  assert.equal(m.tag, 'ok');
  if (m.tag !== 'ok') return;
  assert.equal(m.val.mode, 'decorator');
  assert.deepEqual(m.val.children, [PDB]);
  assert.deepEqual(reads.metadataOnly('{}'), [Kinds.Deployment]);
});

test('a decorator returns its attachments beside its parent patch, and no status', () => {
  const { reconciler } = exportPlugin(attacher);
  const deployment = (annotations: Record<string, string>) => ({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'web', namespace: 'shop', uid: 'u', annotations },
    spec: {},
  });
  const patch = { labels: [['example.com/attached', 'true']], annotations: [] };
  const attached = reconciler.reconcile(request(deployment({ 'example.com/budget': '1' })));
  assert.equal(attached.tag, 'ok');
  if (attached.tag !== 'ok') return;
  assert.deepEqual(attached.val.children.map((c) => JSON.parse(c)), [
    { apiVersion: 'policy/v1', kind: 'PodDisruptionBudget', metadata: { name: 'web-pdb' }, spec: { minAvailable: 1 } },
  ]);
  assert.deepEqual(attached.val.parentPatch, patch);
  assert.equal(attached.val.status, undefined);
  // Not returned: the host prunes the budget it attached before.
  const bare = reconciler.reconcile(request(deployment({})));
  assert.equal(bare.tag, 'ok');
  if (bare.tag !== 'ok') return;
  assert.deepEqual(bare.val.children, []);
  assert.deepEqual(bare.val.parentPatch, patch);
});
