// Run the SDK's unit tests (tests/*.test.ts) in node, without Wasm.
//
// Usage: node test.mjs OUT_DIR TEST.ts...
//
// Each test is bundled with esbuild as the build bundles a plugin
// (`@kubeplug/sdk` -> src/index.ts), except that the host's imports
// (`kubeplug:*`) become a stub: `log` writes to stderr. Then `node --test`
// runs the bundles.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { basename, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const [outDir, ...tests] = process.argv.slice(2);
if (!outDir || tests.length === 0) {
  console.error('usage: node test.mjs OUT_DIR TEST.ts...');
  process.exit(2);
}
const sdk = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const esbuild = createRequire(import.meta.url)('esbuild');

const hostStub = {
  name: 'kubeplug-host-stub',
  setup(build) {
    build.onResolve({ filter: /^kubeplug:/ }, (args) => ({ path: args.path, namespace: 'host-stub' }));
    build.onLoad({ filter: /.*/, namespace: 'host-stub' }, () => ({
      contents: 'export function log(level, message, fields) { console.error(`[${level}] ${message}`, fields); }',
      loader: 'js',
    }));
  },
};

const outputs = [];
for (const test of tests) {
  const outfile = resolve(outDir, basename(test).replace(/\.ts$/, '.mjs'));
  await esbuild.build({
    entryPoints: [resolve(test)],
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'es2022',
    logLevel: 'warning',
    alias: { '@kubeplug/sdk': resolve(sdk, 'src/index.ts') },
    plugins: [hostStub],
    outfile,
  });
  outputs.push(outfile);
}
const run = spawnSync(process.execPath, ['--test', ...outputs], { stdio: 'inherit' });
process.exit(run.status ?? 1);
