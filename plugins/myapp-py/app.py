"""`myapp` (Python): a `MyApp` (`example.com/v1alpha1`) becomes a
Deployment named `<name>-deploy`; its status reports the phase and the
available replicas.

A port of the Rust `plugins/myapp` with the Python SDK that gives exactly
its answers: same manifest (name `myapp`), children, status, conditions and
errors, so either build can serve the same parents. Where the Rust plugin's
behaviour comes from serde (error messages, a previous status that does not
read being ignored whole), `serde_view` reproduces it. Its `mutate` defaults
`spec.image` and `spec.replicas` on create and update, as the Rust one does.
"""

from kubeplug_sdk import (
    DELETE, DEPLOYMENT, InvalidInput, Manifest, Resource, Response, export, parse_time,
    set_condition,
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


def _time(v):
    t = parse_time(sv.string(v))
    if t is None:
        raise sv.SerdeError("not an RFC 3339 timestamp")
    return t


def deployment_name(name: str) -> str:
    """Name of the Deployment of MyApp `name`."""
    return f"{name}-deploy"


def deployment(ctx, spec) -> dict:
    selector = {"app.kubernetes.io/name": "myapp", "app.kubernetes.io/instance": ctx.name}
    labels = {**selector, "app.kubernetes.io/managed-by": "kubeplug"}
    image = spec["image"] or DEFAULT_IMAGE
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment_name(ctx.name), "namespace": ctx.namespace, "labels": labels},
        "spec": {
            "replicas": spec["replicas"],
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels},
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


def status(ctx, spec) -> dict:
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
    out = {"phase": phase, "availableReplicas": available}
    if ctx.generation is not None:
        out["observedGeneration"] = ctx.generation
    out["conditions"] = conditions
    return out


class MyAppPlugin:
    """The plugin: see the module docstring."""

    def manifest(self, config):
        return Manifest.composite("myapp", VERSION, MYAPP).owns(DEPLOYMENT)

    def reconcile(self, ctx):
        try:
            app = _MYAPP(ctx.parent)
        except sv.SerdeError as e:
            raise InvalidInput(f"parent: {e}") from None
        spec = app["spec"]
        if spec["replicas"] < 0:
            raise InvalidInput(f"spec.replicas must not be negative, got {spec['replicas']}")
        return Response().child(deployment(ctx, spec)).set_status(status(ctx, spec))

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
