"""`myapp` (Python): a `MyApp` (`example.com/v1alpha1`) becomes a
Deployment named `<name>-deploy`; its status reports the phase and the
available replicas.

A port of the Rust `plugins/myapp` with the Python SDK that gives exactly
its answers: same manifest (name `myapp`), children, status, conditions and
errors, so either build can serve the same parents. Where the Rust plugin's
behaviour comes from serde (error messages, a previous status that does not
read being ignored whole), `serde_view` reproduces it. Its `mutate` defaults
`spec.image` and `spec.replicas` on create and update, as the Rust one does.

`spec.configRef.name` names a ConfigMap in the MyApp's namespace (a
reference): the hash of its content goes into the pod template, so a change
to it rolls the Deployment, and the `ConfigReady` condition says whether it
was found.
"""

from kubeplug_sdk import (
    CONFIG_MAP, DELETE, DEPLOYMENT, InvalidInput, Manifest, Reference, Resource, Response,
    export, parse_time, set_condition,
)

import serde_view as sv
from conditions_view import conditions_of

#: Image used when `spec.image` is empty: a pinned, widely mirrored tag.
DEFAULT_IMAGE = "nginx:1.27"
VERSION = "0.1.0"
MYAPP = Resource("example.com", "v1alpha1", "MyApp", "myapps")

# The Rust plugin's structs, as serde reads them.
_META = sv.struct("Meta", [
    ("name", sv.option(sv.string), None),
    ("namespace", sv.option(sv.string), None),
    ("uid", sv.option(sv.string), None),
    ("generation", sv.option(sv.i64), None),
    ("labels", sv.option(sv.string_map), None),
    ("annotations", sv.option(sv.string_map), None),
    ("deletionTimestamp", sv.option(lambda v: _time(v)), None),
])
_SPEC = sv.struct("MyAppSpec", [
    ("replicas", sv.i32, lambda: 1),
    ("image", sv.option(sv.string), None),
])
_MYAPP = sv.struct("MyApp", [
    ("metadata", _META, sv.MISSING),
    ("spec", _SPEC, sv.MISSING),
])
_DEPLOYMENT_STATUS = sv.struct("DeploymentStatusView", [
    ("availableReplicas", sv.option(sv.i32), None),
])
_DEPLOYMENT = sv.struct("DeploymentView", [
    ("status", sv.option(_DEPLOYMENT_STATUS), None),
])
_CONFIG_MAP = sv.struct("ConfigMapView", [
    ("data", sv.option(sv.string_map), None),
    ("binaryData", sv.option(sv.string_map), None),
])
#: The pod template annotation that carries the ConfigMap's hash.
CONFIG_HASH = "example.com/config-hash"
FNV_OFFSET, FNV_PRIME, U64 = 0xcbf29ce484222325, 0x100000001b3, 2**64 - 1


def _time(v):
    t = parse_time(sv.string(v))
    if t is None:
        raise sv.SerdeError("not an RFC 3339 timestamp")
    return t


def deployment_name(name: str) -> str:
    """Name of the Deployment of MyApp `name`."""
    return f"{name}-deploy"


def config_ref(parent) -> str:
    """`spec.configRef.name` when it is a non-empty string, else ""."""
    spec = parent.get("spec") if isinstance(parent, dict) else None
    ref = spec.get("configRef") if isinstance(spec, dict) else None
    name = ref.get("name") if isinstance(ref, dict) else None
    return name if isinstance(name, str) else ""


def config_hash(config_map) -> str:
    """FNV-1a 64 over `data` then `binaryData` (as the API server serves
    it: base64), keys in byte order, each entry `section NUL key NUL value NUL`;
    16 lowercase hex digits. Stable across languages, so every port rolls
    the Deployment alike."""
    h = FNV_OFFSET
    for section in ("data", "binaryData"):
        entries = config_map.get(section) or {}
        for key in sorted(entries):
            for part in (section, key, entries[key]):
                for byte in part.encode() + b"\0":
                    h = ((h ^ byte) * FNV_PRIME) & U64
    return f"{h:016x}"


def _config_map(ctx, name: str):
    """The referenced ConfigMap as the Rust plugin finds it: the first of
    that name in the parent's namespace that reads as a ConfigMapView."""
    for o in ctx.related_of("ConfigMap", api_version="v1"):
        meta = o.get("metadata")
        if (isinstance(meta, dict) and meta.get("name") == name
                and (meta.get("namespace") or "") == ctx.namespace):
            try:
                return _CONFIG_MAP(o)
            except sv.SerdeError:
                continue
    return None


