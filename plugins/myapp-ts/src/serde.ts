// The error messages serde gives when the Rust myapp reads its parent
// (`ctx.parent::<MyApp>()` over a serde_json::Value), so that the TS port
// refuses the same parents with the same `invalid-input` text.
//
// serde_json (without preserve_order) visits object keys in sorted order and
// reports missing fields after the present ones; that order is kept here.
// Known gap: JSON.parse cannot tell `3.0` from `3`, so a float that is a whole
// number is accepted here where serde says "invalid type: floating point".

/** serde's `Unexpected` description of a JSON value read from a Value. */
export function unexpected(v: unknown): string {
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'boolean') return `boolean \`${v}\``;
  if (typeof v === 'number') {
    if (Number.isInteger(v)) return `integer \`${v}\``;
    return `floating point \`${v}\``;
  }
  if (typeof v === 'string') return `string ${JSON.stringify(v)}`;
  if (Array.isArray(v)) return 'sequence';
  return 'map';
}

export const isObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v);

/** Sorted keys, as serde_json's Map iterates them. */
export const sortedKeys = (o: Record<string, unknown>) =>
  Object.keys(o).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));

/** Read a signed integer of `bits` bits, as serde's i32/i64 visitors do. */
export function int(v: unknown, bits: 32 | 64): number {
  const name = `i${bits}`;
  if (typeof v !== 'number' || !Number.isInteger(v)) {
    throw `invalid type: ${unexpected(v)}, expected ${name}`;
  }
  const limit = 2 ** (bits - 1);
  if (v < -limit || v >= limit) throw `invalid value: integer \`${v}\`, expected ${name}`;
  return v;
}

/** `Option<String>`: null/absent is none. */
export function optString(v: unknown): string | undefined {
  if (v === null || v === undefined) return undefined;
  if (typeof v !== 'string') throw `invalid type: ${unexpected(v)}, expected a string`;
  return v;
}
