//! The instance pool with a real guest (`plugins/hostile`, built to
//! `target/test-plugins/hostile.wasm`): a call finding every slot busy
//! waits, then fails as the host's shortage; a memory eater is still
//! stopped at its cap; a shape that cannot be instantiated is refused at
//! load. (Isolation on a reused slot: `lib.rs`'s unit tests.)

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kubeplug_runtime::{
    Allocation, CallError, Limits, LoadError, Plugin, PluginOptions, Request, Runtime,
};
use serde_json::json;

fn hostile_bytes() -> Vec<u8> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/test-plugins/hostile.wasm");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}; run `make plugins`", path.display()))
}

fn pooled(slots: u32) -> Runtime {
    Runtime::with_allocation(None, Allocation::Pooling { instances: slots }).unwrap()
}

fn limits() -> Limits {
    Limits {
        timeout: Duration::from_secs(5),
        memory_bytes: 32 << 20,
        ..Limits::default()
    }
}

fn load(runtime: &Runtime, limits: Limits) -> Result<Plugin, LoadError> {
    runtime.load(
        &hostile_bytes(),
        PluginOptions {
            limits,
            label: Some("hostile.wasm".into()),
            ..Default::default()
        },
    )
}

fn behave(behave: &str, spec: serde_json::Value) -> Request {
    let mut spec = spec;
    spec["behave"] = behave.into();
    let parent = json!({
        "apiVersion": "test.kubeplug.io/v1",
        "kind": "Hostile",
        "metadata": {"name": "h", "namespace": "default", "uid": "0b9ff2a4-7a10-4c5e-9d2e-000000000001"},
        "spec": spec,
    });
    Request {
        parent: parent.to_string().into(),
        observed: Vec::new(),
        related: Vec::new(),
        now: "2026-11-29T18:00:00Z".into(),
        entropy: (0..32).collect(),
    }
}

/// Run a call that holds the only slot for `ms`, and `then` while it does.
fn while_the_slot_is_held<T>(plugin: &Plugin, ms: u64, then: impl FnOnce() -> T) -> T {
    let holder = {
        let plugin = plugin.clone();
        std::thread::spawn(move || plugin.reconcile(&behave("hold", json!({"mib": 1, "ms": ms}))))
    };
    // Let the holder take the slot (its call sleeps for `ms`).
    std::thread::sleep(Duration::from_millis(ms / 4));
    let out = then();
    holder.join().unwrap().expect("the holder's call succeeds");
    out
}

#[test]
fn a_call_finding_every_slot_busy_fails_as_the_hosts_shortage_after_its_wait() {
    let runtime = pooled(1).with_slot_wait(Duration::from_millis(50));
    let plugin = Arc::new(load(&runtime, limits()).unwrap());
    let error = while_the_slot_is_held(&plugin, 2000, || {
        plugin.reconcile(&behave("ok", json!({}))).unwrap_err()
    });
    assert!(matches!(error, CallError::HostBusy { .. }), "{error:?}");
    assert!(!error.plugin_fault());
    assert!(error.to_string().contains("instance slots"), "{error}");
    // Once the slot is back, calls are served again.
    plugin.reconcile(&behave("ok", json!({}))).unwrap();
}

#[test]
fn a_call_finding_every_slot_busy_waits_and_is_served_when_one_is_given_back() {
    let runtime = pooled(1).with_slot_wait(Duration::from_secs(30));
    let plugin = load(&runtime, limits()).unwrap();
    let answer =
        while_the_slot_is_held(&plugin, 400, || plugin.reconcile(&behave("ok", json!({}))));
    assert_eq!(answer.unwrap().children.len(), 1);
}

#[test]
fn a_memory_eater_is_stopped_at_its_cap_under_pooling() {
    let runtime = pooled(2);
    let plugin = load(&runtime, limits()).unwrap();
    for _ in 0..2 {
        let error = plugin.reconcile(&behave("alloc", json!({}))).unwrap_err();
        assert!(
            matches!(error, CallError::MemoryCap { limit_bytes, .. } if limit_bytes == 32 << 20),
            "{error:?}"
        );
    }
    // The slot it ate in is reset for the next call.
    assert_eq!(
        plugin
            .reconcile(&behave("ok", json!({})))
            .unwrap()
            .children
            .len(),
        1
    );
}

#[test]
fn a_component_that_cannot_be_instantiated_within_the_limits_is_refused_at_load() {
    // A Rust guest makes a few core instances; allow one.
    let limits = Limits {
        instances: 1,
        ..limits()
    };
    for runtime in [pooled(2), Runtime::new(None).unwrap()] {
        let error = load(&runtime, limits).unwrap_err();
        assert!(matches!(error, LoadError::DoesNotFit(_)), "{error:?}");
        assert!(error.to_string().contains("instance"), "{error}");
    }
}

#[test]
fn every_call_gives_its_slot_back() {
    let runtime = pooled(4);
    let plugin = load(&runtime, limits()).unwrap();
    assert_eq!(runtime.pool_slots(), Some(4));
    for _ in 0..8 {
        plugin.reconcile(&behave("ok", json!({}))).unwrap();
    }
}
