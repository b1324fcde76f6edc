"""`database-py`: a bench guest (never deployed) for tests/bench/admission.

It claims `Database` (`example.com/v1`) as a composite and reconciles
nothing: it declares ConfigMaps as its child kind only because the host
refuses a composite without one, and never returns one. Its `validate` is the version-line rule of the Rust
`database` plugin (plugins/database/src/{admission,versions}.rs), with the
same messages, so that the benchmark compares the same check written in
Python and in Rust: `spec.version` must be `x.y.z` within a line the
engine's image ships. As in Rust, an update is judged on what it changes
(a version it keeps is only warned about) and deletes are always allowed.
The Rust plugin's other checks (engine immutable on update, the storage
annotation) are left out: the benchmark's creates never reach them.
"""

from kubeplug_sdk import CONFIG_MAP, CREATE, DELETE, Manifest, Resource, Response, allow, deny, export

VERSION = "0.1.0"
DATABASE = Resource("example.com", "v1", "Database", "databases")

# versions.rs `lines` and spec.rs `Engine::image`.
LINES = {
    "mysql": ["5.7", "8.0", "8.4"],
    "postgresql": ["13", "14", "15", "16", "17", "18"],
    "mongodb": ["5.0", "6.0", "7.0", "8.0"],
}
IMAGES = {"mysql": "mysql", "postgresql": "postgres", "mongodb": "mongo"}


def _numbers(version):
    """`x.y.z` as numbers, or None (versions.rs `numbers`)."""
    parts = version.split(".")
    if len(parts) != 3 or not all(p and p.isascii() and p.isdigit() for p in parts):
        return None
    numbers = [int(p) for p in parts]
    # Rust parses u64: a larger number is not x.y.z.
    return numbers if all(n < 2**64 for n in numbers) else None


def check(engine, version):
    """Why `engine` cannot run `version`, or None (versions.rs `check`)."""
    numbers = _numbers(version)
    if numbers is None:
        return f"must look like x.y.z, got {_debug(version)}"
    lines = LINES[engine]
    for line in lines:
        want = [int(p) for p in line.split(".")]
        if numbers[: len(want)] == want:
            return None
    return (f"{engine} {version} is not shipped by the {IMAGES[engine]} image this plugin "
            f"supports: supported lines {', '.join(lines)}")


def _debug(text):
    """A string as Rust's `{:?}` prints it (enough for versions)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _spec(obj):
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return spec if isinstance(spec, dict) else {}


class DatabaseVersions:
    def manifest(self, config):
        return Manifest.composite("database-py", VERSION, DATABASE).owns(CONFIG_MAP)

    def reconcile(self, ctx):
        return Response()

    def validate(self, req):
        if req.operation == DELETE or req.object is None:
            return allow()
        spec = _spec(req.object)
        engine, version = spec.get("engine"), spec.get("version")
        # The schema refuses a missing or unknown engine or version first.
        if engine not in LINES or not isinstance(version, str):
            return allow()
        reason = check(engine, version)
        if reason is None:
            return allow()
        old = _spec(req.old_object) if req.operation != CREATE else None
        changed = old is None or old.get("engine") != engine or old.get("version") != version
        if changed:
            return deny(f"spec.version: {reason}", [("spec.version", reason)])
        return allow([f"spec.version: {reason} (kept: this update leaves it unchanged)"])


Reconciler, Reads = export(DatabaseVersions)
