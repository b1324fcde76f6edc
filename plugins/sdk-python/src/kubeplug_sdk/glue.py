"""The componentize-py export classes, wired to a plugin class.

componentize-py instantiates the classes named after the exported WIT
interfaces (`Reconciler`, `Reads`, `References`, `Admission`, `Conversion`)
from the module it builds, so a plugin's `app.py` ends with:

    from kubeplug_sdk import export
    Reconciler, Reads = export(MyPlugin)

and `build` componentizes a module that takes every name of `app` and adds
`References`, `Admission` and `Conversion` for the plugin `export` saw
(`entry_names`): a plugin written before they existed builds unchanged and
answers with the defaults. The generated `wit_world` bindings exist only while componentize-py
builds the component; they are imported lazily so the SDK imports anywhere.
"""

from __future__ import annotations

from . import core
from .manifest import COMPOSITE, ParentName


def _wit():
    from wit_world.imports import types  # type: ignore
    from componentize_py_types import Err  # type: ignore
    return types, Err


def _wit_admission():
    from wit_world.exports import admission  # type: ignore
    return admission


def _wit_references():
    from wit_world.exports import references  # type: ignore
    return references


def _wit_error(types, e):
    cls = {
        "invalid-config": types.Error_InvalidConfig,
        "invalid-input": types.Error_InvalidInput,
    }.get(e.kind, types.Error_Failed)
    # A bug's error names where it raised (`PluginError.text`).
    return cls(e.text)


def _resource(types, r):
    return types.ApiResource(r.group, r.version, r.kind, r.plural, bool(r.namespaced))


def _events(types, events):
    return [types.Event(bool(e.warning), str(e.reason), str(e.message)) for e in events]


def _manifest(types, m):
    related = [
        types.RelatedResource(
            _resource(types, r.resource),
            [
                types.LabelMatch(k, types.LabelValue_ParentName() if isinstance(v, ParentName)
                                 else types.LabelValue_Literal(str(v)))
                for k, v in r.match_labels
            ],
        )
        for r in m.related_objects
    ]
    return types.PluginManifest(
        name=m.name,
        version=m.version,
        parent=_resource(types, m.parent),
        mode=types.Mode.COMPOSITE if m.mode == COMPOSITE else types.Mode.DECORATOR,
        children=[_resource(types, c) for c in m.children],
        related=related,
        namespaces=[str(n) for n in m.namespace_list],
        finalizer=m.finalizer_name,
        resync_seconds=m.resync_seconds,
    )


def _response(types, r):
    children = [c if isinstance(c, str) else core.to_json_text("child", c) for c in r.children]
    status = None
    if r.status is not None:
        status = r.status if isinstance(r.status, str) else core.to_json_text("status", r.status)
    patch = None
    if r.labels or r.annotations:
        patch = types.MetadataPatch(
            [(str(k), str(v)) for k, v in r.labels],
            [(str(k), str(v)) for k, v in r.annotations],
        )
    return types.Response(children, status, patch, r.requeue_after_seconds, _events(types, r.events))


def _reference(types, refs, r):
    target = (refs.Target_Name(str(r.name)) if r.labels is None
              else refs.Target_Labels([(str(k), str(v)) for k, v in r.labels]))
    return refs.Reference(_resource(types, r.resource), r.namespace, target)


def _request_args(request):
    return (request.parent, request.observed, request.related, request.config,
            request.now, bytes(request.entropy))


def _admission_args(adm, request):
    """`core.admission_request`'s arguments from the WIT request."""
    operation = {adm.Operation.CREATE: "create", adm.Operation.UPDATE: "update",
                 adm.Operation.DELETE: "delete"}[request.operation]
    return (operation, request.object, request.old_object, request.config, request.now,
            request.user.username, list(request.user.groups), bool(request.dry_run))


def _verdict(adm, v):
    if v.allowed:
        return adm.Verdict_Allowed([str(w) for w in v.warnings])
    return adm.Verdict_Denied(adm.Denial(
        str(v.message), [adm.FieldCause(str(f), str(m)) for f, m in v.causes]))


