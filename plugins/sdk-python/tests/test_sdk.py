"""Unit tests of kubeplug_sdk in plain Python (pytest or unittest).

    PYTHONPATH=plugins/sdk-python/src python -m pytest plugins/sdk-python/tests
"""

import io
import json
import os
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kubeplug_sdk import (  # noqa: E402
    DEPLOYMENT, PARENT_NAME, POD, Failed, InvalidConfig, InvalidInput, Manifest, Resource,
    Response, core, label_safe_time, parse_time, set_condition,
)
from kubeplug_sdk import testing  # noqa: E402


class Times(unittest.TestCase):
    """The same acceptance and normalization as the Rust SDK's `Time`."""

    def test_normalizes(self):
        cases = {
            "2026-11-30T10:00:00Z": "2026-11-30T10:00:00Z",
            "2026-11-30t10:00:00z": "2026-11-30T10:00:00Z",
            "2026-11-30 10:00:00Z": "2026-11-30T10:00:00Z",
            "2026-11-30T10:00Z": "2026-11-30T10:00:00Z",
            "2026-11-30T10:00:00,123456789Z": "2026-11-30T10:00:00Z",
            "2026-11-30T23:30:00-01:00": "2026-12-01T00:30:00Z",
            "2026-11-30T00:30:00+0130": "2026-11-29T23:00:00Z",
            "2026-11-30T00:30:00+01": "2026-11-29T23:30:00Z",
            "2026-12-31T23:59:60Z": "2026-12-31T23:59:59Z",
            "2024-02-29T12:00:00Z": "2024-02-29T12:00:00Z",
            "0000-01-01T00:00:00+01:00": "-001-12-31T23:00:00Z",
        }
        for text, want in cases.items():
            self.assertEqual(parse_time(text), want, text)

    def test_refuses(self):
        for text in ["2026-11-30T10:00:00.1234567890Z", "2026-11-30T10:00:00.Z",
                     "2023-02-29T12:00:00Z", "2026-12-31T24:00:00Z", "2026-11-30T10:00:00",
                     "2026-11-30", "", " 2026-11-30T10:00:00Z", "9999-12-30T22:00:01Z",
                     "2026-11-30T00:30:00+26:00", None, 5]:
            self.assertIsNone(parse_time(text), text)

    def test_label_safe(self):
        self.assertEqual(label_safe_time("2026-11-29T18:00:00Z"), "20261129T180000Z")


