//! A Python plugin's bug, through the real component and `kubeplug test`:
//! the error the host receives names the plugin's file and line
//! (`app.py:N in reconcile`), the SDK's frames left out, on one line; an
//! error raised on purpose carries no trace.
//!
//! The plugin is built here with the SDK's `build` (its pinned toolchain,
//! cached by content under `KUBEPLUG_CACHE`: ~30 s the first time).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const APP: &str = r#"from kubeplug_sdk import DEPLOYMENT, InvalidInput, Manifest, Resource, Response, export


def replicas(parent):
    return parent["spec"]["replicas"]


class Bug:
    def manifest(self, config):
        return Manifest.composite("bug", "0.1.0", Resource("example.com", "v1alpha1", "MyApp", "myapps")).owns(DEPLOYMENT)

    def reconcile(self, ctx):
        if ctx.labels.get("refuse"):
            raise InvalidInput("refused on purpose")
        replicas(ctx.parent)
        return Response()


Reconciler, Reads = export(Bug)
"#;

const FIXTURES: &str = r#"name: a parent without spec
parent:
  apiVersion: example.com/v1alpha1
  kind: MyApp
  metadata: {name: web, namespace: shop}
---
name: refused on purpose
parent:
  apiVersion: example.com/v1alpha1
  kind: MyApp
  metadata: {name: web, namespace: shop, labels: {refuse: "yes"}}
expect:
  error: {kind: invalid-input, message: refused on purpose}
"#;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn build_python(dir: &Path, out: &Path) {
    let built = Command::new(repo("plugins/sdk-python/build"))
        .arg(dir)
        .arg(out)
        .output()
        .expect("running plugins/sdk-python/build");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
}

#[test]
fn a_python_plugins_bug_names_its_file_and_line_in_kubeplug_test() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bug-py");
    std::fs::create_dir_all(dir.join("fixtures")).unwrap();
    std::fs::write(dir.join("app.py"), APP).unwrap();
    std::fs::write(dir.join("fixtures/bug.yaml"), FIXTURES).unwrap();
    let wasm = dir.join("dist/bug-py.wasm");
    build_python(&dir, &wasm);

    let tested = kubeplug_command()
        .arg("test")
        .arg(&dir)
        .env_remove("KUBEPLUG_POLICY")
        .output()
        .expect("running kubeplug test");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&tested.stdout),
        String::from_utf8_lossy(&tested.stderr)
    );
    assert_eq!(tested.status.code(), Some(1), "{out}");
    // The case expecting nothing fails with the bug's error, where it raised
    // on one line: app.py's lines 15 (reconcile) and 5 (replicas).
    assert!(
        out.contains(
            "message: 'KeyError: ''spec'' (at app.py:15 in reconcile → app.py:5 in replicas)'"
        ),
        "{out}"
    );
    assert!(!out.contains("core.py"), "no SDK frames: {out}");
    // The one expecting the refusal passes: no trace on it.
    assert!(
        out.contains("test result: FAILED. 1 passed; 1 failed"),
        "{out}"
    );
}
