"""Unit tests of admission and conversion in plain Python (no Wasm): the
SDK's defaults, what a plugin offers, the glue's mapping to the WIT types
(on stand-ins for the bindings componentize-py generates at build time), and
myapp-py's mutate.

    PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -s plugins/sdk-python/tests
"""

import enum
import importlib.util
import json
import sys
import types as pytypes
import unittest
from dataclasses import dataclass
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PLUGINS / "sdk-python" / "src"))

from kubeplug_sdk import (  # noqa: E402
    CREATE, DELETE, UPDATE, AdmissionRequest, Failed, InvalidConfig, InvalidInput, Manifest,
    Resource, Response, Verdict, allow, core, deny, export,
)
from kubeplug_sdk import glue  # noqa: E402

WIDGET = Resource("example.com", "v1", "Widget", "widgets")
OBJ = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
       "spec": {"size": 1}}


class Bare:
    """A plugin that defines none of validate, mutate, convert."""

    def manifest(self, config):
        if config.get("bad"):
            raise InvalidConfig("bad config")
        return Manifest.composite("widgets", "0.1.0", WIDGET)

    def reconcile(self, ctx):
        return Response()


def request(operation=CREATE, obj=OBJ, old=None, config="{}", **fields):
    """`core.admission_request`'s arguments for one write."""
    return dict(operation=operation, object_text=None if obj is None else json.dumps(obj),
                old_object_text=None if old is None else json.dumps(old),
                config_text=config, now="2026-11-29T18:00:00Z", **fields)


class Defaults(unittest.TestCase):
    def test_validate_allows_without_warnings(self):
        for op in (CREATE, UPDATE, DELETE):
            v = core.validate(Bare, **request(op, obj=None if op == DELETE else OBJ, old=OBJ))
            self.assertEqual(v, allow())
            self.assertEqual((v.allowed, v.warnings), (True, []))

    def test_mutate_leaves_as_is(self):
        self.assertIsNone(core.mutate(Bare, **request()))

    def test_convert_passes_objects_already_at_the_version(self):
        texts = ['{"apiVersion": "example.com/v1", "kind": "Widget", "x": 1.0}']
        # Unchanged, byte for byte.
        self.assertEqual(core.convert(Bare, texts, "example.com/v1", "{}"), texts)
        self.assertEqual(core.convert(Bare, [], "example.com/v2", "{}"), [])

    def test_convert_refuses_another_version(self):
        texts = [json.dumps(OBJ)]
        with self.assertRaises(Failed) as e:
            core.convert(Bare, texts, "example.com/v2", "{}")
        self.assertEqual(e.exception.message,
                         "widgets converts no versions: cannot convert example.com/v1 to example.com/v2")
        # When the manifest refuses the config, the plugin has no name.
        with self.assertRaises(Failed) as e:
            core.convert(Bare, ['{"kind": "Widget"}'], "example.com/v2", '{"bad": true}')
        self.assertEqual(e.exception.message, "this plugin converts no versions: cannot convert "
                                              "an object without apiVersion to example.com/v2")

    def test_inputs_that_do_not_parse(self):
        with self.assertRaises(InvalidConfig):
            core.validate(Bare, **request(config="{nope"))
        with self.assertRaises(InvalidInput) as e:
            core.mutate(Bare, **dict(request(), object_text="{"))
        self.assertTrue(e.exception.message.startswith("object is not JSON: "))
        with self.assertRaises(InvalidInput) as e:
            core.convert(Bare, ["["], "example.com/v1", "{}")
        self.assertTrue(e.exception.message.startswith("object to convert is not JSON: "))


class Gate:
    """A plugin that defines all three."""

    def manifest(self, config):
        return Manifest.composite("gate", "0.1.0", WIDGET)

    def reconcile(self, ctx):
        return Response()

    def validate(self, req):
        spec = (req.object or req.old_object)["spec"]
        if spec.get("boom"):
            return {}["missing"]
        if spec.get("invalid"):
            raise InvalidInput("nope")
        if spec.get("wrong"):
            return True
        if req.operation == UPDATE and req.object["spec"]["size"] != req.old_object["spec"]["size"]:
            return deny("spec.size is immutable", [("spec.size", "may not change")])
        if req.user.username == "intern" or req.dry_run:
            return allow(["careful"]).warn("twice")
        return None

    def mutate(self, req):
        spec = req.object["spec"]
        mode = spec.get("mode")
        if mode == "same":
            return req.object
        if mode == "float":
            spec["size"] = 1.0
            return req.object
        if mode == "list":
            return [req.object]
        spec.setdefault("color", "blue")
        return req.object

    def convert(self, objects, api_version, config):
        return [{**o, "apiVersion": api_version} for o in objects]


