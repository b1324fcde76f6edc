"""kubeplug_sdk: write kubeplug reconcile plugins in Python.

A plugin is a class with `manifest(config) -> Manifest`,
`reconcile(ctx) -> Response` and optionally `finalize(ctx)`, for the
objects its parents name `references(parent, config) -> [Reference]`, and
for admission and conversion of its parents `validate(req) -> Verdict`,
`mutate(req) -> dict | None` and `convert(objects, api_version, config)`;
its `app.py` exports it with `Reconciler, Reads = export(MyPlugin)`, and
`plugins/sdk-python/build` turns it into a component of the
`plugin-with-admission` world of `wit/plugin.wit`. Mirrors the Rust SDK
(`plugins/sdk`): same manifest builders, errors and `set_condition`.
"""

from . import log
from .admission import (
    CREATE, DELETE, UPDATE, AdmissionRequest, UserInfo, Verdict, allow, convert_none, deny,
)
from .conditions import condition, label_safe_time, parse_time, read_condition, set_condition
from .context import Context
from .errors import Failed, InvalidConfig, InvalidInput, PluginError
from .glue import export, export_admission, export_references
from .manifest import (
    COMPOSITE, CONFIG_MAP, DECORATOR, DEPLOYMENT, PARENT_NAME, POD, SECRET, SERVICE,
    STATEFUL_SET, Manifest, ParentName, Related, Resource,
)
from .references import Reference
from .response import CREATE_ONLY, Event, FinalizeResponse, Response
from .validate import is_dns_label, is_label_key, is_label_value

__all__ = [
    "log", "CREATE", "DELETE", "UPDATE", "AdmissionRequest", "UserInfo", "Verdict", "allow",
    "convert_none", "deny", "condition", "label_safe_time", "parse_time", "read_condition",
    "set_condition", "Context", "Failed", "InvalidConfig", "InvalidInput", "PluginError",
    "export", "export_admission", "export_references",
    "COMPOSITE", "CONFIG_MAP", "DECORATOR", "DEPLOYMENT", "PARENT_NAME", "POD", "SECRET",
    "SERVICE", "STATEFUL_SET", "Manifest", "ParentName", "Related", "Reference", "Resource",
    "CREATE_ONLY", "Event", "FinalizeResponse", "Response",
    "is_dns_label", "is_label_key", "is_label_value",
]
