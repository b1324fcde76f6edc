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

/** The WIT error of any thrown value: our classes keep their kind, anything
 * else is `failed` with its message. */
export function toWitError(e: unknown): import('kubeplug:plugin/types@0.1.0').Error {
  if (e instanceof PluginError) return { tag: e.kind, val: e.message };
  if (e instanceof Error) return { tag: 'failed', val: e.message };
  return { tag: 'failed', val: String(e) };
}
