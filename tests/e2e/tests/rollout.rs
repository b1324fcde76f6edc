//! Safe rollouts: a candidate version in shadow decides beside the live one
//! and writes nothing; a new version that fails on its parents is rolled
//! back automatically; a failing reconcile's request can be fetched and
//! replayed offline.

use std::time::{Duration, Instant};

use kubeplug_e2e::{
    Host, Namespace, PluginDir, apply, built, events_for, eventually, get_json, host_with_policy,
    install_crds, kubectl_ok, resource_versions,
};
use serde_json::Value;

/// Long enough for a compile on a busy two-core machine.
const TIMEOUT: Duration = Duration::from_secs(90);
/// The registry the candidate pulls the engines' images from.
const MIRROR: &str = "mirror.example.com/library";

fn database(name: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: {name}\n\
         spec:\n  engine: postgresql\n  version: 16.4.0\n  replicas: 1\n"
    )
}

fn hostile(name: &str, behave: &str) -> String {
    format!(
        "apiVersion: test.kubeplug.io/v1\nkind: Hostile\nmetadata:\n  name: {name}\n\
         spec:\n  behave: {behave}\n"
    )
}

/// The image of each StatefulSet in `ns`: name → image.
fn images(ns: &str) -> std::collections::BTreeMap<String, String> {
    let list = get_json(ns, "statefulsets").expect("list statefulsets");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                s["spec"]["template"]["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

/// Every Database in the cluster the host reconciles (not a parent being
/// deleted, which is finalized, not compared; other tests' namespaces may
/// still be going away).
fn databases_in_cluster() -> usize {
    let list = |what: &str| -> Vec<Value> {
        let out = kubectl_ok(&["get", what, "-A", "-o", "json"], None);
        let list: Value = serde_json::from_str(&out).expect("kubectl prints JSON");
        list["items"].as_array().cloned().unwrap_or_default()
    };
    let active: Vec<String> = list("namespaces")
        .iter()
        .filter(|n| n["status"]["phase"] == "Active")
        .filter_map(|n| n["metadata"]["name"].as_str().map(String::from))
        .collect();
    list("databases")
        .iter()
        .filter(|d| d["metadata"]["deletionTimestamp"].is_null())
        .filter(|d| {
            d["metadata"]["namespace"]
                .as_str()
                .is_some_and(|ns| active.iter().any(|a| a == ns))
        })
        .count()
}

/// Wait until the shadow of `plugin` has compared at least `parents`
/// parents and `check` holds for its status; returns it.
fn shadow_where(host: &Host, plugin: &str, parents: u64, check: impl Fn(&Value) -> bool) -> Value {
    eventually(
        &format!("the shadow of {plugin} to compare {parents} parents"),
        TIMEOUT,
        || {
            let shadow = host.plugin(plugin)?["shadow"].clone();
            (shadow["parentsCompared"].as_u64()? >= parents && check(&shadow)).then_some(shadow)
        },
    )
}

#[test]
fn a_candidate_in_shadow_writes_nothing_reports_its_differences_and_ships_when_promoted() {
    install_crds();
    let ns = Namespace::new("shadow");
    let dir = PluginDir::with(&["database"]);
    let host = Host::start(&dir);
    let names = ["orders", "users", "stock"];
    for name in names {
        apply(&ns.name, &database(name));
    }
    eventually("every database to run", TIMEOUT, || {
        names
            .iter()
            .all(|n| {
                get_json(&ns.name, &format!("database/{n}"))
                    .is_some_and(|db| db["status"]["phase"] == "Running")
            })
            .then_some(())
    });
    let objects: Vec<String> = names
        .iter()
        .flat_map(|n| {
            [
                format!("database/{n}"),
                format!("statefulset/{n}"),
                format!("service/{n}"),
                format!("secret/{n}-credentials"),
            ]
        })
        .collect();
    let objects: Vec<&str> = objects.iter().map(String::as_str).collect();
    // Settled: the status writes that follow Running are done.
    let versions = eventually("the databases' objects to settle", TIMEOUT, || {
        let before = resource_versions(&ns.name, &objects);
        std::thread::sleep(Duration::from_secs(3));
        (resource_versions(&ns.name, &objects) == before).then_some(before)
    });

    // The same component as a candidate: it decides exactly as the live one.
    let bytes = std::fs::read(built("database")).expect("read database.wasm");
    dir.put("database.next", &bytes);
    let same = shadow_where(&host, "database", names.len() as u64, |s| {
        s["comparisons"].as_u64() > Some(0)
    });
    assert_eq!(same["parentsDiffering"], 0, "{same}");
    assert_eq!(same["candidateErrors"], 0, "{same}");
    assert!(
        same["file"]
            .as_str()
            .unwrap()
            .ends_with("database.next.wasm"),
        "{same}"
    );

    // A candidate that pulls every image from a mirror.
    let settings = format!("config:\n  imageRegistry: {MIRROR}\n");
    dir.settings("database.next", &settings);
    let all = databases_in_cluster() as u64;
    let differing = shadow_where(&host, "database", all, |s| {
        s["parentsDiffering"] == s["parentsCompared"]
    });
    assert_eq!(differing["candidateErrors"], 0, "{differing}");
    let examples = differing["examples"].to_string();
    assert!(
        examples.contains(&format!("{MIRROR}/postgres:16.4.0"))
            && examples.contains("/spec/template/spec/containers"),
        "the examples name the new image: {differing:#}"
    );
    let compared = differing["parentsCompared"].as_f64().unwrap();
    assert!(
        host.metric(
            "kubeplug_shadow_parents",
            "plugin=\"database\",parents=\"differing\""
        ) >= names.len() as f64,
        "{}",
        host.get("/metrics").unwrap().1
    );
    assert_eq!(
        host.metric(
            "kubeplug_shadow_parents",
            "plugin=\"database\",parents=\"compared\""
        ),
        host.metric(
            "kubeplug_shadow_parents",
            "plugin=\"database\",parents=\"differing\""
        ),
    );
    assert!(compared >= names.len() as f64);
    let log = std::fs::read_to_string(&host.log).unwrap_or_default();
    assert!(
        log.contains("shadow: the candidate decides differently"),
        "{}",
        host.log_tail()
    );
    // Nothing was written while the candidate ran in shadow.
    assert_eq!(resource_versions(&ns.name, &objects), versions);
    for (name, image) in images(&ns.name) {
        assert_eq!(image, "postgres:16.4.0", "{name}");
    }

    // Promote: the candidate's settings, then the component, over the live
    // ones. The upgrade then happens as any other.
    std::fs::rename(
        dir.path.join("database.next.yaml"),
        dir.path.join("database.yaml"),
    )
    .expect("promote settings");
    std::fs::rename(
        dir.path.join("database.next.wasm"),
        dir.path.join("database.wasm"),
    )
    .expect("promote component");
    eventually("every StatefulSet to pull from the mirror", TIMEOUT, || {
        let images = images(&ns.name);
        (images.len() == names.len()
            && images
                .values()
                .all(|i| *i == format!("{MIRROR}/postgres:16.4.0")))
        .then_some(())
    });
    eventually("the shadow to stop", TIMEOUT, || {
        let row = host.plugin("database")?;
        (row["shadow"].is_null() && row["state"] == "running").then_some(())
    });
}

/// Write the hostile plugin's settings: `config` (YAML lines) and the
/// rollback threshold.
fn hostile_settings(dir: &PluginDir, config: &str) {
    dir.settings(
        "hostile",
        &format!("config:\n{config}rollback:\n  calls: 10\n  maxErrorRate: 0.5\n"),
    );
}

fn rollbacks(host: &Host) -> f64 {
    host.metric("kubeplug_plugin_rollbacks_total", "plugin=\"hostile\"")
}

#[test]
fn a_version_failing_on_every_parent_is_rolled_back_and_not_retried_until_its_file_changes() {
    install_crds();
    let ns = Namespace::new("rollback");
    let dir = PluginDir::with(&[]);
    hostile_settings(&dir, "  {}\n");
    dir.install("hostile", "hostile");
    let host = Host::start(&dir);
    let names = ["a", "b", "c"];
    for name in names {
        apply(&ns.name, &hostile(name, "ok"));
    }
    let objects: Vec<String> = names
        .iter()
        .flat_map(|n| [format!("hostile/{n}"), format!("configmap/{n}-ok")])
        .collect();
    let objects: Vec<&str> = objects.iter().map(String::as_str).collect();
    eventually("the ok ConfigMaps", TIMEOUT, || {
        names
            .iter()
            .all(|n| get_json(&ns.name, &format!("configmap/{n}-ok")).is_some())
            .then_some(())
    });
    let versions = resource_versions(&ns.name, &objects);
    let digest = host.plugin("hostile").expect("hostile row")["digest"].clone();

    // The new version: the same component configured to fail everywhere.
    let swapped = Instant::now();
    hostile_settings(&dir, "  behave: error\n");
    let row = eventually("the bad version to be rolled back", TIMEOUT, || {
        host.plugin("hostile")
            .filter(|p| p["state"] == "rolled-back")
    });
    let took = swapped.elapsed();
    eprintln!("bad swap to rollback: {took:?} (including the 0.5 s settle and the load)");
    let reason = row["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("reconciles failed (more than 50%)") && reason.contains("rolled back"),
        "{row}"
    );
    assert_eq!(row["digest"], digest, "{row}");
    assert_eq!(rollbacks(&host), 1.0);
    // A sample of the parents it failed on say so.
    eventually("a PluginRolledBack event", TIMEOUT, || {
        names
            .iter()
            .any(|n| {
                events_for(&ns.name, "Hostile", n)
                    .iter()
                    .any(|(kind, reason, _)| kind == "Warning" && reason == "PluginRolledBack")
            })
            .then_some(())
    });

    // The previous version serves again: new parents get their ConfigMap.
    apply(&ns.name, &hostile("after", "ok"));
    eventually(
        "the previous version to reconcile a new parent",
        TIMEOUT,
        || get_json(&ns.name, "configmap/after-ok"),
    );
    // Nothing from the bad version was written.
    assert_eq!(resource_versions(&ns.name, &objects), versions);

    // Not retried while the file stays the same, even when the directory
    // is rescanned (another file appears).
    std::fs::write(dir.path.join("notes.txt"), "rescan").expect("write a file");
    std::thread::sleep(Duration::from_secs(3));
    let row = host.plugin("hostile").expect("hostile row");
    assert_eq!(row["state"], "rolled-back", "{row}");
    assert_eq!(rollbacks(&host), 1.0);

    // A changed file is loaded again (and this one is fine).
    hostile_settings(&dir, "  behave: ok\n");
    eventually("the fixed version to serve", TIMEOUT, || {
        host.plugin("hostile").filter(|p| p["state"] == "running")
    });
    apply(&ns.name, &hostile("fixed", "ok"));
    eventually("the fixed version to reconcile", TIMEOUT, || {
        get_json(&ns.name, "configmap/fixed-ok")
    });
    assert_eq!(rollbacks(&host), 1.0);
}

/// A version that passes its promotion gate (the gate lets failures
/// through) and is then rolled back live: the cluster's record says so, and
/// a restart, which has no previous version to go back to, serves nothing
/// rather than the version rolled back.
#[test]
fn a_version_rolled_back_under_a_gate_does_not_serve_after_a_restart() {
    install_crds();
    let ns = Namespace::new("gated-rollback");
    let dir = PluginDir::with(&[]);
    let policies = kubeplug_e2e::with_policy(
        &dir,
        "apiVersion: kubeplug.io/v1alpha1\nkind: PluginPolicy\nstrict: true\n\
         identityNamespace: kubeplug-system\nplugins:\n  hostile:\n    \
         parent: [Hostile.test.kubeplug.io]\n    children: [ConfigMap]\n    \
         promotion:\n      maxChangedPercent: 100\n      maxFailed: 1000\n",
    );
    hostile_settings(&dir, "  {}\n");
    dir.install("hostile", "hostile");
    // The record in the test's namespace (the host's, here); parents of
    // this namespace only (other tests' parents still going away would be
    // finalized by the new version, and its successes count towards its
    // probation).
    let args = [
        "--policy",
        policies.as_str(),
        "--lease-namespace",
        &ns.name,
        "--namespaces",
        &ns.name,
    ];
    let host = Host::start_with(&dir, &args);
    for name in ["a", "b", "c"] {
        apply(&ns.name, &hostile(name, "ok"));
    }
    eventually("the ok ConfigMaps", TIMEOUT, || {
        ["a", "b", "c"]
            .iter()
            .all(|n| get_json(&ns.name, &format!("configmap/{n}-ok")).is_some())
            .then_some(())
    });
    let record = || -> Option<Value> {
        let map = get_json(&ns.name, "configmap/kubeplug-promotions")?;
        serde_json::from_str(map["data"]["hostile"].as_str()?).ok()
    };
    let first = eventually("the first version recorded", TIMEOUT, record);
    assert!(first.get("rolledBackAt").is_none(), "{first}");

    // The new version fails everywhere; the gate lets it through, its
    // probation does not.
    hostile_settings(&dir, "  behave: error\n");
    eventually("the new version to be rolled back", TIMEOUT, || {
        host.plugin("hostile")
            .filter(|p| p["state"] == "rolled-back")
    });
    let marked = eventually("the record to say it was rolled back", TIMEOUT, || {
        record().filter(|r| r["key"] != first["key"] && r.get("rolledBackAt").is_some())
    });
    eprintln!("recorded: {marked}");

    host.stop();
    let host = Host::start_with(&dir, &args);
    let row = eventually("the restarted host to hold it back", TIMEOUT, || {
        host.plugin("hostile").filter(|p| p["state"] == "blocked")
    });
    assert!(
        row["reason"]
            .as_str()
            .is_some_and(|r| r.contains("rolled back")),
        "{row}"
    );
    apply(&ns.name, &hostile("after", "ok"));
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        get_json(&ns.name, "configmap/after-ok").is_none(),
        "nothing serves"
    );
    assert_eq!(host.reconciles("hostile"), 0.0);
}

#[test]
fn a_failed_reconcile_is_fetched_and_replayed_offline_with_the_same_error_and_secrets_redacted() {
    install_crds();
    let ns = Namespace::new("replay");
    let dir = PluginDir::with(&[]);
    // The hostile plugin, granted reading Secrets labelled for it.
    let policies = kubeplug_e2e::with_policy(
        &dir,
        "apiVersion: kubeplug.io/v1alpha1\nkind: PluginPolicy\nstrict: true\n\
         identityNamespace: kubeplug-system\nplugins:\n  hostile:\n    \
         parent: [Hostile.test.kubeplug.io]\n    children: [ConfigMap]\n    related: [Secret]\n",
    );
    dir.settings("hostile", "config:\n  related: [secrets]\n");
    dir.install("hostile", "hostile");
    let host = Host::start_with(&dir, &["--policy", &policies]);

    // A parent the plugin fails on, with a Secret among its related objects.
    apply(
        &ns.name,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: vault-creds\n  labels:\n    \
         kubeplug-test/steal: \"yes\"\nstringData:\n  k: hunter2\n",
    );
    apply(&ns.name, &hostile("vault", "error"));
    let logged = eventually("the failure's event", TIMEOUT, || {
        events_for(&ns.name, "Hostile", "vault")
            .into_iter()
            .find(|(_, reason, _)| reason == "PluginFailed")
            .map(|(_, _, note)| note)
    });

    // Fetched as the team would, through the host's listener.
    let file = dir.path.with_extension("replay.yaml");
    let parent = format!("{}/vault", ns.name);
    let from = format!("http://127.0.0.1:{}", host.port);
    let fetched = std::process::Command::new(kubeplug_e2e::host_binary())
        .args(["replay", "--from", &from, "hostile", &parent, "-o"])
        .arg(&file)
        .output()
        .expect("run kubeplug replay");
    assert!(
        fetched.status.success(),
        "{}",
        String::from_utf8_lossy(&fetched.stderr)
    );
    let capture: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&file).expect("read capture"))
            .expect("the capture is YAML");
    assert_eq!(capture["kind"], "Replay");
    assert_eq!(
        capture["error"].as_str(),
        Some(logged.as_str()),
        "{capture:#}"
    );
    assert_eq!(capture["reason"], "guest_error");
    // The Secret is handed to the plugin; its data is not kept.
    let secret: Value = capture["request"]["related"]
        .as_array()
        .expect("observed texts")
        .iter()
        .filter_map(|t| serde_json::from_str::<Value>(t.as_str()?).ok())
        .find(|o| o["kind"] == "Secret")
        .expect("the Secret is in the request");
    let live = get_json(&ns.name, "secret/vault-creds").expect("the Secret");
    assert!(!live["data"]["k"].is_null());
    assert_ne!(secret["data"]["k"], live["data"]["k"]);
    assert_eq!(
        secret["data"]["k"], "PHJlZGFjdGVkPg==",
        "base64 of <redacted>"
    );
    // Nowhere in the file, not even in the last-applied annotation.
    let text = std::fs::read_to_string(&file).expect("read capture");
    assert!(
        !text.contains("hunter2") && !text.contains("aHVudGVyMg"),
        "{text}"
    );
    assert!(
        capture["redacted"].to_string().contains("vault-creds"),
        "{capture:#}"
    );

    // Replayed offline: the same error, byte for byte.
    let replayed = std::process::Command::new(kubeplug_e2e::host_binary())
        .args(["render", "--plugin"])
        .arg(built("hostile"))
        .args(["--policy", &policies, "--request"])
        .arg(&file)
        .output()
        .expect("run kubeplug render");
    assert!(!replayed.status.success());
    let stderr = String::from_utf8_lossy(&replayed.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert_eq!(last, format!("error: {logged}"), "{stderr}");
}

