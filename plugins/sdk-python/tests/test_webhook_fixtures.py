"""The fixture runner's `validate`, `mutate` and `convert` cases (plain
Python, no Wasm): the host's decisions it ports from the Rust core, checked
against the cases the core is checked against (webhook_cases.json), and
whole cases run as `kubeplug test` runs them.

    PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -s plugins/sdk-python/tests
"""

import io
import json
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from kubeplug_sdk import (  # noqa: E402
    DELETE, Failed, Manifest, Resource, Response, allow, deny, testing,
)

CASES = json.loads((HERE / "webhook_cases.json").read_text())


class SameDecisionsAsTheCore(unittest.TestCase):
    """host/kit checks the Rust core against the same file."""

    def test_json_patches_and_their_refusals(self):
        self.assertGreater(len(CASES["patch"]), 10)
        for case in CASES["patch"]:
            ops, refused = testing.json_patch(case["before"], case["after"])
            with self.subTest(case["name"]):
                if "refused" in case:
                    self.assertEqual((ops, refused), ([], case["refused"]))
                else:
                    self.assertIsNone(refused)
                    # Strict JSON equality: 1.0 is not 1, true is not 1.
                    self.assertTrue(testing.same(ops, case["ops"]), ops)

    def test_conversion_checks(self):
        self.assertGreater(len(CASES["conversion"]), 5)
        for case in CASES["conversion"]:
            with self.subTest(case["name"]):
                self.assertEqual(
                    testing.check_converted(case["objects"], case["converted"], case["apiVersion"]),
                    case.get("refused"))

    def test_verdict_quotas(self):
        def allowed(n, size=1):
            return {"allowed": True, "warnings": ["w" * size] * n}

        def denied(n, size=1):
            return {"denied": {"message": "m", "causes": [{"field": "f", "message": "c" * size}] * n}}

        self.assertIsNone(testing.check_verdict(allowed(16, 1024)))
        self.assertEqual(testing.check_verdict(allowed(17)), "17 warnings (at most 16)")
        self.assertEqual(testing.check_verdict(allowed(1, 1025)),
                         "a warning of 1025 bytes (at most 1024)")
        # Bytes, not characters: "é" is two.
        self.assertEqual(testing.check_verdict({"allowed": True, "warnings": ["é" * 513]}),
                         "a warning of 1026 bytes (at most 1024)")
        self.assertIsNone(testing.check_verdict(denied(32, 1024)))
        self.assertEqual(testing.check_verdict(denied(33)), "33 causes (at most 32)")
        self.assertEqual(testing.check_verdict(denied(1, 1025)),
                         "a denial text of 1025 bytes (at most 1024)")


WIDGET = Resource("example.com", "v1", "Widget", "widgets")


class Widgets:
    """A plugin whose webhooks answer as each object's spec asks."""

    def manifest(self, config):
        return Manifest.composite("widgets", "0.1.0", WIDGET).namespaces(["shop"])

    def reconcile(self, ctx):
        return Response()

    def validate(self, req):
        spec = (req.object or req.old_object)["spec"]
        if spec.get("warn"):
            return allow(f"warning {i}" for i in range(spec["warn"]))
        if spec.get("size", 0) > 10:
            return deny("spec.size: too big", [("spec.size", "too big")])
        if req.user.username != testing.TEST_USER or req.dry_run:
            return allow([f"{req.user.username} {req.user.groups} {req.dry_run}"])
        return allow()

    def mutate(self, req):
        if req.operation == DELETE:
            raise Failed("mutate is never asked on delete")
        spec = req.object["spec"]
        if spec.get("escape"):
            req.object["metadata"]["finalizers"] = ["example.com/keep"]
        spec.setdefault("size", 1)
        return req.object

    def convert(self, objects, api_version, config):
        out = []
        for o in objects:
            o = dict(o, apiVersion=api_version)
            if o["spec"].get("lossy"):
                o["spec"] = {k: v for k, v in o["spec"].items() if k != "size"}
            if o["spec"].get("rename"):
                o["metadata"] = dict(o["metadata"], name="renamed")
            out.append(o)
        return out


def widget(namespace="shop", version="v1", **spec):
    return json.dumps({"apiVersion": f"example.com/{version}", "kind": "Widget",
                       "metadata": {"name": "w", "namespace": namespace}, "spec": spec})


