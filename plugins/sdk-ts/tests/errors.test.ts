// A bug's error names where it was thrown: the plugin's own frames, mapped
// through the line table `build` embeds (scripts/line-map.mjs), the SDK's
// left out, bounded; errors thrown on purpose carry no trace.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InvalidInput, MAX_FRAMES, MAX_TRACE, toWitError, trace, type LineTable } from '@kubeplug/sdk';

// A bundle of 5 lines: 1-2 the SDK's, 3-5 the plugin's src/plugin.ts.
const TABLE: LineTable = {
  file: 'plugin.js',
  sources: ['../sdk-ts/src/export.ts', 'src/plugin.ts', 'src/util.ts'],
  sdk: [true, false, false],
  lines: [[0, 60], [0, 61], [1, 14], [2, 3], 0],
};

// As SpiderMonkey (componentize-js) writes a stack: innermost first.
const STACK = [
  'helper@plugin.js:4:9',
  'reconcile@plugin.js:3:15',
  'exportPlugin/reconcile/<@plugin.js:2:50',
  'call@plugin.js:1:17',
  'export_reconciler_0_1_0$reconcile@/tmp/x/sources/initializer.js:1350:28',
  '',
].join('\n');

test("a bug's trace: the plugin's frames, outermost first, mapped to its sources", () => {
  assert.equal(trace(STACK, TABLE), 'src/plugin.ts:14 in reconcile → src/util.ts:3 in helper');
});

test('a trace is bounded: the outermost frame, the innermost ones, a count between', () => {
  const deep = Array.from({ length: 40 }, () => 'recurse@plugin.js:4:9').concat(['reconcile@plugin.js:3:15']);
  const frames = trace(deep.join('\n'), TABLE).split(' → ');
  assert.equal(frames.length, MAX_FRAMES + 1);
  assert.equal(frames[0], 'src/plugin.ts:14 in reconcile');
  assert.equal(frames[1], '… 33 more');
  assert.equal(frames[frames.length - 1], 'src/util.ts:3 in recurse');
  assert.ok(trace(deep.join('\n'), TABLE).length <= MAX_TRACE);
});

test('without a line table: bundle positions, down to the SDK wrappers', () => {
  assert.equal(trace(STACK), 'plugin.js:3 in reconcile → plugin.js:4 in helper');
  assert.equal(trace(undefined), '');
});

test('the WIT error: a bug with its name and trace, an answer as it is', () => {
  const bug = new TypeError('x is undefined');
  bug.stack = STACK;
  (globalThis as any)[Symbol.for('kubeplug.lines')] = TABLE;
  try {
    assert.deepEqual(toWitError(bug), {
      tag: 'failed',
      val: 'TypeError: x is undefined (at src/plugin.ts:14 in reconcile → src/util.ts:3 in helper)',
    });
    const plain = new Error('boom');
    plain.stack = STACK;
    assert.equal(toWitError(plain).val, 'boom (at src/plugin.ts:14 in reconcile → src/util.ts:3 in helper)');
    const refused = new InvalidInput('spec.x is required');
    refused.stack = STACK;
    assert.deepEqual(toWitError(refused), { tag: 'invalid-input', val: 'spec.x is required' });
    assert.deepEqual(toWitError('a string'), { tag: 'failed', val: 'a string' });
  } finally {
    delete (globalThis as any)[Symbol.for('kubeplug.lines')];
  }
});
