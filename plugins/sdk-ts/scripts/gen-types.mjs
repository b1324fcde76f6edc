// Generate the guest types (.d.ts) of wit/ world plugin-with-admission (the
// SDK's default world, which includes every other) with jco.
//
// Usage: node gen-types.mjs WIT_DIR OUT_DIR
//
// Why not `jco guest-types` directly: jco 1.35.0 runs its WIT reader as a
// Wasm component on preview2-shim 0.26, which no longer preopens any host
// directory by default, so every WIT path fails with "No such file or
// directory". We give that same shim instance (the one jco-transpile imports)
// a preopen of `/` and call jco's own generateGuestTypes.
import { createRequire } from 'node:module';
import { mkdir } from 'node:fs/promises';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [witDir, outDir] = process.argv.slice(2);
if (!witDir || !outDir) {
  console.error('usage: node gen-types.mjs WIT_DIR OUT_DIR');
  process.exit(2);
}
// Resolve preview2-shim from jco-transpile's own location, so that we set the
// preopens of the module instance jco-transpile uses.
const require = createRequire(import.meta.url);
const transpileEntry = require.resolve('@bytecodealliance/jco-transpile');
const shimRequire = createRequire(transpileEntry);
const fsShim = await import(pathToFileURL(shimRequire.resolve('@bytecodealliance/preview2-shim/filesystem')).href);
fsShim._setPreopens({ '/': '/' });

const { generateGuestTypes, writeFiles } = await import(pathToFileURL(transpileEntry).href);
await mkdir(outDir, { recursive: true });
const files = await generateGuestTypes(resolve(witDir), {
  worldName: 'plugin-with-admission',
  outDir: resolve(outDir) + '/',
});
await writeFiles(files, false);
