"""`Response` and `FinalizeResponse`: what the plugin wants, as builders.

Mirrors the Rust SDK's response.rs. Builders return `self` for chaining.
Children and status are kept as Python values and serialized to JSON text
only at the WIT boundary.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from .errors import Failed

#: The annotation that marks a child create-only (see wit/plugin.wit).
CREATE_ONLY = "kubeplug.io/create-only"


@dataclass
class Event:
    """A Kubernetes Event to record on the parent."""

    warning: bool
    reason: str
    message: str

    @staticmethod
    def normal(reason: str, message: str) -> "Event":
        return Event(False, reason, message)

    @staticmethod
    def warn(reason: str, message: str) -> "Event":
        return Event(True, reason, message)

    def to_json(self) -> dict:
        """As fixtures write it."""
        return {"type": "Warning" if self.warning else "Normal",
                "reason": self.reason, "message": self.message}


_NO_STATUS = object()


@dataclass
class Response:
    """The desired state for one parent."""

    children: list = field(default_factory=list)
    status: Any = None
    labels: list = field(default_factory=list)  # [(key, value)], in order
    annotations: list = field(default_factory=list)
    requeue_after_seconds: Optional[int] = None
    events: list = field(default_factory=list)

    def child(self, obj: dict) -> "Response":
        """Add a desired child (a dict with apiVersion, kind, metadata.name;
        the namespace defaults to the parent's). A decorator's children are
        its attachments, owned by the decorated object."""
        self.children.append(obj)
        return self

    def create_only_child(self, obj: dict) -> "Response":
        """Add a child the host creates once and never updates (generated
        credentials...): it gets the `kubeplug.io/create-only` mark."""
        obj = copy.deepcopy(obj)
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict):
            raise Failed("a child needs metadata")
        annotations = meta.setdefault("annotations", {})
        if isinstance(annotations, dict):
            annotations[CREATE_ONLY] = "true"
        self.children.append(obj)
        return self

    def set_status(self, status: Any) -> "Response":
        """Set the desired `.status` (a dict; composite mode: a decorator
        never writes status)."""
        self.status = status
        return self

    def parent_patch(self, labels: Optional[Mapping[str, str]] = None,
                     annotations: Optional[Mapping[str, str]] = None) -> "Response":
        """Merge labels/annotations into the parent (decorator mode)."""
        for k, v in (labels or {}).items():
            self.labels.append((k, v))
        for k, v in (annotations or {}).items():
            self.annotations.append((k, v))
        return self

    def label(self, key: str, value: str) -> "Response":
        return self.parent_patch(labels={key: value})

    def annotation(self, key: str, value: str) -> "Response":
        return self.parent_patch(annotations={key: value})

    def event(self, reason: str, message: str) -> "Response":
        """Record a Normal event on the parent."""
        self.events.append(Event(False, reason, message))
        return self

    def warning(self, reason: str, message: str) -> "Response":
        """Record a Warning event on the parent."""
        self.events.append(Event(True, reason, message))
        return self

    def requeue_after(self, seconds: int) -> "Response":
        """Reconcile again after `seconds` even without events."""
        self.requeue_after_seconds = int(seconds)
        return self


@dataclass
class FinalizeResponse:
    """The answer to `finalize`."""

    done: bool = True
    requeue_after_seconds: Optional[int] = None
    events: list = field(default_factory=list)

    @staticmethod
    def finished() -> "FinalizeResponse":
        """Cleanup complete: the host may remove the finalizer."""
        return FinalizeResponse(True)

    @staticmethod
    def pending(seconds: int) -> "FinalizeResponse":
        """Cleanup still running: ask again after `seconds`."""
        return FinalizeResponse(False, int(seconds))

    def event(self, reason: str, message: str) -> "FinalizeResponse":
        self.events.append(Event(False, reason, message))
        return self

    def warning(self, reason: str, message: str) -> "FinalizeResponse":
        self.events.append(Event(True, reason, message))
        return self
