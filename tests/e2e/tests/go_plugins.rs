//! Plugins in Go: `plugins/database-go`, the Go port of `database` built by
//! the Go SDK (`plugins/sdk-go/build`: the standard toolchain's `wasip1`
//! module, made a component with kubeplug's own preview1 shim), in the live
//! host beside the Rust seeds on the local control plane.
//!
//! The Rust build serves first and brings a Database to Running; the Go
//! build of the same plugin then replaces it live (same process), and
//! reconciling that Database again changes no child: the two builds give
//! the same answers, so every server-side apply is a no-op and no
//! resourceVersion moves. A new Database is then reconciled to Running by
//! the Go build alone, and a change of its spec reaches its StatefulSet.
//!
//! A hostile Go guest (`plugins/testing/hostile-go`) that loops, allocates
//! without bound, panics or sleeps for ever is stopped at its deadline and
//! memory cap, or trapped with Go's panic message, each reported on its parent with the
//! plugin named, while the Go database beside it serves on.

use std::collections::BTreeMap;
use std::time::Duration;

use kubeplug_e2e::{
    Host, Namespace, PluginDir, apply, built, database_runs, events_for, eventually, get_json,
    hostile, install_crds, items, kubectl_ok, sha256_of,
};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(120);

/// Plugin `name` running the build with `digest`.
fn serving(host: &Host, name: &str, digest: &str) -> Value {
    eventually(&format!("plugin {name} {digest} running"), TIMEOUT, || {
        host.plugin(name)
            .filter(|p| p["state"] == "running" && p["digest"] == digest)
    })
}

