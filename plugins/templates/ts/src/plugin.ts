// {{name}}: a kubeplug reconcile plugin in TypeScript.
// The SDK (`@kubeplug/sdk`, unpacked by `kubeplug build` into .kubeplug/) maps this to the WIT contract; a thrown
// InvalidConfig / InvalidInput / Failed becomes that WIT error, any other
// exception becomes `failed(message)`.
import {
  Event,
  exportPlugin,
  InvalidInput,
  Kinds,
  Manifest,
  Resource,
  Response,
  setCondition,
  Condition,
  time,
  type Plugin,
} from '@kubeplug/sdk';

const plugin: Plugin = {
  manifest: () =>
    Manifest.composite(
      '{{name}}',
      '0.1.0',
      Resource.namespaced('example.com', 'v1alpha1', 'Example', 'examples'),
    ).owns(Kinds.ConfigMap),

  reconcile(ctx) {
    const message = ctx.parent?.spec?.message;
    if (typeof message !== 'string') {
      throw new InvalidInput('spec.message must be a string');
    }
    const conditions = Condition.parseList(ctx.parent?.status?.conditions) ?? [];
    const now = time(ctx.now);
    if (now !== null) {
      setCondition(conditions, {
        type: 'Ready',
        status: 'True',
        reason: 'Reconciled',
        message: 'ConfigMap written',
        lastTransitionTime: now,
        observedGeneration: ctx.generation,
      });
    }
    return new Response()
      .child({
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: `${ctx.name}-message`, namespace: ctx.namespace },
        data: { message },
      })
      .status({ conditions })
      .event(Event.normal('Reconciled', `message is ${message.length} characters`));
  },
};

// Plain `export const` statements: componentize-js finds exports by parsing.
const exported = exportPlugin(plugin);
export const reconciler = exported.reconciler;
export const reads = exported.reads;
