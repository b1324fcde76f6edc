// Test guest: a composite plugin whose `reconcile` calls
// `fetch("http://example.com/")` and reports what happened. Built with
// componentize-js's DEFAULT features (http and fetch-event kept), so the
// component imports wasi:http; the host is to provide wasi:http functions that
// always fail ("plugins have no network"), and this guest shows what a plugin
// then sees: `failed("fetch failed: <message>")`, or, should a request ever
// get through, the status code in `.status`.
//
// `reconcile` is async: componentize-js 0.23.0 (StarlingMonkey) drives the
// event loop when an export returns a promise and lowers the settled value,
// so `await fetch(...)` works inside a synchronous WIT export. See README.md.
import { Manifest, Resource, Kinds, Event } from '@kubeplug/sdk';
import type * as wit from 'kubeplug:plugin/types@0.1.0';

// StarlingMonkey's fetch; the SDK's lib (es2022) has no DOM types.
declare function fetch(url: string): Promise<{ status: number; text(): Promise<string> }>;

type Result<T> = { tag: 'ok'; val: T } | { tag: 'err'; val: wit.Error };

export const reconciler = {
  manifest(_config: string): Result<wit.PluginManifest> {
    const m = Manifest.composite(
      'fetch-ts',
      '0.1.0',
      Resource.namespaced('example.com', 'v1alpha1', 'MyApp', 'myapps'),
    ).owns(Kinds.Deployment);
    return { tag: 'ok', val: m.toWit() };
  },

  async reconcile(_request: wit.Request): Promise<Result<wit.Response>> {
    try {
      const response = await fetch('http://example.com/');
      const body = await response.text();
      return {
        tag: 'ok',
        val: {
          children: [],
          status: JSON.stringify({ fetched: response.status, bytes: body.length }),
          events: [Event.warning('FetchSucceeded', `GET http://example.com/ -> ${response.status}`)],
        },
      };
    } catch (e) {
      const message = e instanceof Error ? e.message : String(e);
      return { tag: 'err', val: { tag: 'failed', val: `fetch failed: ${message}` } };
    }
  },

  finalize(_request: wit.Request): Result<wit.FinalizeResponse> {
    return { tag: 'ok', val: { done: true, events: [] } };
  },
};