class Runner(unittest.TestCase):
    def run_fixture(self, text):
        with tempfile.TemporaryDirectory() as d:
            Path(d, "case.yaml").write_text(text)
            sys.modules["widgets_mod"] = type(sys)("widgets_mod")
            sys.modules["widgets_mod"].Widgets = Widgets
            out, err = io.StringIO(), io.StringIO()
            old = sys.stdout, sys.stderr
            sys.stdout, sys.stderr = out, err
            try:
                rc = testing.main(["--plugin", "widgets_mod:Widgets", d])
            finally:
                sys.stdout, sys.stderr = old
            return rc, out.getvalue() + err.getvalue()

    def passes(self, text):
        rc, out = self.run_fixture(text)
        self.assertEqual(rc, 0, out)

    def fails(self, text, *says):
        rc, out = self.run_fixture(text)
        self.assertEqual(rc, 1, out)
        for s in says:
            self.assertIn(s, out)

    def test_validate_allowed_warned_and_denied(self):
        self.passes(f"call: validate\noperation: create\nobject: {widget(size=1)}\n"
                    "expect: {allowed: true}\n")
        self.passes(f"call: validate\noperation: create\nobject: {widget(size=1)}\n")
        self.passes(f"call: validate\noperation: update\nobject: {widget(size=1)}\n"
                    f"oldObject: {widget()}\nuser: {{username: alice, groups: [devs]}}\n"
                    "dryRun: true\nexpect: {warnings: [\"alice ['devs'] True\"]}\n")
        self.passes(f"call: validate\noperation: create\nobject: {widget(size=11)}\n"
                    "expect:\n  denied:\n    message: 'spec.size: too big'\n"
                    "    causes: [{field: spec.size, message: too big}]\n")
        self.fails(f"call: validate\noperation: create\nobject: {widget(size=11)}\n"
                   "expect: {denied: {message: 'spec.size: too big'}}\n", "too big")

    def test_a_verdict_over_its_quotas_is_refused(self):
        warnings = json.dumps([f"warning {i}" for i in range(17)])
        self.passes(f"call: validate\noperation: create\nobject: {widget(warn=17)}\n"
                    f"expect:\n  warnings: {warnings}\n"
                    "  refused: 'plugin widgets failed: answered with 17 warnings (at most 16)'\n")

    def test_mutate_answers_the_hosts_patch_or_its_refusal(self):
        self.passes(f"call: mutate\noperation: create\nobject: {widget()}\n"
                    "expect: {patch: [{op: add, path: /spec/size, value: 1}]}\n")
        self.passes(f"call: mutate\noperation: update\nobject: {widget(size=3)}\n"
                    f"oldObject: {widget()}\n")
        self.passes(f"call: mutate\noperation: create\nobject: {widget(escape=True)}\n"
                    "expect: {refused: 'plugin widgets failed: its mutation is refused by its "
                    "fence: /metadata/finalizers is outside spec, metadata.labels and "
                    "metadata.annotations'}\n")
        # Not asked on delete, as the live host: no patch, no error.
        self.passes(f"call: mutate\noperation: delete\noldObject: {widget()}\n")

    def test_convert_and_round_trips(self):
        v2 = widget(version="v2", size=2)
        self.passes(f"call: convert\napiVersion: example.com/v2\nroundTrip: true\n"
                    f"objects: [{widget(size=2)}]\nexpect: {{objects: [{v2}]}}\n")
        self.fails(f"call: convert\napiVersion: example.com/v2\nroundTrip: true\n"
                   f"objects: [{widget(size=2, lossy=True)}]\n"
                   f"expect: {{objects: [{widget(version='v2', lossy=True)}]}}\n",
                   "roundTrip: object 0 (w): example.com/v1 → example.com/v2 → example.com/v1 "
                   "loses\n  -/spec/size: 2\n  +/spec/size: null")
        self.fails(f"call: convert\napiVersion: example.com/v2\nroundTrip: true\n"
                   f"objects: [{widget(rename=True)}]\n",
                   "refused: 'plugin widgets failed: its conversion is refused by its fence",
                   "(w) changed metadata.name", "no round trip")

    def test_what_the_live_host_would_not_ask_fails(self):
        self.fails(f"call: validate\noperation: create\nobject: {widget(namespace='elsewhere')}\n",
                   'does not serve namespace "elsewhere"')
        self.fails(f"call: validate\noperation: create\nobject: {widget(version='v2')}\n",
                   "reads Widget at example.com/v1")
        self.fails("call: convert\napiVersion: other.com/v2\nobjects: []\n",
                   "converts Widget.example.com only, not other.com/v2")

    def test_inputs_a_call_does_not_take_are_errors(self):
        for text, says in [
            (f"call: validate\noperation: create\nobject: {widget()}\nparent: {{}}\n",
             "takes no parent"),
            ("call: mutate\noperation: create\n", "needs object"),
            (f"call: mutate\noperation: create\nobject: {widget()}\noldObject: {widget()}\n",
             "carries no oldObject"),
            (f"call: validate\noperation: patch\nobject: {widget()}\n", "create, update or delete"),
            ("call: convert\nobjects: []\n", "needs the apiVersion"),
        ]:
            with self.subTest(says):
                rc, out = self.run_fixture(text)
                self.assertEqual(rc, 2, out)
                self.assertIn(says, out)


if __name__ == "__main__":
    unittest.main()
