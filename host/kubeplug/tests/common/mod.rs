//! Shared by the integration tests: where the built plugins are, a runtime
//! per test binary, fixed request inputs and object builders.
//!
//! Assumes `make plugins` ran: the tests run the real `.wasm` files the
//! Makefile copies into `target/plugins` and `target/test-plugins`.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of these helpers"
)]

use std::path::PathBuf;
use std::sync::OnceLock;

pub mod hostile;

use kubeplug_runtime::{Plugin, PluginOptions, Request, Runtime};
use serde_json::{Value, json};

/// The `now` of every request: tests are deterministic.
pub const NOW: &str = "2026-11-29T18:00:00Z";
/// A later `now`, for a second reconcile.
pub const LATER: &str = "2026-11-29T18:05:00Z";
/// The uid of every parent.
pub const PARENT_UID: &str = "0b9ff2a4-7a10-4c5e-9d2e-000000000001";

/// Fixed entropy: bytes 0, 1, 2, ... 31.
pub fn entropy() -> Vec<u8> {
    (0..32).collect()
}

/// Other fixed entropy, for "a second call with fresh entropy".
pub fn other_entropy() -> Vec<u8> {
    (100..132).collect()
}

fn repo_dir(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(dir)
}

/// Path of a shipped plugin, e.g. `plugin_path("database")`.
pub fn plugin_path(name: &str) -> PathBuf {
    existing(repo_dir("target/plugins").join(format!("{name}.wasm")))
}

/// Path of a test guest, e.g. `test_plugin_path("hostile")`.
pub fn test_plugin_path(name: &str) -> PathBuf {
    existing(repo_dir("target/test-plugins").join(format!("{name}.wasm")))
}

fn existing(path: PathBuf) -> PathBuf {
    assert!(
        path.is_file(),
        "{} is missing: run `make plugins` first",
        path.display()
    );
    path
}

pub fn plugin_bytes(name: &str) -> Vec<u8> {
    std::fs::read(plugin_path(name)).expect("reading a built plugin")
}

pub fn test_plugin_bytes(name: &str) -> Vec<u8> {
    std::fs::read(test_plugin_path(name)).expect("reading a built test guest")
}

/// A compile cache shared by the test binaries of this package (and kept
/// between runs), so each plugin is compiled once rather than once per test.
pub fn shared_cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kubeplug-compiled")
}

/// The built `kubeplug` binary as a command: the compile cache shared by
/// these tests, no colours. Callers add the policy they test under.
pub fn kubeplug_command() -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_kubeplug"));
    command
        .env("KUBEPLUG_CACHE_DIR", shared_cache_dir())
        .env("NO_COLOR", "1");
    command
}

/// One runtime per test binary. It lives as long as the process, so its
/// epoch ticker (which enforces deadlines) never stops.
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| Runtime::new(Some(shared_cache_dir())).expect("starting the runtime"))
}

/// Load a shipped plugin with default limits.
pub fn load(name: &str, config: Option<Value>) -> Plugin {
    runtime()
        .load(
            &plugin_bytes(name),
            PluginOptions {
                config,
                label: Some(format!("{name}.wasm")),
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("loading {name}: {e:?}"))
}

/// A request with fixed `now` and entropy.
pub fn request(parent: &Value, observed: &[Value], related: &[Value]) -> Request {
    Request {
        parent: parent.to_string().into(),
        observed: observed.iter().map(|o| o.to_string().into()).collect(),
        related: related.iter().map(|o| o.to_string().into()).collect(),
        now: NOW.into(),
        entropy: entropy(),
    }
}

/// A `Database` as the API server stores it.
pub fn database(name: &str, engine: &str, version: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Database",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "uid": PARENT_UID,
            "generation": 1,
            "resourceVersion": "100",
        },
        "spec": {"engine": engine, "version": version, "replicas": replicas},
    })
}

/// A Pod of database `db`, `Running` and Ready (or not).
pub fn database_pod(db: &str, index: usize, ready: bool) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{db}-{index}"),
            "namespace": "shop",
            "labels": {
                "app.kubernetes.io/name": "database",
                "app.kubernetes.io/instance": db,
            },
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
        },
    })
}

/// The object in `children` of this kind.
pub fn child<'a>(children: &'a [Value], kind: &str) -> &'a Value {
    children
        .iter()
        .find(|c| c["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} among the children: {children:#?}"))
}

/// What the API server returns for an applied `object`: the same object with
/// the fields the server owns filled in.
pub fn as_stored(object: &Value, uid: &str) -> Value {
    let mut stored = object.clone();
    let meta = stored["metadata"].as_object_mut().expect("object metadata");
    meta.insert("uid".into(), uid.into());
    meta.insert("resourceVersion".into(), "200".into());
    meta.insert("creationTimestamp".into(), NOW.into());
    stored
}
