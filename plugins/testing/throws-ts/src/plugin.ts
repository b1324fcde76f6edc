// Test guest: a TypeScript plugin, built with the SDK, whose reconcile throws
// what `spec.throw` names. The SDK must turn every one of them into the WIT
// `failed(message)` (never a trap), so the host reports the plugin's own
// message: host/kubeplug/tests/languages.rs.
//   error  -> throw new Error(...)
//   type   -> a TypeError from reading a property of undefined
//   string -> throw a plain string
//   input  -> throw the SDK's InvalidInput (keeps its kind)
import { exportPlugin, InvalidInput, Kinds, Manifest, Resource, Response, type Plugin } from '@kubeplug/sdk';

const plugin: Plugin = {
  manifest: () =>
    Manifest.composite(
      'throws',
      '0.1.0',
      Resource.namespaced('example.com', 'v1alpha1', 'MyApp', 'myapps'),
    ).owns(Kinds.Deployment),

  reconcile(ctx) {
    const what = ctx.parent?.spec?.throw;
    switch (what) {
      case 'error':
        throw new Error(`boom in ${ctx.name}`);
      case 'type': {
        const missing: any = undefined;
        return missing.children;
      }
      case 'string':
        throw 'a plain string';
      case 'input':
        throw new InvalidInput('spec.throw asked for it');
      default:
        return new Response();
    }
  },
};

const exported = exportPlugin(plugin);
export const reconciler = exported.reconciler;
export const reads = exported.reads;
