"""`Reference`: an object a parent names (its `spec.configRef`, a selector in
its spec), which the host looks up and appends to `ctx.related`.

What a plugin's optional `references(parent, config)` answers (the WIT
`references` interface). Each reference's kind must be one the manifest
declares with `Manifest.references`: the host watches those kinds, so that a
change to an object a parent names reconciles that parent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from .manifest import Resource


@dataclass(frozen=True)
class Reference:
    """Objects of `resource` a parent names: the one called `name`, or every
    one whose labels hold all of `labels` (exactly one of the two is set).
    `namespace` None means the parent's; only a cluster-scoped parent names
    another (one of the plugin's namespaces). Ignored for cluster-scoped
    kinds."""

    resource: Resource
    name: Optional[str] = None
    labels: Optional[tuple] = None  # tuple[tuple[str, str], ...]
    namespace: Optional[str] = None

    @staticmethod
    def named(resource: Resource, name: str, namespace: Optional[str] = None) -> "Reference":
        """The object of `resource` named `name` (must not be empty)."""
        return Reference(resource, name=str(name), namespace=namespace)

    @staticmethod
    def labelled(resource: Resource, labels, namespace: Optional[str] = None) -> "Reference":
        """Every object of `resource` whose labels hold all of `labels` (a
        mapping or pairs; must not be empty: that would select a whole
        namespace)."""
        pairs = labels.items() if isinstance(labels, Mapping) else labels
        return Reference(resource, labels=tuple((str(k), str(v)) for k, v in pairs),
                         namespace=namespace)