/// Every StatefulSet, Service and Secret in `ns` with its resourceVersion.
fn children(ns: &str) -> BTreeMap<String, String> {
    items(&["-n", ns, "statefulsets,services,secrets"])
        .iter()
        .map(|o| {
            let meta = &o["metadata"];
            (
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap(),
                    meta["name"].as_str().unwrap()
                ),
                meta["resourceVersion"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn failed_reconciles(host: &Host) -> f64 {
    host.series("kubeplug_reconciles_total")
        .into_iter()
        .filter(|(labels, _)| labels.contains("plugin=\"database\"") && !labels.contains("\"ok\""))
        .map(|(_, n)| n)
        .sum()
}

fn database(name: &str, replicas: u32) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: {name}\nspec:\n  engine: postgresql\n  version: 16.4.0\n  replicas: {replicas}\n"
    )
}

#[test]
fn the_go_port_of_database_takes_over_from_the_rust_build_live_and_reconciles_to_running() {
    install_crds();
    let ns = Namespace::new("go");
    let n = &ns.name;
    let dir = PluginDir::with(&["database", "myapp", "pod-annotator"]);
    let host = Host::start(&dir);
    let rust = sha256_of(&built("database"));
    let go = sha256_of(&built("database-go"));
    serving(&host, "database", &rust);

    // The Rust build brings a Database to Running.
    apply(n, &database("first", 2));
    database_runs(n, "first");
    host.quiet("database", TIMEOUT);
    let before = children(n);
    assert!(
        before.contains_key("StatefulSet/first") && before.contains_key("Service/first"),
        "{before:?}"
    );
    let status = get_json(n, "database/first").expect("the Database")["status"].clone();

    // The Go build replaces it in the same process.
    let pid = host.pid();
    dir.put(
        "database",
        &std::fs::read(built("database-go")).expect("read the Go build"),
    );
    let row = serving(&host, "database", &go);
    assert!(row["lastError"].is_null(), "{row}");
    assert_eq!(row["version"], "0.1.0", "{row}");
    assert_eq!(host.pid(), pid, "the host was not restarted");

    // Reconciled again by the Go build: no child changes, nor the status.
    let reconciled = host.reconciles("database");
    kubectl_ok(
        &[
            "annotate",
            "-n",
            n,
            "database/first",
            "example.com/touched=by-the-test",
        ],
        None,
    );
    eventually("the Go build to reconcile it", TIMEOUT, || {
        (host.reconciles("database") > reconciled).then_some(())
    });
    host.quiet("database", TIMEOUT);
    assert_eq!(children(n), before, "no child written by the Go build");
    assert_eq!(
        get_json(n, "database/first").expect("the Database")["status"],
        status,
        "the same status"
    );

    // A new Database, the Go build alone: Running, and a change of its
    // spec reaches the StatefulSet.
    apply(n, &database("second", 1));
    database_runs(n, "second");
    let status = get_json(n, "database/second").expect("the Database")["status"].clone();
    assert_eq!(status["readyReplicas"], 1, "{status}");
    apply(n, &database("second", 3));
    eventually("the StatefulSet scaled by the Go build", TIMEOUT, || {
        let set = get_json(n, "statefulset/second")?;
        (set["spec"]["replicas"] == 3).then_some(())
    });
    database_runs(n, "second");
    assert_eq!(failed_reconciles(&host), 0.0, "no failed reconcile");
    host.stop();
}

/// The note of the Warning event `reason` on Hostile `name` once it
/// mentions `needle`.
fn warning(ns: &str, name: &str, reason: &str, needle: &str) -> String {
    eventually(
        &format!("a {reason} warning on {name} mentioning {needle:?}"),
        TIMEOUT,
        || {
            events_for(ns, "Hostile", name)
                .into_iter()
                .find(|(kind, why, note)| {
                    kind == "Warning" && why == reason && note.contains(needle)
                })
                .map(|(_, _, note)| note)
        },
    )
}

#[test]
fn a_hostile_go_guest_is_stopped_at_its_deadline_and_memory_cap_named_while_the_go_database_serves_on()
 {
    install_crds();
    let ns = Namespace::new("go-hostile");
    let n = &ns.name;
    let dir = PluginDir::with(&[]);
    dir.install("database-go", "database");
    // The Go guest is `hostile` by its manifest, under the tests' grant.
    dir.install("hostile-go", "hostile");
    let host = Host::start(&dir);
    serving(&host, "database", &sha256_of(&built("database-go")));
    serving(&host, "hostile", &sha256_of(&built("hostile-go")));

    for (name, behave) in [
        ("spin", "loop"),
        ("hog", "alloc"),
        ("boom", "panic"),
        ("nap", "sleep-forever"),
    ] {
        apply(n, &hostile(name, behave, ""));
    }
    apply(n, &hostile("calm", "ok", ""));
    apply(n, &database("steady", 1));

    let deadline = warning(n, "spin", "PluginFailed", "deadline");
    assert!(
        deadline.contains("plugin hostile exceeded its deadline"),
        "{deadline}"
    );
    // A goroutine asleep for ever: the virtual clock moves, the wall
    // clock's deadline ends it.
    let asleep = warning(n, "nap", "PluginFailed", "deadline");
    assert!(
        asleep.contains("plugin hostile exceeded its deadline"),
        "{asleep}"
    );
    let memory = warning(n, "hog", "PluginFailed", "memory");
    assert!(
        memory.contains("plugin hostile exceeded its memory cap"),
        "{memory}"
    );
    // Go's panic, with its message, reaches the report.
    let panic = warning(n, "boom", "PluginFailed", "hostile plugin asked to panic");
    assert!(panic.contains("plugin hostile trapped"), "{panic}");

    // The same guest answers a calm parent, and the Go database serves on.
    eventually("calm's ConfigMap", TIMEOUT, || {
        get_json(n, "configmap/calm-ok")
    });
    database_runs(n, "steady");
    assert!(
        host.get("/healthz").is_ok_and(|(code, _)| code == 200),
        "the host is healthy"
    );
    assert_eq!(host.plugin("database").unwrap()["state"], "running");
    host.stop();
}
