//! Fleet-wide what-if benchmark (run by `tests/bench/whatif`, not a test).
//!
//! Prints, on a running host against a real control plane, for N
//! Databases of three engines and a version of `database` that pulls one
//! engine's image from another registry:
//! - throughput: the time the host took to reconcile the N new Databases
//!   live (their first reconcile: creation to N StatefulSets), and the
//!   what-if's time over the same N parents (p50 of several runs, each
//!   started by a new candidate), as parents per second and a ratio;
//! - cost to live reconciles: rounds touching [`ROUND`] Databases, every
//!   other one with a what-if over all N running beside it, interleaved;
//!   the mean reconcile latency and the round's time, with against without.
//!   The what-if is started through the promotion gate (a policy change
//!   judges the blocked version again), which requeues no parent, so the
//!   two kinds of round differ by the what-if alone.
//!
//! Needs `KUBECONFIG`/`KUBECTL` of a running cluster and built plugins/host.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use kubeplug_e2e::*;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(300);
/// What-if runs measured for throughput.
const RUNS: usize = 5;
/// Rounds per case (without, with a what-if), interleaved.
const ROUNDS: usize = 5;
/// Databases a round touches.
const ROUND: usize = 100;
const ENGINES: [(&str, &str); 3] = [
    ("postgresql", "16.4.0"),
    ("mysql", "8.0.36"),
    ("mongodb", "7.0.5"),
];
const MIRROR: &str = "pg.mirror.example.com";

/// `database`'s grant with a gate that blocks any change; `note` changes
/// the file (a policy change judges a blocked version again).
fn policy(note: &str) -> String {
    format!(
        "# {note}\napiVersion: kubeplug.io/v1alpha1\nkind: PluginPolicy\nstrict: true\nidentityNamespace: kubeplug-system\n\
         plugins:\n  database:\n    parent: [Database.example.com]\n    children: [StatefulSet.apps, Service, Secret]\n    related: [Pod]\n    admission: [validate]\n    conversion: true\n    promotion: {{maxChangedPercent: 0}}\n"
    )
}

fn count(ns: &str, what: &str, running: bool) -> usize {
    let Some(list) = get_json(ns, what) else {
        return 0;
    };
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| !running || d["status"]["phase"] == "Running")
        .count()
}

/// Reconcile latency so far: (sum of seconds, count).
fn latency(host: &Host) -> (f64, f64) {
    let selector = "plugin=\"database\"";
    (
        host.metric("kubeplug_reconcile_duration_seconds_sum", selector),
        host.metric("kubeplug_reconcile_duration_seconds_count", selector),
    )
}

