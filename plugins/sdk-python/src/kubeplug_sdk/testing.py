"""Run a plugin class over fixture cases without Wasm (docs/fixtures.md).

    python -m kubeplug_sdk.testing --plugin app:PodLabeler FIXTURE_DIR

The fast inner loop of a Python plugin: the same files `kubeplug test` runs
through the real runtime, with the same comparison semantics:

- fixtures are the *.yaml / *.yml / *.json files of DIR/fixtures/ if it
  exists, else of DIR, in name order; a YAML file may hold several cases;
- `expect` keys that are absent compare as the empty answer;
- children compare as a set keyed by apiVersion/kind/namespace/name (the
  namespace defaulting to the parent's); everything else as JSON values
  (key order never matters, array order does; `1` is not `1.0` or `true`);
- `error.kind` and `error.message` compare exactly.

Besides the answer, the case fails when the host's fence would refuse it
(children of a decorator, undeclared child kinds, a parent patch from a
composite). Exit code: 0 all pass, 1 a case fails, 2 a file cannot be read
or the plugin cannot be imported. Needs PyYAML (in the SDK's pinned venv).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import json
import os
import sys
from pathlib import Path

from . import core
from .errors import PluginError
from .manifest import DECORATOR

DEFAULT_NOW = "2026-11-29T18:00:00Z"
DEFAULT_ENTROPY = bytes(range(32))
#: Filled in as the parent's metadata.uid when a fixture gives none.
PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"
CALLS = ("reconcile", "finalize", "manifest")


class FixtureError(Exception):
    """A fixture file or case that cannot be read (exit code 2)."""


def _yaml():
    try:
        import yaml
    except ImportError:  # pragma: no cover
        raise FixtureError("PyYAML is needed to read fixtures: run plugins/sdk-python/test, "
                           "which uses the SDK's pinned venv") from None

    class Loader(yaml.SafeLoader):
        """SafeLoader that keeps timestamps as strings: objects are JSON,
        and `now: 2026-11-29T18:00:00Z` must stay the text it is."""

    Loader.yaml_implicit_resolvers = {
        k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
        for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    return yaml, Loader


def fixture_files(directory: Path) -> list:
    """The fixture files of DIR/fixtures/ (or DIR), in name order."""
    d = directory / "fixtures" if (directory / "fixtures").is_dir() else directory
    if not d.is_dir():
        raise FixtureError(f"{directory}: not a directory")
    return sorted(p for p in d.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml", ".json"))


def load_cases(path: Path) -> list:
    """The cases of one file as (name, dict) pairs."""
    try:
        text = path.read_text()
    except OSError as e:
        raise FixtureError(f"{path}: {e}") from None
    try:
        if path.suffix == ".json":
            docs = [json.loads(text)]
        else:
            yaml, Loader = _yaml()
            docs = [d for d in yaml.load_all(text, Loader=Loader) if d is not None]
    except FixtureError:
        raise
    except Exception as e:  # noqa: BLE001 - any parse error is a bad file
        raise FixtureError(f"{path}: {e}") from None
    cases = []
    for i, doc in enumerate(docs, 1):
        if not isinstance(doc, dict):
            raise FixtureError(f"{path}: document {i} is not a mapping")
        default = path.name + (f"#{i}" if len(docs) > 1 else "")
        cases.append((str(doc.get("name") or default), doc))
    return cases


def _entropy(case) -> bytes:
    e = case.get("entropy")
    if e is None:
        return DEFAULT_ENTROPY
    try:
        b = bytes.fromhex(str(e))
    except ValueError:
        b = b""
    if len(b) != 32:
        raise FixtureError("entropy must be 64 hex digits")
    return b


def _events(events) -> list:
    return [{"type": "Warning" if e.warning else "Normal", "reason": e.reason,
             "message": e.message} for e in events]


def _through_json(what, value):
    """A value as it crosses the WIT boundary: JSON text, parsed back."""
    return json.loads(value if isinstance(value, str) else core.to_json_text(what, value))


def run_case(plugin, case: dict):
    """(answer, fence problems) of one case; the answer in fixture form."""
    call = case.get("call", "reconcile")
    if call not in CALLS:
        raise FixtureError(f"call must be one of {', '.join(CALLS)}, not {call!r}")
    config = case.get("config")
    config_text = json.dumps({} if config is None else config)
    if call == "manifest":
        try:
            return {"manifest": core.manifest(plugin, config_text).to_json()}, []
        except PluginError as e:
            return {"error": {"kind": e.kind, "message": e.message}}, []
    parent = case.get("parent")
    if not isinstance(parent, dict):
        raise FixtureError(f"`parent` (an object) is required for {call}")
    parent = json.loads(json.dumps(parent))
    meta = parent.setdefault("metadata", {})
    if isinstance(meta, dict) and "uid" not in meta:
        meta["uid"] = PLACEHOLDER_UID
    args = (
        json.dumps(parent),
        [json.dumps(o) for o in case.get("observed") or []],
        [json.dumps(o) for o in case.get("related") or []],
        config_text,
        str(case.get("now") or DEFAULT_NOW),
        _entropy(case),
    )
    try:
        if call == "finalize":
            r = core.finalize(plugin, *args)
            return {"done": r.done, "requeueAfterSeconds": r.requeue_after_seconds,
                    "events": _events(r.events)}, []
        r = core.reconcile(plugin, *args)
        answer = {
            "children": [_through_json("child", c) for c in r.children],
            "status": None if r.status is None else _through_json("status", r.status),
            "parentPatch": {"labels": dict(r.labels), "annotations": dict(r.annotations)}
            if (r.labels or r.annotations) else None,
            "requeueAfterSeconds": r.requeue_after_seconds,
            "events": _events(r.events),
        }
    except PluginError as e:
        return {"error": {"kind": e.kind, "message": e.message}}, []
    return answer, fence(plugin, config_text, parent, answer)


def fence(plugin, config_text, parent, answer) -> list:
    """What the host would refuse in a reconcile answer (a subset of the
    host's checks: kinds, decorator rules)."""
    try:
        m = core.manifest(plugin, config_text)
    except PluginError as e:
        return [f"the manifest is refused for this config: {e.kind}: {e.message}"]
    problems = []
    if m.mode == DECORATOR and answer["children"]:
        problems.append("a decorator plugin may not return children")
    if m.mode != DECORATOR and answer["parentPatch"] is not None:
        problems.append("a composite plugin may not patch its parent (parentPatch is for decorators)")
    allowed = {(r.api_version, r.kind) for r in m.children}
    for c in answer["children"]:
        if not isinstance(c, dict):
            problems.append("a child is not an object")
            continue
        key = (c.get("apiVersion"), c.get("kind"))
        if m.mode != DECORATOR and key not in allowed:
            problems.append(f"child kind {key[1]} ({key[0]}) is not declared in the manifest")
        meta = c.get("metadata")
        if not isinstance(meta, dict) or not meta.get("name"):
            problems.append(f"a {key[1]} child has no metadata.name")
        elif m.parent.namespaced and meta.get("namespace") not in (None, parent["metadata"].get("namespace")):
            problems.append(f"child {meta.get('name')} is outside the parent's namespace")
    return problems


def _child_key(parent_ns, c):
    meta = c.get("metadata") if isinstance(c, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    return json.dumps([c.get("apiVersion") if isinstance(c, dict) else None,
                       c.get("kind") if isinstance(c, dict) else None,
                       meta.get("namespace") or parent_ns, meta.get("name")])


def canonical(call: str, value: dict, parent_ns: str) -> dict:
    """An answer (expected or actual) in one comparable form: absent keys
    filled with the empty answer, children in key order."""
    if value is None:
        value = {}
    if "error" in value:
        e = value["error"] or {}
        return {"error": {"kind": e.get("kind"), "message": e.get("message")}}
    if call == "manifest":
        return {"manifest": value.get("manifest")}
    if call == "finalize":
        return {"done": bool(value.get("done", False)),
                "requeueAfterSeconds": value.get("requeueAfterSeconds"),
                "events": value.get("events") or []}
    patch = value.get("parentPatch") or {}
    labels, annotations = patch.get("labels") or {}, patch.get("annotations") or {}
    children = sorted(value.get("children") or [],
                      key=lambda c: (_child_key(parent_ns, c), json.dumps(c, sort_keys=True)))
    return {
        "children": children,
        "status": value.get("status"),
        "parentPatch": {"labels": labels, "annotations": annotations} if labels or annotations else None,
        "requeueAfterSeconds": value.get("requeueAfterSeconds"),
        "events": value.get("events") or [],
    }


def _dump(value) -> list:
    try:
        yaml, _ = _yaml()
        text = yaml.safe_dump(value, sort_keys=True, default_flow_style=False, allow_unicode=True)
    except FixtureError:
        text = json.dumps(value, indent=2, sort_keys=True) + "\n"
    return text.splitlines(keepends=True)


def same(a, b) -> bool:
    """JSON-value equality (`true` is not `1`, `1` is not `1.0`)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def check(plugin, name: str, case: dict, out=None) -> bool:
    """Run one case, print its verdict (and a diff); True if it passes."""
    out = out or sys.stdout
    call = case.get("call", "reconcile")
    answer, problems = run_case(plugin, case)
    parent = case.get("parent") if isinstance(case.get("parent"), dict) else {}
    ns = (parent.get("metadata") or {}).get("namespace") or ""
    want = canonical(call, case.get("expect"), ns)
    got = canonical(call, answer, ns)
    if same(want, got) and not problems:
        print(f"ok   {name}", file=out)
        return True
    print(f"FAIL {name}", file=out)
    for p in problems:
        print(f"  fence: {p}", file=out)
    if not same(want, got):
        out.writelines(difflib.unified_diff(_dump(want), _dump(got), "expected", "answered"))
    return False


def load_plugin(spec: str):
    """`module:Class` imported from sys.path; a bare `module` means the
    plugin that module exported (`Reconciler, Reads = export(Plugin)`)."""
    module, _, attr = spec.partition(":")
    mod = importlib.import_module(module)
    if attr:
        return getattr(mod, attr)
    try:
        return mod.Reconciler.plugin
    except AttributeError:
        raise ImportError(f"{module} exports no plugin; name it as {module}:Class") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kubeplug_sdk.testing",
                                 description="Run a Python plugin over fixture cases without Wasm.")
    ap.add_argument("--plugin", required=True, help="module:Class of the plugin, e.g. app:PodLabeler")
    ap.add_argument("-p", "--path", action="append", default=[],
                    help="directory to import the plugin from (repeatable; default: the current one)")
    ap.add_argument("dir", help="a plugin directory (with fixtures/) or a directory of fixtures")
    args = ap.parse_args(argv)
    for p in reversed(args.path or [os.getcwd()]):
        sys.path.insert(0, os.path.abspath(p))
    try:
        plugin = load_plugin(args.plugin)
    except Exception as e:  # noqa: BLE001
        print(f"error: cannot import {args.plugin}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    failed = passed = 0
    try:
        for path in fixture_files(Path(args.dir)):
            for name, case in load_cases(path):
                try:
                    ok = check(plugin, name, case)
                except FixtureError as e:
                    raise FixtureError(f"{path}: {name}: {e}") from None
                passed += ok
                failed += not ok
    except FixtureError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if passed + failed == 0:
        print(f"error: no fixtures in {args.dir}", file=sys.stderr)
        return 2
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
