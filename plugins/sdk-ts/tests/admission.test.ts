// Admission and conversion without Wasm: the export objects exportPlugin
// makes (what componentize-js binds), on WIT-shaped values; and myapp-ts's
// mutate. Run by plugins/sdk-ts/test.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type * as wit from 'kubeplug:plugin/admission@0.1.0';
import {
  allow,
  deny,
  entryExports,
  exportPlugin,
  InvalidConfig,
  InvalidInput,
  Manifest,
  Resource,
  Response,
  type KubeObject,
  type Plugin,
} from '@kubeplug/sdk';
import * as myappModule from '../../myapp-ts/src/plugin.js';

const WIDGET = Resource.namespaced('example.com', 'v1', 'Widget', 'widgets');
const OBJ = { apiVersion: 'example.com/v1', kind: 'Widget', metadata: { name: 'w' }, spec: { size: 1 } };

/** A plugin that defines none of validate, mutate, convert. */
const bare: Plugin<any> = {
  manifest(config) {
    if (config.bad) throw new InvalidConfig('bad config');
    return Manifest.composite('widgets', '0.1.0', WIDGET);
  },
  reconcile: () => new Response(),
};

function request(
  operation: wit.Operation,
  object?: unknown,
  oldObject?: unknown,
  more: Partial<wit.AdmissionRequest> = {},
): wit.AdmissionRequest {
  return {
    operation,
    object: object === undefined ? undefined : JSON.stringify(object),
    oldObject: oldObject === undefined ? undefined : JSON.stringify(oldObject),
    user: { username: 'u', groups: ['g'] },
    dryRun: false,
    config: '{}',
    now: '2026-11-29T18:00:00Z',
    ...more,
  };
}

test('defaults: allow, leave as is, convert nothing', () => {
  const { admission, conversion } = exportPlugin(bare);
  for (const op of ['create', 'update', 'delete'] as const) {
    const obj = op === 'delete' ? undefined : OBJ;
    assert.deepEqual(admission.validate(request(op, obj, OBJ)), { tag: 'ok', val: { tag: 'allowed', val: [] } });
  }
  assert.deepEqual(admission.mutate(request('create', OBJ)), { tag: 'ok', val: undefined });
  // Objects already at the version pass unchanged, byte for byte.
  const texts = ['{"apiVersion": "example.com/v1", "kind": "Widget", "x": 1.0}'];
  assert.deepEqual(conversion.convert(texts, 'example.com/v1', '{}'), { tag: 'ok', val: texts });
  assert.deepEqual(conversion.convert([JSON.stringify(OBJ)], 'example.com/v2', '{}'), {
    tag: 'err',
    val: { tag: 'failed', val: 'widgets converts no versions: cannot convert example.com/v1 to example.com/v2' },
  });
  assert.deepEqual(conversion.convert(['{"kind": "Widget"}'], 'example.com/v2', '{"bad": true}'), {
    tag: 'err',
    val: {
      tag: 'failed',
      val: 'this plugin converts no versions: cannot convert an object without apiVersion to example.com/v2',
    },
  });
});

test('inputs that do not parse', () => {
  const { admission, conversion } = exportPlugin(bare);
  const bad = admission.validate(request('create', OBJ, undefined, { config: '{nope' }));
  assert.equal(bad.tag === 'err' && bad.val.tag, 'invalid-config');
  const obj = admission.mutate({ ...request('create'), object: '{' });
  assert.ok(obj.tag === 'err' && obj.val.tag === 'invalid-input' && obj.val.val.startsWith('object is not JSON: '));
  const conv = conversion.convert(['['], 'example.com/v1', '{}');
  assert.ok(conv.tag === 'err' && conv.val.tag === 'invalid-input' && conv.val.val.startsWith('object to convert is not JSON: '));
});

const gate: Plugin = {
  manifest: () => Manifest.composite('gate', '0.1.0', WIDGET),
  reconcile: () => new Response(),
  validate(req) {
    const spec = (req.object ?? req.oldObject)!.spec;
    if (spec.boom) return (null as any).boom;
    if (spec.invalid) throw new InvalidInput('nope');
    if (spec.wrong) return true as any;
    if (req.operation === 'update' && req.object!.spec.size !== req.oldObject!.spec.size) {
      return deny('spec.size is immutable', [['spec.size', 'may not change'], { field: 'spec', message: 'm' }]);
    }
    if (req.user.username === 'intern' || req.dryRun) return allow(['careful']).warn('twice');
    return allow();
  },
  mutate(req) {
    const spec = req.object!.spec;
    if (spec.mode === 'same') return req.object;
    if (spec.mode === 'list') return [req.object] as any;
    if (spec.mode === 'none') return undefined;
    spec.color ??= 'blue';
    return req.object;
  },
  convert: (objects: KubeObject[], apiVersion: string) => objects.map((o) => ({ ...o, apiVersion })),
};

