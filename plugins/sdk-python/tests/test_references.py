"""Unit tests of references in plain Python (no Wasm): what a plugin declares
and names, the glue's mapping to the WIT types (on the stand-ins of
test_admission), the fixture runner's resolution of `cluster:` as the host
resolves it, and myapp-py's configRef.

    PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -s plugins/sdk-python/tests
"""

import json
import sys
import types as pytypes
import unittest
from dataclasses import dataclass
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PLUGINS / "sdk-python" / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kubeplug_sdk import (  # noqa: E402
    CONFIG_MAP, DEPLOYMENT, SECRET, Context, Failed, InvalidConfig, InvalidInput, Manifest,
    Reference, Resource, Response, core, export,
)
from kubeplug_sdk import glue, testing  # noqa: E402
from test_admission import _Err, _bindings, _load_app  # noqa: E402

WIDGET = Resource("example.com", "v1", "Widget", "widgets")
NODE = Resource.core("v1", "Node", "nodes", namespaced=False)
PARENT = {"apiVersion": "example.com/v1", "kind": "Widget",
          "metadata": {"name": "w", "namespace": "a"}, "spec": {}}


class Refers:
    """Names what `spec.refs` asks for; its status lists what it was handed."""

    def manifest(self, config):
        if config.get("bad"):
            raise InvalidConfig("bad config")
        parent = WIDGET if not config.get("cluster") else Resource.cluster(
            "example.com", "v1", "Widget", "widgets")
        m = Manifest.composite("refers", "0.1.0", parent).owns(DEPLOYMENT)
        return m.references(CONFIG_MAP).references(SECRET).references(NODE).namespaces(
            config.get("namespaces") or [])

    def references(self, parent, config):
        refs = []
        for r in parent["spec"].get("refs") or []:
            kind = {"ConfigMap": CONFIG_MAP, "Secret": SECRET, "Node": NODE,
                    "Pod": Resource.core("v1", "Pod", "pods")}[r["kind"]]
            if "labels" in r:
                refs.append(Reference.labelled(kind, r["labels"], r.get("namespace")))
            else:
                refs.append(Reference.named(kind, r["name"], r.get("namespace")))
        return refs

    def reconcile(self, ctx):
        return Response().set_status({"related": [
            f"{o['kind']}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}"
            for o in ctx.related]})


class Plain:
    def manifest(self, config):
        return Manifest.composite("plain", "0.1.0", WIDGET).owns(DEPLOYMENT)

    def reconcile(self, ctx):
        return Response()


def cm(name, ns="a", labels=None, api_version="v1"):
    meta = {"name": name, "namespace": ns}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": api_version, "kind": "ConfigMap", "metadata": meta}


class Declared(unittest.TestCase):
    def test_kinds_and_manifest_json(self):
        self.assertEqual(core.reference_kinds(Refers, "{}"), [CONFIG_MAP, SECRET, NODE])
        self.assertEqual(core.manifest(Refers, "{}").to_json()["references"][0],
                         {"group": "", "version": "v1", "kind": "ConfigMap",
                          "plural": "configmaps", "namespaced": True})
        # As `inspect` shows it: only when there are any.
        self.assertNotIn("references", core.manifest(Plain, "{}").to_json())
        self.assertEqual(core.reference_kinds(Plain, "{}"), [])

    def test_no_kinds_when_the_config_is_refused(self):
        self.assertEqual(core.reference_kinds(Refers, '{"bad": true}'), [])


