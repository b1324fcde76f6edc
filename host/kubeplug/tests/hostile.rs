//! A misbehaving guest (`plugins/hostile`, built to
//! `target/test-plugins/hostile.wasm`) and files that are not plugins at all:
//! each failure must come back as the right typed error, and the runtime
//! must keep serving afterwards.
//!
//! `spec.behave` of the `Hostile` parent picks the misbehaviour; the config
//! `{"manifest": "panic"}` makes `manifest()` panic.

mod common;

use std::time::{Duration, Instant};

use common::hostile::*;
use common::*;
use kubeplug_core::plan;
use kubeplug_runtime::{
    CONTRACT, CallError, Desired, GuestError, Limits, LoadError, Plugin, PluginOptions, Runtime,
};
use serde_json::{Value, json};

/// The default limits with the roomy deadline.
fn roomy_defaults() -> Limits {
    Limits {
        timeout: ROOMY,
        ..Limits::default()
    }
}

fn load_hostile(runtime: &Runtime) -> Plugin {
    load_guest(runtime, "hostile")
}

/// `hostile` (built with WASI) or `hostile-pure` (the same code without it,
/// as the SDK's plugins are built).
fn load_guest(runtime: &Runtime, file: &str) -> Plugin {
    runtime
        .load(
            &test_plugin_bytes(file),
            PluginOptions {
                limits: limits(),
                label: Some(format!("{file}.wasm")),
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("loading {file}.wasm: {e:?}"))
}

fn assert_database_serves(runtime: &Runtime) {
    let database = runtime
        .load(
            &plugin_bytes("database"),
            PluginOptions {
                limits: roomy_defaults(),
                ..Default::default()
            },
        )
        .expect("database.wasm loads");
    let parent = database_parent();
    let desired = database
        .reconcile(&request(&parent, &[], &[]))
        .expect("database reconciles");
    assert_eq!(desired.children.len(), 3);
}

fn database_parent() -> Value {
    database("orders", "postgresql", "16.2.0", 1)
}

fn expect_panic_trap(result: Result<Desired, CallError>) {
    let message = expect_trap(result);
    assert!(
        message.contains("hostile plugin asked to panic"),
        "the panic message is kept: {message}"
    );
}

fn expect_malformed(result: Result<Desired, CallError>) {
    match result {
        Err(CallError::Malformed { plugin, reason }) => {
            assert_eq!(plugin, "hostile");
            assert!(reason.starts_with("child #0 is not JSON"), "{reason}");
        }
        other => panic!("expected a malformed response, got {other:?}"),
    }
}

fn expect_guest_failure(result: Result<Desired, CallError>) {
    match result {
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

fn expect_manifest_panic(result: Result<Plugin, LoadError>) {
    match result {
        Err(LoadError::Manifest(CallError::Trap { plugin, message })) => {
            assert_eq!(
                plugin, "hostile.wasm",
                "named by its label before its manifest"
            );
            assert!(
                message.contains("hostile plugin asked to panic in manifest()"),
                "{message}"
            );
        }
        other => panic!("expected a manifest trap, got {other:?}"),
    }
}

fn load_with_panicking_manifest(runtime: &Runtime) -> Result<Plugin, LoadError> {
    runtime.load(
        &test_plugin_bytes("hostile"),
        PluginOptions {
            config: Some(json!({"manifest": "panic"})),
            limits: limits(),
            label: Some("hostile.wasm".into()),
            ..Default::default()
        },
    )
}

// One misbehaviour per test.

#[test]
fn a_guest_that_loops_forever_is_stopped_at_its_deadline() {
    let plugin = quick(&load_hostile(runtime()));
    let started = Instant::now();
    expect_deadline(behave(&plugin, "loop"));
    // Not a timing test: only proof that the loop was interrupted rather
    // than allowed to finish some other way.
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn a_guest_that_allocates_without_bound_hits_its_memory_cap() {
    expect_memory_cap(behave(&load_hostile(runtime()), "alloc"));
}

#[test]
fn a_guest_panic_is_a_trap_that_carries_the_panic_message() {
    expect_panic_trap(behave(&load_hostile(runtime()), "panic"));
}

/// Without WASI std prints a panic nowhere: the SDK sends its message as an
/// error log, and the trap's report carries it all the same.
#[test]
fn a_guest_panic_without_wasi_carries_the_panic_message_too() {
    let plugin = load_guest(runtime(), "hostile-pure");
    expect_panic_trap(behave(&plugin, "panic"));
    assert_serves(&plugin);
}

#[test]
fn a_child_that_is_not_json_is_a_malformed_response() {
    expect_malformed(behave(&load_hostile(runtime()), "malformed"));
}

#[test]
fn an_error_the_guest_returns_is_a_typed_guest_error() {
    expect_guest_failure(behave(&load_hostile(runtime()), "error"));
}

#[test]
fn a_panic_in_manifest_refuses_the_plugin() {
    expect_manifest_panic(load_with_panicking_manifest(runtime()));
}

#[test]
fn call_errors_have_short_metric_labels() {
    let plugin = load_hostile(runtime());
    let label = |b| behave(&plugin, b).unwrap_err().label();
    assert_eq!(
        behave(&quick(&plugin), "loop").unwrap_err().label(),
        "deadline"
    );
    assert_eq!(label("alloc"), "memory_cap");
    assert_eq!(label("panic"), "trap");
    assert_eq!(label("malformed"), "malformed");
    assert_eq!(label("error"), "guest_error");
}

#[test]
fn a_child_of_a_kind_the_manifest_does_not_declare_is_stopped_at_the_fence() {
    let plugin = load_hostile(runtime());
    let parent = hostile_parent("undeclared");
    let desired = behave(&plugin, "undeclared").expect("the call itself succeeds");
    let error = plan::children(plugin.manifest(), &parent, &desired.children).unwrap_err();
    assert_eq!(
        error,
        plan::FenceError::UndeclaredKind {
            api_version: "v1".into(),
            kind: "Secret".into(),
            name: "h-smuggled".into(),
        }
    );
}

// The runtime survives.

#[test]
fn the_runtime_keeps_serving_after_every_kind_of_misbehaviour() {
    let runtime = Runtime::new(None).unwrap();
    let hostile = load_hostile(&runtime);
    expect_deadline(behave(&quick(&hostile), "loop"));
    expect_memory_cap(behave(&hostile, "alloc"));
    expect_panic_trap(behave(&hostile, "panic"));
    expect_malformed(behave(&hostile, "malformed"));
    expect_guest_failure(behave(&hostile, "error"));
    expect_manifest_panic(load_with_panicking_manifest(&runtime));

    // The very plugin that misbehaved serves the next call normally: every
    // call gets a fresh instance.
    assert_serves(&hostile);
    assert_serves(&load_hostile(&runtime));
    assert_database_serves(&runtime);
}

#[test]
fn misbehaving_calls_on_other_threads_do_not_disturb_good_ones() {
    let hostile = load_hostile(runtime());
    // The loop on the same component with the short deadline (with the
    // roomy one it would spin for a minute).
    let looping = quick(&hostile);
    std::thread::scope(|s| {
        for bad in ["loop", "alloc", "panic", "malformed", "error"] {
            let plugin = if bad == "loop" { &looping } else { &hostile };
            s.spawn(move || assert!(behave(plugin, bad).is_err()));
        }
        for _ in 0..3 {
            let hostile = &hostile;
            s.spawn(move || {
                for _ in 0..5 {
                    assert_serves(hostile);
                }
            });
        }
    });
}

#[test]
fn a_deadline_is_kept_after_the_runtime_that_loaded_the_plugin_is_dropped() {
    let runtime = Runtime::new(None).unwrap();
    let plugin = quick(&load_hostile(&runtime));
    drop(runtime);
    // Run the call on its own thread: if the deadline were lost, the loop
    // would never end and this test would report that rather than hang.
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(behave(&plugin, "loop").map(|_| ()));
    });
    match result.recv_timeout(Duration::from_secs(20)) {
        Ok(Err(CallError::Deadline { .. })) => {}
        Ok(other) => panic!("expected a deadline error, got {other:?}"),
        Err(_) => panic!("the looping call was never interrupted"),
    }
}

// Files that are not plugins for this host.

fn load_error(bytes: &[u8]) -> LoadError {
    runtime()
        .load(bytes, PluginOptions::default())
        .expect_err("the bytes are refused")
}

#[test]
fn garbage_bytes_are_not_a_component() {
    for bytes in [&b""[..], b"hello, world", b"\0asm"] {
        let error = load_error(bytes);
        assert!(
            matches!(error, LoadError::NotAComponent(_)),
            "{bytes:?}: {error:?}"
        );
        assert_eq!(error.to_string(), "not a valid WebAssembly component");
    }
}

#[test]
fn a_core_wasm_module_is_not_a_component() {
    let empty_core_module = b"\0asm\x01\0\0\0";
    let error = load_error(empty_core_module);
    assert!(matches!(error, LoadError::NotAComponent(_)), "{error:?}");
}

/// A guest of the bare `plugin` world (no optional `reads` export, like
/// guests built before it existed) loads, reads nothing metadata-only and is
/// handed the whole parent.
#[test]
fn a_component_without_the_optional_reads_export_loads_and_gets_whole_objects() {
    let plugin = runtime()
        .load(&test_plugin_bytes("plain"), PluginOptions::default())
        .expect("a guest without `reads` loads");
    assert_eq!(plugin.manifest().name, "plain");
    assert!(plugin.manifest().metadata_only.is_empty());
    let parent = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
        "data": {"key": "a value the plugin sees"},
    });
    let desired = plugin
        .reconcile(&request(&parent, &[], &[]))
        .expect("the call succeeds");
    let seen = &desired.parent_patch.expect("a patch").annotations["plain/parent-bytes"];
    assert_eq!(
        seen,
        &parent.to_string().len().to_string(),
        "the whole parent was handed over"
    );
}

