// Append to a bundle the line table the SDK maps a stack with (errors.ts
// `trace`): for each line of the bundle, the source file and line it came
// from, per the source map esbuild wrote beside it. SpiderMonkey (what
// componentize-js runs) reports bundle positions and applies no source map,
// so a plugin's error names `src/plugin.ts:14` rather than `plugin.js:651`.
//
// Usage: node line-map.mjs BUNDLE.js PLUGIN_DIR SDK_DIR
// (reads BUNDLE.js.map; source paths relative to PLUGIN_DIR; files under
// SDK_DIR, and any outside PLUGIN_DIR, are marked as the SDK's.)
import { appendFileSync, readFileSync } from 'node:fs';
import { basename, dirname, relative, resolve, sep } from 'node:path';

const [bundle, pluginDir, sdkDir] = process.argv.slice(2);
if (!bundle || !pluginDir || !sdkDir) {
  console.error('usage: node line-map.mjs BUNDLE.js PLUGIN_DIR SDK_DIR');
  process.exit(2);
}
const map = JSON.parse(readFileSync(`${bundle}.map`, 'utf8'));
const base = resolve(dirname(bundle), map.sourceRoot || '');
const plugin = resolve(pluginDir);
const sdk = resolve(sdkDir);
const under = (path, dir) => path === dir || path.startsWith(dir + sep);
const paths = map.sources.map((s) => resolve(base, s));
const sources = paths.map((p) => relative(plugin, p).split(sep).join('/'));
// Not the plugin's own code: the SDK, anything outside the project, and
// what the kit unpacked (.kubeplug/) or npm installed (node_modules/).
const foreign = (p) =>
  relative(plugin, p)
    .split(sep)
    .some((part) => part === 'node_modules' || part === '.kubeplug');
const sdkFlags = paths.map((p) => under(p, sdk) || !under(p, plugin) || foreign(p));

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
function vlq(segment) {
  const out = [];
  let value = 0;
  let shift = 0;
  for (const ch of segment) {
    const digit = B64.indexOf(ch);
    value += (digit & 31) << shift;
    if (digit & 32) {
      shift += 5;
    } else {
      out.push(value & 1 ? -(value >>> 1) : value >>> 1);
      value = 0;
      shift = 0;
    }
  }
  return out;
}

// Per generated line, the first segment that names a source: [source, line].
const lines = [];
let src = 0;
let line = 0;
for (const text of map.mappings.split(';')) {
  let first = 0;
  for (const segment of text ? text.split(',') : []) {
    const f = vlq(segment);
    if (f.length < 4) continue;
    src += f[1];
    line += f[2];
    if (!first) first = [src, line + 1];
  }
  lines.push(first);
}
const table = { file: basename(bundle), sources, sdk: sdkFlags, lines };
appendFileSync(bundle, `\nglobalThis[Symbol.for('kubeplug.lines')] = ${JSON.stringify(table)};\n`);