class Named(unittest.TestCase):
    def refs(self, plugin, parent, config="{}"):
        return core.references(plugin, json.dumps(parent), config)

    def test_constructors(self):
        self.assertEqual(Reference.named(CONFIG_MAP, "x"),
                         Reference(CONFIG_MAP, name="x", labels=None, namespace=None))
        by_map = Reference.labelled(SECRET, {"a": "1", "b": "2"}, "ns")
        self.assertEqual(by_map, Reference.labelled(SECRET, [("a", "1"), ("b", "2")], "ns"))
        self.assertEqual((by_map.name, by_map.labels, by_map.namespace),
                         (None, (("a", "1"), ("b", "2")), "ns"))

    def test_a_plugin_without_references_names_none(self):
        self.assertEqual(self.refs(Plain, PARENT), [])

        class Nothing(Plain):
            def references(self, parent, config):
                return None
        self.assertEqual(self.refs(Nothing, PARENT), [])

    def test_parent_and_config_are_parsed(self):
        parent = {**PARENT, "spec": {"refs": [{"kind": "ConfigMap", "name": "c"}]}}
        self.assertEqual(self.refs(Refers, parent), [Reference.named(CONFIG_MAP, "c")])
        with self.assertRaises(InvalidInput):
            core.references(Refers, "{", "{}")
        with self.assertRaises(InvalidConfig):
            core.references(Refers, json.dumps(PARENT), "{not json")

    def test_wrong_answers_and_exceptions_are_failed(self):
        class Wrong(Plain):
            answer = None

            def references(self, parent, config):
                return self.answer
        for answer, message in [
            ("c", "TypeError: references() returned str, not a list of Reference"),
            ([{"name": "c"}], "TypeError: references() returned a dict, not a Reference"),
        ]:
            Wrong.answer = answer
            with self.assertRaises(Failed) as e:
                self.refs(Wrong, PARENT)
            self.assertEqual(e.exception.message, message)
        with self.assertRaises(Failed) as e:
            self.refs(Refers, {**PARENT, "spec": {"refs": [{"kind": "Nope", "name": "c"}]}})
        self.assertEqual(e.exception.message, "KeyError: 'Nope'")

    def test_related_named(self):
        ctx = Context(parent=PARENT, related=[
            cm("c", "b"), cm("c", "a"), {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}},
        ])
        self.assertEqual(ctx.related_named("ConfigMap", "c"), cm("c", "b"))
        self.assertEqual(ctx.related_named("ConfigMap", "c", "v1", namespace="a"), cm("c", "a"))
        self.assertIsNone(ctx.related_named("ConfigMap", "c", "v2"))
        self.assertIsNone(ctx.related_named("ConfigMap", "d"))
        self.assertEqual(ctx.related_named("Secret", "c", namespace="")["kind"], "Secret")


class Glue(unittest.TestCase):
    def setUp(self):
        modules = _bindings()
        t = modules["wit_world.imports.types"]
        t.ApiResource = dataclass(type("ApiResource", (), {"__annotations__": {
            "group": str, "version": str, "kind": str, "plural": str, "namespaced": bool}}))
        r = pytypes.ModuleType("wit_world.exports.references")
        r.Target_Name = dataclass(type("Target_Name", (), {"__annotations__": {"value": str}}))
        r.Target_Labels = dataclass(type("Target_Labels", (), {"__annotations__": {"value": list}}))
        r.Reference = dataclass(type("Reference", (), {"__annotations__": {
            "resource": object, "namespace": object, "target": object}}))
        modules["wit_world.exports"].references = r
        modules["wit_world.exports.references"] = r
        self.saved = {k: sys.modules.get(k) for k in modules}
        sys.modules.update(modules)
        self.t, self.r = t, r

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v

    def test_kinds_and_references_map_to_the_wit_types(self):
        t, r = self.t, self.r
        refs = glue.export_references(Refers)()
        self.assertEqual(refs.kinds("{}")[0], t.ApiResource("", "v1", "ConfigMap", "configmaps", True))
        self.assertEqual(refs.kinds('{"bad": true}'), [])
        parent = {**PARENT, "spec": {"refs": [
            {"kind": "ConfigMap", "name": "c"},
            {"kind": "Secret", "labels": {"app": "w"}, "namespace": "a"}]}}
        self.assertEqual(refs.references(json.dumps(parent), "{}"), [
            r.Reference(t.ApiResource("", "v1", "ConfigMap", "configmaps", True), None,
                        r.Target_Name("c")),
            r.Reference(t.ApiResource("", "v1", "Secret", "secrets", True), "a",
                        r.Target_Labels([("app", "w")])),
        ])
        self.assertEqual(glue.export_references(Plain)().references(json.dumps(PARENT), "{}"), [])

    def test_errors_map_to_the_wit_error(self):
        with self.assertRaises(_Err) as e:
            glue.export_references(Refers)().references("{", "{}")
        self.assertIsInstance(e.exception.value, self.t.Error_InvalidInput)

        class BadResource(Plain):
            def references(self, parent, config):
                return [Reference.named("ConfigMap", "c")]
        with self.assertRaises(_Err) as e:
            glue.export_references(BadResource)().references(json.dumps(PARENT), "{}")
        self.assertIsInstance(e.exception.value, self.t.Error_Failed)

    def test_entry_names_add_references(self):
        app = pytypes.ModuleType("app")
        app.Reconciler, app.Reads = export(Refers)
        self.assertIs(glue.entry_names(app)["References"].plugin, Refers)
        app.References = object
        self.assertIs(glue.entry_names(app)["References"], object)