class Answers(unittest.TestCase):
    def test_validate(self):
        self.assertEqual(core.validate(Gate, **request()), allow())
        v = core.validate(Gate, **request(username="intern", groups=["g"]))
        self.assertEqual((v.allowed, v.warnings), (True, ["careful", "twice"]))
        self.assertEqual(core.validate(Gate, **request(dry_run=True)).warnings, ["careful", "twice"])
        new = {**OBJ, "spec": {"size": 2}}
        v = core.validate(Gate, **request(UPDATE, new, OBJ))
        self.assertEqual(v, Verdict(False, [], "spec.size is immutable",
                                    [("spec.size", "may not change")]))
        self.assertEqual(core.validate(Gate, **request(DELETE, None, OBJ)), allow())

    def test_errors_map_as_reconcile_errors_do(self):
        with self.assertRaises(InvalidInput):
            core.validate(Gate, **request(obj={"spec": {"invalid": True}}))
        with self.assertRaises(Failed) as e:
            core.validate(Gate, **request(obj={"spec": {"boom": True}}))
        self.assertEqual(e.exception.message, "KeyError: 'missing'")
        with self.assertRaises(Failed) as e:
            core.validate(Gate, **request(obj={"spec": {"wrong": True}}))
        self.assertEqual(e.exception.message,
                         "TypeError: validate() returned bool, not Verdict (allow() or deny())")
        with self.assertRaises(Failed) as e:
            core.mutate(Gate, **request(obj={"spec": {"mode": "list"}}))
        self.assertEqual(e.exception.message, "TypeError: mutate() returned list, not dict")

    def test_mutate_returns_the_whole_object_or_none_when_unchanged(self):
        self.assertEqual(json.loads(core.mutate(Gate, **request())),
                         {**OBJ, "spec": {"size": 1, "color": "blue"}})
        # Handed back as it came, or with nothing to default: unchanged.
        self.assertIsNone(core.mutate(Gate, **request(obj={**OBJ, "spec": {"mode": "same"}})))
        self.assertIsNone(core.mutate(
            Gate, **request(obj={**OBJ, "spec": {"size": 1, "color": "red"}})))
        # 1 -> 1.0 is a change in JSON, although 1 == 1.0 in Python.
        out = core.mutate(Gate, **request(obj={"spec": {"mode": "float", "size": 1}}))
        self.assertEqual(out, '{"spec":{"mode":"float","size":1.0}}')

    def test_convert(self):
        out = core.convert(Gate, [json.dumps(OBJ)], "example.com/v2", "{}")
        self.assertEqual([json.loads(o) for o in out], [{**OBJ, "apiVersion": "example.com/v2"}])

    def test_request_fields(self):
        seen = []

        class Spy(Bare):
            def validate(self, req):
                seen.append(req)

        core.validate(Spy, **request(UPDATE, OBJ, OBJ, config='{"a": 1}', username="u",
                                     groups=["g1", "g2"], dry_run=True))
        req = seen[0]
        self.assertIsInstance(req, AdmissionRequest)
        self.assertEqual((req.operation, req.object, req.old_object, req.config, req.name),
                         ("update", OBJ, OBJ, {"a": 1}, "w"))
        self.assertEqual((req.user.username, req.user.groups, req.dry_run), ("u", ["g1", "g2"], True))


class OnlyMutate(Bare):
    """A plugin that defines mutate alone."""

    def mutate(self, req):
        return None


class Offered(unittest.TestCase):
    """`offered`: what the plugin itself defines, never the SDK's defaults."""

    def test_what_the_plugin_defines(self):
        self.assertEqual(core.offered(Bare, "{}"), [])
        self.assertEqual(core.offered(OnlyMutate, "{}"), ["mutate"])
        # In the WIT enum's order, whatever the order of definition.
        self.assertEqual(core.offered(Gate, ""), ["validate", "mutate", "convert"])

        class Converts(Bare):
            def convert(self, objects, api_version, config):
                return objects

            def validate(self, req):
                return None

            mutate = None  # not a method: as if undefined (core.mutate agrees)

        self.assertEqual(core.offered(Converts, "{}"), ["validate", "convert"])
        # An instance serves as well as a class.
        self.assertEqual(core.offered(OnlyMutate(), "{}"), ["mutate"])

    def test_nothing_when_the_config_is_refused(self):
        # Not JSON, refused by parse_config, refused by manifest(): then
        # `manifest` reports the error, and nothing is offered.
        class Picky(Gate):
            def parse_config(self, raw):
                if raw.get("picky"):
                    raise InvalidConfig("picky")
                return raw

            def manifest(self, config):
                if config.get("bad"):
                    raise InvalidConfig("bad config")
                if config.get("boom"):
                    return {}["missing"]
                if config.get("decorator"):
                    # Declares its attachments: no longer refused.
                    return Manifest.decorator("gate", "0.1.0", WIDGET).owns(WIDGET)
                return super().manifest(config)

        self.assertEqual(core.offered(Picky, "{}"), ["validate", "mutate", "convert"])
        self.assertEqual(core.offered(Picky, '{"decorator": true}'), ["validate", "mutate", "convert"])
        for config in ("{nope", '{"picky": true}', '{"bad": true}', '{"boom": true}'):
            self.assertEqual(core.offered(Picky, config), [], config)


