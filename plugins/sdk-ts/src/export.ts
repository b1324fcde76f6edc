// exportPlugin: turns a Plugin into the `reconciler`, `reads`, `references`,
// `admission` and `conversion` export objects componentize-js binds to the
// WIT world `plugin-with-admission`.
//
// How componentize-js 0.23.0 lowers a `result<T, E>` export (read from the
// bindings its splicer generates): the function's return value is used as is
// when it is an object `{tag: 'ok' | 'err', val}`, otherwise it is wrapped as
// `{tag: 'ok', val}`. A thrown value becomes `err(e.payload)` when it has an own
// `payload` property, `err(e)` when it is not an Error, and an Error *without*
// `payload` is rethrown: the component traps. So we never let anything escape:
// every call returns an explicit `{tag, val}`, and any exception becomes
// `failed(message)` (our InvalidConfig/InvalidInput/Failed keep their kind).
import type * as witAdmission from 'kubeplug:plugin/admission@0.1.0';
import type * as witReferences from 'kubeplug:plugin/references@0.1.0';
import type * as wit from 'kubeplug:plugin/types@0.1.0';
import { AdmissionRequest, Verdict, canonicalJson, convertNone } from './admission.js';
import { Context, type KubeObject } from './context.js';
import { Failed, InvalidConfig, InvalidInput, toWitError } from './errors.js';
import type { Manifest } from './manifest.js';
import { Reference } from './references.js';
import { FinalizeResponse, toJson, type Response } from './response.js';

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
  /** The objects `parent` names (`Reference.named`, `Reference.labelled`),
   * of kinds the manifest declares with `Manifest.references`; the host
   * appends those it finds to `ctx.related`. Computed from the parent
   * alone. Default: none. */
  references?(parent: KubeObject, config: C): Reference[];
  /** Allow or deny a create, update or delete of a parent (`allow()`,
   * `deny()`): for what the CRD's schema cannot say, such as fields that
   * may not change. Default: allow. */
  validate?(req: AdmissionRequest<C>): Verdict;
  /** Default a parent on create and update: the whole object as it should
   * be stored, or undefined to leave it (so is an object handed back
   * unchanged). Only `spec`, `metadata.labels` and `metadata.annotations`
   * may change; it may run more than once per write: keep it idempotent.
   * Default: leave it. */
  mutate?(req: AdmissionRequest<C>): KubeObject | undefined | null;
  /** Convert objects of the parent kind to `apiVersion`, in order and
   * without loss (keep what the target cannot hold in an annotation).
   * Default: `convertNone` (objects already at `apiVersion` pass). */
  convert?(objects: KubeObject[], apiVersion: string, config: C): KubeObject[];
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

/** The plugin's name for messages ('this plugin' when its manifest refuses
 * the config). */
function nameOf<C>(plugin: Plugin<C>, config: C): string {
  try {
    return plugin.manifest(config).name;
  } catch {
    return 'this plugin';
  }
}

/** The webhooks a plugin may offer, in the WIT enum's order: each is the
 * name of the `Plugin` method that implements it. */
const WEBHOOKS: readonly witAdmission.Webhook[] = ['validate', 'mutate', 'convert'];

/** Where `entryExports` finds the whole export set of an exported reconciler. */
const EXPORTS = Symbol.for('kubeplug.exports');

/** The export objects of a plugin. In the plugin's entry module:
 *
 * ```ts
 * const exported = exportPlugin(myPlugin);
 * export const reconciler = exported.reconciler;
 * export const reads = exported.reads;
 * ```
 * (plain `export const` statements: componentize-js finds exports by parsing
 * the module, so keep them explicit.) `build` adds `references`, `admission`
 * and `conversion` (see `entryExports`); export them the same way to be
 * explicit. */