class Resolve(unittest.TestCase):
    """The fixture runner resolves `cluster:` as the host does."""

    def run_case(self, refs, cluster, related=(), config=None, parent=None):
        parent = dict(parent or PARENT)
        parent["spec"] = {"refs": refs}
        case = {"parent": parent, "cluster": list(cluster), "related": list(related)}
        if config is not None:
            case["config"] = config
        return testing.run_case(Refers, case)

    def handed(self, *args, **kwargs):
        answer, problems = self.run_case(*args, **kwargs)
        self.assertEqual(problems, [])
        return answer["status"]["related"]

    def refused(self, *args, **kwargs):
        answer, problems = self.run_case(*args, **kwargs)
        self.assertEqual(answer, {})
        self.assertEqual(len(problems), 1, problems)
        self.assertTrue(problems[0].startswith("references: "), problems)
        return problems[0]

    def test_by_name_in_the_parents_namespace_appended_in_reference_order(self):
        cluster = [cm("x", "b"), cm("y"), cm("x"), cm("x", api_version="v2")]
        self.assertEqual(
            self.handed([{"kind": "ConfigMap", "name": "missing"}, {"kind": "ConfigMap", "name": "y"},
                         {"kind": "ConfigMap", "name": "x", "namespace": "a"}],
                        cluster, related=[cm("r")]),
            # The group decides, not the version.
            ["ConfigMap/a/r", "ConfigMap/a/y", "ConfigMap/a/x", "ConfigMap/a/x"])

    def test_each_object_once(self):
        cluster = [cm("x", labels={"app": "w"}), cm("y", labels={"app": "w", "tier": "db"})]
        self.assertEqual(
            self.handed([{"kind": "ConfigMap", "name": "y"},
                         {"kind": "ConfigMap", "labels": {"app": "w"}},
                         {"kind": "ConfigMap", "name": "x"}], cluster, related=[cm("x")]),
            ["ConfigMap/a/x", "ConfigMap/a/y"])

    def test_by_labels_every_pair(self):
        cluster = [cm("x", labels={"app": "w"}), cm("y", labels={"app": "w", "tier": "db"}),
                   cm("z", "b", labels={"app": "w", "tier": "db"})]
        self.assertEqual(self.handed([{"kind": "ConfigMap", "labels": {"app": "w", "tier": "db"}}],
                                     cluster), ["ConfigMap/a/y"])

    def test_cluster_scoped_kinds_ignore_namespaces(self):
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
        self.assertEqual(self.handed([{"kind": "Node", "name": "n1", "namespace": "elsewhere"}],
                                     [node]), ["Node//n1"])

    def test_a_cluster_scoped_parent_names_the_namespace(self):
        parent = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
        cluster = [cm("x", "b"), cm("x", "c")]
        self.assertEqual(self.handed([{"kind": "ConfigMap", "name": "x", "namespace": "c"}], cluster,
                                     config={"cluster": True}, parent=parent), ["ConfigMap/c/x"])
        self.assertIn("a cluster-scoped parent must name the namespace", self.refused(
            [{"kind": "ConfigMap", "name": "x"}], cluster, config={"cluster": True}, parent=parent))
        # Outside the plugin's namespaces the host watches nothing.
        self.assertIn("the plugin does not act in namespace c", self.refused(
            [{"kind": "ConfigMap", "name": "x", "namespace": "c"}], cluster,
            config={"cluster": True, "namespaces": ["b"]}, parent=parent))

    def test_refused(self):
        cluster = [cm("x", "b")]
        for refs, why in [
            ([{"kind": "ConfigMap", "name": "x"}, {"kind": "Pod", "name": "p"}],
             "reference 1: Pod.v1 is not among the kinds the plugin references"),
            ([{"kind": "ConfigMap", "name": ""}], "reference 0 to ConfigMap: an empty name"),
            ([{"kind": "Secret", "labels": {}}], "reference 0 to Secret: no labels"),
            ([{"kind": "ConfigMap", "name": "x", "namespace": "b"}],
             "namespace b is not the parent's (a): a parent reads only its own namespace"),
            ([{"kind": "ConfigMap", "name": f"c{i}"} for i in range(33)],
             "33 references, over the limit of 32 per parent"),
        ]:
            self.assertIn(why, self.refused(refs, cluster), refs)
        self.assertEqual(len(self.handed([{"kind": "ConfigMap", "name": f"c{i}"} for i in range(32)],
                                         [])), 0)

    def test_the_plugins_own_error_is_the_answer(self):
        answer, problems = self.run_case([{"kind": "Nope", "name": "x"}], [])
        # As the host receives it: with the frame of the plugin's code.
        self.assertEqual(answer["error"]["kind"], "failed")
        self.assertRegex(answer["error"]["message"],
                         r"^KeyError: 'Nope' \(at test_references\.py:\d+ in references\)$")
        self.assertEqual(problems, [])

    def test_cluster_must_be_a_list_of_objects(self):
        with self.assertRaises(testing.FixtureError):
            testing.run_case(Refers, {"parent": PARENT, "cluster": {"a": 1}})