def deployment(ctx, spec, config=None) -> dict:
    """The Deployment; `config` is the referenced ConfigMap, if found."""
    selector = {"app.kubernetes.io/name": "myapp", "app.kubernetes.io/instance": ctx.name}
    labels = {**selector, "app.kubernetes.io/managed-by": "kubeplug"}
    image = spec["image"] or DEFAULT_IMAGE
    template_meta = {"labels": labels}
    if config is not None:
        template_meta["annotations"] = {CONFIG_HASH: config_hash(config)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment_name(ctx.name), "namespace": ctx.namespace, "labels": labels},
        "spec": {
            "replicas": spec["replicas"],
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": template_meta,
                "spec": {"containers": [{"name": "app", "image": image}]},
            },
        },
    }


def _observed_deployment(ctx):
    """The observed Deployment as the Rust plugin finds it: the first of the
    right apiVersion/kind/name that reads as a DeploymentView."""
    name = deployment_name(ctx.name)
    for o in ctx.observed_of("Deployment", api_version="apps/v1"):
        meta = o.get("metadata")
        if isinstance(meta, dict) and meta.get("name") == name:
            try:
                return _DEPLOYMENT(o)
            except sv.SerdeError:
                continue
    return None


def status(ctx, spec, ref: str = "", config=None) -> dict:
    """The status; `ref` is the configRef's name ("" for none), `config`
    the ConfigMap it names, if found."""
    observed = _observed_deployment(ctx)
    available = ((observed or {}).get("status") or {}).get("availableReplicas") or 0
    want = spec["replicas"]
    if observed is None:
        phase = "Pending"
    elif available >= want:
        phase = "Running"
    else:
        phase = "Progressing"
    conditions = conditions_of(ctx.status)
    now = parse_time(ctx.now)
    if now is not None:
        set_condition(
            conditions, "Available", "True" if phase == "Running" else "False", phase,
            f"{available}/{want} replicas available", now, observed_generation=ctx.generation,
        )
        if ref:
            found = config is not None
            set_condition(
                conditions, "ConfigReady", "True" if found else "False",
                "Found" if found else "NotFound",
                f"ConfigMap {ref} {'found' if found else 'not found'}", now,
                observed_generation=ctx.generation,
            )
    if not ref:
        conditions = [c for c in conditions if c.get("type") != "ConfigReady"]
    out = {"phase": phase, "availableReplicas": available}
    if ctx.generation is not None:
        out["observedGeneration"] = ctx.generation
    out["conditions"] = conditions
    return out


class MyAppPlugin:
    """The plugin: see the module docstring."""

    def manifest(self, config):
        return Manifest.composite("myapp", VERSION, MYAPP).owns(DEPLOYMENT).references(CONFIG_MAP)

    def references(self, parent, config):
        """The ConfigMap `spec.configRef` names, in the MyApp's namespace."""
        name = config_ref(parent)
        return [Reference.named(CONFIG_MAP, name)] if name else []

    def reconcile(self, ctx):
        try:
            app = _MYAPP(ctx.parent)
        except sv.SerdeError as e:
            raise InvalidInput(f"parent: {e}") from None
        spec = app["spec"]
        if spec["replicas"] < 0:
            raise InvalidInput(f"spec.replicas must not be negative, got {spec['replicas']}")
        ref = config_ref(ctx.parent)
        config = _config_map(ctx, ref) if ref else None
        return (Response().child(deployment(ctx, spec, config))
                .set_status(status(ctx, spec, ref, config)))

    def mutate(self, req):
        """Store the defaults reconcile assumes, so that `kubectl get` shows
        them (reconcile keeps assuming them, for MyApps stored before the
        webhook): `spec.image` when missing, null or empty, `spec.replicas`
        when missing. A spec that is not an object is the schema's to refuse."""
        if req.operation == DELETE:
            return None
        spec = req.object.get("spec") if isinstance(req.object, dict) else None
        if not isinstance(spec, dict):
            return None
        changed = False
        if spec.get("image") in (None, ""):
            spec["image"] = DEFAULT_IMAGE
            changed = True
        if "replicas" not in spec:
            spec["replicas"] = 1
            changed = True
        return req.object if changed else None


Reconciler, Reads = export(MyAppPlugin)