test('allow and deny map to the verdict', () => {
  const { admission } = exportPlugin(gate);
  assert.deepEqual(admission.validate(request('create', OBJ)), { tag: 'ok', val: { tag: 'allowed', val: [] } });
  const warned = { tag: 'ok', val: { tag: 'allowed', val: ['careful', 'twice'] } };
  assert.deepEqual(admission.validate(request('create', OBJ, undefined, { user: { username: 'intern', groups: [] } })), warned);
  assert.deepEqual(admission.validate(request('create', OBJ, undefined, { dryRun: true })), warned);
  assert.deepEqual(admission.validate(request('update', { ...OBJ, spec: { size: 2 } }, OBJ)), {
    tag: 'ok',
    val: {
      tag: 'denied',
      val: {
        message: 'spec.size is immutable',
        causes: [
          { field: 'spec.size', message: 'may not change' },
          { field: 'spec', message: 'm' },
        ],
      },
    },
  });
});

test('errors map as reconcile errors do', () => {
  const { admission } = exportPlugin(gate);
  assert.deepEqual(admission.validate(request('create', { spec: { invalid: true } })), {
    tag: 'err',
    val: { tag: 'invalid-input', val: 'nope' },
  });
  const boom = admission.validate(request('create', { spec: { boom: true } }));
  assert.ok(boom.tag === 'err' && boom.val.tag === 'failed', JSON.stringify(boom));
  assert.deepEqual(admission.validate(request('create', { spec: { wrong: true } })), {
    tag: 'err',
    val: { tag: 'failed', val: 'validate() must return a Verdict (allow() or deny())' },
  });
  assert.deepEqual(admission.mutate(request('create', { spec: { mode: 'list' } })), {
    tag: 'err',
    val: { tag: 'failed', val: 'mutate() must return the whole object, or undefined' },
  });
});

test('mutate returns the whole object, or none when unchanged', () => {
  const { admission, conversion } = exportPlugin(gate);
  const out = admission.mutate(request('create', OBJ));
  assert.ok(out.tag === 'ok' && out.val !== undefined);
  assert.deepEqual(JSON.parse(out.val!), { ...OBJ, spec: { size: 1, color: 'blue' } });
  // Handed back as it came, with nothing to default, or not at all: none.
  for (const spec of [{ mode: 'same' }, { size: 1, color: 'red' }, { mode: 'none' }]) {
    assert.deepEqual(admission.mutate(request('create', { ...OBJ, spec })), { tag: 'ok', val: undefined });
  }
  // Key order does not make a change.
  const reordered = '{"spec":{"color":"red","size":1},"metadata":{"name":"w"},"kind":"Widget","apiVersion":"example.com/v1"}';
  assert.deepEqual(admission.mutate({ ...request('create'), object: reordered }), { tag: 'ok', val: undefined });
  const conv = conversion.convert([JSON.stringify(OBJ)], 'example.com/v2', '{}');
  assert.ok(conv.tag === 'ok');
  assert.deepEqual(conv.val.map((o) => JSON.parse(o)), [{ ...OBJ, apiVersion: 'example.com/v2' }]);
});

test('the request as the plugin sees it', () => {
  const seen: any[] = [];
  const spy: Plugin = { ...bare, validate: (req) => (seen.push(req), allow()) };
  exportPlugin(spy).admission.validate(
    request('update', OBJ, OBJ, { config: '{"a": 1}', dryRun: true, user: { username: 'x', groups: ['g1', 'g2'] } }),
  );
  const req = seen[0];
  assert.deepEqual(
    [req.operation, req.object, req.oldObject, req.config, req.name, req.user, req.dryRun],
    ['update', OBJ, OBJ, { a: 1 }, 'w', { username: 'x', groups: ['g1', 'g2'] }, true],
  );
});

test('entryExports: a module that exports only reconciler and reads gets the rest', () => {
  const exported = exportPlugin(gate);
  const filled = entryExports({ reconciler: exported.reconciler, reads: exported.reads });
  assert.equal(filled.admission, exported.admission);
  assert.equal(filled.conversion, exported.conversion);
  // A module's own win; a hand-written reconciler gets nothing.
  const own = { validate: () => ({ tag: 'ok', val: { tag: 'allowed', val: [] } }) };
  assert.equal(entryExports({ reconciler: exported.reconciler, admission: own }).admission, own);
  assert.deepEqual(entryExports({ reconciler: {} }), { references: undefined, admission: undefined, conversion: undefined });
});

