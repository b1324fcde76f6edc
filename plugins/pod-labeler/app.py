"""`pod-labeler`: a decorator that merges the labels
`managed-by: pod-label-controller` and `injected-at: <time>` into every Pod
(of the configured namespaces) lacking them. A port of the seeds'
PodLabelController (Python).

Deviation from the seed, on purpose: the seed wrote `injected-at` as
`%Y-%m-%dT%H:%M:%SZ`, which the API server refuses (a label value may not
contain `:`), so its patch could never succeed. This port writes the
label-safe form of the request's `now`, `20261129T180000Z` (basic ISO 8601,
UTC), and takes the time from the request, never a clock, so it is
deterministic.

Configuration (JSON), every key optional:
- `namespaces`: namespace names (DNS labels) to serve; empty or missing
  means every namespace the host serves.
- `labels`: extra fixed labels to merge as well (valid label keys/values).

A Pod that already carries every label keeps what it has (empty answer;
an existing value is never overwritten). It reads Pods' labels only, so the
host caches Pods metadata-only (`reads` export).
"""

from kubeplug_sdk import (
    POD, InvalidConfig, Manifest, Response, export, is_dns_label, is_label_key,
    is_label_value, label_safe_time, Failed,
)

MANAGED_BY = "managed-by"
MANAGED_BY_VALUE = "pod-label-controller"
INJECTED_AT = "injected-at"

VERSION = "0.1.0"


def _config(raw):
    """Validated `(namespaces, extra_labels)` of a config document."""
    if not isinstance(raw, dict):
        raise InvalidConfig("the configuration must be an object")
    unknown = sorted(set(raw) - {"namespaces", "labels"})
    if unknown:
        raise InvalidConfig(f"unknown field `{unknown[0]}`, expected `namespaces` or `labels`")
    namespaces = raw.get("namespaces")
    if namespaces is None:
        namespaces = []
    if not isinstance(namespaces, list):
        raise InvalidConfig("`namespaces` must be a list of namespace names")
    for n in namespaces:
        if not is_dns_label(n):
            raise InvalidConfig(f"`namespaces`: {_quote(n)} is not a valid namespace name")
    labels = raw.get("labels")
    if labels is None:
        labels = {}
    if not isinstance(labels, dict):
        raise InvalidConfig("`labels` must be an object of label keys to values")
    for k, v in labels.items():
        if not is_label_key(k):
            raise InvalidConfig(f"`labels`: {_quote(k)} is not a valid label key")
        if not is_label_value(v):
            raise InvalidConfig(f"`labels`: {_quote(v)} (for {_quote(k)}) is not a valid label value")
        if k in (MANAGED_BY, INJECTED_AT):
            raise InvalidConfig(f"`labels`: {_quote(k)} is set by the plugin itself")
    return list(namespaces), dict(labels)


def _quote(v):
    """A value as the error messages show it (JSON, like the Rust plugins' `{:?}`)."""
    import json
    return json.dumps(v)


class PodLabeler:
    """The plugin: see the module docstring."""

    def parse_config(self, raw):
        return _config(raw)

    def manifest(self, config):
        namespaces, _ = config
        return (
            Manifest.decorator("pod-labeler", VERSION, POD)
            .namespaces(namespaces)
            # It reads a Pod's labels only: the host caches Pods metadata-only.
            .metadata_only(POD)
        )

    def reconcile(self, ctx):
        namespaces, extra = ctx.config
        # The host filters by namespace too; checking here keeps `render`
        # and fixtures honest and the plugin safe under any host.
        if namespaces and ctx.namespace not in namespaces:
            return Response()
        have = ctx.labels
        stamp = label_safe_time(ctx.now)
        if stamp is None:
            raise Failed(f"the request's time {ctx.now!r} is not RFC 3339")
        want = {MANAGED_BY: MANAGED_BY_VALUE, INJECTED_AT: stamp, **extra}
        missing = {k: v for k, v in want.items() if k not in have}
        if not missing:
            return Response()
        return (
            Response()
            .parent_patch(labels=missing)
            .event("Labeled", f"labeled pod {ctx.name} with {', '.join(sorted(missing))}")
        )


Reconciler, Reads = export(PodLabeler)