#[test]
fn a_component_built_for_another_contract_version_is_refused_by_name() {
    let error = load_error(&test_plugin_bytes("contract-v1"));
    match &error {
        LoadError::WrongContract { found, expected } => {
            assert_eq!(found, "kubeplug:plugin/reconciler@1.0.0");
            assert_eq!(expected, "kubeplug:plugin/reconciler@0.1.0");
        }
        other => panic!("expected a contract mismatch, got {other:?}"),
    }
    assert_eq!(
        error.to_string(),
        "built for contract kubeplug:plugin/reconciler@1.0.0, \
         this host speaks kubeplug:plugin/reconciler@0.1.0"
    );
    assert_eq!(CONTRACT, "kubeplug:plugin@0.1.0");
}

// Quotas on answers, logs and compiles.

#[test]
fn an_answer_with_too_many_children_is_refused_before_it_is_parsed() {
    let plugin = load_hostile(runtime());
    let mut parent = hostile_parent("children");
    parent["spec"]["count"] = json!(2000);
    match plugin.reconcile(&request(&parent, &[], &[])) {
        Err(CallError::OverQuota { what, .. }) => {
            assert_eq!(what, "2000 children (quota 64)")
        }
        other => panic!("expected a quota refusal, got {other:?}"),
    }
    // With the default memory cap: the status is built in guest memory.
    let roomy = runtime()
        .load(
            &test_plugin_bytes("hostile"),
            PluginOptions {
                limits: roomy_defaults(),
                ..Default::default()
            },
        )
        .unwrap();
    let mut parent = hostile_parent("status-bomb");
    parent["spec"]["bytes"] = json!(5 << 20);
    let error = roomy.reconcile(&request(&parent, &[], &[])).unwrap_err();
    assert_eq!(error.label(), "quota");
    assert!(error.to_string().contains("(quota 4194304)"), "{error}");
}

