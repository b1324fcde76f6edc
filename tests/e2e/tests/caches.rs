//! Acceptance tests of the host's caches on the local control plane: each
//! plugin's kinds are watched and cached in its own namespaces only, related
//! kinds only with their selector's fixed labels, and a host started with
//! `--namespaces` watches, caches and writes nothing outside them.

use std::time::Duration;

use kubeplug_e2e::{Host, Namespace, PluginDir, apply, eventually, get_json, install_crds};

const CONVERGE: Duration = Duration::from_secs(90);

fn pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n    - name: app\n      image: nginx:1.27\n"
    )
}

fn database(name: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: {name}\nspec:\n  engine: postgresql\n  version: \"16.4.0\"\n  replicas: 1\n"
    )
}

/// `kubeplug_cached_objects` series: (resource label, objects).
fn caches(host: &Host) -> Vec<(String, f64)> {
    host.series("kubeplug_cached_objects")
        .into_iter()
        .map(|(labels, n)| {
            let resource = labels
                .split_once("resource=\"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .map_or(labels.clone(), |(r, _)| r.to_string());
            (resource, n)
        })
        .collect()
}

#[test]
fn a_plugin_bound_to_one_namespace_watches_and_caches_only_its_pods() {
    install_crds();
    let ns = Namespace::new("scoped");
    let other = Namespace::new("unscoped");
    let dir = PluginDir::with(&["pod-annotator"]);
    dir.settings(
        "pod-annotator",
        &format!("config:\n  namespaces: [{}]\n", ns.name),
    );
    let host = Host::start(&dir);
    for name in ["a", "b"] {
        apply(&other.name, &pod(name));
    }
    apply(&ns.name, &pod("web"));
    eventually("the pod to be stamped", CONVERGE, || {
        let pod = get_json(&ns.name, "pod/web")?;
        (pod["metadata"]["annotations"]["example.com/injected"] == "true").then_some(())
    });

    let pods: Vec<(String, f64)> = caches(&host)
        .into_iter()
        .filter(|(r, _)| r.starts_with("Pod.v1"))
        .collect();
    assert_eq!(
        pods,
        vec![(format!("Pod.v1 in {} (metadata)", ns.name), 1.0)],
        "one Pod watch, of the plugin's namespace, metadata-only (pod-annotator reads no more), holding its one pod"
    );
    let bytes = host.metric("kubeplug_cached_bytes", "Pod.v1");
    let whole = serde_json::to_string(&get_json(&ns.name, "pod/web").expect("exists"))
        .unwrap()
        .len() as f64;
    assert!(
        bytes > 0.0 && bytes < whole,
        "the cached pod ({bytes} bytes) is smaller than the whole pod ({whole})"
    );
}

#[test]
fn a_host_bound_to_namespaces_serves_them_and_watches_nothing_else() {
    install_crds();
    let served = Namespace::new("served");
    let outside = Namespace::new("outside");
    let dir = PluginDir::with(&["database", "pod-annotator"]);
    // pod-annotator asks for a namespace the host does not serve: refused.
    dir.settings(
        "pod-annotator",
        &format!("config:\n  namespaces: [{}]\n", outside.name),
    );
    let host = Host::start_with(&dir, &["--namespaces", &served.name]);
    apply(&served.name, &database("inside"));
    apply(&outside.name, &database("beyond"));
    eventually("the served database to run", CONVERGE, || {
        let db = get_json(&served.name, "database/inside")?;
        (db["status"]["phase"] == "Running").then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        get_json(&outside.name, "statefulset/beyond").is_none(),
        "nothing is written outside --namespaces"
    );
    assert!(get_json(&outside.name, "database/beyond").expect("exists")["status"].is_null());

    let caches = caches(&host);
    assert!(!caches.is_empty());
    for (resource, _) in &caches {
        assert!(
            resource.ends_with(&format!(" in {}", served.name))
                || resource.contains(&format!(" in {} with ", served.name)),
            "every watch is of the served namespace: {caches:?}"
        );
    }
    assert!(
        caches
            .iter()
            .any(|(r, _)| r.starts_with("Pod.v1 in ")
                && r.contains("app.kubernetes.io/name=database")),
        "related Pods are watched with the selector's fixed label: {caches:?}"
    );
    let annotator = host.plugin_file("pod-annotator.wasm").expect("listed");
    assert_eq!(annotator["state"], "failed", "{annotator}");
    let reason = annotator["lastError"].as_str().unwrap_or_default();
    assert!(
        reason.contains("--namespaces") && reason.contains(&outside.name),
        "the refusal names the flag and the namespace: {reason}"
    );
}