class MyAppConfigRef(unittest.TestCase):
    """myapp-py's spec.configRef (plugins/myapp/fixtures/config.yaml runs it whole)."""

    myapp = _load_app("myapp-py")

    def test_config_hash(self):
        h = self.myapp.config_hash
        data = {"data": {"greeting": "hello", "LOG_LEVEL": "debug"},
                "binaryData": {"logo.png": "iVBORw0KGgo="}}
        self.assertEqual(h(data), "fbf2cb315d7bcbdf")
        data["data"]["LOG_LEVEL"] = "info"
        self.assertEqual(h(data), "20a651e2c4af4014")
        self.assertEqual(h({}), "cbf29ce484222325")

    def test_references_the_named_config_map(self):
        plugin = self.myapp.MyAppPlugin
        self.assertEqual(core.reference_kinds(plugin, "{}"), [CONFIG_MAP])
        for config_ref, want in [({"name": "s"}, [Reference.named(CONFIG_MAP, "s")]),
                                 ({"name": ""}, []), ({}, []), (None, []), ("s", [])]:
            spec = {"image": "x"} if config_ref is None else {"configRef": config_ref}
            self.assertEqual(core.references(plugin, json.dumps({**PARENT, "spec": spec}), "{}"),
                             want, config_ref)


if __name__ == "__main__":
    unittest.main()