#[test]
fn a_guest_that_floods_its_log_still_answers_within_its_deadline() {
    // 1,000 lines of 1 MiB: the host keeps 64 KiB of them and drops the
    // rest without copying them into its log.
    let plugin = load_hostile(runtime());
    let mut parent = hostile_parent("log-bomb");
    parent["spec"]["count"] = json!(100);
    let started = Instant::now();
    let desired = plugin.reconcile(&request(&parent, &[], &[])).unwrap();
    println!(
        "figures: a call flooding its log answered in {:?}",
        started.elapsed()
    );
    assert_eq!(desired.children.len(), 1);
}

// Deadlines that hold inside host calls, and the host's memory budget.

#[test]
fn a_guest_sleeping_in_a_host_call_is_stopped_at_its_deadline() {
    let plugin = load_hostile(runtime());
    let sleepy = quick(&plugin);
    // The guest sleeps for an hour: ending within seconds is proof enough
    // that the deadline held (not a speed target on a busy machine).
    let started = Instant::now();
    expect_deadline(behave(&sleepy, "sleep"));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    // finalize too.
    let mut parent = hostile_parent("ok");
    parent["spec"]["finalize"] = json!("sleep");
    let started = Instant::now();
    match sleepy.finalize(&request(&parent, &[], &[])) {
        Err(CallError::Deadline { plugin, .. }) => assert_eq!(plugin, "hostile"),
        other => panic!("expected a deadline error, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_serves(&plugin);
}

#[test]
fn a_manifest_that_sleeps_is_stopped_at_its_deadline_and_refused() {
    let started = Instant::now();
    let result = runtime().load(
        &test_plugin_bytes("hostile"),
        PluginOptions {
            config: Some(json!({"manifest": "sleep"})),
            limits: Limits {
                timeout: TIMEOUT,
                ..limits()
            },
            ..Default::default()
        },
    );
    match result {
        Err(LoadError::Manifest(CallError::Deadline { .. })) => {}
        other => panic!("expected a deadline in manifest(), got {other:?}"),
    }
    // manifest() sleeps for an hour: a generous bound, not a speed target.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn sleeping_calls_on_many_threads_all_end_at_their_deadline() {
    // A deadline long beside what starting six calls costs on a busy
    // machine: one after another, the six would take 12 s; at once, each
    // ends at its own deadline.
    let deadline = Duration::from_secs(2);
    let plugin = with_deadline(&load_hostile(runtime()), deadline);
    let started = Instant::now();
    let sleepers: Vec<_> = (0..6)
        .map(|_| {
            let plugin = plugin.clone();
            std::thread::spawn(move || behave(&plugin, "sleep"))
        })
        .collect();
    for sleeper in sleepers {
        expect_deadline_of(sleeper.join().unwrap(), deadline);
    }
    let took = started.elapsed();
    println!("figures: six calls sleeping at once ended after {took:?} (deadline {deadline:?})");
    assert!(took < deadline * 3, "{took:?}");
}

#[test]
fn one_log_call_with_millions_of_empty_fields_is_read_only_as_far_as_its_budget() {
    let plugin = runtime()
        .load(
            &test_plugin_bytes("hostile"),
            PluginOptions {
                limits: roomy_defaults(),
                ..Default::default()
            },
        )
        .unwrap();
    let desired = behave(&plugin, "log-fields").expect("answers");
    assert_eq!(desired.children.len(), 1);
}

/// `calls` reconciles of `parent` on as many threads at once.
fn at_once(plugin: &Plugin, parent: &Value, calls: usize) -> Vec<Result<Desired, CallError>> {
    let threads: Vec<_> = (0..calls)
        .map(|_| {
            let (plugin, parent) = (plugin.clone(), parent.clone());
            std::thread::spawn(move || plugin.reconcile(&request(&parent, &[], &[])))
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn calls_wait_for_the_host_memory_budget_and_never_hold_more_than_it() {
    use kubeplug_runtime::MemoryBudget;
    // Room for two 40 MiB calls at once, however many threads call.
    let budget = MemoryBudget::new(90 << 20);
    let runtime = Runtime::new(None)
        .unwrap()
        .with_memory_budget(budget.clone());
    let plugin = runtime
        .load(
            &test_plugin_bytes("hostile"),
            PluginOptions {
                limits: Limits {
                    memory_bytes: 48 << 20,
                    timeout: Duration::from_secs(10),
                    ..Limits::default()
                },
                ..Default::default()
            },
        )
        .unwrap();
    let mut parent = hostile_parent("hold");
    parent["spec"]["mib"] = json!(40);
    parent["spec"]["ms"] = json!(200);
    let results = at_once(&plugin, &parent, 6);
    let stats = budget.stats();
    assert!(stats.peak <= 90 << 20, "{stats:?}");
    // The first calls grow past their small reservation; later ones reserve
    // what their predecessors used and wait for it. None fails by its own
    // fault; a grow the budget cannot cover is the host's refusal.
    for result in &results {
        match result {
            Ok(_) | Err(CallError::HostMemory { .. }) => {}
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert!(results.iter().any(Result::is_ok), "{results:?}");
    assert_eq!(stats.used, 0);
    // Once the plugin is known to need 40 MiB, calls queue for it.
    let queued = at_once(&plugin, &parent, 4);
    assert!(queued.iter().all(Result::is_ok), "{queued:?}");
    assert!(budget.stats().waits > 0, "{:?}", budget.stats());
    assert!(budget.stats().peak <= 90 << 20);
}

fn bounded_runtime() -> Runtime {
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_kubeplug"));
    Runtime::new(None)
        .expect("starting the runtime")
        .with_compiler(kubeplug_runtime::Compiler::Subprocess(exe))
}

fn load_bomb(runtime: &Runtime, compile: kubeplug_runtime::CompileLimits) -> LoadError {
    runtime
        .load(
            &test_plugin_bytes("compile-bomb"),
            PluginOptions {
                compile,
                ..Default::default()
            },
        )
        .expect_err("the compile bomb never loads")
}

#[test]
fn a_compile_bomb_is_stopped_at_its_compile_deadline_while_another_plugin_loads() {
    let runtime = std::sync::Arc::new(bounded_runtime());
    let bomb = {
        let runtime = runtime.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let error = load_bomb(
                &runtime,
                kubeplug_runtime::CompileLimits {
                    timeout: Duration::from_secs(1),
                    memory_bytes: 4 << 30,
                },
            );
            (error, started.elapsed())
        })
    };
    // Loads beside it are not held up by it (each compile is its own
    // process; nothing is locked while it runs).
    // Its compile competes with the bomb's for the CPU: a compile quota of
    // its own, not the production default, so that only a queue (not a busy
    // machine) could fail it.
    let myapp = runtime.load(
        &plugin_bytes("myapp"),
        PluginOptions {
            config: None,
            compile: kubeplug_runtime::CompileLimits {
                timeout: Duration::from_secs(600),
                ..Default::default()
            },
            ..Default::default()
        },
    );
    assert!(myapp.is_ok(), "{myapp:?}");
    let (error, took) = bomb.join().unwrap();
    assert!(
        matches!(error, LoadError::CompileTimeout { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("compile quota of 1s"), "{error}");
    // The bomb takes Cranelift ~10 s: it was stopped, not waited for.
    assert!(took < Duration::from_secs(8), "{took:?}");
}

#[test]
fn a_compile_bomb_is_stopped_at_its_compile_memory_quota() {
    let error = load_bomb(
        &bounded_runtime(),
        kubeplug_runtime::CompileLimits {
            timeout: Duration::from_secs(120),
            memory_bytes: 64 << 20,
        },
    );
    assert!(
        matches!(error, LoadError::CompileMemory { .. }),
        "{error:?}"
    );
}
