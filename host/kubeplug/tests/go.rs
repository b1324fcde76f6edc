//! Go plugins through the real runtime: components the Go SDK builds
//! (`plugins/sdk-go/build`, the standard toolchain and kubeplug's preview1
//! shim), as `make plugins` leaves them in `target/test-plugins/`.
//!
//! - (`database-go`, the Go port of `database`, passes `database`'s own
//!   fixtures unchanged: `tests/plugins.rs`, beside the other ports;)
//! - a Go component imports what a Rust one does (`kubeplug:plugin/log`
//!   and its types): no WASI;
//! - a hostile Go guest (`plugins/testing/hostile-go`, `spec.behave` picks
//!   the misbehaviour) is contained as a Rust one is: the deadline, the
//!   memory cap, a panic's message in the trap's report, and no files,
//!   arguments, environment or clock from inside.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::hostile::*;
use common::*;
use kubeplug_kit::kit;
use kubeplug_runtime::{CallError, GuestError, LoadError, Plugin, PluginOptions};
use serde_json::{Value, json};

/// Every export and manifest field of the contract through the Go SDK's
/// hand-written glue (`plugins/testing/exports-go`): its fixtures check
/// each against the answers the Go code gives.
#[test]
fn every_export_of_the_go_sdk_answers_through_the_real_runtime() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let tmp = tempfile::tempdir().unwrap();
    let policy_file = tmp.path().join("policy.yaml");
    std::fs::write(&policy_file, EXPORTS_POLICY).unwrap();
    let options = kit::Options {
        plugin: Some(test_plugin_path("exports-go")),
        policy: kubeplug_core::policy::Policy::load(&[policy_file]).expect("the policy"),
        ..Default::default()
    };
    let report = kit::run(
        runtime(),
        &repo.join("plugins/testing/exports-go"),
        &options,
    )
    .unwrap_or_else(|e| panic!("{:#}", anyhow::Error::from(e)));
    assert!(report.passed(), "{}", report.render());
    assert_eq!(report.results.len(), 9);
}

/// What `exports-go` asks for.
const EXPORTS_POLICY: &str = "\
plugins:
  exports:
    parent: [Example.example.com]
    children: [ConfigMap]
    related: [Pod]
    references: [ConfigMap, Secret]
    admission: [validate, mutate]
";

/// The names a component imports, at its top level.
fn component_imports(bytes: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut depth = 0;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload.expect("a valid component") {
            wasmparser::Payload::ModuleSection { .. }
            | wasmparser::Payload::ComponentSection { .. } => depth += 1,
            wasmparser::Payload::End(_) if depth > 0 => depth -= 1,
            wasmparser::Payload::ComponentImportSection(reader) if depth == 0 => {
                for import in reader {
                    names.push(import.expect("an import").name.name.to_string());
                }
            }
            _ => {}
        }
    }
    names
}

/// Exactly what the Rust build of the same world imports: the log, and
/// the types its functions use.
#[test]
fn a_go_component_imports_only_the_log_and_no_wasi() {
    let rust = component_imports(&plugin_bytes("database"));
    assert_eq!(
        rust,
        ["kubeplug:plugin/log@0.1.0", "kubeplug:plugin/types@0.1.0"]
    );
    for name in ["database-go", "hostile-go", "exports-go"] {
        let bytes = test_plugin_bytes(name);
        assert_eq!(component_imports(&bytes), rust, "{name}.wasm");
        assert!(
            !bytes.windows(5).any(|w| w == b"wasi:"),
            "{name}.wasm names no WASI interface"
        );
    }
}

fn load_hostile(config: Option<Value>) -> Result<Plugin, LoadError> {
    runtime().load(
        &test_plugin_bytes("hostile-go"),
        PluginOptions {
            config,
            limits: limits(),
            label: Some("hostile-go.wasm".into()),
            ..Default::default()
        },
    )
}

