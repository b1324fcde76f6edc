// Errors a plugin reports on purpose. They become the WIT `error` variant;
// any other thrown value becomes `failed(message)` (see export.ts), so a plugin
// never traps on an exception.

/** Base class of the errors that map to a WIT `error` case. */
export abstract class PluginError extends Error {
  /** The WIT variant tag. */
  abstract readonly kind: 'invalid-config' | 'invalid-input' | 'failed';
}

/** The configuration document is not acceptable (WIT `invalid-config`). */
export class InvalidConfig extends PluginError {
  readonly kind = 'invalid-config' as const;
  constructor(message: string) {
    super(message);
    this.name = 'InvalidConfig';
  }
}

/** The parent or an observed object is not acceptable (WIT `invalid-input`). */
export class InvalidInput extends PluginError {
  readonly kind = 'invalid-input' as const;
  constructor(message: string) {
    super(message);
    this.name = 'InvalidInput';
  }
}

/** Anything else; the host retries with backoff (WIT `failed`). */
export class Failed extends PluginError {
  readonly kind = 'failed' as const;
  constructor(message: string) {
    super(message);
    this.name = 'Failed';
  }
}

/** The WIT error of any thrown value: our classes keep their kind and
 * message (an answer, not a crash: no trace); any other Error is `failed`
 * with its message (after its name unless that is plain `Error`) and where
 * it was thrown (`trace`), e.g. `TypeError: x is undefined (at
 * src/plugin.ts:14 in reconcile → src/util.ts:3 in helper)`; anything else
 * is `failed` with its text. */
export function toWitError(e: unknown): import('kubeplug:plugin/types@0.1.0').Error {
  if (e instanceof PluginError) return { tag: e.kind, val: e.message };
  if (e instanceof Error) {
    let text = e.name && e.name !== 'Error' ? `${e.name}: ${e.message}` : e.message;
    const where = trace(e.stack);
    if (!where) return { tag: 'failed', val: text };
    if (text.length > MAX_EXCEPTION_TEXT) text = text.slice(0, MAX_EXCEPTION_TEXT - 1) + '…';
    return { tag: 'failed', val: `${text}${TRACE_OPEN}${where})` };
  }
  return { tag: 'failed', val: String(e) };
}

/** At most this many frames are named (the outermost one and the innermost
 * ones, the rest counted), in at most `MAX_TRACE` characters: the trace goes
 * into one log line, an event and a condition. */
export const MAX_FRAMES = 8;
export const MAX_TRACE = 2048;
/** An error's own text is clipped to this when a trace follows it, so that
 * the host's 16 KiB limit on an error never cuts the trace off. */
const MAX_EXCEPTION_TEXT = 8192;
/** What opens the trace in the error's text, and what separates frames (as
 * the Python SDK writes them). */
export const TRACE_OPEN = ' (at ';
export const TRACE_SEP = ' → ';

/** Where `build` puts the bundle's line table (scripts/line-map.mjs): for
 * each line of the bundle, the plugin's source file and line it came from;
 * `sdk` marks the SDK's own files (and the generated entry). */
export interface LineTable {
  file: string;
  sources: string[];
  sdk: boolean[];
  /** Per bundle line (index 0 = line 1): [source index, line], or 0. */
  lines: ([number, number] | 0)[];
}
const LINES = Symbol.for('kubeplug.lines');

/** One frame of a stack, SpiderMonkey's `fn@file:line:col` (componentize-js)
 * or V8's `at fn (file:line:col)` (node). */
function parseFrame(text: string): { fn: string; file: string; line: number } | undefined {
  const sm = /^(.*)@(.*):(\d+):\d+$/.exec(text);
  if (sm) return { fn: sm[1], file: sm[2], line: Number(sm[3]) };
  const v8 = /^\s*at (?:(.*) \()?(.*):(\d+):\d+\)?$/.exec(text);
  if (v8) return { fn: v8[1] ?? '', file: v8[2], line: Number(v8[3]) };
  return undefined;
}

/** A function's name as a stack names it, shortened: SpiderMonkey's
 * `outer/inner/<` becomes `inner`. */
function fnName(fn: string): string {
  const parts = fn.replace(/[/<]+$/, '').split('/').filter((p) => p && p !== '<');
  const last = parts.length ? parts[parts.length - 1] : '';
  return last.replace(/^(async\*|Object\.|Function\.)/, '') || '<anonymous>';
}

/** The frames of `stack` in the plugin's own code, outermost first, each
 * `file:line in function`, joined by `TRACE_SEP`; bounded as `MAX_FRAMES` and
 * `MAX_TRACE` say; '' when none is the plugin's. With the line table `build`
 * embeds (`table`, default: the bundle's), files and lines are the plugin's
 * sources (relative to its directory) and the SDK's frames are left out;
 * without one, the frames are the bundle's, down to the SDK's wrappers. */
export function trace(stack: string | undefined, table?: LineTable): string {
  if (!stack) return '';
  const lines = table ?? ((globalThis as any)[LINES] as LineTable | undefined);
  let frames: string[] = [];
  for (const text of stack.split('\n')) {
    const f = parseFrame(text);
    if (!f) continue;
    if (lines) {
      if (!f.file.endsWith(lines.file)) continue;
      const at = lines.lines[f.line - 1];
      if (!at || lines.sdk[at[0]]) continue;
      frames.push(`${lines.sources[at[0]]}:${at[1]} in ${fnName(f.fn)}`);
    } else {
      // The SDK's export wrappers are all defined in exportPlugin.
      if (f.fn.startsWith('exportPlugin/')) break;
      frames.push(`${f.file.slice(f.file.lastIndexOf('/') + 1)}:${f.line} in ${fnName(f.fn)}`);
    }
  }
  frames = frames.reverse();
  let leftOut = 0;
  while (frames.length > 2 && (frames.length > MAX_FRAMES || frames.join(TRACE_SEP).length > MAX_TRACE)) {
    // Keep the outermost frame (where the call came in) and the innermost
    // ones (where it went wrong).
    frames.splice(1, 1);
    leftOut++;
  }
  if (leftOut) frames.splice(1, 0, `… ${leftOut} more`);
  const joined = frames.join(TRACE_SEP);
  return joined.length <= MAX_TRACE ? joined : joined.slice(0, MAX_TRACE - 1) + '…';
}
