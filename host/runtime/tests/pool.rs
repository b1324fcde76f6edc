//! The instance pool with a real guest (`plugins/hostile`, built to
//! `target/test-plugins/hostile.wasm`): a call finding every slot busy
//! waits, then fails as the host's shortage; a memory eater is still
//! stopped at its cap; a shape that cannot be instantiated is refused at
//! load; a call never sees an earlier call's memory, and every slot and
//! byte of the budget comes back once the spent Stores are reset off the
//! calls' path (`reaper`). (Isolation of raw instances on a reused slot:
//! `lib.rs`'s unit tests.)

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kubeplug_runtime::{
    Allocation, CallError, Limits, LoadError, MemoryBudget, Plugin, PluginOptions, Request, Runtime,
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

/// A pool whose spent Stores are reset on the reaper's thread (off by
/// default; see `pool::Tuning::reset_off_path`).
fn pooled_off_path(slots: u32) -> Runtime {
    let tuning = kubeplug_runtime::pool::Tuning {
        reset_off_path: true,
        ..Default::default()
    };
    Runtime::with_pool_tuning(None, Allocation::Pooling { instances: slots }, tuning).unwrap()
}

/// Limits of every call here. The deadline is no subject of these tests:
/// roomy, so that a busy machine (the tests run in parallel threads) never
/// stops a call meant to answer (the holder's sleeps for up to 2 s).
fn limits() -> Limits {
    Limits {
        timeout: Duration::from_secs(60),
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

/// Run a call that holds the only slot of `runtime`'s pool for `ms`, and
/// `then` while it does.
fn while_the_slot_is_held<T>(
    runtime: &Runtime,
    plugin: &Plugin,
    ms: u64,
    then: impl FnOnce() -> T,
) -> T {
    let slots = runtime.slots().expect("a pooled runtime").clone();
    let holder = {
        let plugin = plugin.clone();
        std::thread::spawn(move || plugin.reconcile(&behave("hold", json!({"mib": 1, "ms": ms}))))
    };
    // Wait for the holder to take the slot (its call then sleeps for `ms`),
    // however long starting its thread and instance takes.
    assert!(
        settled(|| slots.used() >= slots.total()),
        "the holder never took the slot"
    );
    let out = then();
    holder.join().unwrap().expect("the holder's call succeeds");
    out
}

#[test]
fn a_call_finding_every_slot_busy_fails_as_the_hosts_shortage_after_its_wait() {
    let runtime = pooled(1).with_slot_wait(Duration::from_millis(50));
    let plugin = Arc::new(load(&runtime, limits()).unwrap());
    let error = while_the_slot_is_held(&runtime, &plugin, 2000, || {
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
    let answer = while_the_slot_is_held(&runtime, &plugin, 400, || {
        plugin.reconcile(&behave("ok", json!({})))
    });
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

/// `marker`'s answer: the word and page count its memory had at the start.
fn marker(plugin: &Plugin) -> String {
    let desired = plugin
        .reconcile(&behave("marker", json!({"write": 1234, "mib": 4})))
        .unwrap();
    assert_eq!(desired.children.len(), 1);
    desired.children[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_call_never_sees_an_earlier_calls_memory() {
    for runtime in [pooled(1), pooled_off_path(1), Runtime::new(None).unwrap()] {
        let plugin = load(&runtime, limits()).unwrap();
        let fresh = marker(&plugin);
        assert!(fresh.starts_with("h-seen-7-pages-"), "{fresh}");
        // A call that grows the memory by 8 MiB, then calls on the same
        // slot (the pool has one): the word and the size are the image's.
        plugin
            .reconcile(&behave("hold", json!({"mib": 8, "ms": 1})))
            .unwrap();
        for _ in 0..3 {
            assert_eq!(marker(&plugin), fresh);
        }
    }
}

/// Wait (up to a generous bound, not a speed target) until `done`, e.g.
/// for the reaper to have reset every spent Store.
fn settled(done: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

#[test]
fn concurrent_calls_give_back_every_slot_and_byte_once_their_stores_are_reset() {
    for runtime in [pooled(4), pooled_off_path(4)] {
        concurrent_calls_give_back_every_slot_and_byte(runtime);
    }
}

fn concurrent_calls_give_back_every_slot_and_byte(runtime: Runtime) {
    let budget = MemoryBudget::new(256 << 20);
    let runtime = runtime.with_memory_budget(budget.clone());
    let slots = runtime.slots().unwrap().clone();
    let plugin = load(&runtime, limits()).unwrap();
    let fresh = marker(&plugin);
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let plugin = plugin.clone();
            std::thread::spawn(move || (0..10).map(|_| marker(&plugin)).collect::<Vec<_>>())
        })
        .collect();
    for caller in callers {
        for seen in caller.join().unwrap() {
            assert_eq!(seen, fresh);
        }
    }
    assert!(settled(|| slots.used() == 0 && budget.stats().used == 0));
    let stats = budget.stats();
    assert!(stats.peak <= stats.total, "{stats:?}");
    assert_eq!(stats.timed_out, 0);
}

#[test]
fn dropping_the_runtime_with_stores_still_queued_leaks_nothing() {
    let budget = MemoryBudget::new(256 << 20);
    let runtime = pooled_off_path(4).with_memory_budget(budget.clone());
    let slots = runtime.slots().unwrap().clone();
    let plugin = load(&runtime, limits()).unwrap();
    for _ in 0..20 {
        marker(&plugin);
    }
    // The last handle on the reaper drains its queue before it is gone.
    drop(plugin);
    drop(runtime);
    assert_eq!(slots.used(), 0);
    assert_eq!(budget.stats().used, 0);
}
