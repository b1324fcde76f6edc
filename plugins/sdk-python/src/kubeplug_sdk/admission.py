"""Admission and conversion of the plugin's parent kind: what a plugin's
optional `validate(req)`, `mutate(req)` and `convert(objects, api_version,
config)` are handed and answer (mirrors the Rust SDK's admission.rs).

The host serves them as the API server's webhooks only for what the
platform's grant allows (`admission:`, `conversion: true`); a plugin that
defines none of them answers like one without them: every write allowed,
nothing defaulted, no version converted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from .errors import Failed, InvalidInput

#: `AdmissionRequest.operation` values (the WIT `operation` cases).
CREATE, UPDATE, DELETE = "create", "update", "delete"


def _parse(what: str, text: Optional[str]):
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as e:
        raise InvalidInput(f"{what} is not JSON: {e}") from None


@dataclass
class UserInfo:
    """Who writes, as the API server authenticated them."""

    username: str = "test"
    groups: list = field(default_factory=list)


@dataclass
class AdmissionRequest:
    """One write of a parent, parsed: `object` and `old_object` are dicts
    (or None: no `object` on delete, no `old_object` on create)."""

    operation: str
    object: Any = None
    old_object: Any = None
    user: UserInfo = field(default_factory=UserInfo)
    #: Nothing will be stored (`kubectl --dry-run=server`).
    dry_run: bool = False
    config: Any = field(default_factory=dict)
    now: str = "2026-11-29T18:00:00Z"

    @staticmethod
    def from_json(operation: str, object_text: Optional[str], old_object_text: Optional[str],
                  config, now: str, username: str = "", groups: Iterable[str] = (),
                  dry_run: bool = False) -> "AdmissionRequest":
        """Parse the request's JSON texts; a text that is not JSON is
        `invalid-input` (as in the Rust SDK)."""
        return AdmissionRequest(
            operation=operation,
            object=_parse("object", object_text),
            old_object=_parse("old object", old_object_text),
            user=UserInfo(username, list(groups)),
            dry_run=bool(dry_run),
            config=config,
            now=now,
        )

    @property
    def name(self) -> str:
        """The parent's `metadata.name` (of the old object on delete)."""
        obj = self.object if self.object is not None else self.old_object
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        return name if isinstance(name, str) else ""


@dataclass
class Verdict:
    """A validation's answer: build it with `allow()` or `deny()`."""

    allowed: bool = True
    #: Shown to the client (e.g. by `kubectl`) when allowed.
    warnings: list = field(default_factory=list)
    #: Why the write is denied (HTTP 422), and the `(field, message)` causes.
    message: str = ""
    causes: list = field(default_factory=list)

    def warn(self, warning: str) -> "Verdict":
        """Add a warning (ignored on a denial)."""
        if self.allowed:
            self.warnings.append(warning)
        return self


def allow(warnings: Iterable[str] = ()) -> Verdict:
    """Allow the write, with warnings for the client."""
    return Verdict(True, [str(w) for w in warnings])


def deny(message: str, causes: Iterable = ()) -> Verdict:
    """Deny the write with `message`; `causes` are `(field, message)` pairs
    naming the fields at fault as `kubectl` prints them (`spec.engine`)."""
    pairs = []
    for c in causes:
        f, m = c
        pairs.append((str(f), str(m)))
    return Verdict(False, [], str(message), pairs)


def convert_none(plugin_name: str, objects: list, api_version: str) -> list:
    """What `convert` does when a plugin defines none: objects already at
    `api_version` pass, any other is an error (its CRD serves one version)."""
    for o in objects:
        have = o.get("apiVersion") if isinstance(o, dict) else None
        if have != api_version:
            have = have if isinstance(have, str) else "an object without apiVersion"
            raise Failed(f"{plugin_name} converts no versions: cannot convert {have} to {api_version}")
    return objects