export function exportPlugin<C>(plugin: Plugin<C>) {
  const context = (request: wit.Request) => new Context(request, parseConfig(plugin, request.config));
  const admissionRequest = (request: witAdmission.AdmissionRequest) =>
    new AdmissionRequest(request, parseConfig(plugin, request.config));
  const exported = {
    reconciler: {
      manifest: (config: string): WitResult<wit.PluginManifest> =>
        call(() => plugin.manifest(parseConfig(plugin, config)).toWit()),
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
    references: {
      /** What `Manifest.references` declared; nothing when the config or
       * manifest is refused (`manifest` reports that). */
      kinds: (config: string): wit.ApiResource[] => {
        try {
          return plugin.manifest(parseConfig(plugin, config)).referenceKinds.map((r) => ({ ...r }));
        } catch {
          return [];
        }
      },
      references: (parent: string, config: string): WitResult<witReferences.Reference[]> =>
        call(() => {
          const c = parseConfig(plugin, config);
          let parsed: KubeObject;
          try {
            parsed = JSON.parse(parent);
          } catch (e) {
            throw new InvalidInput(`parent is not JSON: ${(e as Error).message}`);
          }
          const out = plugin.references ? plugin.references(parsed, c) : [];
          if (out === undefined || out === null) return [];
          if (!Array.isArray(out) || !out.every((r) => r instanceof Reference)) {
            throw new Failed('references() must return a list of Reference');
          }
          return out.map((r) => r.toWit());
        }),
    },
    admission: {
      /** The webhooks the plugin itself defines (`validate`, `mutate`,
       * `convert`), not the defaults below: the platform's grant must allow
       * each, or the host refuses the plugin at load. Nothing when the
       * config or manifest is refused (`manifest` reports that). */
      offered: (config: string): witAdmission.Webhook[] => {
        try {
          plugin.manifest(parseConfig(plugin, config)).toWit();
        } catch {
          return [];
        }
        return WEBHOOKS.filter((w) => typeof plugin[w] === 'function');
      },
      validate: (request: witAdmission.AdmissionRequest): WitResult<witAdmission.Verdict> =>
        call(() => {
          const req = admissionRequest(request);
          const verdict = plugin.validate ? plugin.validate(req) : Verdict.allow();
          if (!(verdict instanceof Verdict)) {
            throw new Failed('validate() must return a Verdict (allow() or deny())');
          }
          return verdict.toWit();
        }),
      /** `none` also when the plugin hands the object back unchanged, so
       * the host sees no patch to check. */
      mutate: (request: witAdmission.AdmissionRequest): WitResult<string | undefined> =>
        call(() => {
          const req = admissionRequest(request);
          const out = plugin.mutate ? plugin.mutate(req) : undefined;
          if (out === undefined || out === null) return undefined;
          if (typeof out !== 'object' || Array.isArray(out)) {
            throw new Failed('mutate() must return the whole object, or undefined');
          }
          const text = toJson('the mutated object', out);
          // Against a fresh parse: the plugin may have changed `req.object`
          // in place and returned it.
          if (request.object !== undefined && canonicalJson(out) === canonicalJson(JSON.parse(request.object))) {
            return undefined;
          }
          return text;
        }),
    },
    conversion: {
      convert: (objects: string[], apiVersion: string, config: string): WitResult<string[]> =>
        call(() => {
          const c = parseConfig(plugin, config);
          const parsed = objects.map((o) => {
            try {
              return JSON.parse(o) as KubeObject;
            } catch (e) {
              throw new InvalidInput(`object to convert is not JSON: ${(e as Error).message}`);
            }
          });
          if (!plugin.convert) {
            convertNone(nameOf(plugin, c), parsed, apiVersion);
            return objects;
          }
          const out = plugin.convert(parsed, apiVersion, c);
          if (!Array.isArray(out)) throw new Failed('convert() must return a list of objects');
          return out.map((o) => toJson('a converted object', o));
        }),
    },
  };
  Object.defineProperty(exported.reconciler, EXPORTS, { value: exported });
  return exported;
}

/** What `build` exports besides the plugin module's own exports: its
 * `references`, `admission` and `conversion`, or, for each it lacks, that
 * of the `exportPlugin` its `reconciler` came from. So a plugin that exports
 * only `reconciler` and `reads` (written before the others existed) still
 * builds for `plugin-with-admission`, with the defaults; a world without
 * those exports ignores them. */
export function entryExports(module: Record<string, any>) {
  const all = module.reconciler?.[EXPORTS];
  return {
    references: module.references ?? all?.references,
    admission: module.admission ?? all?.admission,
    conversion: module.conversion ?? all?.conversion,
  };
}
