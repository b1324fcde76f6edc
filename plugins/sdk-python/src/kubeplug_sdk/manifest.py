"""`Resource` and `Manifest`: what a plugin reconciles, as builders.

Mirrors the Rust SDK's `Manifest` (plugins/sdk/src/manifest.rs); see
`wit/plugin.wit` for every field's meaning. Builders return `self`, so a
manifest reads as one chained expression.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Union

COMPOSITE = "composite"
DECORATOR = "decorator"


@dataclass(frozen=True)
class Resource:
    """A Kubernetes resource type, as the API server names it."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True

    @staticmethod
    def core(version: str, kind: str, plural: str, namespaced: bool = True) -> "Resource":
        """A core-group type, e.g. `Resource.core("v1", "Pod", "pods")`."""
        return Resource("", version, kind, plural, namespaced)

    @staticmethod
    def cluster(group: str, version: str, kind: str, plural: str) -> "Resource":
        """A cluster-scoped type."""
        return Resource(group, version, kind, plural, False)

    @property
    def api_version(self) -> str:
        """`apiVersion` as objects of this type carry it (`v1`, `apps/v1`)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def to_json(self) -> dict:
        """As `kubeplug inspect -o json` prints it."""
        return {
            "group": self.group,
            "version": self.version,
            "kind": self.kind,
            "plural": self.plural,
            "namespaced": self.namespaced,
        }


# Well-known types, for brevity in plugins.
POD = Resource.core("v1", "Pod", "pods")
SERVICE = Resource.core("v1", "Service", "services")
SECRET = Resource.core("v1", "Secret", "secrets")
CONFIG_MAP = Resource.core("v1", "ConfigMap", "configmaps")
DEPLOYMENT = Resource("apps", "v1", "Deployment", "deployments")
STATEFUL_SET = Resource("apps", "v1", "StatefulSet", "statefulsets")


class ParentName:
    """Selector value: the parent's `metadata.name` (WIT `parent-name`)."""

    def __eq__(self, other):
        return isinstance(other, ParentName)

    def __hash__(self):
        return hash("parent-name")

    def __repr__(self):
        return "PARENT_NAME"


PARENT_NAME = ParentName()
LabelValue = Union[str, ParentName]


@dataclass
class Related:
    """Objects to observe (not own), selected by an equality label selector.
    A plain `str` value is a literal; `PARENT_NAME` is the parent's name."""

    resource: Resource
    match_labels: list  # list[tuple[str, LabelValue]]


@dataclass
class Manifest:
    """What a plugin is. Build with `Manifest.composite` / `.decorator` and
    the chained builders (`owns`, `related`, `namespaces`, `finalizer`,
    `resync`, `metadata_only`, `references`). The builders own the plain
    names, so the data lives in the fields below."""

    name: str
    version: str
    parent: Resource
    mode: str = COMPOSITE
    children: list = field(default_factory=list)
    related_objects: list = field(default_factory=list)
    namespace_list: list = field(default_factory=list)
    finalizer_name: Optional[str] = None
    resync_seconds: Optional[int] = None
    metadata_only_kinds: list = field(default_factory=list)
    reference_kinds: list = field(default_factory=list)

    @staticmethod
    def composite(name: str, version: str, parent: Resource) -> "Manifest":
        """A composite plugin (owns children, writes status) for `parent`."""
        return Manifest(name, version, parent, COMPOSITE)

    @staticmethod
    def decorator(name: str, version: str, parent: Resource) -> "Manifest":
        """A decorator plugin for `parent`: patches its labels and
        annotations, and may attach children to it (its attachments,
        declared with `owns`); it never writes status."""
        return Manifest(name, version, parent, DECORATOR)

    def owns(self, resource: Resource) -> "Manifest":
        """Declare a child kind the plugin may return (Rust: `child`). A
        decorator's are its attachments: owned by the decorated object,
        labelled, pruned when no longer returned, and fenced as a
        composite's children are."""
        self.children.append(resource)
        return self

    def related(self, resource: Resource, match_labels) -> "Manifest":
        """Observe `resource` objects whose labels match `match_labels` (a
        mapping or pairs; values are literals or `PARENT_NAME`). All
        entries must match; an empty selector matches nothing."""
        pairs = list(match_labels.items()) if isinstance(match_labels, Mapping) else list(match_labels)
        self.related_objects.append(Related(resource, [(str(k), v) for k, v in pairs]))
        return self

    def namespaces(self, namespaces: Iterable[str]) -> "Manifest":
        """Restrict the plugin to these namespaces (empty: all)."""
        self.namespace_list.extend(namespaces)
        return self

    def finalizer(self, finalizer: str) -> "Manifest":
        """Keep `finalizer` on every parent and call `finalize` on deletion."""
        self.finalizer_name = finalizer
        return self

    def resync(self, seconds: int) -> "Manifest":
        """Reconcile every parent at least this often."""
        self.resync_seconds = int(seconds)
        return self

    def metadata_only(self, resource: Resource) -> "Manifest":
        """Read only apiVersion/kind/metadata of `resource` (a related kind or
        a decorator's parent): the host then caches it metadata-only. This
        is what the optional `reads` export answers."""
        self.metadata_only_kinds.append(resource)
        return self

    def references(self, resource: Resource) -> "Manifest":
        """Let the plugin's `references(parent, config)` name objects of
        `resource` (each kind must be granted, `references:`): the host
        watches the kind and hands the objects a parent names to
        `reconcile` and `finalize`. This is what the optional
        `references.kinds` export answers."""
        self.reference_kinds.append(resource)
        return self

    def to_json(self) -> dict:
        """The manifest as `kubeplug inspect -o json` prints it (fixtures)."""
        return {
            "name": self.name,
            "version": self.version,
            "parent": self.parent.to_json(),
            "mode": self.mode,
            "children": [c.to_json() for c in self.children],
            "related": [
                {
                    "resource": r.resource.to_json(),
                    "matchLabels": [
                        [k, "parentName" if isinstance(v, ParentName) else {"literal": v}]
                        for k, v in r.match_labels
                    ],
                }
                for r in self.related_objects
            ],
            "namespaces": list(self.namespace_list),
            "finalizer": self.finalizer_name,
            "resyncSeconds": self.resync_seconds,
            # `inspect` prints the `reads` answer only when there is one.
            **({"metadataOnly": [r.to_json() for r in self.metadata_only_kinds]}
               if self.metadata_only_kinds else {}),
            # Likewise the `references.kinds` answer.
            **({"references": [r.to_json() for r in self.reference_kinds]}
               if self.reference_kinds else {}),
        }
