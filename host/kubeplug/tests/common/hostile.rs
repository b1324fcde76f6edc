//! A misbehaving guest through the real runtime, in any language
//! (`plugins/hostile` in Rust, `plugins/testing/hostile-go` in Go): its
//! limits, its `Hostile` parent, and the typed errors each misbehaviour
//! must come back as.

use std::time::Duration;

use kubeplug_runtime::{CallError, Desired, Limits, Plugin};
use serde_json::{Value, json};

use super::{PARENT_UID, request};

/// The deadline of the calls meant to run into it (`loop`, `sleep`): short
/// enough to keep the suite fast.
pub const TIMEOUT: Duration = Duration::from_millis(300);
/// The deadline of every other call, `manifest()` at load included: calls
/// meant to end otherwise (an answer, a trap, the memory cap) are never
/// failed by a busy machine (the tests run in parallel threads).
pub const ROOMY: Duration = Duration::from_secs(60);
/// Well above what a guest needs to start (a few MiB for Rust, the Go
/// runtime's reservation for Go), far below the default cap.
pub const MEMORY_CAP: usize = 32 << 20;

/// A hostile guest's limits: the roomy deadline, [`MEMORY_CAP`].
pub fn limits() -> Limits {
    Limits {
        timeout: ROOMY,
        memory_bytes: MEMORY_CAP,
        ..Limits::default()
    }
}

/// The same loaded component with a deadline of `timeout` for its calls.
pub fn with_deadline(plugin: &Plugin, timeout: Duration) -> Plugin {
    plugin.admitted(
        plugin.manifest().clone(),
        Limits {
            timeout,
            ..plugin.limits()
        },
    )
}

/// The same loaded component with the short [`TIMEOUT`], for `loop` and
/// `sleep`.
pub fn quick(plugin: &Plugin) -> Plugin {
    with_deadline(plugin, TIMEOUT)
}

pub fn hostile_parent(behave: &str) -> Value {
    json!({
        "apiVersion": "test.kubeplug.io/v1",
        "kind": "Hostile",
        "metadata": {"name": "h", "namespace": "default", "uid": PARENT_UID},
        "spec": {"behave": behave},
    })
}

pub fn behave(plugin: &Plugin, behave: &str) -> Result<Desired, CallError> {
    plugin.reconcile(&request(&hostile_parent(behave), &[], &[]))
}

/// `behave: ok` is answered with its one child.
pub fn assert_serves(plugin: &Plugin) -> Desired {
    let desired = behave(plugin, "ok").expect("behave ok is served");
    assert_eq!(desired.children.len(), 1);
    assert_eq!(desired.children[0]["metadata"]["name"], "h-ok");
    desired
}

pub fn expect_deadline(result: Result<Desired, CallError>) {
    expect_deadline_of(result, TIMEOUT);
}

pub fn expect_deadline_of(result: Result<Desired, CallError>, deadline: Duration) {
    match result {
        Err(CallError::Deadline { plugin, timeout }) => {
            assert_eq!(plugin, "hostile");
            assert_eq!(timeout, deadline);
        }
        other => panic!("expected a deadline error, got {other:?}"),
    }
}

pub fn expect_memory_cap(result: Result<Desired, CallError>) {
    match result {
        Err(CallError::MemoryCap {
            plugin,
            limit_bytes,
        }) => {
            assert_eq!(plugin, "hostile");
            assert_eq!(limit_bytes, MEMORY_CAP);
        }
        other => panic!("expected a memory cap error, got {other:?}"),
    }
}

/// A trap of the plugin `hostile`: its message.
pub fn expect_trap(result: Result<Desired, CallError>) -> String {
    match result {
        Err(CallError::Trap { plugin, message }) => {
            assert_eq!(plugin, "hostile");
            message
        }
        other => panic!("expected a trap, got {other:?}"),
    }
}
