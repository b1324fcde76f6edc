//! Drop-in plugins and live upgrade: the host picks up new, changed and
//! removed `.wasm` files while it runs, in the same process, without a failed
//! reconcile, and a file that cannot be loaded never replaces one that works.
//!
//! `database` v1 is the plugin as built; `database-v2` (built with
//! `--features v2`) reports version 0.2.0 and adds the label
//! `example.com/plugin-revision: v2` to every child, which is how these tests
//! tell which version wrote an object.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kubeplug_e2e::{
    Host, Namespace, PluginDir, apply, built, eventually, get_json, install_crds, items,
    resource_versions, sha256_of, with_policy,
};
use serde_json::Value;

/// Long enough for a compile on a busy two-core machine.
const TIMEOUT: Duration = Duration::from_secs(90);
/// The label database v2 adds to every child.
const REVISION: &str = "example.com/plugin-revision";

fn database(name: &str, replicas: u32) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: {name}\n\
         spec:\n  engine: postgresql\n  version: 16.4.0\n  replicas: {replicas}\n"
    )
}

fn myapp(name: &str) -> String {
    format!(
        "apiVersion: example.com/v1alpha1\nkind: MyApp\nmetadata:\n  name: {name}\n\
         spec:\n  replicas: 1\n  image: nginx:1.27\n"
    )
}

fn pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n\
         spec:\n  containers:\n    - name: main\n      image: busybox:1.36\n"
    )
}

fn hostile(name: &str) -> String {
    format!(
        "apiVersion: test.kubeplug.io/v1\nkind: Hostile\nmetadata:\n  name: {name}\n\
         spec:\n  behave: ok\n"
    )
}

/// Settings that point pod-annotator at the test's namespace.
fn annotate(namespace: &str) -> String {
    format!("config:\n  namespaces: [{namespace}]\nlimits:\n  timeoutMs: 1000\n")
}

/// Wait until `/plugins` shows `name` running (at `version`, if given);
/// returns its row.
fn serving(host: &Host, name: &str, version: Option<&str>) -> Value {
    eventually(
        &format!(
            "plugin {name} {} running",
            version.unwrap_or("(any version)")
        ),
        TIMEOUT,
        || {
            host.plugin(name)
                .filter(|p| p["state"] == "running" && version.is_none_or(|v| p["version"] == v))
        },
    )
}

/// The SHA-256 of a built plugin, as `/plugins` reports digests.
fn digest_of(built_name: &str) -> String {
    sha256_of(&built(built_name))
}

/// Reconciles of `plugin` that did not end `ok`, summed over results.
fn failed_reconciles(host: &Host, plugin: &str) -> f64 {
    let of_plugin = format!("plugin=\"{plugin}\"");
    host.series("kubeplug_reconciles_total")
        .into_iter()
        .filter(|(labels, _)| labels.contains(&of_plugin) && !labels.contains("result=\"ok\""))
        .map(|(_, v)| v)
        .sum()
}

fn ok_reconciles(host: &Host, plugin: &str) -> f64 {
    host.metric(
        "kubeplug_reconciles_total",
        &format!("plugin=\"{plugin}\",result=\"ok\""),
    )
}

fn load_failures(host: &Host, plugin: &str) -> f64 {
    host.metric(
        "kubeplug_plugin_load_failures_total",
        &format!("plugin=\"{plugin}\""),
    )
}

/// Wait until the writes of `plugin` stay unchanged for three seconds;
/// returns the count.
fn quiet_writes(host: &Host, plugin: &str) -> u64 {
    eventually(&format!("{plugin} to stop writing"), TIMEOUT, || {
        let before = host.writes(plugin);
        std::thread::sleep(Duration::from_secs(3));
        (host.writes(plugin) == before).then_some(before)
    })
}

