"""Test guest: a Python plugin whose world imports `wasi:keyvalue/store`,
which no kubeplug host provides. It is 18 MB like any Python plugin, so a
host that found out only by compiling it would take ~20 s; the host must
refuse it from its import list in well under a second."""

from kubeplug_sdk import Manifest, Resource, Response, export


class Unprovided:
    def manifest(self, config):
        return Manifest.composite(
            "unprovided", "0.1.0",
            Resource("example.com", "v1", "Widget", "widgets", True),
        )

    def reconcile(self, ctx):
        return Response()


Reconciler, Reads = export(Unprovided)
