//! Fleet-wide what-if benchmark (run by `tests/bench/whatif`, not a test).
//!
//! Prints, on a running host against a real control plane, for N
//! Databases of three engines and a candidate `database` that pulls one
//! engine's image from another registry:
//! - the time the host took to reconcile the N new Databases live (their
//!   first reconcile: creation to N StatefulSets), and the what-if's time
//!   over the same N parents (p50 of several runs), as parents per second
//!   and a ratio;
//! - the host's CPU per parent of a what-if, against its CPU per live
//!   reconcile (a round touching every Database), measured in the same run.
//!
//! Needs `KUBECONFIG`/`KUBECTL` of a running cluster and built plugins/host.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use kubeplug_e2e::*;

const TIMEOUT: Duration = Duration::from_secs(300);
/// What-if runs measured.
const RUNS: usize = 5;
const ENGINES: [(&str, &str); 3] = [
    ("postgresql", "16.4.0"),
    ("mysql", "8.0.36"),
    ("mongodb", "7.0.5"),
];

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

fn main() {
    let n: usize = std::env::var("WHATIF_BENCH_PARENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    install_crds();
    let ns = Namespace::new("bench-whatif");
    let dir = PluginDir::with(&["database"]);
    let host = Host::start(&dir);
    running(&host, "database");

    // Live: N new Databases to N StatefulSets.
    let docs: String = (0..n)
        .map(|i| {
            let (engine, version) = ENGINES[i % ENGINES.len()];
            format!(
                "---\napiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: db{i}\nspec:\n  engine: {engine}\n  version: {version}\n  replicas: 1\n"
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

    // Live CPU per reconcile: one round touching every Database.
    let (c0, r0) = (host.cpu(), host.reconciles("database"));
    kubectl_ok(
        &[
            "annotate",
            "-n",
            &ns.name,
            "databases",
            "--all",
            "--overwrite",
            "bench.kubeplug.io/round=1",
        ],
        None,
    );
    eventually("every database reconciled", TIMEOUT, || {
        (host.reconciles("database") - r0 >= n as f64).then_some(())
    });
    host.quiet("database", TIMEOUT);
    let live_cpu = (host.cpu() - c0).as_secs_f64() * 1e6 / (host.reconciles("database") - r0);

    // What-if runs: each new candidate settings file starts one (a new
    // `startedAt`).
    let bytes = std::fs::read(built("database")).expect("database.wasm");
    let mut seconds = Vec::new();
    let mut parents = 0;
    let mut last = serde_json::Value::Null;
    for run in 0..RUNS {
        dir.settings(
            "database.next",
            &format!(
                "# run {run}\nconfig:\n  engineRegistries:\n    postgresql: pg.mirror.example.com\n"
            ),
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
    seconds.sort_by(f64::total_cmp);
    let p50 = seconds[seconds.len() / 2];
    println!(
        "what-if of `database` over {n} Databases (3 engines; candidate: one engine's registry changed)"
    );
    println!(
        "  live: {n} new Databases reconciled (creation to {n} StatefulSets): {:.2} s, {:.0} parents/s; host CPU {live_cpu:.0} µs per live reconcile",
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
}