# Stand-ins for the bindings componentize-py generates (`wit_world`), with
# the same names and shapes, so that the glue runs here as in the component.
@dataclass
class _Case:
    value: object


class _Err(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


def _bindings():
    def case(name):
        return type(name, (_Case,), {})

    t = pytypes.ModuleType("wit_world.imports.types")
    t.Error_InvalidConfig, t.Error_InvalidInput, t.Error_Failed = (
        case("Error_InvalidConfig"), case("Error_InvalidInput"), case("Error_Failed"))
    a = pytypes.ModuleType("wit_world.exports.admission")
    a.Operation = enum.Enum("Operation", {"CREATE": 0, "UPDATE": 1, "DELETE": 2})
    a.UserInfo = dataclass(type("UserInfo", (), {"__annotations__": {"username": str, "groups": list}}))
    a.AdmissionRequest = dataclass(type("AdmissionRequest", (), {"__annotations__": {
        "operation": object, "object": object, "old_object": object, "user": object,
        "dry_run": bool, "config": str, "now": str}}))
    a.FieldCause = dataclass(type("FieldCause", (), {"__annotations__": {"field": str, "message": str}}))
    a.Denial = dataclass(type("Denial", (), {"__annotations__": {"message": str, "causes": list}}))
    a.Verdict_Allowed, a.Verdict_Denied = case("Verdict_Allowed"), case("Verdict_Denied")
    a.Webhook = enum.Enum("Webhook", {"VALIDATE": 0, "MUTATE": 1, "CONVERT": 2})
    c = pytypes.ModuleType("componentize_py_types")
    c.Err = _Err
    imports, exports = pytypes.ModuleType("wit_world.imports"), pytypes.ModuleType("wit_world.exports")
    imports.types, exports.admission = t, a
    root = pytypes.ModuleType("wit_world")
    root.imports, root.exports = imports, exports
    return {"wit_world": root, "wit_world.imports": imports, "wit_world.exports": exports,
            "wit_world.imports.types": t, "wit_world.exports.admission": a,
            "componentize_py_types": c}


class Glue(unittest.TestCase):
    def setUp(self):
        self.modules = _bindings()
        self.saved = {k: sys.modules.get(k) for k in self.modules}
        sys.modules.update(self.modules)
        self.t = self.modules["wit_world.imports.types"]
        self.a = self.modules["wit_world.exports.admission"]

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v

    def wit_request(self, operation="CREATE", obj=OBJ, old=None, username="u"):
        a = self.a
        return a.AdmissionRequest(a.Operation[operation], None if obj is None else json.dumps(obj),
                                  None if old is None else json.dumps(old),
                                  a.UserInfo(username, ["g"]), False, "{}", "2026-11-29T18:00:00Z")

    def test_allow_and_deny_map_to_the_verdict(self):
        admission, _ = glue.export_admission(Gate)
        v = admission().validate(self.wit_request(username="intern"))
        self.assertEqual(v, self.a.Verdict_Allowed(["careful", "twice"]))
        new = {**OBJ, "spec": {"size": 2}}
        v = admission().validate(self.wit_request("UPDATE", new, OBJ))
        self.assertEqual(v, self.a.Verdict_Denied(self.a.Denial(
            "spec.size is immutable", [self.a.FieldCause("spec.size", "may not change")])))

    def test_defaults_and_errors(self):
        admission, conversion = glue.export_admission(Bare)
        self.assertEqual(admission().validate(self.wit_request()), self.a.Verdict_Allowed([]))
        self.assertIsNone(admission().mutate(self.wit_request()))
        with self.assertRaises(_Err) as e:
            conversion().convert([json.dumps(OBJ)], "example.com/v2", "{}")
        self.assertEqual(e.exception.value, self.t.Error_Failed(
            "widgets converts no versions: cannot convert example.com/v1 to example.com/v2"))
        admission, _ = glue.export_admission(Gate)
        with self.assertRaises(_Err) as e:
            admission().validate(self.wit_request(obj={"spec": {"invalid": True}}))
        self.assertEqual(e.exception.value, self.t.Error_InvalidInput("nope"))

    def test_offered_maps_to_the_webhook_enum(self):
        W = self.a.Webhook
        self.assertEqual(glue.export_admission(Gate)[0]().offered("{}"),
                         [W.VALIDATE, W.MUTATE, W.CONVERT])
        self.assertEqual(glue.export_admission(OnlyMutate)[0]().offered("{}"), [W.MUTATE])
        self.assertEqual(glue.export_admission(Bare)[0]().offered("{}"), [])
        self.assertEqual(glue.export_admission(OnlyMutate)[0]().offered('{"bad": true}'), [])
        # What `build` adds to an app that exports only Reconciler and Reads.
        app = pytypes.ModuleType("app")
        app.Reconciler, app.Reads = export(OnlyMutate)
        self.assertEqual(glue.entry_names(app)["Admission"]().offered("{}"), [W.MUTATE])

    def test_entry_names_add_admission_and_conversion(self):
        app = pytypes.ModuleType("app")
        app.Reconciler, app.Reads = export(Gate)
        names = glue.entry_names(app)
        self.assertIs(names["Reconciler"], app.Reconciler)
        self.assertIs(names["Admission"].plugin, Gate)
        self.assertIs(names["Conversion"].plugin, Gate)
        # An app's own classes win; an app without the SDK's Reconciler
        # gets nothing added (componentize-py then names what is missing).
        app.Admission = object
        self.assertIs(glue.entry_names(app)["Admission"], object)
        bare = pytypes.ModuleType("app")
        bare.Reconciler = type("Reconciler", (), {})
        self.assertNotIn("Admission", glue.entry_names(bare))


def _load_app(name):
    """The `app.py` of plugin directory `name`, as a module."""
    d = PLUGINS / name
    sys.path.insert(0, str(d))
    try:
        spec = importlib.util.spec_from_file_location(name.replace("-", "_") + "_app", d / "app.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(d))


class MyAppMutate(unittest.TestCase):
    """myapp-py stores the defaults its reconcile assumes."""

    myapp = _load_app("myapp-py")

    def mutate(self, spec, operation=CREATE):
        obj = {"apiVersion": "example.com/v1alpha1", "kind": "MyApp",
               "metadata": {"name": "a", "namespace": "n"}}
        if spec is not ...:
            obj["spec"] = spec
        old = None if operation == CREATE else obj
        out = core.mutate(self.myapp.MyAppPlugin, **request(operation, None if operation == DELETE
                                                            else obj, old))
        return None if out is None else json.loads(out)

    def test_defaults_on_create_and_update(self):
        for op in (CREATE, UPDATE):
            for spec in ({}, {"image": None}, {"image": ""}):
                out = self.mutate(spec, op)
                self.assertEqual(out["spec"], {"image": "nginx:1.27", "replicas": 1}, (op, spec))
                self.assertEqual(out["metadata"], {"name": "a", "namespace": "n"})
            self.assertEqual(self.mutate({"image": "x", "replicas": 0}, op), None)
            self.assertEqual(self.mutate({"image": "x"}, op)["spec"], {"image": "x", "replicas": 1})
            self.assertEqual(self.mutate({"replicas": 3}, op)["spec"],
                             {"image": "nginx:1.27", "replicas": 3})

    def test_never_on_delete_nor_without_a_spec_object(self):
        self.assertIsNone(self.mutate({}, DELETE))
        self.assertIsNone(self.mutate(...))
        self.assertIsNone(self.mutate("nope"))

    def test_no_validate_or_convert(self):
        self.assertEqual(core.validate(self.myapp.MyAppPlugin, **request()), allow())
        with self.assertRaises(Failed) as e:
            core.convert(self.myapp.MyAppPlugin,
                         ['{"apiVersion": "example.com/v1alpha1", "kind": "MyApp"}'],
                         "example.com/v1", "{}")
        self.assertEqual(e.exception.message, "myapp converts no versions: "
                                              "cannot convert example.com/v1alpha1 to example.com/v1")


class PluginsOffer(unittest.TestCase):
    """What the repository's Python plugins offer (the grant must allow it)."""

    def test_myapp_py_offers_mutate(self):
        self.assertEqual(core.offered(MyAppMutate.myapp.MyAppPlugin, "{}"), ["mutate"])

    def test_pod_labeler_offers_nothing(self):
        app = _load_app("pod-labeler")
        self.assertEqual(core.offered(app.Reconciler.plugin, "{}"), [])


if __name__ == "__main__":
    unittest.main()
