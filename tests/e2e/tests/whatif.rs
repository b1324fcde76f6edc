//! Fleet-wide what-if and the promotion gate, against the real control
//! plane: 200 Databases of three engines, a candidate `database` that
//! pulls one engine's image from another registry; the what-if names
//! exactly that engine's Databases and the one field, faster than the 200
//! reconciles took live; a gate of 10 % keeps the promoted version out of
//! service (blocked, with the reason, an Event, `kubeplug whatif`), also
//! after the host restarts (the cluster remembers the version promoted),
//! until the platform lifts it.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kubeplug_e2e::*;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(180);
const N: usize = 200;
const ENGINES: [(&str, &str); 3] = [
    ("postgresql", "16.4.0"),
    ("mysql", "8.0.36"),
    ("mongodb", "7.0.5"),
];
const MIRROR: &str = "pg.mirror.example.com";
const IMAGE_FIELD: &str = "spec.template.spec.containers[0].image";

/// The policy: `database`'s grant with a promotion gate of `percent`, and
/// the calls' deadline the test relies on (no candidate call of the 200 may
/// fail): roomy, not the 2 s default a call starved on a busy machine could
/// run past. Without `percent`, no gate.
fn policy(percent: Option<u32>) -> String {
    let gate = percent
        .map(|p| {
            format!(
                "    promotion:\n      maxChangedPercent: {p}\n      noPrunes: [StatefulSet.apps]\n"
            )
        })
        .unwrap_or_default();
    format!(
        "apiVersion: kubeplug.io/v1alpha1\nkind: PluginPolicy\nstrict: true\nidentityNamespace: kubeplug-system\n\
         quotas:\n  callTimeoutMs: 30000\n\
         plugins:\n  database:\n    parent: [Database.example.com]\n    children: [StatefulSet.apps, Service, Secret]\n    related: [Pod]\n    admission: [validate]\n    conversion: true\n{gate}"
    )
}

fn name(i: usize) -> String {
    format!("db-{i:03}")
}

fn engine(i: usize) -> (&'static str, &'static str) {
    ENGINES[i % ENGINES.len()]
}

/// StatefulSets in `ns`: name → image (`None`: kubectl failed this time,
/// as it may on a loaded machine; callers ask again).
fn images(ns: &str) -> Option<std::collections::BTreeMap<String, String>> {
    let list = get_json(ns, "statefulsets")?;
    let images = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["metadata"]["name"].as_str().unwrap_or_default().into(),
                s["spec"]["template"]["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap_or_default()
                    .into(),
            )
        })
        .collect();
    Some(images)
}

/// StatefulSets in `ns`, asked until kubectl answers.
fn images_now(ns: &str) -> std::collections::BTreeMap<String, String> {
    eventually("the StatefulSets' images", TIMEOUT, || images(ns))
}

/// Running Databases in `ns`, read at v1 by name: kubectl's cached
/// discovery may still prefer the v2 an earlier test served.
fn running_databases(ns: &str) -> Option<usize> {
    let list = get_json(ns, "databases.v1.example.com")?;
    Some(
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["status"]["phase"] == "Running")
            .count(),
    )
}

