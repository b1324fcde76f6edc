"""The calls of the contract on Python values, shared by the Wasm glue
(`export`) and the pure-Python fixture runner (`kubeplug_sdk.testing`), so
both run a plugin the same way. Every function raises a `PluginError` (any
other exception from plugin code is wrapped as `Failed`)."""

from __future__ import annotations

import json
from typing import Any

from .context import Context
from .errors import InvalidConfig, PluginError, as_plugin_error
from .manifest import Manifest
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


def _guard(fn):
    """Run `fn`, turning any exception into a `PluginError`."""
    try:
        return fn()
    except PluginError:
        raise
    except Exception as e:  # noqa: BLE001 - a plugin bug must not trap
        raise as_plugin_error(e) from e


def manifest(plugin, config_text: str) -> Manifest:
    """`manifest`: the validated manifest for this config."""
    def run():
        p = instance(plugin)
        m = p.manifest(parse_config(p, config_text))
        if not isinstance(m, Manifest):
            raise TypeError(f"manifest() returned {type(m).__name__}, not Manifest")
        m.validate()
        return m
    return _guard(run)


def metadata_only(plugin, config_text: str) -> list:
    """`reads.metadata-only`: nothing when the config is refused (then
    `manifest` reports why), as in the Rust SDK."""
    try:
        return list(manifest(plugin, config_text).metadata_only_kinds)
    except PluginError:
        return []


def context(plugin, parent: str, observed, related, config_text: str, now: str, entropy) -> Context:
    p = instance(plugin)
    config = parse_config(p, config_text)
    return Context.from_json(parent, observed, related, config, now, entropy)


def _answer(plugin, method: str, answer_type, ctx_args, missing):
    """Call the plugin's `method` on a fresh context; `None` (or no such
    method) is the `missing()` answer; anything but `answer_type` is a bug."""
    def run():
        p = instance(plugin)
        ctx = context(p, *ctx_args)
        f = getattr(p, method, None)
        r = f(ctx) if f is not None else None
        if r is None:
            r = missing()
        if not isinstance(r, answer_type):
            raise TypeError(f"{method}() returned {type(r).__name__}, not {answer_type.__name__}")
        return r
    return _guard(run)


def reconcile(plugin, parent: str, observed, related, config_text: str, now: str, entropy) -> Response:
    """`reconcile`: the plugin's Response (None counts as the empty one)."""
    return _answer(plugin, "reconcile", Response,
                   (parent, observed, related, config_text, now, entropy), Response)


def finalize(plugin, parent: str, observed, related, config_text: str, now: str, entropy) -> FinalizeResponse:
    """`finalize`: the plugin's answer; a plugin without `finalize` (or one
    returning None) reports cleanup done at once, as in the Rust SDK."""
    return _answer(plugin, "finalize", FinalizeResponse,
                   (parent, observed, related, config_text, now, entropy), FinalizeResponse)


def to_json_text(what: str, value) -> str:
    """Compact JSON text of a child or status; Failed if it cannot be."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        from .errors import Failed
        raise Failed(f"cannot serialize {what}: {e}") from None
