//! Plugins in other languages on the control plane: `pod-labeler`, written
//! in Python (plugins/pod-labeler), labels Pods beside the three Rust seed
//! plugins, in the same host, and is upgraded live like any other plugin
//! (`pod-labeler-v2` is the same source at version 0.2.0, `make plugins`);
//! a default componentize-js build loads, and its `fetch()` fails while the
//! host and the other plugins go on.

use std::time::Duration;

use kubeplug_e2e::{
    Host, Namespace, PluginDir, apply, built, events_for, eventually, get_json, install_crds,
    sha256_of,
};
use serde_json::Value;

/// Reconciles of `plugin` that did not end `ok`.
fn failed_reconciles(host: &Host, plugin: &str) -> f64 {
    let of_plugin = format!("plugin=\"{plugin}\"");
    host.series("kubeplug_reconciles_total")
        .into_iter()
        .filter(|(l, _)| l.contains(&of_plugin) && !l.contains("result=\"ok\""))
        .map(|(_, v)| v)
        .sum()
}

/// A Python plugin's first load compiles ~18 MB (10-20 s on two busy cores).
const TIMEOUT: Duration = Duration::from_secs(120);

fn pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n\
         spec:\n  containers:\n    - name: main\n      image: busybox:1.36\n"
    )
}

fn serving(host: &Host, name: &str, version: &str) -> Value {
    eventually(&format!("plugin {name} {version} running"), TIMEOUT, || {
        host.plugin(name)
            .filter(|p| p["state"] == "running" && p["version"] == version)
    })
}

/// The pod's labels once pod-labeler stamped it.
fn labelled(ns: &str, name: &str) -> serde_json::Map<String, Value> {
    eventually(&format!("pod {name} labelled"), TIMEOUT, || {
        let pod = get_json(ns, &format!("pod/{name}"))?;
        let labels = pod["metadata"]["labels"].as_object()?.clone();
        (labels.get("managed-by")? == "pod-label-controller").then_some(labels)
    })
}

/// `20261129T180000Z`: the label-safe time the port writes (the seed's
/// `2026-11-29T18:00:00Z` is not a valid label value).
fn is_label_safe_time(value: &str) -> bool {
    let b = value.as_bytes();
    b.len() == 16
        && b[8] == b'T'
        && b[15] == b'Z'
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 8 | 15) || c.is_ascii_digit())
}

#[test]
fn pod_labeler_in_python_labels_pods_beside_the_seed_plugins_and_is_upgraded_live() {
    install_crds();
    let ns = Namespace::new("polyglot");
    let n = &ns.name;
    let dir = PluginDir::with(&["database", "myapp", "pod-annotator", "pod-labeler"]);
    dir.settings("pod-annotator", &format!("config:\n  namespaces: [{n}]\n"));
    dir.settings("pod-labeler", &format!("config:\n  namespaces: [{n}]\n"));
    let host = Host::start(&dir);
    for name in ["database", "myapp", "pod-annotator"] {
        serving(&host, name, "0.1.0");
    }
    let v1 = serving(&host, "pod-labeler", "0.1.0");

    apply(n, &pod("first"));
    apply(
        n,
        "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: db\n\
         spec:\n  engine: postgresql\n  version: 16.4.0\n  replicas: 1\n",
    );
    apply(
        n,
        "apiVersion: example.com/v1alpha1\nkind: MyApp\nmetadata:\n  name: web\n\
         spec:\n  replicas: 1\n",
    );

    // Both decorators stamp the same Pod, each with its own keys.
    let labels = labelled(n, "first");
    let at = labels["injected-at"].as_str().expect("injected-at");
    assert!(is_label_safe_time(at), "injected-at={at}");
    eventually("pod-annotator's annotation too", TIMEOUT, || {
        let pod = get_json(n, "pod/first")?;
        (pod["metadata"]["annotations"]["example.com/injected"] == "true").then_some(())
    });
    assert!(
        events_for(n, "Pod", "first")
            .iter()
            .any(|(_, reason, note)| reason == "Labeled" && note.contains("managed-by")),
        "a Labeled event on the pod"
    );
    // The Rust seeds serve beside it.
    eventually("the Database's StatefulSet", TIMEOUT, || {
        get_json(n, "statefulset/db")
    });
    eventually("the MyApp's Deployment", TIMEOUT, || {
        get_json(n, "deployment/web-deploy")
    });

    // Live upgrade: the new file replaces the old one in the same process.
    let pid = host.pid();
    // (`put`, not `install`: the test's settings stay.)
    dir.put(
        "pod-labeler",
        &std::fs::read(built("pod-labeler-v2")).expect("read v2"),
    );
    let v2 = serving(&host, "pod-labeler", "0.2.0");
    assert_eq!(
        v2["digest"],
        sha256_of(&built("pod-labeler-v2")),
        "{v2} (was {v1})"
    );
    assert!(v2["lastError"].is_null(), "{v2}");
    assert_eq!(host.pid(), pid, "the host was not restarted");
    apply(n, &pod("second"));
    let labels = labelled(n, "second");
    assert!(is_label_safe_time(labels["injected-at"].as_str().unwrap()));
    assert_eq!(
        failed_reconciles(&host, "pod-labeler"),
        0.0,
        "no failed pod-labeler reconcile"
    );
    host.stop();
}

#[test]
fn a_default_componentize_js_build_loads_and_its_fetch_fails_while_the_host_goes_on() {
    install_crds();
    let ns = Namespace::new("fetch");
    let n = &ns.name;
    // fetch-ts reconciles MyApps (in place of myapp) and imports wasi:http.
    let dir = PluginDir::with(&["database", "fetch-ts"]);
    let host = Host::start(&dir);
    serving(&host, "fetch-ts", "0.1.0");
    serving(&host, "database", "0.1.0");

    apply(
        n,
        "apiVersion: example.com/v1alpha1\nkind: MyApp\nmetadata:\n  name: web\n\
         spec:\n  replicas: 1\n",
    );
    let note = eventually("the fetch to fail as the plugin's error", TIMEOUT, || {
        events_for(n, "MyApp", "web")
            .into_iter()
            .find(|(kind, reason, _)| kind == "Warning" && reason == "PluginFailed")
            .map(|(_, _, note)| note)
    });
    assert!(note.contains("fetch failed: "), "{note}");
    assert!(
        std::fs::read_to_string(&host.log)
            .expect("host log")
            .contains("plugins have no network"),
        "the host logs the refused request"
    );
    // The host and the other plugin go on.
    apply(
        n,
        "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: db\n\
         spec:\n  engine: postgresql\n  version: 16.4.0\n  replicas: 1\n",
    );
    eventually("the Database's StatefulSet", TIMEOUT, || {
        get_json(n, "statefulset/db")
    });
    assert!(failed_reconciles(&host, "fetch-ts") > 0.0);
    // Its only parent keeps failing: the plugin says so, and why; the
    // other plugin is untouched.
    let row = eventually("fetch-ts to be degraded", TIMEOUT, || {
        host.plugin("fetch-ts").filter(|p| p["state"] == "degraded")
    });
    let reason = row["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("reconciles keep failing") && reason.contains("fetch failed: "),
        "{row}"
    );
    assert_eq!(host.plugin("database").expect("listed")["state"], "running");
    host.stop();
}
