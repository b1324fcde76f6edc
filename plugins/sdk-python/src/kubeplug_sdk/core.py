"""The calls of the contract on Python values, shared by the Wasm glue
(`export`) and the pure-Python fixture runner (`kubeplug_sdk.testing`), so
both run a plugin the same way. Every function raises a `PluginError` (any
other exception from plugin code is wrapped as `Failed`)."""

from __future__ import annotations

import copy
import json
from typing import Any, Optional

from .admission import AdmissionRequest, Verdict, allow, convert_none
from .context import Context
from .errors import Failed, InvalidConfig, InvalidInput, PluginError, as_plugin_error
from .manifest import Manifest
from .references import Reference
from .response import FinalizeResponse, Response


def instance(plugin):
    """The plugin object: a class is instantiated (without arguments)."""
    return plugin() if isinstance(plugin, type) else plugin


def parse_config(plugin, text: str) -> Any:
    """The config document as a Python value (`{}` when blank), passed
    through the plugin's optional `parse_config(raw)` hook."""
    if not text or not text.strip():
        text = "{}"
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise InvalidConfig(str(e)) from None
    hook = getattr(plugin, "parse_config", None)
    return hook(raw) if hook is not None else raw


def _guard(fn, plugin=None):
    """Run `fn`, turning any exception into a `PluginError`; one from a bug
    names the frames of `plugin`'s code it went through (`errors.trace`)."""
    try:
        return fn()
    except PluginError:
        raise
    except Exception as e:  # noqa: BLE001 - a plugin bug must not trap
        raise as_plugin_error(e, plugin) from e


def manifest(plugin, config_text: str) -> Manifest:
    """`manifest`: the plugin's manifest for this config (the host
    validates it)."""
    def run():
        p = instance(plugin)
        m = p.manifest(parse_config(p, config_text))
        if not isinstance(m, Manifest):
            raise TypeError(f"manifest() returned {type(m).__name__}, not Manifest")
        return m
    return _guard(run, plugin)


def metadata_only(plugin, config_text: str) -> list:
    """`reads.metadata-only`: nothing when the config is refused (then
    `manifest` reports why), as in the Rust SDK."""
    try:
        return list(manifest(plugin, config_text).metadata_only_kinds)
    except PluginError:
        return []


def reference_kinds(plugin, config_text: str) -> list:
    """`references.kinds`: what `Manifest.references` declared; nothing
    when the config is refused (then `manifest` reports why)."""
    try:
        return list(manifest(plugin, config_text).reference_kinds)
    except PluginError:
        return []


def references(plugin, parent: str, config_text: str) -> list:
    """`references.references`: the plugin's `references(parent, config)`
    (parent a dict, config as `parse_config` made it), a list of
    `Reference`; a plugin without it (or returning None) names nothing."""
    def run():
        p = instance(plugin)
        config = parse_config(p, config_text)
        try:
            parsed = json.loads(parent)
        except ValueError as e:
            raise InvalidInput(f"parent is not JSON: {e}") from None
        f = getattr(p, "references", None)
        r = f(parsed, config) if f is not None else None
        if r is None:
            return []
        if not isinstance(r, (list, tuple)):
            raise TypeError(f"references() returned {type(r).__name__}, not a list of Reference")
        for ref in r:
            if not isinstance(ref, Reference):
                raise TypeError(f"references() returned a {type(ref).__name__}, not a Reference")
        return list(r)
    return _guard(run, plugin)


#: The webhooks a plugin may offer, in the WIT `webhook` enum's order, each
#: the name of the plugin's method that implements it.
WEBHOOKS = ("validate", "mutate", "convert")


def offered(plugin, config_text: str) -> list:
    """`admission.offered`: the names (of `WEBHOOKS`) of the methods the
    plugin itself defines, not the SDK's defaults; nothing when the config
    is refused (then `manifest` reports why). The platform's grant must
    allow each one, or the host refuses the plugin at load."""
    try:
        manifest(plugin, config_text)
    except PluginError:
        return []
    p = instance(plugin)
    return [w for w in WEBHOOKS if callable(getattr(p, w, None))]


def context(plugin, parent: str, observed, related, config_text: str, now: str, entropy) -> Context:
    p = instance(plugin)
    config = parse_config(p, config_text)
    return Context.from_json(parent, observed, related, config, now, entropy)


