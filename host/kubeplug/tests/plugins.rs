//! The shipped plugins through the real runtime, with the `.wasm` files
//! `make plugins` builds: each plugin's fixtures (`plugins/<name>/fixtures/`,
//! the format of docs/fixtures.md) run through the same library function as
//! `kubeplug test`, and what fixtures cannot express: the host's plan over
//! two calls, error chains, the compile cache and concurrency.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use common::*;
use kubeplug_core::plan;
use kubeplug_kit::kit;
use kubeplug_runtime::{Desired, Origin, Plugin, PluginOptions, Request, Runtime};
use serde_json::{Value, json};

/// Run `plugins/<name>/fixtures/` against the built plugin; fail with the
/// report `kubeplug test` would print.
fn fixtures(name: &str) {
    fixtures_with(name, plugin_path(name));
}

/// The default grant for every plugin but database and myapp, whose
/// Secrets and webhooks no default grant covers: granted what the shipped
/// policy (deploy/base/policy.yaml) grants them.
const FIXTURE_POLICY: &str = "\
plugins:
  database:
    parent: [Database.example.com]
    children: [StatefulSet.apps, Service, Secret]
    related: [Pod]
    admission: [validate]
    conversion: true
  myapp:
    parent: [MyApp.example.com]
    children: [Deployment.apps]
    references: [ConfigMap]
    admission: [mutate]
  disruption-budget:
    parent: [Deployment.apps]
    children: [PodDisruptionBudget.policy]
";

/// Run `plugins/<name>/fixtures/` against the component at `wasm` (a port
/// of the plugin to another language), admitted with the shipped CRDs as
/// the live host would admit it under [`FIXTURE_POLICY`]: how many cases
/// passed.
fn fixtures_with(name: &str, wasm: PathBuf) -> usize {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = repo.join("plugins").join(name);
    let tmp = tempfile::tempdir().unwrap();
    let policy_file = tmp.path().join("policy.yaml");
    std::fs::write(&policy_file, FIXTURE_POLICY).unwrap();
    let policy = kubeplug_core::policy::Policy::load(&[policy_file]).expect("the fixture policy");
    let mut crds = Vec::new();
    for crd in ["databases.example.com.yaml", "myapps.example.com.yaml"] {
        crds.extend(
            kubeplug_kit::render::read_objects(&repo.join("crds").join(crd)).expect("a CRD"),
        );
    }
    let options = kit::Options {
        plugin: Some(wasm),
        policy,
        crds,
        ..Default::default()
    };
    let report = kit::run(runtime(), &dir, &options)
        .unwrap_or_else(|e| panic!("{name}: {:#}", anyhow::Error::from(e)));
    assert!(report.passed(), "{}", report.render());
    assert!(report.results.len() > 1, "{name} has fixtures");
    report.results.len()
}

#[test]
fn database_fixtures() {
    fixtures("database");
}

/// database's port to Go (plugins/database-go, whose `fixtures` is a link
/// to database's) passes database's own fixtures, unchanged.
#[test]
fn database_fixtures_through_its_go_port() {
    let cases = fixtures_with("database", test_plugin_path("database-go"));
    assert!(cases > 30, "database has its fixtures");
}

#[test]
fn myapp_fixtures() {
    fixtures("myapp");
}

#[test]
fn pod_annotator_fixtures() {
    fixtures("pod-annotator");
}

/// A decorator with attachments (plugins/disruption-budget), built as a
/// test plugin.
#[test]
fn disruption_budget_fixtures() {
    fixtures_with("disruption-budget", test_plugin_path("disruption-budget"));
}

/// pod-labeler is written in Python (plugins/pod-labeler).
#[test]
fn pod_labeler_fixtures() {
    fixtures("pod-labeler");
}

/// The Python and TypeScript ports of myapp give the Rust plugin's answer
/// to every one of its fixtures.
#[test]
fn myapp_fixtures_through_its_python_port() {
    fixtures_with("myapp", test_plugin_path("myapp-py"));
}

#[test]
fn myapp_fixtures_through_its_typescript_port() {
    fixtures_with("myapp", test_plugin_path("myapp-ts"));
}

