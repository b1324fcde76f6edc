"""`{{name}}`: a kubeplug plugin in Python.

Describe here what it reconciles and why. `manifest` validates the config
and says what the plugin is; `reconcile` is a pure function of the request
(use `ctx.now` and `ctx.entropy`, never a clock or random module).
"""

from kubeplug_sdk import POD, InvalidConfig, Manifest, Response, export

VERSION = "0.1.0"


class Plugin:
    def manifest(self, config):
        if not isinstance(config, dict):
            raise InvalidConfig("the configuration must be an object")
        return Manifest.decorator("{{name}}", VERSION, POD).metadata_only(POD)

    def reconcile(self, ctx):
        if ctx.labels.get("example.com/{{name}}") == "seen":
            return Response()
        return (Response()
                .parent_patch(labels={"example.com/{{name}}": "seen"})
                .event("Seen", f"{{name}} saw pod {ctx.name}"))


Reconciler, Reads = export(Plugin)
