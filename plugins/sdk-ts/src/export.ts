// exportPlugin: turns a Plugin into the `reconciler` and `reads` export
// objects componentize-js binds to the WIT world `plugin-with-reads`.
//
// How componentize-js 0.23.0 lowers a `result<T, E>` export (read from the
// bindings its splicer generates): the function's return value is used as is
// when it is an object `{tag: 'ok' | 'err', val}`, otherwise it is wrapped as
// `{tag: 'ok', val}`. A thrown value becomes `err(e.payload)` when it has an own
// `payload` property, `err(e)` when it is not an Error, and an Error *without*
// `payload` is rethrown: the component traps. So we never let anything escape:
// every call returns an explicit `{tag, val}`, and any exception becomes
// `failed(message)` (our InvalidConfig/InvalidInput/Failed keep their kind).
import type * as wit from 'kubeplug:plugin/types@0.1.0';
import { Context } from './context.js';
import { InvalidConfig, toWitError } from './errors.js';
import type { Manifest } from './manifest.js';
import { FinalizeResponse, type Response } from './response.js';

/** A reconcile plugin: a pure function from what the host observed to what
 * should exist. `C` is the plugin's configuration type. */
export interface Plugin<C = unknown> {
  /** Validate and convert the configuration document (parsed JSON; `{}` when
   * none is given). Throw `InvalidConfig` to refuse it. Default: as is. */
  config?(raw: unknown): C;
  /** Describe the plugin; called once when the host loads it. */
  manifest(config: C): Manifest;
  /** Decide the desired children, status and parent patch for one parent. */
  reconcile(ctx: Context<C>): Response;
  /** Clean up for a parent being deleted (only with a finalizer). Default:
   * done at once. */
  finalize?(ctx: Context<C>): FinalizeResponse;
}

type WitResult<T> = { tag: 'ok'; val: T } | { tag: 'err'; val: wit.Error };

function call<T>(f: () => T): WitResult<T> {
  try {
    const val = f();
    // Exports are synchronous: the host cannot wait for a promise.
    if (val && typeof (val as any).then === 'function') {
      return { tag: 'err', val: { tag: 'failed', val: 'the plugin returned a Promise; exports must be synchronous' } };
    }
    return { tag: 'ok', val };
  } catch (e) {
    return { tag: 'err', val: toWitError(e) };
  }
}

function parseConfig<C>(plugin: Plugin<C>, text: string): C {
  let raw: unknown;
  try {
    raw = JSON.parse(text.trim() === '' ? '{}' : text);
  } catch (e) {
    throw new InvalidConfig((e as Error).message);
  }
  return plugin.config ? plugin.config(raw) : (raw as C);
}

/** The export objects of a plugin. In the plugin's entry module:
 *
 * ```ts
 * const exported = exportPlugin(myPlugin);
 * export const reconciler = exported.reconciler;
 * export const reads = exported.reads;
 * ```
 * (plain `export const` statements: componentize-js finds exports by parsing
 * the module, so keep them explicit.) */
export function exportPlugin<C>(plugin: Plugin<C>) {
  const context = (request: wit.Request) => new Context(request, parseConfig(plugin, request.config));
  return {
    reconciler: {
      manifest: (config: string): WitResult<wit.PluginManifest> =>
        call(() => {
          const m = plugin.manifest(parseConfig(plugin, config));
          m.validate();
          return m.toWit();
        }),
      reconcile: (request: wit.Request): WitResult<wit.Response> =>
        call(() => plugin.reconcile(context(request)).toWit()),
      finalize: (request: wit.Request): WitResult<wit.FinalizeResponse> =>
        call(() => {
          const ctx = context(request);
          return (plugin.finalize ? plugin.finalize(ctx) : FinalizeResponse.done()).toWit();
        }),
    },
    reads: {
      /** What `Manifest.metadataOnly` declared; nothing when the config or
       * manifest is refused (`manifest` reports that). */
      metadataOnly: (config: string): wit.ApiResource[] => {
        try {
          return plugin.manifest(parseConfig(plugin, config)).metadataOnlyKinds.map((r) => ({ ...r }));
        } catch {
          return [];
        }
      },
    },
  };
}