test('offered: what the plugin itself defines, never the defaults', () => {
  assert.deepEqual(exportPlugin(bare).admission.offered('{}'), []);
  assert.deepEqual(exportPlugin({ ...bare, mutate: () => undefined }).admission.offered('{}'), ['mutate']);
  // In the WIT enum's order, whatever the order of definition.
  assert.deepEqual(exportPlugin(gate).admission.offered(''), ['validate', 'mutate', 'convert']);
  const converts: Plugin<any> = { ...bare, convert: (objects: KubeObject[]) => objects, validate: () => allow() };
  assert.deepEqual(exportPlugin(converts).admission.offered('{}'), ['validate', 'convert']);
  // A class's methods count as well.
  class Gate {
    manifest() {
      return Manifest.composite('gate', '0.1.0', WIDGET);
    }
    reconcile() {
      return new Response();
    }
    mutate() {
      return undefined;
    }
  }
  assert.deepEqual(exportPlugin(new Gate()).admission.offered('{}'), ['mutate']);
  // What `build` adds to a module that exports only reconciler and reads.
  const only = exportPlugin({ ...bare, validate: () => allow() });
  assert.deepEqual(entryExports({ reconciler: only.reconciler, reads: only.reads }).admission.offered('{}'), ['validate']);
});

test('offered: nothing when the config is refused (manifest reports it)', () => {
  const picky: Plugin<any> = {
    ...gate,
    config(raw: any) {
      if (raw.picky) throw new InvalidConfig('picky');
      return raw;
    },
    manifest(config) {
      if (config.bad) throw new InvalidConfig('bad config');
      if (config.boom) return (null as any).boom;
      if (config.nothing) return undefined as any;
      // A decorator with children (its attachments): no longer refused.
      if (config.decorator) return Manifest.decorator('gate', '0.1.0', WIDGET).owns(WIDGET);
      return Manifest.composite('gate', '0.1.0', WIDGET);
    },
  };
  const { admission, reconciler } = exportPlugin(picky);
  assert.deepEqual(admission.offered('{}'), ['validate', 'mutate', 'convert']);
  assert.deepEqual(admission.offered('{"decorator": true}'), ['validate', 'mutate', 'convert']);
  assert.equal(reconciler.manifest('{"decorator": true}').tag, 'ok');
  for (const config of ['{nope', '{"picky": true}', '{"bad": true}', '{"boom": true}', '{"nothing": true}']) {
    assert.deepEqual(admission.offered(config), [], config);
    assert.equal(reconciler.manifest(config).tag, 'err', config);
  }
});

test('myapp-ts: mutate stores the defaults on create and update, never on delete', () => {
  const { admission, conversion } = exportPlugin(myappModule.myapp);
  // What the build exports is what exportPlugin made.
  assert.ok(typeof myappModule.admission.mutate === 'function');
  const app = (spec?: unknown) => ({
    apiVersion: 'example.com/v1alpha1',
    kind: 'MyApp',
    metadata: { name: 'a', namespace: 'n' },
    ...(spec === undefined ? {} : { spec }),
  });
  const mutate = (op: wit.Operation, spec?: unknown) => {
    const r = admission.mutate(request(op, op === 'delete' ? undefined : app(spec), op === 'create' ? undefined : app(spec)));
    assert.equal(r.tag, 'ok');
    return r.tag === 'ok' && r.val !== undefined ? JSON.parse(r.val) : undefined;
  };
  for (const op of ['create', 'update'] as const) {
    for (const spec of [{}, { image: null }, { image: '' }]) {
      assert.deepEqual(mutate(op, spec), app({ image: 'nginx:1.27', replicas: 1 }), `${op} ${JSON.stringify(spec)}`);
    }
    assert.equal(mutate(op, { image: 'x', replicas: 0 }), undefined);
    assert.deepEqual(mutate(op, { image: 'x' })?.spec, { image: 'x', replicas: 1 });
    assert.deepEqual(mutate(op, { replicas: 3 })?.spec, { image: 'nginx:1.27', replicas: 3 });
  }
  assert.equal(mutate('delete', {}), undefined);
  assert.equal(mutate('create'), undefined);
  assert.equal(mutate('create', 'nope'), undefined);
  // It offers mutate alone; no validate or convert: the defaults.
  assert.deepEqual(admission.offered('{}'), ['mutate']);
  assert.deepEqual(myappModule.admission.offered('{}'), ['mutate']);
  assert.deepEqual(admission.validate(request('create', app({}))), { tag: 'ok', val: { tag: 'allowed', val: [] } });
  assert.deepEqual(conversion.convert([JSON.stringify(app({}))], 'example.com/v1', '{}'), {
    tag: 'err',
    val: { tag: 'failed', val: 'myapp converts no versions: cannot convert example.com/v1alpha1 to example.com/v1' },
  });
});