fn names(namespace: &str, what: &str) -> Vec<String> {
    get_json(namespace, what)
        .and_then(|list| {
            list["items"].as_array().map(|items| {
                items
                    .iter()
                    .filter_map(|o| o["metadata"]["name"].as_str().map(String::from))
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// Children of Databases in `namespace`: (kind, name) → revision label.
fn database_children(namespace: &str) -> HashMap<(String, String), Option<String>> {
    items(&[
        "-n",
        namespace,
        "statefulsets,services,secrets",
        "-l",
        "app.kubernetes.io/name=database",
    ])
    .iter()
    .map(|o| {
        let key = (
            o["kind"].as_str().unwrap_or_default().to_string(),
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        let revision = o["metadata"]["labels"][REVISION].as_str().map(String::from);
        (key, revision)
    })
    .collect()
}

/// The children of `databases` that are missing or not labelled `revision`
/// (`None`: not labelled at all, as v1 writes them). The credentials Secret
/// is create-only: it keeps the labels of the version that created it, so
/// it only has to exist.
fn laggards(namespace: &str, databases: &[String], revision: Option<&str>) -> Vec<String> {
    let children = database_children(namespace);
    databases
        .iter()
        .flat_map(|db| {
            [
                ("StatefulSet", db.clone(), true),
                ("Service", db.clone(), true),
                ("Secret", format!("{db}-credentials"), false),
            ]
        })
        .filter_map(
            |(kind, name, updated)| match children.get(&(kind.to_string(), name.clone())) {
                None => Some(format!("{kind} {name} missing")),
                Some(found) if updated && found.as_deref() != revision => {
                    Some(format!("{kind} {name} labelled {found:?}"))
                }
                Some(_) => None,
            },
        )
        .collect()
}

/// Wait until every child of `databases` exists with label `revision`.
fn converged(namespace: &str, databases: &[String], revision: Option<&str>) {
    let started = Instant::now();
    loop {
        let behind = laggards(namespace, databases, revision);
        if behind.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < TIMEOUT,
            "after {TIMEOUT:?}, {} of the children of {} Databases are not at revision \
             {revision:?}: {behind:?}",
            behind.len(),
            databases.len()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn exists(namespace: &str, what: &str) -> bool {
    get_json(namespace, what).is_some()
}

/// Assert `what` does not appear in `namespace` for `window`.
fn stays_absent(namespace: &str, what: &str, window: Duration) {
    let started = Instant::now();
    while started.elapsed() < window {
        assert!(!exists(namespace, what), "{what} appeared");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Background load: every ~300 ms a new Database, MyApp and Pod, and a
/// replicas change to an existing Database, in one `kubectl apply`.
struct Churn {
    stop: Arc<AtomicBool>,
    ticks: Arc<AtomicUsize>,
    thread: Option<JoinHandle<Vec<(String, Instant)>>>,
}

impl Churn {
    fn start(namespace: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let ticks = Arc::new(AtomicUsize::new(0));
        let namespace = namespace.to_string();
        let thread = {
            let (stop, ticks) = (stop.clone(), ticks.clone());
            std::thread::spawn(move || {
                let mut myapps = Vec::new();
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let mut docs = vec![
                        database(&format!("churn-db-{i}"), 1),
                        myapp(&format!("churn-app-{i}")),
                        pod(&format!("churn-pod-{i}")),
                    ];
                    if i > 0 {
                        let existing = rand::random_range(0..i);
                        docs.push(database(&format!("churn-db-{existing}"), 1 + i % 2));
                    }
                    apply(&namespace, &docs.join("---\n"));
                    myapps.push((format!("churn-app-{i}"), Instant::now()));
                    ticks.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                    std::thread::sleep(
                        Duration::from_millis(300).saturating_sub(started.elapsed()),
                    );
                }
                myapps
            })
        };
        Churn {
            stop,
            ticks,
            thread: Some(thread),
        }
    }

    fn ticks(&self) -> usize {
        self.ticks.load(Ordering::Relaxed)
    }

    /// Stop and return the MyApps created, with when.
    fn stop(mut self) -> Vec<(String, Instant)> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.take().expect("churn thread");
        thread.join().expect("churn thread panicked")
    }
}

impl Drop for Churn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[test]
fn upgrading_a_plugin_under_load_converges_every_child_without_a_failed_reconcile_or_restart() {
    install_crds();
    let ns = Namespace::new("upgrade-load");
    let dir = PluginDir::with(&["database", "myapp", "pod-annotator"]);
    dir.settings("pod-annotator", &annotate(&ns.name));
    // Not one failed reconcile of database is allowed below: its calls'
    // deadline is the test's own, roomy (the policy's quota; a settings file
    // may only lower it), not the 2 s default, which a call starved by the
    // churn and v2's compile on a busy machine could run past.
    let policy = with_policy(&dir, "quotas: {callTimeoutMs: 30000}\n");
    let mut host = Host::start_with(&dir, &["--policy", &policy]);
    let pid = host.pid();
    let v1 = serving(&host, "database", Some("0.1.0"));
    serving(&host, "myapp", None);
    serving(&host, "pod-annotator", None);

    let churn = Churn::start(&ns.name);
    eventually("some load on v1", TIMEOUT, || {
        (churn.ticks() >= 8).then_some(())
    });
    let (myapp_before, pods_before) = (
        ok_reconciles(&host, "myapp"),
        ok_reconciles(&host, "pod-annotator"),
    );
    let swapped_at = Instant::now();
    dir.install("database-v2", "database");

    let v2 = serving(&host, "database", Some("0.2.0"));
    assert_eq!(v2["digest"], digest_of("database-v2"), "{v2}");
    assert_ne!(v2["digest"], v1["digest"]);
    assert!(v2["lastError"].is_null(), "{v2}");
    eprintln!(
        "v2 serving {:?} after the file was swapped in",
        swapped_at.elapsed()
    );
    eventually(
        "myapp and pod-annotator to reconcile across the swap",
        TIMEOUT,
        || {
            (ok_reconciles(&host, "myapp") > myapp_before
                && ok_reconciles(&host, "pod-annotator") > pods_before)
                .then_some(())
        },
    );
    // Keep the load on for a while on v2, then let it drain.
    let ticks_at_v2 = churn.ticks();
    eventually("more load on v2", TIMEOUT, || {
        (churn.ticks() >= ticks_at_v2 + 8).then_some(())
    });
    let myapps = churn.stop();

    let databases = names(&ns.name, "databases");
    assert!(databases.len() >= 16, "only {} Databases", databases.len());
    converged(&ns.name, &databases, Some("v2"));

    let during: Vec<&String> = myapps
        .iter()
        .filter(|(_, at)| *at >= swapped_at)
        .map(|(name, _)| name)
        .collect();
    assert!(!during.is_empty(), "no MyApp was created during the swap");
    for name in during {
        eventually(&format!("Deployment of {name}"), TIMEOUT, || {
            exists(&ns.name, &format!("deployment/{name}-deploy")).then_some(())
        });
    }
    assert_eq!(
        failed_reconciles(&host, "database"),
        0.0,
        "database reconciles failed: {:?}",
        host.series("kubeplug_reconciles_total")
    );
    assert_eq!(host.pid(), pid);
    assert!(host.running(), "the host exited");
}

#[test]
fn a_broken_next_version_is_refused_and_reported_while_the_previous_one_keeps_serving() {
    install_crds();
    let ns = Namespace::new("upgrade-broken");
    let dir = PluginDir::with(&[]);
    dir.install("database-v2", "database");
    let mut host = Host::start(&dir);
    let pid = host.pid();
    let v2 = serving(&host, "database", Some("0.2.0"));
    apply(&ns.name, &database("before", 1));
    converged(&ns.name, &["before".into()], Some("v2"));
    eventually("the database to run", TIMEOUT, || {
        let db = get_json(&ns.name, "database/before")?;
        (db["status"]["phase"] == "Running").then_some(())
    });
    quiet_writes(&host, "database");
    let objects = [
        "database/before",
        "statefulset/before",
        "service/before",
        "secret/before-credentials",
    ];
    let versions = resource_versions(&ns.name, &objects);

    let failures = load_failures(&host, "database");
    let garbage: Vec<u8> = (0..64 * 1024).map(|_| rand::random::<u8>()).collect();
    dir.put("database", &garbage);
    let row = eventually("the corrupt file to be refused", TIMEOUT, || {
        host.plugin("database").filter(|p| {
            p["state"] == "degraded"
                && p["lastError"]
                    .as_str()
                    .is_some_and(|e| e.contains("not a valid WebAssembly component"))
        })
    });
    assert_eq!(row["version"], "0.2.0", "{row}");
    assert_eq!(row["digest"], v2["digest"], "{row}");
    assert!(load_failures(&host, "database") > failures);

    let failures = load_failures(&host, "database");
    dir.put(
        "database",
        &std::fs::read(built("contract-v1")).expect("read contract-v1"),
    );
    let row = eventually(
        "the wrong-contract component to be refused",
        TIMEOUT,
        || {
            host.plugin("database").filter(|p| {
                p["state"] == "degraded"
                    && p["lastError"]
                        .as_str()
                        .is_some_and(|e| e.contains("contract"))
            })
        },
    );
    assert_eq!(row["version"], "0.2.0", "{row}");
    assert_eq!(row["digest"], v2["digest"], "{row}");
    assert!(load_failures(&host, "database") > failures);

    // Refused versions write nothing: this namespace's objects are as they
    // were. (The host's write counter is not used here: it also counts
    // writes for parents of earlier tests whose namespaces are going away.)
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(resource_versions(&ns.name, &objects), versions);

    apply(&ns.name, &database("after", 1));
    converged(&ns.name, &["before".into(), "after".into()], Some("v2"));
    assert_eq!(host.pid(), pid);
    assert!(host.running(), "the host exited");
}

#[test]
fn a_plugin_for_a_new_kind_dropped_in_at_runtime_reconciles_parents_created_before_it() {
    install_crds();
    let ns = Namespace::new("upgrade-new-kind");
    let dir = PluginDir::with(&["database", "myapp", "pod-annotator"]);
    let mut host = Host::start(&dir);
    let pid = host.pid();
    for name in ["database", "myapp", "pod-annotator"] {
        serving(&host, name, None);
    }
    apply(&ns.name, &hostile("early"));
    stays_absent(&ns.name, "configmap/early-ok", Duration::from_secs(2));

    dir.install("hostile", "hostile");
    serving(&host, "hostile", None);
    eventually("ConfigMap early-ok", TIMEOUT, || {
        exists(&ns.name, "configmap/early-ok").then_some(())
    });
    assert_eq!(host.pid(), pid);
    assert!(host.running(), "the host exited");
}

#[test]
fn removing_a_plugin_stops_its_controller_and_keeps_its_children() {
    install_crds();
    let ns = Namespace::new("upgrade-remove");
    let dir = PluginDir::with(&["database", "myapp"]);
    let host = Host::start(&dir);
    serving(&host, "myapp", None);
    serving(&host, "database", None);
    apply(&ns.name, &myapp("kept"));
    eventually("Deployment kept-deploy", TIMEOUT, || {
        exists(&ns.name, "deployment/kept-deploy").then_some(())
    });

    dir.remove("myapp");
    eventually("myapp to leave /plugins", TIMEOUT, || {
        host.plugin_file("myapp.wasm").is_none().then_some(())
    });
    assert!(host.plugin("myapp").is_none());
    // Its watches stop with it: MyApps and Deployments concern no one else.
    eventually("the MyApp and Deployment watches to stop", TIMEOUT, || {
        let log = std::fs::read_to_string(&host.log).unwrap_or_default();
        let stopped = |kind: &str| {
            log.lines()
                .any(|l| l.contains("watch stopped") && l.contains(kind))
        };
        (stopped("MyApp.example.com") && stopped("Deployment.apps")).then_some(())
    });
    assert_eq!(
        host.metric("kubeplug_cached_objects", "Deployment.apps"),
        0.0,
        "a stopped informer drops its cache"
    );
    apply(&ns.name, &myapp("orphan"));
    stays_absent(&ns.name, "deployment/orphan-deploy", Duration::from_secs(5));
    assert!(exists(&ns.name, "deployment/kept-deploy"));
    assert_eq!(
        host.plugin("database").map(|p| p["state"].clone()),
        Some("running".into())
    );
}

/// Lay out `dir` as the kubelet does a ConfigMap volume: the files live in
/// `..<version>/`, `..data` links to the current version, and each file is a
/// link through `..data`.
fn configmap_version(dir: &Path, version: &str, files: &[(&str, &str)]) {
    let versioned = dir.join(format!("..{version}"));
    std::fs::create_dir(&versioned).expect("create version dir");
    for (built_name, as_name) in files {
        std::fs::copy(built(built_name), versioned.join(format!("{as_name}.wasm")))
            .expect("copy plugin");
    }
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(format!("..{version}"), &tmp).expect("link ..data_tmp");
    // The atomic swap: rename over the old `..data` link.
    std::fs::rename(&tmp, dir.join("..data")).expect("swap ..data");
    for (_, as_name) in files {
        let link = dir.join(format!("{as_name}.wasm"));
        if link.symlink_metadata().is_err() {
            std::os::unix::fs::symlink(format!("..data/{as_name}.wasm"), &link)
                .expect("link plugin");
        }
    }
}

#[test]
fn a_configmap_style_symlink_swap_upgrades_the_plugin() {
    install_crds();
    let ns = Namespace::new("upgrade-configmap");
    let dir = PluginDir::with(&[]);
    configmap_version(
        &dir.path,
        "v1",
        &[("database", "database"), ("myapp", "myapp")],
    );
    let mut host = Host::start(&dir);
    let pid = host.pid();
    serving(&host, "database", Some("0.1.0"));
    let myapp_row = serving(&host, "myapp", None);
    apply(&ns.name, &database("mounted", 1));
    converged(&ns.name, &["mounted".into()], None);

    configmap_version(
        &dir.path,
        "v2",
        &[("database-v2", "database"), ("myapp", "myapp")],
    );
    std::fs::remove_dir_all(dir.path.join("..v1")).expect("remove old version");

    let v2 = serving(&host, "database", Some("0.2.0"));
    assert_eq!(v2["digest"], digest_of("database-v2"), "{v2}");
    converged(&ns.name, &["mounted".into()], Some("v2"));
    // myapp's bytes did not change: it was not reloaded.
    assert_eq!(host.plugin("myapp"), Some(myapp_row));
    assert_eq!(host.pid(), pid);
    assert!(host.running(), "the host exited");
}

#[test]
fn a_second_plugin_for_a_served_parent_kind_is_refused_and_the_first_keeps_reconciling() {
    install_crds();
    let ns = Namespace::new("upgrade-imposter");
    let dir = PluginDir::with(&["database"]);
    let host = Host::start(&dir);
    serving(&host, "database", None);
    apply(&ns.name, &database("first", 1));
    converged(&ns.name, &["first".into()], None);

    dir.settings(
        "imposter",
        "config:\n  name: imposter\n  claim: databases\n",
    );
    dir.install("hostile", "imposter");
    let row = eventually("imposter to be refused", TIMEOUT, || {
        host.plugin_file("imposter.wasm")
            .filter(|p| p["state"] == "failed")
    });
    let error = row["lastError"].as_str().unwrap_or_default();
    assert!(
        error.contains("parent kind Database") && error.contains("plugin database"),
        "{row}"
    );

    apply(&ns.name, &database("second", 1));
    converged(&ns.name, &["first".into(), "second".into()], None);
    stays_absent(&ns.name, "configmap/second-ok", Duration::from_secs(3));
    assert!(!exists(&ns.name, "configmap/first-ok"));
    assert_eq!(
        host.plugin("database").map(|p| p["state"].clone()),
        Some("running".into())
    );
}

#[test]
fn a_half_written_plugin_file_is_retried_once_complete() {
    install_crds();
    let ns = Namespace::new("upgrade-half");
    let dir = PluginDir::with(&["database"]);
    let mut host = Host::start(&dir);
    let pid = host.pid();
    serving(&host, "database", Some("0.1.0"));
    apply(&ns.name, &database("halfway", 1));
    converged(&ns.name, &["halfway".into()], None);

    let bytes = std::fs::read(built("database-v2")).expect("read database-v2");
    let file = dir.path.join("database.wasm");
    std::fs::write(&file, &bytes[..bytes.len() / 2]).expect("write half");
    std::thread::sleep(Duration::from_secs(1));
    std::fs::write(&file, &bytes).expect("write whole");

    let v2 = serving(&host, "database", Some("0.2.0"));
    assert!(v2["lastError"].is_null(), "{v2}");
    assert_eq!(v2["digest"], digest_of("database-v2"), "{v2}");
    converged(&ns.name, &["halfway".into()], Some("v2"));
    assert_eq!(host.pid(), pid);
    assert!(host.running(), "the host exited");
}