def _answer(plugin, method: str, answer_type, build, missing, shown=None):
    """Call the plugin's `method` on what `build(plugin object)` makes of
    the request; `None` (or no such method) is the `missing()` answer;
    anything but `answer_type` is a bug (`shown` names what it should be)."""
    def run():
        p = instance(plugin)
        arg = build(p)
        f = getattr(p, method, None)
        r = f(arg) if f is not None else None
        if r is None:
            r = missing()
        if not isinstance(r, answer_type):
            raise TypeError(f"{method}() returned {type(r).__name__}, "
                            f"not {shown or answer_type.__name__}")
        return r
    return _guard(run, plugin)


def reconcile(plugin, parent: str, observed, related, config_text: str, now: str, entropy) -> Response:
    """`reconcile`: the plugin's Response (None counts as the empty one)."""
    return _answer(plugin, "reconcile", Response,
                   lambda p: context(p, parent, observed, related, config_text, now, entropy),
                   Response)


def finalize(plugin, parent: str, observed, related, config_text: str, now: str, entropy) -> FinalizeResponse:
    """`finalize`: the plugin's answer; a plugin without `finalize` (or one
    returning None) reports cleanup done at once, as in the Rust SDK."""
    return _answer(plugin, "finalize", FinalizeResponse,
                   lambda p: context(p, parent, observed, related, config_text, now, entropy),
                   FinalizeResponse)


def admission_request(p, operation: str, object_text, old_object_text, config_text: str,
                      now: str, username: str = "", groups=(), dry_run: bool = False) -> AdmissionRequest:
    """The parsed request of `validate` and `mutate` for plugin object `p`."""
    return AdmissionRequest.from_json(operation, object_text, old_object_text,
                                      parse_config(p, config_text), now, username, groups, dry_run)


def validate(plugin, *request, **fields) -> Verdict:
    """`admission.validate` (request as `admission_request` takes it): the
    plugin's Verdict; a plugin without `validate` (or returning None) allows."""
    return _answer(plugin, "validate", Verdict,
                   lambda p: admission_request(p, *request, **fields), allow,
                   "Verdict (allow() or deny())")


def mutate(plugin, *request, **fields) -> Optional[str]:
    """`admission.mutate`: the object as it should be stored (JSON text), or
    None to leave it: when the plugin has no `mutate`, returns None, or
    returns the object unchanged (so the host sees no patch to check)."""
    def run():
        p = instance(plugin)
        req = admission_request(p, *request, **fields)
        f = getattr(p, "mutate", None)
        if f is None:
            return None
        # A copy: the plugin may change `req.object` in place and return it.
        before = copy.deepcopy(req.object)
        r = f(req)
        if r is None:
            return None
        if not isinstance(r, dict):
            raise TypeError(f"mutate() returned {type(r).__name__}, not dict")
        text = to_json_text("the mutated object", r)
        # As sorted JSON text, since `1 == 1.0 == True` in Python.
        if before is not None and _canonical(r) == _canonical(before):
            return None
        return text
    return _guard(run, plugin)


def convert(plugin, objects, api_version: str, config_text: str) -> list:
    """`conversion.convert`: the objects at `api_version`, as JSON texts in
    the same order. A plugin without `convert` passes objects already at
    `api_version` (unchanged) and refuses any other (`convert_none`)."""
    def run():
        p = instance(plugin)
        config = parse_config(p, config_text)
        parsed = []
        for o in objects:
            try:
                parsed.append(json.loads(o))
            except ValueError as e:
                raise InvalidInput(f"object to convert is not JSON: {e}") from None
        f = getattr(p, "convert", None)
        if f is None:
            convert_none(_plugin_name(p, config), parsed, api_version)
            return list(objects)
        r = f(parsed, api_version, config)
        if not isinstance(r, list):
            raise TypeError(f"convert() returned {type(r).__name__}, not list")
        return [o if isinstance(o, str) else to_json_text("a converted object", o) for o in r]
    return _guard(run, plugin)


def _plugin_name(p, config) -> str:
    """The plugin's name for messages ("this plugin" when its manifest
    refuses the config)."""
    try:
        return p.manifest(config).name
    except Exception:  # noqa: BLE001 - only a message depends on it
        return "this plugin"


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def to_json_text(what: str, value) -> str:
    """Compact JSON text of a child or status; Failed if it cannot be."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise Failed(f"cannot serialize {what}: {e}") from None
