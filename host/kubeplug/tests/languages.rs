//! Plugins in Python and TypeScript through the real runtime: big guests
//! load under the default limits, a default componentize-js build loads and
//! its `fetch()` fails without reaching anything, an import the host does
//! not provide is refused before any compile, and one compiled component
//! serves every load of the same bytes.
//!
//! The guests are built by `make plugins` (`polyglot-plugins`) with the
//! pinned toolchains. Their fixtures (myapp's, pod-labeler's) run in
//! `plugins.rs`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kubeplug_runtime::{CallError, GuestError, Limits, LoadError, Origin, PluginOptions, Runtime};
use serde_json::json;

fn myapp_parent() -> serde_json::Value {
    json!({
        "apiVersion": "example.com/v1alpha1",
        "kind": "MyApp",
        "metadata": {"name": "web", "namespace": "shop", "uid": PARENT_UID, "generation": 1},
        "spec": {"replicas": 2},
    })
}

#[test]
fn a_default_componentize_js_build_loads_and_its_fetch_fails_while_the_host_goes_on() {
    let bytes = test_plugin_bytes("fetch-ts");
    let fetcher = runtime()
        .load(&bytes, PluginOptions::default())
        .expect("a component importing wasi:http loads");
    for _ in 0..2 {
        match fetcher.reconcile(&request(&myapp_parent(), &[], &[])) {
            Err(CallError::Guest {
                error: GuestError::Failed(message),
                ..
            }) => assert!(message.starts_with("fetch failed: "), "{message}"),
            other => panic!("fetch must fail as the plugin's own error: {other:?}"),
        }
    }
    // The same runtime, and the same plugin, go on serving.
    let myapp = load("myapp", None);
    let desired = myapp
        .reconcile(&request(&myapp_parent(), &[], &[]))
        .expect("myapp reconciles after the refused fetch");
    assert_eq!(desired.children.len(), 1);
    assert!(
        fetcher
            .reconcile(&request(&myapp_parent(), &[], &[]))
            .is_err()
    );
}

#[test]
fn whatever_a_typescript_plugin_throws_is_its_own_error_never_a_trap() {
    let plugin = runtime()
        .load(&test_plugin_bytes("throws-ts"), PluginOptions::default())
        .expect("throws-ts loads");
    let answer = |throw: &str| {
        let mut parent = myapp_parent();
        parent["spec"]["throw"] = throw.into();
        match plugin.reconcile(&request(&parent, &[], &[])) {
            Err(CallError::Guest { error, .. }) => error,
            other => panic!("{throw}: expected the plugin's own error, got {other:?}"),
        }
    };
    // A thrown Error names where it was thrown, in the plugin's source (the
    // line table `build` embeds maps the bundle's lines), on one line.
    assert_eq!(
        answer("error"),
        GuestError::Failed("boom in web (at src/plugin.ts:23 in reconcile)".into())
    );
    match answer("type") {
        GuestError::Failed(message) => {
            assert!(message.starts_with("TypeError: "), "{message}");
            assert!(message.contains("undefined"), "{message}");
            assert!(
                message.ends_with(" (at src/plugin.ts:26 in reconcile)"),
                "{message}"
            );
        }
        other => panic!("a TypeError is failed(..): {other:?}"),
    }
    assert_eq!(
        answer("string"),
        GuestError::Failed("a plain string".into())
    );
    assert_eq!(
        answer("input"),
        GuestError::InvalidInput("spec.throw asked for it".into())
    );
    plugin
        .reconcile(&request(&myapp_parent(), &[], &[]))
        .expect("and it goes on answering");
}