def export(plugin):
    """The `(Reconciler, Reads)` export classes for `plugin` (a class with
    `manifest(config)`, `reconcile(ctx)` and optionally `finalize(ctx)`).
    A `PluginError` becomes the WIT error; any other exception becomes
    `failed("<Type>: message (at <frames of the plugin's code>)")` instead
    of a trap (`errors.as_plugin_error`)."""

    class Reconciler:
        def manifest(self, config: str):
            types, Err = _wit()
            try:
                return _manifest(types, core.manifest(plugin, config))
            except core.PluginError as e:
                raise Err(_wit_error(types, e))

        def reconcile(self, request):
            types, Err = _wit()
            try:
                r = core.reconcile(plugin, *_request_args(request))
                return core._guard(lambda: _response(types, r))
            except core.PluginError as e:
                raise Err(_wit_error(types, e))

        def finalize(self, request):
            types, Err = _wit()
            try:
                r = core.finalize(plugin, *_request_args(request))
                return types.FinalizeResponse(bool(r.done), r.requeue_after_seconds,
                                              _events(types, r.events))
            except core.PluginError as e:
                raise Err(_wit_error(types, e))

    class Reads:
        def metadata_only(self, config: str):
            types, _ = _wit()
            return [_resource(types, r) for r in core.metadata_only(plugin, config)]

    # The fixture runner and `entry_names` find the plugin of an app
    # module through this.
    Reconciler.plugin = Reads.plugin = plugin
    return Reconciler, Reads


def export_references(plugin):
    """The `References` export class for `plugin`: `kinds` answers what its
    manifest declares (`Manifest.references`), `references` calls its
    optional `references(parent, config)` (default: none). Errors map as in
    `export`."""

    class References:
        def kinds(self, config: str):
            types, _ = _wit()
            return [_resource(types, r) for r in core.reference_kinds(plugin, config)]

        def references(self, parent: str, config: str):
            types, Err = _wit()
            refs = _wit_references()
            try:
                found = core.references(plugin, parent, config)
                return core._guard(lambda: [_reference(types, refs, r) for r in found])
            except core.PluginError as e:
                raise Err(_wit_error(types, e))

    References.plugin = plugin
    return References


def export_admission(plugin):
    """The `(Admission, Conversion)` export classes for `plugin`, whose
    optional `validate(req)`, `mutate(req)` and `convert(objects,
    api_version, config)` they call (defaults: allow, leave as is, convert
    nothing). `offered` names those the plugin defines (`core.offered`).
    Errors map as in `export`."""

    class Admission:
        def offered(self, config: str):
            adm = _wit_admission()
            return [adm.Webhook[w.upper()] for w in core.offered(plugin, config)]

        def validate(self, request):
            types, Err = _wit()
            adm = _wit_admission()
            try:
                v = core.validate(plugin, *_admission_args(adm, request))
                return core._guard(lambda: _verdict(adm, v))
            except core.PluginError as e:
                raise Err(_wit_error(types, e))

        def mutate(self, request):
            types, Err = _wit()
            try:
                return core.mutate(plugin, *_admission_args(_wit_admission(), request))
            except core.PluginError as e:
                raise Err(_wit_error(types, e))

    class Conversion:
        def convert(self, objects, api_version: str, config: str):
            types, Err = _wit()
            try:
                return core.convert(plugin, list(objects), api_version, config)
            except core.PluginError as e:
                raise Err(_wit_error(types, e))

    Admission.plugin = Conversion.plugin = plugin
    return Admission, Conversion


def entry_names(app) -> dict:
    """What the module `build` componentizes holds: every name of the
    plugin's `app` module, plus `References`, `Admission` and `Conversion`
    for the plugin its `Reconciler` came from, each unless `app` defines it
    (a world without those exports ignores them)."""
    names = {k: v for k, v in vars(app).items() if not k.startswith("__")}
    plugin = getattr(names.get("Reconciler"), "plugin", None)
    if plugin is not None:
        names.setdefault("References", export_references(plugin))
        admission, conversion = export_admission(plugin)
        names.setdefault("Admission", admission)
        names.setdefault("Conversion", conversion)
    return names
