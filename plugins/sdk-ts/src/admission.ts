// Admission and conversion of the plugin's parent kind: what a plugin's
// optional `validate`, `mutate` and `convert` are handed and answer (mirrors
// the Rust SDK's admission.rs). The host serves them as the API server's
// webhooks only for what the platform's grant allows (`admission:`,
// `conversion: true`); a plugin that defines none of them answers like one
// without them: every write allowed, nothing defaulted, no version converted.
import type * as wit from 'kubeplug:plugin/admission@0.1.0';
import type { KubeObject } from './context.js';
import { Failed, InvalidInput } from './errors.js';

/** What a write does to the parent. */
export type Operation = 'create' | 'update' | 'delete';

/** Who writes, as the API server authenticated them. */
export interface UserInfo {
  username: string;
  groups: string[];
}

function parse(what: string, text: string | undefined): KubeObject | undefined {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new InvalidInput(`${what} is not JSON: ${(e as Error).message}`);
  }
}

/** One write of a parent, parsed. */
export class AdmissionRequest<C = unknown> {
  readonly operation: Operation;
  /** The object as the write would store it; undefined on delete. */
  readonly object?: KubeObject;
  /** The stored object before the write; undefined on create. */
  readonly oldObject?: KubeObject;
  readonly user: UserInfo;
  /** Nothing will be stored (`kubectl --dry-run=server`). */
  readonly dryRun: boolean;
  /** Current time, RFC 3339 UTC. */
  readonly now: string;

  constructor(
    request: wit.AdmissionRequest,
    /** The plugin's configuration, as `Plugin.config` returned it. */
    readonly config: C,
  ) {
    this.operation = request.operation;
    this.object = parse('object', request.object);
    this.oldObject = parse('old object', request.oldObject);
    this.user = { username: request.user.username, groups: [...request.user.groups] };
    this.dryRun = request.dryRun;
    this.now = request.now;
  }

  /** The parent's `metadata.name` (of the old object on delete; '' if none). */
  get name(): string {
    const n = (this.object ?? this.oldObject)?.metadata?.name;
    return typeof n === 'string' ? n : '';
  }
}

/** Why one field is refused: the field as `kubectl` prints it (`spec.engine`). */
export interface Cause {
  field: string;
  message: string;
}

/** A validation's answer: build it with `allow()` or `deny()`. */
export class Verdict {
  private constructor(
    readonly allowed: boolean,
    /** Shown to the client (e.g. by `kubectl`) when allowed. */
    readonly warnings: string[],
    /** Why the write is denied (HTTP 422). */
    readonly message: string,
    readonly causes: Cause[],
  ) {}

  /** Allow the write, with warnings for the client. */
  static allow(warnings: string[] = []): Verdict {
    return new Verdict(true, [...warnings], '', []);
  }

  /** Deny the write with `message`; `causes` name the fields at fault, as
   * `{field, message}` or `[field, message]`. */
  static deny(message: string, causes: (Cause | [string, string])[] = []): Verdict {
    const list = causes.map((c) => (Array.isArray(c) ? { field: c[0], message: c[1] } : { ...c }));
    return new Verdict(false, [], message, list);
  }

  /** Add a warning (ignored on a denial). */
  warn(warning: string): this {
    if (this.allowed) this.warnings.push(warning);
    return this;
  }

  toWit(): wit.Verdict {
    if (this.allowed) return { tag: 'allowed', val: this.warnings.map(String) };
    return {
      tag: 'denied',
      val: {
        message: String(this.message),
        causes: this.causes.map((c) => ({ field: String(c.field), message: String(c.message) })),
      },
    };
  }
}

/** `Verdict.allow`. */
export const allow = (warnings: string[] = []): Verdict => Verdict.allow(warnings);
/** `Verdict.deny`. */
export const deny = (message: string, causes: (Cause | [string, string])[] = []): Verdict =>
  Verdict.deny(message, causes);

/** What `convert` does when a plugin defines none: objects already at
 * `apiVersion` pass, any other is an error (its CRD serves one version). */
export function convertNone(pluginName: string, objects: KubeObject[], apiVersion: string): KubeObject[] {
  for (const o of objects) {
    const have = o?.apiVersion;
    if (have !== apiVersion) {
      const what = typeof have === 'string' ? have : 'an object without apiVersion';
      throw new Failed(`${pluginName} converts no versions: cannot convert ${what} to ${apiVersion}`);
    }
  }
  return objects;
}

/** JSON text with object keys sorted: equal texts, equal JSON values. */
export function canonicalJson(value: unknown): string {
  const sorted = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(sorted);
    if (v !== null && typeof v === 'object') {
      const out: Record<string, unknown> = {};
      for (const k of Object.keys(v).sort()) out[k] = sorted((v as Record<string, unknown>)[k]);
      return out;
    }
    return v;
  };
  return JSON.stringify(sorted(value)) ?? 'undefined';
}