#[test]
fn a_candidate_that_loops_is_stopped_at_its_deadline_and_never_holds_a_live_reconcile_up() {
    install_crds();
    let ns = Namespace::new("shadow-loop");
    let dir = PluginDir::with(&[]);
    dir.settings("hostile", "config: {}\n");
    dir.install("hostile", "hostile");
    // The deadline this test relies on, set here rather than inherited from
    // the 2 s default: 4 s (the platform's quota; a plugin's settings may
    // only lower it), so that a live reconcile that waited for a candidate
    // call would take 4 s or more, well past the bucket checked below,
    // while one that did not has 3.3 s however busy the machine.
    let host = host_with_policy(
        &dir,
        "strict: true
plugins:
  hostile:
    parent: [Hostile.test.kubeplug.io]
    children: [ConfigMap]
    quotas: {callTimeoutMs: 4000}
",
    );
    // The candidate spins until its deadline (4 s, above) on every call.
    // It stands beside the live file, the only place a candidate may sit.
    std::fs::write(
        dir.path.join("hostile.next.yaml"),
        "config:\n  behave: loop\n",
    )
    .expect("write the candidate's settings");
    std::fs::copy(built("hostile"), dir.path.join("hostile.next.wasm"))
        .expect("copy the candidate");
    eventually("the candidate in shadow", TIMEOUT, || {
        host.plugin("hostile")?["shadow"]["version"]
            .as_str()
            .map(String::from)
    });
    let names = ["p", "q", "r"];
    for name in names {
        apply(&ns.name, &hostile(name, "ok"));
    }
    eventually("the live version's ConfigMaps", TIMEOUT, || {
        names
            .iter()
            .all(|n| get_json(&ns.name, &format!("configmap/{n}-ok")).is_some())
            .then_some(())
    });
    let shadow = eventually("the candidate's failures to be compared", TIMEOUT, || {
        let s = host.plugin("hostile")?["shadow"].clone();
        (s["candidateErrors"].as_u64()? >= names.len() as u64).then_some(s)
    });
    assert!(
        shadow["examples"]
            .to_string()
            .contains("exceeded its deadline"),
        "{shadow:#}"
    );
    // No live reconcile waited for the candidate: all took under 3.3 s
    // (histogram bucket), while each candidate call ran for 4 s.
    let all = host.metric(
        "kubeplug_reconcile_duration_seconds_count",
        "plugin=\"hostile\"",
    );
    let quick = host.metric(
        "kubeplug_reconcile_duration_seconds_bucket",
        "le=\"3.2768\",plugin=\"hostile\"",
    );
    assert!(all >= names.len() as f64);
    assert_eq!(quick, all, "{}", host.get("/metrics").unwrap().1);
}