/// One round: touch the [`ROUND`] Databases labelled for rounds, wait until
/// each is reconciled; (round time, mean reconcile latency).
fn round(host: &Host, ns: &str, n: usize) -> (Duration, Duration) {
    let (r0, (s0, c0)) = (host.reconciles("database"), latency(host));
    let started = Instant::now();
    kubectl_ok(
        &[
            "annotate",
            "-n",
            ns,
            "databases",
            "-l",
            "bench.kubeplug.io/round=yes",
            "--overwrite",
            &format!("bench.kubeplug.io/round={n}"),
        ],
        None,
    );
    eventually("every touched database reconciled", TIMEOUT, || {
        (host.reconciles("database") - r0 >= ROUND as f64).then_some(())
    });
    let took = started.elapsed();
    let (s1, c1) = latency(host);
    (
        took,
        Duration::from_secs_f64((s1 - s0) / (c1 - c0).max(1.0)),
    )
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let n: usize = std::env::var("WHATIF_BENCH_PARENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    install_crds();
    let ns = Namespace::new("bench-whatif");
    let dir = PluginDir::with(&["database"]);
    let policy_file = dir.path.with_extension("policy.yaml");
    std::fs::write(&policy_file, policy("start")).expect("write the policy");
    let host = Host::start_with(&dir, &["--policy", policy_file.to_str().unwrap()]);
    running(&host, "database");

    // Live: N new Databases to N StatefulSets.
    let docs: String = (0..n)
        .map(|i| {
            let (engine, version) = ENGINES[i % ENGINES.len()];
            let label = if i < ROUND { "yes" } else { "no" };
            format!(
                "---\napiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: db{i}\n  labels: {{bench.kubeplug.io/round: \"{label}\"}}\nspec:\n  engine: {engine}\n  version: {version}\n  replicas: 1\n"
            )
        })
        .collect();
    let created = Instant::now();
    apply(&ns.name, &docs);
    eventually("N StatefulSets", TIMEOUT, || {
        (count(&ns.name, "statefulsets", false) == n).then_some(())
    });
    let live = created.elapsed();
    eventually("every database to run", TIMEOUT, || {
        (count(&ns.name, "databases", true) == n).then_some(())
    });
    host.quiet("database", TIMEOUT);

    // Throughput: each new candidate settings file starts a what-if (a new
    // `startedAt`).
    let bytes = std::fs::read(built("database")).expect("database.wasm");
    let mut seconds = Vec::new();
    let mut parents = 0;
    let mut last = Value::Null;
    for run in 0..RUNS {
        dir.settings(
            "database.next",
            &format!("# run {run}\nconfig:\n  engineRegistries:\n    postgresql: {MIRROR}\n"),
        );
        if run == 0 {
            dir.put("database.next", &bytes);
        }
        let report = eventually("this run's what-if to complete", TIMEOUT, || {
            let report = host.plugin("database")?["shadow"]["whatIf"].clone();
            (report["phase"] == "complete" && report["startedAt"] != last).then_some(report)
        });
        last = report["startedAt"].clone();
        seconds.push(report["seconds"].as_f64().unwrap());
        parents = report["parents"].as_u64().unwrap_or(0);
        host.quiet("database", TIMEOUT);
    }
    dir.remove("database.next");
    let _ = std::fs::remove_file(dir.path.join("database.next.yaml"));
    eventually("the shadow to stop", TIMEOUT, || {
        host.plugin("database")?["shadow"].is_null().then_some(())
    });
    let p50 = median(seconds.clone());
    seconds.sort_by(f64::total_cmp);

    // Cost to live reconciles. The same change as the live version's
    // settings: the gate (no change allowed) blocks it after a what-if.
    dir.settings(
        "database",
        &format!("config:\n  engineRegistries:\n    postgresql: {MIRROR}\n"),
    );
    let mut judged = eventually("the version to be blocked", TIMEOUT, || {
        let row = host.plugin("database")?;
        (row["state"] == "blocked").then(|| row["promotion"]["whatIf"]["startedAt"].clone())
    });
    host.quiet("database", TIMEOUT);
    let (mut without, mut with) = (Vec::new(), Vec::new());
    let mut whatifs = Vec::new();
    for r in 0..2 * ROUNDS {
        let beside = r % 2 == 1;
        if beside {
            // A policy change: the blocked version is judged again.
            std::fs::write(&policy_file, policy(&format!("round {r}"))).expect("policy");
        }
        // A rescan either way, so both kinds of round pay for it.
        std::fs::write(dir.path.join("notes.txt"), format!("round {r}")).expect("touch");
        if beside {
            eventually("the what-if to start", TIMEOUT, || {
                let report = host.plugin("database")?["promotion"]["whatIf"].clone();
                (report["startedAt"] != judged).then_some(())
            });
        } else {
            std::thread::sleep(Duration::from_millis(400));
        }
        let (took, mean) = round(&host, &ns.name, r);
        if beside {
            let report = eventually("the what-if to end", TIMEOUT, || {
                let report = host.plugin("database")?["promotion"]["whatIf"].clone();
                (report["startedAt"] != judged && report["phase"] == "complete").then_some(report)
            });
            judged = report["startedAt"].clone();
            whatifs.push(report["seconds"].as_f64().unwrap_or(0.0));
            with.push((took, mean));
        } else {
            without.push((took, mean));
        }
        host.quiet("database", TIMEOUT);
    }
    let mean_of = |rows: &[(Duration, Duration)], f: fn(&(Duration, Duration)) -> Duration| {
        median(rows.iter().map(|r| f(r).as_secs_f64()).collect())
    };
    let (latency_without, latency_with) = (mean_of(&without, |r| r.1), mean_of(&with, |r| r.1));
    let (time_without, time_with) = (mean_of(&without, |r| r.0), mean_of(&with, |r| r.0));

    println!(
        "what-if of `database` over {n} Databases (3 engines; candidate: one engine's registry changed)"
    );
    println!(
        "  live: {n} new Databases reconciled (creation to {n} StatefulSets): {:.2} s, {:.0} parents/s",
        live.as_secs_f64(),
        n as f64 / live.as_secs_f64()
    );
    println!(
        "  what-if: {parents} parents in {p50:.3} s (p50 of {RUNS}; min {:.3}, max {:.3}), {:.0} parents/s, {:.3}x the live time",
        seconds[0],
        seconds[seconds.len() - 1],
        parents as f64 / p50,
        p50 / live.as_secs_f64()
    );
    println!(
        "  cost to live reconciles ({ROUNDS} rounds each touching {ROUND} Databases, interleaved; medians):"
    );
    println!(
        "    mean reconcile latency: {:.2} ms without, {:.2} ms with a what-if beside (ratio {:.2})",
        latency_without * 1e3,
        latency_with * 1e3,
        latency_with / latency_without
    );
    println!(
        "    round time: {time_without:.2} s without, {time_with:.2} s with (ratio {:.2}); the what-ifs beside took {:.2} s (median)",
        time_with / time_without,
        median(whatifs)
    );
}