#[test]
fn a_component_importing_what_the_host_does_not_provide_is_refused_before_compiling() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(Some(dir.path().to_path_buf())).unwrap();
    let bytes = test_plugin_bytes("unprovided-py");
    assert!(bytes.len() > 10 << 20, "a full-size Python component");
    let started = Instant::now();
    let error = runtime
        .load(&bytes, PluginOptions::default())
        .expect_err("refused");
    let took = started.elapsed();
    match &error {
        LoadError::Unprovided(imports) => {
            assert_eq!(imports, &["wasi:keyvalue/store@0.2.0-draft".to_string()])
        }
        other => panic!("expected the import check to refuse it: {other:?}"),
    }
    assert!(
        error
            .to_string()
            .contains("wasi:keyvalue/store@0.2.0-draft"),
        "{error}"
    );
    // Refused from its import list: nothing was compiled (no artefact), so
    // the refusal costs what reading the file costs.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    eprintln!("refused in {took:?}");
}

/// The default limits but the deadline: what is checked is that the big
/// guests fit the default memory, instances and tables. How long their calls
/// take is a figure (`make bench`, languages), and the calls here share two
/// cores with the other tests (pod-labeler's 18 MB compile among them), which
/// a production default of 2 s does not allow for.
fn default_limits_but_the_deadline() -> PluginOptions {
    PluginOptions {
        limits: Limits {
            timeout: Duration::from_secs(60),
            ..Limits::default()
        },
        ..Default::default()
    }
}

#[test]
fn python_and_typescript_plugins_run_under_the_default_limits() {
    for name in ["myapp-py", "myapp-ts"] {
        let plugin = runtime()
            .load(&test_plugin_bytes(name), default_limits_but_the_deadline())
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(plugin.name(), "myapp", "{name}");
        for _ in 0..3 {
            let desired = plugin
                .reconcile(&request(&myapp_parent(), &[], &[]))
                .unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!(desired.children.len(), 1, "{name}");
        }
    }
    let labeler = runtime()
        .load(
            &plugin_bytes("pod-labeler"),
            default_limits_but_the_deadline(),
        )
        .expect("pod-labeler loads");
    assert_eq!(labeler.name(), "pod-labeler");
}

#[test]
fn one_compiled_component_serves_every_load_of_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(Some(dir.path().to_path_buf())).unwrap();
    let bytes = plugin_bytes("pod-annotator");
    let options = |ns: &str| PluginOptions {
        config: Some(json!({"namespaces": [ns]})),
        ..Default::default()
    };
    let first = runtime.load(&bytes, options("team-a")).unwrap();
    assert_eq!(first.origin(), Origin::Compiled);
    // Other settings, same bytes (a settings change, a shadow candidate).
    let second = runtime.load(&bytes, options("team-b")).unwrap();
    assert_eq!(second.origin(), Origin::Shared);
    assert_eq!(second.manifest().namespaces, vec!["team-b".to_string()]);
    drop((first, second));
    let third = runtime.load(&bytes, options("team-a")).unwrap();
    assert_eq!(
        third.origin(),
        Origin::Cached,
        "once nobody holds it, the artefact on disk is loaded again"
    );
}

#[test]
fn a_long_compile_holds_no_other_load_up() {
    // No cache: pod-labeler (18 MB of CPython) compiles for 10-20 s.
    let runtime = std::sync::Arc::new(Runtime::new(None).unwrap());
    let big = {
        let runtime = runtime.clone();
        std::thread::spawn(move || {
            let plugin = runtime.load(&plugin_bytes("pod-labeler"), PluginOptions::default());
            // The plugin is handed back, so it is alive when the second load
            // of the same bytes looks for it.
            (plugin, Instant::now())
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    // A small plugin compiled meanwhile, in the second compile slot...
    let small = runtime
        .load(&plugin_bytes("myapp"), PluginOptions::default())
        .expect("myapp loads");
    let small_done = Instant::now();
    // ...and a second load of the big one waits for its one compile.
    let again = runtime
        .load(&plugin_bytes("pod-labeler"), PluginOptions::default())
        .expect("pod-labeler loads");
    let (first, big_done) = big.join().unwrap();
    assert_eq!(first.expect("pod-labeler loads").origin(), Origin::Compiled);
    assert_eq!(small.origin(), Origin::Compiled);
    assert!(
        small_done < big_done,
        "the small plugin must not wait for the big compile"
    );
    assert_eq!(again.origin(), Origin::Shared);
}