class Conditions(unittest.TestCase):
    def test_keeps_time_when_status_unchanged(self):
        cs = [{"type": "Ready", "status": "True", "reason": "A", "message": "a",
               "lastTransitionTime": "2026-01-01T00:00:00Z"}]
        set_condition(cs, "Ready", "True", "B", "b", "2026-02-02T00:00:00Z", observed_generation=2)
        self.assertEqual(cs, [{"type": "Ready", "status": "True", "reason": "B", "message": "b",
                               "lastTransitionTime": "2026-01-01T00:00:00Z",
                               "observedGeneration": 2}])

    def test_new_time_when_status_changes_and_appends(self):
        cs = [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
        set_condition(cs, "Ready", "False", "R", "m", "2026-02-02T00:00:00Z")
        set_condition(cs, "Other", "True", "R", "m", "2026-02-02T00:00:00Z")
        self.assertEqual([c["lastTransitionTime"] for c in cs], ["2026-02-02T00:00:00Z"] * 2)
        self.assertEqual([c["type"] for c in cs], ["Ready", "Other"])


class Plugin:
    def manifest(self, config):
        if config.get("bad"):
            raise InvalidConfig("bad config")
        return (Manifest.composite("demo", "0.1.0", Resource("example.com", "v1", "Demo", "demos"))
                .owns(DEPLOYMENT).related(POD, {"app": PARENT_NAME, "tier": "web"})
                .namespaces(["a"]).finalizer("example.com/f").resync(60).metadata_only(POD))

    def reconcile(self, ctx):
        spec = ctx.parent.get("spec", {})
        if spec.get("boom"):
            return {}["missing"]
        if spec.get("invalid"):
            raise InvalidInput("nope")
        return (Response().child({"apiVersion": "apps/v1", "kind": "Deployment",
                                  "metadata": {"name": ctx.name}})
                .set_status({"seen": len(ctx.observed)}).requeue_after(30).warning("W", "w"))


PDB = Resource("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets")


class Attacher:
    """A decorator with attachments: a budget for each annotated Deployment;
    `spec.attach` adds other children, to be fenced."""

    def manifest(self, config):
        return Manifest.decorator("attacher", "0.1.0", DEPLOYMENT).owns(PDB)

    def reconcile(self, ctx):
        r = Response().label("example.com/attached", "true")
        if ctx.parent["metadata"].get("annotations", {}).get("example.com/budget"):
            r.child({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                     "metadata": {"name": f"{ctx.name}-pdb"}, "spec": {"minAvailable": 1}})
        for c in ctx.parent.get("spec", {}).get("attach", []):
            r.child(c)
        if "status" in ctx.parent.get("spec", {}):
            r.set_status(ctx.parent["spec"]["status"])
        return r


class Core(unittest.TestCase):
    args = (json.dumps({"metadata": {"name": "x", "namespace": "a"}, "spec": {}}), [], [], "{}",
            "2026-11-29T18:00:00Z", bytes(32))

    def test_manifest_json(self):
        m = core.manifest(Plugin, "")
        j = m.to_json()
        self.assertEqual(j["related"][0]["matchLabels"],
                         [["app", "parentName"], ["tier", {"literal": "web"}]])
        self.assertEqual((j["finalizer"], j["resyncSeconds"], j["namespaces"]),
                         ("example.com/f", 60, ["a"]))
        self.assertEqual(core.metadata_only(Plugin, "{}"), [POD])

    def test_config_errors(self):
        with self.assertRaises(InvalidConfig):
            core.manifest(Plugin, '{"bad": true}')
        with self.assertRaises(InvalidConfig):
            core.manifest(Plugin, "{not json")
        self.assertEqual(core.metadata_only(Plugin, '{"bad": true}'), [])

    def test_decorator_may_declare_children(self):
        # Its attachments: declared like a composite's child kinds.
        m = core.manifest(Attacher, "{}")
        self.assertEqual((m.to_json()["mode"], m.to_json()["children"]),
                         ("decorator", [PDB.to_json()]))
        self.assertEqual(core.metadata_only(Attacher, "{}"), [])

    def test_other_exceptions_become_failed(self):
        a = list(self.args)
        a[0] = json.dumps({"metadata": {"name": "x"}, "spec": {"boom": True}})
        with self.assertRaises(Failed) as e:
            core.reconcile(Plugin, *a)
        self.assertEqual(e.exception.message, "KeyError: 'missing'")

    def test_bad_json_is_invalid_input(self):
        a = list(self.args)
        a[0] = "{"
        with self.assertRaises(InvalidInput):
            core.reconcile(Plugin, *a)

    def test_finalize_defaults_to_done(self):
        self.assertTrue(core.finalize(Plugin, *self.args).done)


class Runner(unittest.TestCase):
    """The fixture runner's comparison semantics (docs/fixtures.md)."""

    def run_fixture(self, text, plugin=Plugin):
        with tempfile.TemporaryDirectory() as d:
            Path(d, "case.yaml").write_text(text)
            sys.modules["demo_plugin_mod"] = type(sys)("demo_plugin_mod")
            sys.modules["demo_plugin_mod"].Plugin = plugin
            out = io.StringIO()
            old, sys.stdout = sys.stdout, out
            try:
                rc = testing.main(["--plugin", "demo_plugin_mod:Plugin", d])
            finally:
                sys.stdout = old
            return rc, out.getvalue()

    PARENT = "parent: {metadata: {name: x, namespace: a}, spec: {}}\n"

    def test_pass_with_defaults(self):
        rc, out = self.run_fixture(self.PARENT + """expect:
  children: [{apiVersion: apps/v1, kind: Deployment, metadata: {name: x}}]
  status: {seen: 0}
  requeueAfterSeconds: 30
  events: [{type: Warning, reason: W, message: w}]
""")
        self.assertEqual(rc, 0, out)

    def test_absent_keys_are_empty_and_diff_is_printed(self):
        rc, out = self.run_fixture(self.PARENT + "expect: {}\n")
        self.assertEqual(rc, 1)
        self.assertIn("--- expected", out)
        self.assertIn("+  seen: 0", out)

    def test_error_compared_exactly(self):
        rc, out = self.run_fixture("parent: {metadata: {name: x}, spec: {invalid: true}}\n"
                                   "expect: {error: {kind: invalid-input, message: nope}}\n"
                                   "---\n"
                                   "call: manifest\nconfig: {bad: true}\n"
                                   "expect: {error: {kind: invalid-config, message: bad config!}}\n")
        self.assertEqual(rc, 1)
        self.assertIn("ok   case.yaml#1", out)
        self.assertIn("FAIL case.yaml#2", out)

    def test_json_types_are_strict(self):
        rc, _ = self.run_fixture(self.PARENT + """expect:
  children: [{apiVersion: apps/v1, kind: Deployment, metadata: {name: x}}]
  status: {seen: 0.0}
  requeueAfterSeconds: 30
  events: [{type: Warning, reason: W, message: w}]
""")
        self.assertEqual(rc, 1)

    def test_unreadable_file_exits_2(self):
        rc, _ = self.run_fixture("parent: [unclosed\n")
        self.assertEqual(rc, 2)

    DEPLOYMENT_PARENT = ("parent: {apiVersion: apps/v1, kind: Deployment, metadata: "
                         "{name: web, namespace: shop, annotations: {example.com/budget: '1'}}, "
                         "spec: %s}\n")
    LABELLED = "  parentPatch: {labels: {example.com/attached: 'true'}, annotations: {}}\n"

    def test_decorator_attachments_pass_the_fence(self):
        # A decorator returns children of its declared kinds, beside its patch.
        rc, out = self.run_fixture(self.DEPLOYMENT_PARENT % "{}" + """expect:
  children:
  - {apiVersion: policy/v1, kind: PodDisruptionBudget, metadata: {name: web-pdb}, spec: {minAvailable: 1}}
""" + self.LABELLED + """---
parent: {apiVersion: apps/v1, kind: Deployment, metadata: {name: web, namespace: shop}, spec: {}}
expect:
""" + self.LABELLED, Attacher)
        self.assertEqual(rc, 0, out)
        self.assertNotIn("fence:", out)

    def test_decorator_attachments_are_fenced_as_a_composites(self):
        def refused(attach):
            parent = {"apiVersion": "apps/v1", "kind": "Deployment",
                      "metadata": {"name": "web", "namespace": "shop"}, "spec": {"attach": attach}}
            answer, problems = testing.run_case(Attacher, {"parent": parent})
            self.assertEqual(answer["parentPatch"]["labels"], {"example.com/attached": "true"})
            return problems

        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "b"}}
        self.assertEqual(refused([pdb]), [])
        self.assertEqual(refused([dict(pdb, metadata={"name": "b", "namespace": "shop"})]), [])
        self.assertEqual(
            refused([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}]),
            ["fence: child kind ConfigMap (v1) is not declared in the manifest"])
        self.assertEqual(refused([dict(pdb, metadata={"name": "b", "namespace": "other"})]),
                         ["fence: child b is outside the parent's namespace"])
        self.assertEqual(refused([dict(pdb, metadata={})]),
                         ["fence: a PodDisruptionBudget child has no metadata.name"])

    def test_a_decorator_still_may_not_return_a_status(self):
        parent = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "web", "namespace": "shop"}, "spec": {"status": {"a": 1}}}
        _, problems = testing.run_case(Attacher, {"parent": parent})
        self.assertEqual(problems, ["fence: a decorator plugin may not return a status"])

    def test_composite_still_may_not_patch_its_parent(self):
        class Patcher(Plugin):
            def reconcile(self, ctx):
                return super().reconcile(ctx).label("a", "b")

        answer, problems = testing.run_case(
            Patcher, {"parent": {"metadata": {"name": "x", "namespace": "a"}, "spec": {}}})
        self.assertEqual(
            problems,
            ["fence: a composite plugin may not patch its parent (parentPatch is for decorators)"])


if __name__ == "__main__":
    unittest.main()