fn database_plugin() -> Plugin {
    static PLUGIN: OnceLock<Plugin> = OnceLock::new();
    PLUGIN.get_or_init(|| load("database", None)).clone()
}

fn reconcile(plugin: &Plugin, request: &Request) -> Desired {
    plugin
        .reconcile(request)
        .unwrap_or_else(|e| panic!("reconcile failed: {e}"))
}

/// The children exactly as the operator would apply them.
fn prepared(plugin: &Plugin, parent: &Value, desired: &Desired) -> Vec<Value> {
    plan::children(plugin.manifest(), parent, &desired.children)
        .unwrap_or_else(|e| panic!("the plugin crossed its fence: {e}"))
}

fn myapp(spec: Value) -> Value {
    json!({
        "apiVersion": "example.com/v1alpha1",
        "kind": "MyApp",
        "metadata": {"name": "web", "namespace": "shop", "uid": PARENT_UID, "generation": 2},
        "spec": spec,
    })
}

// database: what the host's plan makes of two calls.

/// Reconcile `parent`, store what was applied, and reconcile again later
/// with other entropy, as the operator would after the watch caught up.
/// Returns both answers and the stored children in between.
fn reconcile_twice(plugin: &Plugin, parent: &Value) -> (Desired, Vec<Value>, Desired) {
    let first = reconcile(plugin, &request(parent, &[], &[]));
    let stored: Vec<Value> = prepared(plugin, parent, &first)
        .iter()
        .map(|c| as_stored(c, "child-uid"))
        .collect();
    let second = Request {
        now: LATER.into(),
        entropy: other_entropy(),
        ..request(parent, &stored, &[])
    };
    let second = reconcile(plugin, &second);
    (first, stored, second)
}

#[test]
fn database_writes_no_child_again_once_they_are_observed_unchanged() {
    let plugin = database_plugin();
    let parent = database("orders", "mysql", "8.4.3", 1);
    let (_, stored, second) = reconcile_twice(&plugin, &parent);
    let again = prepared(&plugin, &parent, &second);
    assert_eq!(again.len(), 3);
    for want in &again {
        let key = plan::TypedKey::of(want);
        let observed = stored.iter().find(|o| plan::TypedKey::of(o) == key);
        assert!(observed.is_some(), "{key} was observed");
        assert!(
            !plan::needs_apply(want, observed),
            "{key} would be re-applied"
        );
    }
    assert!(plan::prune(plugin.manifest(), &stored, &again).is_empty());
}

// Error chains.

#[test]
fn a_refused_config_reads_as_the_plugins_message_in_the_error_chain() {
    let error = runtime()
        .load(
            &plugin_bytes("pod-annotator"),
            PluginOptions {
                label: Some("pod-annotator.wasm".into()),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert_eq!(
        format!("{:#}", anyhow::Error::from(error)),
        "manifest refused: plugin pod-annotator.wasm returned an error: \
         invalid config: `namespaces` must name at least one namespace"
    );
}

// The compile cache.

#[test]
fn a_component_is_compiled_once_then_loaded_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = plugin_bytes("myapp");
    let runtime = Runtime::new(Some(dir.path().to_path_buf())).unwrap();
    let first = runtime.load(&bytes, PluginOptions::default()).unwrap();
    assert_eq!(first.origin(), Origin::Compiled);
    let second = runtime.load(&bytes, PluginOptions::default()).unwrap();
    assert_eq!(
        second.origin(),
        Origin::Shared,
        "the first is loaded: its compiled code is shared"
    );
    let parent = myapp(json!({"replicas": 2}));
    let answer = reconcile(&first, &request(&parent, &[], &[]));
    drop((first, second));
    let unloaded = runtime.load(&bytes, PluginOptions::default()).unwrap();
    assert_eq!(
        unloaded.origin(),
        Origin::Cached,
        "once unloaded: the artefact"
    );

    let restarted = Runtime::new(Some(dir.path().to_path_buf())).unwrap();
    let third = restarted.load(&bytes, PluginOptions::default()).unwrap();
    assert_eq!(third.origin(), Origin::Cached, "a restart reuses the cache");
    assert_eq!(reconcile(&third, &request(&parent, &[], &[])), answer);
}

fn artefacts(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect()
}

#[test]
fn a_corrupted_artefact_is_discarded_and_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = plugin_bytes("myapp");
    let runtime = Runtime::new(Some(dir.path().to_path_buf())).unwrap();
    runtime.load(&bytes, PluginOptions::default()).unwrap();
    let [artefact] = artefacts(dir.path()).try_into().expect("one artefact");
    let good = std::fs::read(&artefact).unwrap();

    let corruptions: [(&str, Vec<u8>); 3] = [
        ("garbage", b"definitely not an ELF file".to_vec()),
        ("truncated", good[..good.len() / 2].to_vec()),
        ("empty", Vec::new()),
    ];
    for (what, corrupted) in corruptions {
        std::fs::write(&artefact, corrupted).unwrap();
        let plugin = runtime
            .load(&bytes, PluginOptions::default())
            .unwrap_or_else(|e| panic!("{what} artefact: {e:?}"));
        assert_eq!(plugin.origin(), Origin::Compiled, "{what} artefact");
        let parent = myapp(json!({}));
        reconcile(&plugin, &request(&parent, &[], &[]));
        // Unloaded, so the next load reads the artefact rather than sharing.
        drop(plugin);
        let again = runtime.load(&bytes, PluginOptions::default()).unwrap();
        assert_eq!(again.origin(), Origin::Cached, "rewritten after {what}");
    }
}

