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
- `error.kind` and `error.message` compare exactly, except that the trace
  the SDK appends to a bug's message (`failed("KeyError: 'spec' (at
  app.py:14 in reconcile)")`) need not be expected: `KeyError: 'spec'`
  matches it too, so a fixture does not break when lines move.

Besides the answer, the case fails when the host's fence would refuse it
(children of undeclared kinds or outside the parent's namespace, a parent
patch from a composite). A decorator's children are its attachments, fenced
as a composite's are.

A reconcile or finalize case's `cluster:` lists objects that exist in the
cluster: the plugin's `references(parent, config)` are resolved against them
as the host resolves them (`resolve`), and the objects found are appended to
`related`. References outside the host's rules fail the case.

Exit code: 0 all pass, 1 a case fails, 2 a file cannot be read or the plugin
cannot be imported. Needs PyYAML (in the SDK's pinned venv).

`validate`, `mutate` and `convert` cases run as `kubeplug test` runs them,
with the host's decisions on their answers ported from the Rust core
(`kubeplug_core::webhook`): the mutation's JSON patch and its fence, the
verdict's quotas, what a conversion may change, and the `roundTrip` check.
A case the live host would not ask the plugin (another kind or version than
its parent's, a namespace it does not serve) fails.
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
from .errors import TRACE_OPEN, PluginError
from .manifest import DECORATOR

DEFAULT_NOW = "2026-11-29T18:00:00Z"
DEFAULT_ENTROPY = bytes(range(32))
#: Filled in as the parent's metadata.uid when a fixture gives none.
PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"
WEBHOOK_CALLS = ("validate", "mutate", "convert")
CALLS = ("reconcile", "finalize", "manifest") + WEBHOOK_CALLS
#: The user of a `validate` or `mutate` case that names none (the SDKs').
TEST_USER = "test"
#: Which objects a write carries, as the API server sends them:
#: (object, oldObject).
CARRIES = {"create": (True, False), "update": (True, True), "delete": (False, True)}
#: The keys of a case besides `name`, `call`, `config` and `expect`.
INPUTS = {
    "validate": ("operation", "object", "oldObject", "user", "dryRun", "now"),
    "mutate": ("operation", "object", "oldObject", "user", "dryRun", "now"),
    "convert": ("objects", "apiVersion", "roundTrip"),
}
#: The host's quotas on a verdict (kubeplug_core::webhook).
MAX_WARNINGS, MAX_TEXT, MAX_CAUSES = 16, 1024, 32
#: The host's label and annotation domain, which no answer may touch.
HOST_DOMAIN = "kubeplug.io"
#: The most references the host resolves for one parent.
MAX_REFERENCES = 32


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
    """(answer, problems) of one case; the answer in fixture form, each
    problem a reason the case fails besides its answer."""
    call = case.get("call", "reconcile")
    if call not in CALLS:
        raise FixtureError(f"call must be one of {', '.join(CALLS)}, not {call!r}")
    config = case.get("config")
    config_text = json.dumps({} if config is None else config)
    if call in WEBHOOK_CALLS:
        return run_webhook_case(plugin, call, case, config_text)
    if call == "manifest":
        try:
            shown = core.manifest(plugin, config_text).to_json()
            # As the host shows it: with the webhooks `offered` answers,
            # only when there are any.
            offered = core.offered(plugin, config_text)
            if offered:
                shown["webhooks"] = offered
            return {"manifest": shown}, []
        except PluginError as e:
            return _error(e), []
    parent = case.get("parent")
    if not isinstance(parent, dict):
        raise FixtureError(f"`parent` (an object) is required for {call}")
    parent = json.loads(json.dumps(parent))
    meta = parent.setdefault("metadata", {})
    if isinstance(meta, dict) and "uid" not in meta:
        meta["uid"] = PLACEHOLDER_UID
    related = list(case.get("related") or [])
    try:
        found, refused = resolve(plugin, config_text, parent, _cluster(case))
    except PluginError as e:
        return _error(e), []
    if refused:
        return {}, [f"references: {refused}"]
    related += [o for o in found if _object_key(o) not in {_object_key(r) for r in related}]
    args = (
        json.dumps(parent),
        [json.dumps(o) for o in case.get("observed") or []],
        [json.dumps(o) for o in related],
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
        return _error(e), []
    return answer, [f"fence: {p}" for p in fence(plugin, config_text, parent, answer)]


def _cluster(case: dict) -> list:
    """The objects of a case's `cluster:`."""
    cluster = case.get("cluster")
    if cluster is None:
        return []
    if not isinstance(cluster, list) or not all(isinstance(o, dict) for o in cluster):
        raise FixtureError("cluster: expected a list of objects")
    return cluster


def _object_key(o) -> tuple:
    """Who an object is: apiVersion, kind, namespace, name."""
    return (_text(o, "apiVersion"), _text(o, "kind"), _text(o, "metadata", "namespace"),
            _text(o, "metadata", "name"))


def check_reference(index: int, ref, m, kinds: list, parent_ns):
    """(the declared kind, the namespace to look in or None for a
    cluster-scoped kind) of a reference, or a str: why the host refuses it
    (kubeplug_core::reference::check, same order and words). `parent_ns` is
    None for a cluster-scoped parent."""
    asked = ref.resource
    kind = next((k for k in kinds if (k.group, k.kind) == (asked.group, asked.kind)), None)
    if kind is None:
        return (f"reference {index}: {asked.kind}.{asked.api_version} is not among the kinds "
                f"the plugin references")
    at = f"reference {index} to {asked.kind}"
    namespace = None
    if kind.namespaced:
        namespace = ref.namespace if ref.namespace is not None else parent_ns
        if parent_ns is not None and namespace != parent_ns:
            return (f"{at}: namespace {namespace} is not the parent's ({parent_ns}): a parent "
                    f"reads only its own namespace by reference")
        if namespace is None:
            return f"{at}: a cluster-scoped parent must name the namespace"
        # The host also keeps out the namespaces the platform excludes;
        # the runner knows only the plugin's own list.
        if parent_ns is None and m.namespace_list and namespace not in m.namespace_list:
            return f"{at}: the plugin does not act in namespace {namespace}"
    if ref.labels is None and not ref.name:
        return f"{at}: an empty name"
    if ref.labels is not None and not ref.labels:
        return f"{at}: no labels (that would select every object of the kind)"
    return kind, namespace


def _finds(kind, namespace, ref, o) -> bool:
    """Whether a reference of `kind` looked up in `namespace` finds `o`."""
    if (_group_version(_text(o, "apiVersion"))[0], _text(o, "kind")) != (kind.group, kind.kind):
        return False
    if namespace is not None and _text(o, "metadata", "namespace") != namespace:
        return False
    if ref.labels is None:
        return _text(o, "metadata", "name") == ref.name
    labels = (o.get("metadata") or {}).get("labels")
    labels = labels if isinstance(labels, dict) else {}
    return all(labels.get(k) == v for k, v in ref.labels)


def resolve(plugin, config_text: str, parent: dict, cluster: list):
    """(found, None): the objects of `cluster` the parent's references find,
    in reference order, each once, as the host looks them up; ([], reason)
    when the host would refuse the references. Raises the plugin's own
    error (a PluginError)."""
    refs = core.references(plugin, json.dumps(parent), config_text)
    if not refs:
        return [], None
    if len(refs) > MAX_REFERENCES:
        return [], f"{len(refs)} references, over the limit of {MAX_REFERENCES} per parent"
    try:
        m = core.manifest(plugin, config_text)
    except PluginError as e:
        return [], f"the manifest is refused for this config: {e.kind}: {e.text}"
    parent_ns = _text(parent, "metadata", "namespace") if m.parent.namespaced else None
    found, seen = [], set()
    for index, ref in enumerate(refs):
        checked = check_reference(index, ref, m, m.reference_kinds, parent_ns)
        if isinstance(checked, str):
            return [], checked
        kind, namespace = checked
        for o in cluster:
            if _finds(kind, namespace, ref, o) and _object_key(o) not in seen:
                seen.add(_object_key(o))
                found.append(o)
    return found, None


def fence(plugin, config_text, parent, answer) -> list:
    """What the host would refuse in a reconcile answer (a subset of the
    host's checks: child kinds and namespaces, mode rules). A decorator's
    children (its attachments) pass the same checks as a composite's."""
    try:
        m = core.manifest(plugin, config_text)
    except PluginError as e:
        return [f"the manifest is refused for this config: {e.kind}: {e.text}"]
    problems = []
    if m.mode != DECORATOR and answer["parentPatch"] is not None:
        problems.append("a composite plugin may not patch its parent (parentPatch is for decorators)")
    if m.mode == DECORATOR and answer.get("status") is not None:
        problems.append("a decorator plugin may not return a status")
    allowed = {(r.api_version, r.kind) for r in m.children}
    for c in answer["children"]:
        if not isinstance(c, dict):
            problems.append("a child is not an object")
            continue
        key = (c.get("apiVersion"), c.get("kind"))
        if key not in allowed:
            problems.append(f"child kind {key[1]} ({key[0]}) is not declared in the manifest")
        meta = c.get("metadata")
        if not isinstance(meta, dict) or not meta.get("name"):
            problems.append(f"a {key[1]} child has no metadata.name")
        elif m.parent.namespaced and meta.get("namespace") not in (None, parent["metadata"].get("namespace")):
            problems.append(f"child {meta.get('name')} is outside the parent's namespace")
    return problems


# --- Webhooks: validate, mutate, convert --------------------------------

def _error(e: PluginError) -> dict:
    """A plugin's error in fixture form, its message as the host receives
    it (with the trace of a bug: `PluginError.text`)."""
    return {"error": {"kind": e.kind, "message": e.text}}


def _guest_error_text(e: PluginError) -> str:
    """A plugin's error as the host words it (Rust `GuestError`)."""
    prefix = {"invalid-config": "invalid config: ", "invalid-input": "invalid input: "}
    return prefix.get(e.kind, "") + e.text


def _refusal(name: str, reason: str) -> str:
    """An answer the host refuses, as it words the failed review."""
    return f"plugin {name} failed: {reason}"


def _text(obj, *path) -> str:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj if isinstance(obj, str) else ""


def _group_version(api_version: str):
    """(group, version) of an apiVersion; the core group is ""."""
    group, slash, version = api_version.partition("/")
    return (group, version) if slash else ("", api_version)


def _user(case: dict):
    """(username, groups) of a validate or mutate case."""
    user = case.get("user")
    if user is None:
        return TEST_USER, []
    if not isinstance(user, dict) or set(user) - {"username", "groups"}:
        raise FixtureError("user: expected {username, groups}")
    return str(user.get("username") or TEST_USER), list(user.get("groups") or [])


def _review(call: str, case: dict):
    """(operation, object, oldObject) of a validate or mutate case."""
    op = case.get("operation")
    if op is None:
        raise FixtureError(f"a {call} case needs an operation (create, update or delete)")
    if op not in CARRIES:
        raise FixtureError(f"operation: expected create, update or delete, got {op!r}")
    for key, carried in zip(("object", "oldObject"), CARRIES[op]):
        given = case.get(key) is not None
        if carried and not given:
            raise FixtureError(f"a {op} case needs {key}")
        if given and not carried:
            raise FixtureError(f"a {op} carries no {key}")
        if given and not isinstance(case[key], dict):
            raise FixtureError(f"{key}: expected an object")
    return op, case.get("object"), case.get("oldObject")


def _unasked(m, obj):
    """Why the live host would not ask the plugin of manifest `m` about a
    write of `obj` (kubeplug_core::webhook's AdmissionCall::check_kind, and
    the plugin's namespaces); None when it would."""
    parent = m.parent
    kind = _text(obj, "kind")
    group, version = _group_version(_text(obj, "apiVersion"))
    if (group, kind) != (parent.group, parent.kind):
        return (f"plugin {m.name} serves admission for {_kind_name(parent.group, parent.kind)} "
                f"only, not {_kind_name(group, kind)}")
    if version != parent.version:
        return (f"plugin {m.name} reads {parent.kind} at {parent.api_version}; the webhook's "
                f"rules must name that version (and matchPolicy Equivalent), not {version}")
    namespace = _text(obj, "metadata", "namespace")
    if parent.namespaced and m.namespace_list and namespace not in m.namespace_list:
        return (f"plugin {m.name} does not serve namespace {json.dumps(namespace)}: "
                f"the live host allows the write without asking it")
    return None


def _unconverted(m, objects: list, api_version: str):
    """Why the live host would not ask the plugin of manifest `m` to convert
    `objects` (kubeplug_core::webhook's ConversionCall::check_kind)."""
    parent = m.parent
    refuse = f"plugin {m.name} converts {_kind_name(parent.group, parent.kind)} only, not "
    if _group_version(api_version)[0] != parent.group:
        return refuse + api_version
    for o in objects:
        have, kind = _text(o, "apiVersion"), _text(o, "kind")
        if _group_version(have)[0] != parent.group or kind != parent.kind:
            return refuse + f"{kind} {have}"
    return None


def _kind_name(group: str, kind: str) -> str:
    return f"{kind}.{group}" if group else kind


def run_webhook_case(plugin, call: str, case: dict, config_text: str):
    """(answer, problems) of a validate, mutate or convert case."""
    allowed = {"name", "call", "config", "expect"} | set(INPUTS[call])
    unknown = sorted(k for k in case if k not in allowed)
    if unknown:
        raise FixtureError(f"a {call} case takes no {unknown[0]}")
    if call == "convert":
        objects, api_version = _conversion(case)
    else:
        op, obj, old = _review(call, case)
        username, groups = _user(case)
    try:
        m = core.manifest(plugin, config_text)
    except PluginError as e:
        return _error(e), []
    if call == "convert":
        return _run_convert(plugin, m, objects, api_version, bool(case.get("roundTrip")),
                            config_text)
    why = _unasked(m, obj if obj is not None else old)
    if why:
        return {}, [f"the live host would not ask: {why}"]
    request = dict(
        operation=op,
        object_text=None if obj is None else json.dumps(obj),
        old_object_text=None if old is None else json.dumps(old),
        config_text=config_text, now=str(case.get("now") or DEFAULT_NOW),
        username=username, groups=groups,
        dry_run=bool(case.get("dryRun", False)),
    )
    try:
        if call == "validate":
            return _verdict_answer(m.name, core.validate(plugin, **request)), []
        if op == "delete":
            # As the live host: nothing to patch, the plugin is not asked.
            return {"patch": []}, []
        text = core.mutate(plugin, **request)
    except PluginError as e:
        return _error(e), []
    if text is None:
        return {"patch": []}, []
    ops, refused = json_patch(obj, json.loads(text))
    if refused:
        return {"patch": [], "refused": _refusal(
            m.name, f"its mutation is refused by its fence: {refused}")}, []
    return {"patch": ops}, []


def _verdict_answer(name: str, v) -> dict:
    """A verdict in fixture form, refused over the host's quotas."""
    if v.allowed:
        answer = {"allowed": True, "warnings": [str(w) for w in v.warnings]}
    else:
        answer = {"denied": {"message": str(v.message),
                             "causes": [{"field": str(f), "message": str(m)} for f, m in v.causes]}}
    over = check_verdict(answer)
    if over:
        answer["refused"] = _refusal(name, f"answered with {over}")
    return answer


def check_verdict(answer: dict):
    """Why the host refuses a verdict (kubeplug_core::webhook::check_verdict):
    more warnings or causes, or longer texts, than it passes on; None if
    it does not."""
    def long(what, t):
        n = len(t.encode())
        return f"a {what} of {n} bytes (at most {MAX_TEXT})" if n > MAX_TEXT else None
    if "denied" not in answer:
        warnings = answer["warnings"]
        if len(warnings) > MAX_WARNINGS:
            return f"{len(warnings)} warnings (at most {MAX_WARNINGS})"
        return next((r for r in (long("warning", w) for w in warnings) if r), None)
    denied = answer["denied"]
    if len(denied["causes"]) > MAX_CAUSES:
        return f"{len(denied['causes'])} causes (at most {MAX_CAUSES})"
    texts = [denied["message"]] + [t for c in denied["causes"] for t in (c["field"], c["message"])]
    return next((r for r in (long("denial text", t) for t in texts) if r), None)


_ABSENT = object()


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _at(doc, pointer: str):
    """The value at a JSON Pointer, or _ABSENT."""
    for token in pointer.split("/")[1:] if pointer else []:
        token = token.replace("~1", "/").replace("~0", "~")
        if not isinstance(doc, dict) or token not in doc:
            return _ABSENT
        doc = doc[token]
    return doc


def changes(before, after, path: str = "") -> list:
    """Where `after` differs from `before` (kubeplug_core::plan::diff with
    both sides): objects walked key by key in sorted order (a key one side
    lacks compares as null), anything else, lists included, compared whole.
    Each change is (pointer, before, after), _ABSENT where a side has no
    such field."""
    out = []

    def walk(b, a, path):
        bv, av = (None if b is _ABSENT else b), (None if a is _ABSENT else a)
        if isinstance(bv, dict) and isinstance(av, dict):
            for key in sorted(set(bv) | set(av)):
                walk(bv.get(key, _ABSENT), av.get(key, _ABSENT), f"{path}/{_escape(key)}")
        elif not same(bv, av):
            out.append((path, b, a))

    walk(before, after, path)
    return out


def _host_key(key: str) -> bool:
    prefix, slash, _ = key.partition("/")
    return bool(slash) and (prefix == HOST_DOMAIN or prefix.endswith("." + HOST_DOMAIN))


def _mutable(pointer: str, before, after):
    """Why a mutation may not write `pointer` (kubeplug_core::webhook's
    `mutable`): only spec, and labels and annotations one key at a time
    outside the host's domain. None when it may."""
    if pointer == "/spec" or pointer.startswith("/spec/"):
        return None
    for m in ("/metadata/labels", "/metadata/annotations"):
        if pointer == m:
            def keys(doc):
                v = _at(doc, pointer)
                return sorted(v) if isinstance(v, dict) else []
            changed = keys(before) + keys(after)
        elif pointer.startswith(m + "/"):
            changed = [pointer[len(m) + 1:].replace("~1", "/").replace("~0", "~")]
        else:
            continue
        for key in changed:
            if _host_key(key):
                return f"{m[len('/metadata/'):]} key {json.dumps(key, ensure_ascii=False)} is the host's ({HOST_DOMAIN}/)"
        return None
    return f"{pointer} is outside spec, metadata.labels and metadata.annotations"


def json_patch(before: dict, after: dict):
    """(ops, None): the JSON Patch (RFC 6902) turning `before` into `after`
    as the host computes it (kubeplug_core::webhook::patch): `add` for a
    field `before` lacks, `remove` for one `after` lacks, `replace`
    otherwise; lists replaced whole. ([], reason) when a change is outside
    what a mutation may write: one refuses the whole answer."""
    ops = []
    for pointer, b, a in changes(before, after):
        refused = _mutable(pointer, before, after)
        if refused:
            return [], refused
        if b is _ABSENT and a is not _ABSENT:
            ops.append({"op": "add", "path": pointer, "value": a})
        elif a is _ABSENT and b is not _ABSENT:
            ops.append({"op": "remove", "path": pointer})
        elif a is not _ABSENT:
            ops.append({"op": "replace", "path": pointer, "value": a})
    return ops, None


def _fixed_metadata(obj) -> dict:
    """Metadata a conversion may not change: all but labels and
    annotations, and of those the host's keys."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return meta
    meta = dict(meta)
    for m in ("labels", "annotations"):
        entries = meta.get(m)
        kept = {k: v for k, v in entries.items() if _host_key(k)} if isinstance(entries, dict) else {}
        if kept:
            meta[m] = kept
        else:
            meta.pop(m, None)
    return meta


def check_converted(objects: list, converted: list, api_version: str):
    """Why the host refuses a conversion's answer
    (kubeplug_core::webhook::check_converted); None if it does not."""
    if len(converted) != len(objects):
        return f"{len(converted)} objects answered for {len(objects)} asked"
    for i, (before, after) in enumerate(zip(objects, converted)):
        at = f"object {i} ({_text(before, 'metadata', 'name')})"
        after = after if isinstance(after, dict) else {}
        if after.get("apiVersion") != api_version:
            return (f"{at} is answered at {json.dumps(after.get('apiVersion'), ensure_ascii=False)}, "
                    f"not {api_version}")
        if not same(after.get("kind"), before.get("kind")):
            return f"{at} changed kind to {json.dumps(after.get('kind'), ensure_ascii=False)}"
        changed = changes(_fixed_metadata(before), _fixed_metadata(after))
        if changed:
            return (f"{at} changed metadata{changed[0][0].replace('/', '.')} "
                    f"(only labels and annotations outside {HOST_DOMAIN}/ may change)")
    return None


def _convert(plugin, objects: list, api_version: str, config_text: str) -> list:
    texts = core.convert(plugin, [json.dumps(o) for o in objects], api_version, config_text)
    return [json.loads(t) for t in texts]


def _conversion(case: dict):
    """(objects, apiVersion) of a convert case."""
    objects, api_version = case.get("objects"), case.get("apiVersion")
    if not isinstance(objects, list) or not all(isinstance(o, dict) for o in objects):
        raise FixtureError("a convert case needs objects (a list of objects)")
    if not isinstance(api_version, str):
        raise FixtureError("a convert case needs the apiVersion to convert to")
    return objects, api_version


def _run_convert(plugin, m, objects: list, api_version: str, round_trips: bool,
                 config_text: str):
    why = _unconverted(m, objects, api_version)
    if why:
        return {}, [f"the live host would not ask: {why}"]
    try:
        converted = _convert(plugin, objects, api_version, config_text)
    except PluginError as e:
        answer, problems = _error(e), []
    else:
        answer, problems = {"objects": converted}, []
        refused = check_converted(objects, converted, api_version)
        if refused:
            answer["refused"] = _refusal(m.name, f"its conversion is refused by its fence: {refused}")
    if round_trips:
        problems += round_trip(plugin, m, objects, answer, api_version, config_text)
    return answer, problems


def round_trip(plugin, m, objects: list, answer: dict, api_version: str, config_text: str) -> list:
    """What converting `answer`'s objects back to each original's version
    loses, field by field (kubeplug_core::webhook::round_trip_losses), as
    problems: nothing may be lost."""
    if "error" in answer or "refused" in answer:
        return [f"roundTrip: no round trip: the conversion to {api_version} "
                f"gave no objects to convert back"]
    problems = []
    for i, (original, there) in enumerate(zip(objects, answer["objects"])):
        home = _text(original, "apiVersion")
        trip = f"object {i} ({_text(original, 'metadata', 'name')}): {home} → {api_version} → {home}"
        try:
            back = _convert(plugin, [there], home, config_text)
        except PluginError as e:
            problems.append(f"roundTrip: {trip}\n  converting back failed: {_guest_error_text(e)}")
            continue
        refused = check_converted([there], back, home)
        if refused:
            problems.append(f"roundTrip: {trip}\n  " + _refusal(
                m.name, f"its conversion is refused by its fence: {refused}"))
            continue
        lost = changes(original, back[0])
        if lost:
            shown = "".join(
                f"\n  -{p}: {json.dumps(None if b is _ABSENT else b)}"
                f"\n  +{p}: {json.dumps(None if a is _ABSENT else a)}"
                for p, b, a in lost)
            problems.append(f"roundTrip: {trip} loses{shown}")
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
    if call == "validate":
        denied = value.get("denied")
        if isinstance(denied, dict):
            denied = {"message": denied.get("message"), "causes": denied.get("causes") or []}
        return {"allowed": value.get("allowed", denied is None),
                "warnings": value.get("warnings") or [], "denied": denied,
                "refused": value.get("refused")}
    if call == "mutate":
        return {"patch": value.get("patch") or [], "refused": value.get("refused")}
    if call == "convert":
        return {"objects": value.get("objects") or [], "refused": value.get("refused")}
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
        # Unwrapped: a long message (a bug's, with its trace) stays one line.
        text = yaml.safe_dump(value, sort_keys=True, default_flow_style=False, allow_unicode=True,
                              width=1 << 20)
    except FixtureError:
        text = json.dumps(value, indent=2, sort_keys=True) + "\n"
    return text.splitlines(keepends=True)


def _untraced(error: dict) -> dict:
    """A `failed` error without the trace the SDK appended to its message
    (`errors.TRACE_OPEN` ... `)` at its end); any other error as is."""
    message = error.get("message")
    if error.get("kind") != "failed" or not isinstance(message, str) or not message.endswith(")"):
        return error
    at = message.rfind(TRACE_OPEN)
    return error if at < 0 else {**error, "message": message[:at]}


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
    if "error" in want and "error" in got and _untraced(got["error"]) == want["error"]:
        got = want
    if same(want, got) and not problems:
        print(f"ok   {name}", file=out)
        return True
    print(f"FAIL {name}", file=out)
    for p in problems:
        print(f"  {p}", file=out)
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
