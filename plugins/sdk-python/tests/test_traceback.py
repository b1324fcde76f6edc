"""A bug's error names where it raised: the frames of the plugin's own code
(file relative to the plugin's directory, line, function), bounded; errors
raised on purpose and the SDK's own refusals carry none. Through the core
calls, the Wasm glue's error mapping and the fixture runner.

    python3 -m unittest discover -s plugins/sdk-python/tests
"""

import io
import json
import sys
import tempfile
import textwrap
import types as pytypes
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kubeplug_sdk import core, errors, glue, testing  # noqa: E402
from kubeplug_sdk.errors import Failed, InvalidInput, PluginError  # noqa: E402

# The plugin, as a plugin directory holds it: app.py and a package. Line
# numbers matter: the tests name them (APP_LINES).
APP = textwrap.dedent('''\
    from kubeplug_sdk import InvalidInput, Manifest, Resource, export
    from pkg.deep import dig


    def helper(ctx):
        return dig(ctx.parent)


    class Plugin:
        def manifest(self, config):
            return Manifest.composite("p", "0.1.0", Resource("example.com", "v1", "W", "ws"))

        def reconcile(self, ctx):
            if ctx.parent["spec"].get("refuse"):
                raise InvalidInput("spec.refuse is set")
            if ctx.parent["spec"].get("deep"):
                return recurse(0)
            if ctx.parent["spec"].get("long"):
                raise ValueError("x" * 20000)
            return helper(ctx)

        def finalize(self, ctx):
            return 42


    def recurse(n):
        return recurse(n + 1) if n < 40 else {}["bottom"]


    Reconciler, Reads = export(Plugin)
''')
DEEP = "def dig(parent):\n    return parent['spec']['missing']\n"
APP_LINES = {"reconcile": 20, "helper": 6, "recurse": 27}


def request(spec):
    parent = {"metadata": {"name": "x", "namespace": "a", "uid": "u"}, "spec": spec}
    return (json.dumps(parent), [], [], "{}", "2026-11-29T18:00:00Z", bytes(32))


class Traced(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        root = Path(cls.dir.name)
        (root / "app.py").write_text(APP)
        (root / "pkg").mkdir()
        (root / "pkg" / "__init__.py").write_text("")
        (root / "pkg" / "deep.py").write_text(DEEP)
        fixtures = root / "fixtures"
        fixtures.mkdir()
        (fixtures / "bug.yaml").write_text(textwrap.dedent('''\
            name: the bug without its trace
            parent: {metadata: {name: x, namespace: a}, spec: {}}
            expect: {error: {kind: failed, message: "KeyError: 'missing'"}}
            ---
            name: another message
            parent: {metadata: {name: x, namespace: a}, spec: {}}
            expect: {error: {kind: failed, message: "KeyError: 'other'"}}
        '''))
        sys.path.insert(0, str(root))
        cls.saved = {k: sys.modules.pop(k) for k in ("app", "pkg", "pkg.deep") if k in sys.modules}
        import app  # noqa: F401 - the plugin under test
        cls.app = sys.modules["app"]
        cls.plugin = cls.app.Plugin

    @classmethod
    def tearDownClass(cls):
        sys.path.remove(cls.dir.name)
        for k in ("app", "pkg", "pkg.deep"):
            sys.modules.pop(k, None)
        sys.modules.update(cls.saved)
        cls.dir.cleanup()

    def failed(self, spec) -> PluginError:
        with self.assertRaises(PluginError) as e:
            core.reconcile(self.plugin, *request(spec))
        return e.exception

    def test_a_bug_names_the_plugins_frames_outermost_first(self):
        e = self.failed({})
        self.assertIsInstance(e, Failed)
        self.assertEqual(e.message, "KeyError: 'missing'")
        self.assertEqual(e.where, f"app.py:{APP_LINES['reconcile']} in reconcile → "
                                  f"app.py:{APP_LINES['helper']} in helper → pkg/deep.py:2 in dig")
        self.assertEqual(e.text, f"KeyError: 'missing' (at {e.where})")
        # Not the SDK's frames, nor absolute paths.
        self.assertNotIn("core.py", e.text)
        self.assertNotIn(self.dir.name, e.text)

    def test_an_error_raised_on_purpose_has_no_trace(self):
        e = self.failed({"refuse": True})
        self.assertIsInstance(e, InvalidInput)
        self.assertEqual((e.where, e.text), ("", "spec.refuse is set"))

    def test_the_sdks_own_refusal_has_no_trace(self):
        with self.assertRaises(Failed) as e:
            core.finalize(self.plugin, *request({}))
        self.assertEqual(e.exception.text, "TypeError: finalize() returned int, not FinalizeResponse")

    def test_the_trace_is_bounded(self):
        e = self.failed({"deep": True})
        frames = e.where.split(errors.TRACE_SEP)
        self.assertEqual(len(frames), errors.MAX_FRAMES + 1, frames)
        self.assertEqual(frames[0], f"app.py:{APP_LINES['reconcile'] - 3} in reconcile")
        self.assertRegex(frames[1], r"^… \d+ more$")
        self.assertEqual(frames[-1], f"app.py:{APP_LINES['recurse']} in recurse")
        self.assertLessEqual(len(e.where), errors.MAX_TRACE)
        # A huge exception text is clipped so the trace survives the host's
        # 16 KiB limit on an error.
        long = self.failed({"long": True})
        self.assertLessEqual(len(long.text.encode()), 16 << 10)
        self.assertTrue(long.text.endswith(f"(at app.py:{APP_LINES['reconcile'] - 1} in reconcile)"),
                        long.text[-80:])

    def test_the_wit_error_carries_the_trace(self):
        wit = pytypes.SimpleNamespace(
            Error_InvalidConfig=lambda m: ("invalid-config", m),
            Error_InvalidInput=lambda m: ("invalid-input", m),
            Error_Failed=lambda m: ("failed", m),
        )
        bug = self.failed({})
        self.assertEqual(glue._wit_error(wit, bug), ("failed", bug.text))
        self.assertIn("(at app.py:", glue._wit_error(wit, bug)[1])
        self.assertEqual(glue._wit_error(wit, self.failed({"refuse": True})),
                         ("invalid-input", "spec.refuse is set"))

    def test_the_runner_shows_the_trace_and_matches_the_message_without_it(self):
        out = io.StringIO()
        old, sys.stdout = sys.stdout, out
        try:
            rc = testing.main(["--plugin", "app", "-p", self.dir.name, self.dir.name])
        finally:
            sys.stdout = old
        text = out.getvalue()
        self.assertEqual(rc, 1, text)
        self.assertIn("ok   the bug without its trace", text)
        self.assertIn("FAIL another message", text)
        self.assertIn(f"(at app.py:{APP_LINES['reconcile']} in reconcile", text)
        self.assertIn("pkg/deep.py:2 in dig)", text)


class Untraced(unittest.TestCase):
    def test_only_failed_errors_lose_a_trailing_trace(self):
        self.assertEqual(testing._untraced({"kind": "failed", "message": "E: x (at app.py:1 in f)"}),
                         {"kind": "failed", "message": "E: x"})
        for e in ({"kind": "invalid-input", "message": "x (at app.py:1 in f)"},
                  {"kind": "failed", "message": "no trace"}):
            self.assertEqual(testing._untraced(e), e)

    def test_without_a_plugin_there_is_no_trace(self):
        try:
            {}["k"]
        except KeyError as exc:
            e = errors.as_plugin_error(exc)
        self.assertEqual(e.text, "KeyError: 'k'")


if __name__ == "__main__":
    unittest.main()
