// The little of node's test runner the tests use (the toolchain has no
// @types/node; tests run in node, the SDK in componentize-js).
declare module 'node:test' {
  export function test(name: string, fn: () => void): void;
}
declare module 'node:assert/strict' {
  const assert: {
    equal(actual: unknown, expected: unknown, message?: string): void;
    deepEqual(actual: unknown, expected: unknown, message?: string): void;
    ok(value: unknown, message?: string): asserts value;
  };
  export default assert;
}
