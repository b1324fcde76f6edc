"""`Context`: the request of one call, parsed, with accessors.

Objects cross the WIT boundary as JSON text; the SDK parses them once into
plain dicts (as the API server would serve them) so plugin code reads
`ctx.parent["spec"]` directly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from .errors import InvalidInput


def _parse(what: str, text: str):
    try:
        return json.loads(text)
    except ValueError as e:
        raise InvalidInput(f"{what} is not JSON: {e}") from None


def _get(obj, *path):
    """`obj[p0][p1]...`, None where a step is missing or not a dict."""
    for p in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(p)
    return obj


@dataclass
class Context:
    """What the host observed for one parent, plus the plugin's config."""

    parent: Any
    observed: list = field(default_factory=list)
    related: list = field(default_factory=list)
    config: Any = field(default_factory=dict)
    now: str = "2026-11-29T18:00:00Z"
    entropy: bytes = bytes(range(32))

    @staticmethod
    def from_json(parent: str, observed, related, config, now: str, entropy: bytes) -> "Context":
        """Parse the request's JSON texts; a text that is not JSON is
        `invalid-input` (as in the Rust SDK)."""
        return Context(
            parent=_parse("parent", parent),
            observed=[_parse("observed object", o) for o in observed],
            related=[_parse("related object", o) for o in related],
            config=config,
            now=now,
            entropy=bytes(entropy),
        )

    @property
    def name(self) -> str:
        """The parent's `metadata.name` ("" when absent)."""
        v = _get(self.parent, "metadata", "name")
        return v if isinstance(v, str) else ""

    @property
    def namespace(self) -> str:
        """The parent's `metadata.namespace` ("" for cluster-scoped)."""
        v = _get(self.parent, "metadata", "namespace")
        return v if isinstance(v, str) else ""

    @property
    def generation(self) -> Optional[int]:
        """The parent's `metadata.generation`, for `observedGeneration`."""
        v = _get(self.parent, "metadata", "generation")
        if isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63:
            return v
        return None

    @property
    def status(self):
        """The parent's current `.status` (None when it has none)."""
        return _get(self.parent, "status")

    @property
    def labels(self) -> dict:
        """The parent's labels ({} when none)."""
        v = _get(self.parent, "metadata", "labels")
        return v if isinstance(v, dict) else {}

    @property
    def annotations(self) -> dict:
        """The parent's annotations ({} when none)."""
        v = _get(self.parent, "metadata", "annotations")
        return v if isinstance(v, dict) else {}

    @staticmethod
    def _of(objects, kind: str, api_version: Optional[str]):
        return [
            o for o in objects
            if isinstance(o, dict) and o.get("kind") == kind
            and (api_version is None or o.get("apiVersion") == api_version)
        ]

    def observed_of(self, kind: str, api_version: Optional[str] = None) -> list:
        """Observed children of `kind` (and `api_version`, if given)."""
        return self._of(self.observed, kind, api_version)

    def observed_named(self, kind: str, name: str, api_version: Optional[str] = None):
        """The observed child of `kind` named `name`, or None."""
        for o in self.observed_of(kind, api_version):
            if _get(o, "metadata", "name") == name:
                return o
        return None

    def related_of(self, kind: str, api_version: Optional[str] = None) -> list:
        """Related objects of `kind` (and `api_version`, if given)."""
        return self._of(self.related, kind, api_version)

    def related_named(self, kind: str, name: str, api_version: Optional[str] = None,
                      namespace: Optional[str] = None):
        """The related object of `kind` named `name` (and of `api_version`
        and in `namespace`, if given), or None: e.g. the one a reference
        named, which is absent when it does not exist."""
        for o in self.related_of(kind, api_version):
            if _get(o, "metadata", "name") == name and (
                    namespace is None or (_get(o, "metadata", "namespace") or "") == namespace):
                return o
        return None