#[test]
fn a_missing_cache_dir_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("a/b/compiled");
    let runtime = Runtime::new(Some(nested.clone())).unwrap();
    let plugin = runtime
        .load(&plugin_bytes("myapp"), PluginOptions::default())
        .unwrap();
    assert_eq!(plugin.origin(), Origin::Compiled);
    assert_eq!(artefacts(&nested).len(), 1);
}

#[test]
fn a_cache_dir_that_cannot_be_written_costs_only_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, "").unwrap();
    let runtime = Runtime::new(Some(not_a_dir)).unwrap();
    for _ in 0..2 {
        let plugin = runtime
            .load(&plugin_bytes("myapp"), PluginOptions::default())
            .unwrap();
        assert_eq!(plugin.origin(), Origin::Compiled);
    }
}

#[test]
fn without_a_cache_dir_every_load_compiles() {
    let runtime = Runtime::new(None).unwrap();
    let plugin = runtime
        .load(&plugin_bytes("myapp"), PluginOptions::default())
        .unwrap();
    assert_eq!(plugin.origin(), Origin::Compiled);
    assert_eq!(plugin.size(), plugin_bytes("myapp").len());
    assert_eq!(plugin.digest().len(), 64);
}

// Concurrency.

#[test]
fn one_plugin_serves_many_threads_at_once() {
    const THREADS: usize = 8;
    const CALLS: usize = 10;
    let plugin = database_plugin();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let plugin = &plugin;
            s.spawn(move || {
                let name = format!("db-{t}");
                let parent = database(&name, "mysql", "8.4.3", (t % 10 + 1) as i64);
                for _ in 0..CALLS {
                    let desired = reconcile(plugin, &request(&parent, &[], &[]));
                    let sts = child(&desired.children, "StatefulSet");
                    assert_eq!(sts["metadata"]["name"], name.as_str());
                    assert_eq!(sts["spec"]["replicas"], t % 10 + 1);
                }
            });
        }
    });
}

/// The SDK's plugins are built without WASI (`make plugins`: an instance
/// with no WASI imports starts faster): a build that links it again, say
/// through a target or a dependency that reaches for the OS, fails here.
/// `hostile.wasm` (built with WASI) shows the check sees WASI imports.
#[test]
fn the_shipped_plugins_import_no_wasi() {
    let imports_wasi = |bytes: &[u8]| bytes.windows(5).any(|w| w == b"wasi:");
    for name in ["database", "myapp", "pod-annotator"] {
        assert!(
            !imports_wasi(&plugin_bytes(name)),
            "{name}.wasm imports WASI"
        );
    }
    assert!(!imports_wasi(&test_plugin_bytes("hostile-pure")));
    assert!(imports_wasi(&test_plugin_bytes("hostile")));
}