/// The parents of `report` (with details) in `ns` that would change.
fn changed_in(report: &Value, ns: &str) -> BTreeSet<String> {
    report["details"]["changed"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(|p| p.strip_prefix(&format!("{ns}/")))
        .map(String::from)
        .collect()
}

#[test]
fn a_whatif_names_the_parents_and_field_a_candidate_changes_and_a_gate_holds_its_promotion() {
    install_crds();
    let ns = Namespace::new("whatif");
    let dir = PluginDir::with(&["database"]);
    let policy_file = dir.path.with_extension("policy.yaml");
    std::fs::write(&policy_file, policy(Some(10))).expect("write the policy");
    // The host's namespace, where it records the version promoted: the
    // test's own, so no other test's record is read.
    let args = [
        "--policy",
        policy_file.to_str().unwrap(),
        "--lease-namespace",
        &ns.name,
    ];
    let host = Host::start_with(&dir, &args);
    running(&host, "database");
    let first = eventually("the first version recorded as promoted", TIMEOUT, || {
        recorded(&ns.name)
    });
    assert_eq!(
        Some(first["digest"].as_str().unwrap()),
        host.plugin("database").unwrap()["digest"].as_str(),
        "{first}"
    );

    // 200 Databases at once; live, the host reconciles each into a
    // StatefulSet (its first reconcile).
    let all: String = (0..N)
        .map(|i| {
            let (engine, version) = engine(i);
            format!(
                "---\napiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: {}\nspec:\n  engine: {engine}\n  version: {version}\n  replicas: 1\n",
                name(i)
            )
        })
        .collect();
    let created = Instant::now();
    apply(&ns.name, &all);
    eventually("200 StatefulSets", TIMEOUT, || {
        (images(&ns.name)?.len() == N).then_some(())
    });
    let live = created.elapsed();
    eventually("every database to run", TIMEOUT, || {
        (running_databases(&ns.name)? == N).then_some(())
    });
    // Settled: no status write or child update is still due.
    eventually("the host to settle", TIMEOUT, || {
        let before = host.metric("kubeplug_reconciles_total", r#"plugin="database""#);
        std::thread::sleep(Duration::from_secs(3));
        (host.metric("kubeplug_reconciles_total", r#"plugin="database""#) == before).then_some(())
    });

    // The candidate: the same component, PostgreSQL's image from a mirror.
    let bytes = std::fs::read(built("database")).expect("read database.wasm");
    dir.settings(
        "database.next",
        &format!("config:\n  engineRegistries:\n    postgresql: {MIRROR}\n"),
    );
    dir.put("database.next", &bytes);
    let report = eventually("the what-if to complete", TIMEOUT, || {
        let report = host.plugin("database")?["shadow"]["whatIf"].clone();
        (report["phase"] == "complete").then_some(report)
    });
    let postgres: BTreeSet<String> = (0..N)
        .filter(|&i| engine(i).0 == "postgresql")
        .map(name)
        .collect();
    assert_eq!(changed_in(&report, &ns.name), postgres, "{report:#}");
    assert!(
        report["parents"].as_u64().unwrap() >= N as u64,
        "{report:#}"
    );
    let updates = report["details"]["updates"].as_array().unwrap();
    assert_eq!(updates.len(), 1, "one kind, one field: {report:#}");
    assert_eq!(updates[0]["kind"], "StatefulSet.apps");
    assert_eq!(updates[0]["field"], IMAGE_FIELD);
    for rows in ["creates", "prunes", "status"] {
        assert_eq!(report[rows], serde_json::json!([]), "{rows}: {report:#}");
    }
    assert_eq!(
        (report["refused"].as_u64(), report["failed"].as_u64()),
        (Some(0), Some(0))
    );
    let seconds = report["seconds"].as_f64().unwrap();
    eprintln!(
        "200 reconciles live: {live:.2?}; what-if of {} parents: {seconds:.3} s",
        report["parents"]
    );
    assert!(
        seconds < live.as_secs_f64(),
        "the what-if took {seconds} s, the live reconciles {live:?}"
    );
    // Nothing written: every StatefulSet keeps its image.
    let before = images_now(&ns.name);
    assert!(
        before.values().all(|i| !i.starts_with(MIRROR)),
        "{before:?}"
    );

    // Promote: settings, then component. The gate keeps it out.
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
    let row = eventually("the promotion to be blocked", TIMEOUT, || {
        host.plugin("database").filter(|r| r["state"] == "blocked")
    });
    let reason = row["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("would change, more than the gate's 10 %"),
        "{row:#}"
    );
    assert_eq!(
        changed_in(&row["promotion"]["whatIf"], &ns.name),
        postgres,
        "{row:#}"
    );
    eventually("a PromotionBlocked event", TIMEOUT, || {
        let out = kubectl(
            &[
                "get",
                "events",
                "-A",
                "--field-selector",
                "reason=PromotionBlocked",
                "-o",
                "json",
            ],
            None,
        );
        let list: Value = serde_json::from_slice(&out.stdout).ok()?;
        list["items"]
            .as_array()?
            .iter()
            .find(|e| {
                e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("kept out of service by its promotion gate"))
            })
            .cloned()
    });
    // The command line says the same.
    let cli = std::process::Command::new(host_binary())
        .args([
            "whatif",
            "database",
            "--from",
            &format!("http://127.0.0.1:{}", host.port),
        ])
        .output()
        .expect("run kubeplug whatif");
    let text = String::from_utf8_lossy(&cli.stdout);
    eprintln!("kubeplug whatif database:\n{text}");
    assert!(
        cli.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    assert!(
        text.contains(IMAGE_FIELD) && text.contains("promotion blocked:"),
        "{text}"
    );
    // Still serving the previous version: nothing moved.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(images_now(&ns.name), before);

    // A restart (or a new replica: a process with nothing serving either)
    // has no previous version to serve or to judge the file against; the
    // record says it is not the version promoted, so it does not serve.
    host.stop();
    let host = Host::start_with(&dir, &args);
    let row = eventually(
        "the restarted host to hold the version back",
        TIMEOUT,
        || host.plugin("database").filter(|r| r["state"] == "blocked"),
    );
    let reason = row["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("not the version last promoted") && reason.contains("nothing serves"),
        "{row:#}"
    );
    assert!(row["version"].is_null(), "nothing serves: {row:#}");
    assert_eq!(recorded(&ns.name).as_ref(), Some(&first));
    // A new replica beside it: the same.
    let replica = Host::start_with(&dir, &args);
    eventually("a new replica to hold the version back", TIMEOUT, || {
        replica
            .plugin("database")
            .filter(|r| r["state"] == "blocked" && r["version"].is_null())
    });
    assert_eq!(replica.reconciles("database"), 0.0);
    drop(replica);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(images_now(&ns.name), before);
    assert_eq!(host.reconciles("database"), 0.0);

    // The platform lifts the gate: the version serves. Raising it is not
    // enough here: with nothing serving, there is nothing to judge against.
    std::fs::write(&policy_file, policy(None)).expect("lift the gate");
    std::fs::write(dir.path.join("notes.txt"), "rescan").expect("touch the plugin directory");
    eventually(
        "PostgreSQL's StatefulSets to pull from the mirror",
        TIMEOUT,
        || {
            let images = images(&ns.name)?;
            images
                .iter()
                .all(|(name, image)| image.starts_with(MIRROR) == postgres.contains(name))
                .then_some(())
        },
    );
    eventually("the plugin to run", TIMEOUT, || {
        host.plugin("database")
            .filter(|r| r["state"] == "running" && r.get("promotion").is_none())
    });

    // The gate again: what serves is recorded as promoted, and serves after
    // the next restart.
    std::fs::write(&policy_file, policy(Some(10))).expect("restore the gate");
    std::fs::write(dir.path.join("notes.txt"), "rescan again").expect("touch the plugin directory");
    let promoted = eventually("the new version recorded as promoted", TIMEOUT, || {
        recorded(&ns.name).filter(|r| r["key"] != first["key"])
    });
    host.stop();
    let host = Host::start_with(&dir, &args);
    let row = eventually(
        "the promoted version to serve after a restart",
        TIMEOUT,
        || host.plugin("database").filter(|r| r["state"] == "running"),
    );
    assert_eq!(row["digest"], promoted["digest"], "{row:#}");
    assert!(row.get("promotion").is_none(), "{row:#}");
}

/// The version of `database` the host in `ns` recorded as promoted.
fn recorded(ns: &str) -> Option<Value> {
    let map = get_json(ns, "configmap/kubeplug-promotions")?;
    serde_json::from_str(map["data"]["database"].as_str()?).ok()
}