fn hostile() -> Plugin {
    load_hostile(None).expect("hostile-go.wasm loads")
}

#[test]
fn a_go_guest_that_loops_forever_is_stopped_at_its_deadline() {
    let plugin = hostile();
    let started = Instant::now();
    expect_deadline(behave(&quick(&plugin), "loop"));
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_serves(&plugin);
}

#[test]
fn a_go_guest_that_allocates_without_bound_hits_its_memory_cap() {
    let plugin = hostile();
    expect_memory_cap(behave(&plugin, "alloc"));
    assert_serves(&plugin);
}

/// The SDK recovers the panic, logs its message and the plugin's frame at
/// error level, then exits (a trap through the shim's `proc_exit`).
#[test]
fn a_go_panic_is_a_trap_that_carries_the_panic_message_and_where() {
    let plugin = hostile();
    let message = expect_trap(behave(&plugin, "panic"));
    assert!(
        message.contains("panic: hostile plugin asked to panic at main.Hostile.Reconcile")
            && message.contains("main.go:"),
        "{message}"
    );
    assert_serves(&plugin);
}

#[test]
fn a_go_panic_in_manifest_refuses_the_plugin_with_its_message() {
    match load_hostile(Some(json!({"manifest": "panic"}))) {
        Err(LoadError::Manifest(CallError::Trap { plugin, message })) => {
            assert_eq!(plugin, "hostile-go.wasm");
            assert!(
                message.contains("hostile plugin asked to panic in manifest()"),
                "{message}"
            );
        }
        other => panic!("expected a manifest trap, got {:?}", other.map(|_| ())),
    }
}

/// The shim's clock is virtual: a sleep passes at once (no host thread
/// waits on a guest), and a guest that sleeps forever spins through its
/// timers until the deadline.
#[test]
fn a_go_guest_that_sleeps_never_holds_a_host_thread_past_its_deadline() {
    let plugin = hostile();
    let started = Instant::now();
    let desired = behave(&plugin, "sleep").expect("an hour passes at once");
    assert_eq!(desired.children[0]["metadata"]["name"], "h-ok");
    assert!(started.elapsed() < Duration::from_secs(30));
    expect_deadline(behave(&quick(&plugin), "sleep-forever"));
    assert_serves(&plugin);
}

/// Nothing left to run: Go's runtime reports a deadlock on stderr and
/// exits, which the shim makes a trap; the report's reason (not the
/// traceback after it) is what the host reports with the trap.
#[test]
fn a_go_guest_that_blocks_forever_traps_with_the_runtimes_reason() {
    let plugin = hostile();
    let message = expect_trap(behave(&plugin, "block"));
    assert!(
        message.ends_with("guest error log: fatal error: all goroutines are asleep - deadlock!"),
        "{message}"
    );
    assert_serves(&plugin);
}

#[test]
fn a_go_guest_returns_its_typed_error() {
    match behave(&hostile(), "error") {
        Err(CallError::Guest { plugin, error }) => {
            assert_eq!(plugin, "hostile");
            assert_eq!(
                error,
                GuestError::Failed("hostile plugin asked to fail".into())
            );
        }
        other => panic!("expected the guest's own error, got {other:?}"),
    }
}

/// What a Go guest sees of the world: no environment, no arguments, no
/// files, and a clock that starts in 1970 (plugins read the request's
/// `now`). Its stderr goes to the host's log.
#[test]
fn a_go_guest_has_no_files_environment_or_clock() {
    let plugin = hostile();
    let desired = behave(&plugin, "env").expect("env is served");
    let data = &desired.children[0]["data"];
    assert_eq!(data["environ"], "[]");
    assert_eq!(data["args"], "[]");
    assert_eq!(data["file"], "open /etc/passwd: Bad file number");
    assert_eq!(data["dir"], "0 open .: Bad file number");
    assert_eq!(data["year"], "1970");
    behave(&plugin, "stderr").expect("a guest that writes to stderr is served");
}
