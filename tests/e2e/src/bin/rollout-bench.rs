//! Safe-rollout benchmark (run by `tests/bench/rollout`, not a test).
//!
//! Prints, on a running host against a real control plane:
//! - the host's CPU per reconcile of `database` without a candidate, with an
//!   identical candidate in shadow and with a differing one (every parent
//!   differs), as ratios measured in the same run, rounds interleaved;
//! - the time from a bad version's file being in place to its automatic
//!   rollback, with the default rollback settings, for 3 and 30 parents.
//!
//! Needs `KUBECONFIG`/`KUBECTL` of a running cluster and built plugins/host.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use kubeplug_e2e::*;

/// Databases reconciled per round.
const PARENTS: usize = 150;
/// Rounds per condition (interleaved: none, same, differing, none, ...).
const ROUNDS: usize = 4;
/// Bad swaps per parent count.
const SWAPS: usize = 5;
const TIMEOUT: Duration = Duration::from_secs(180);

/// One round: touch every Database (an annotation: no decision changes),
/// wait for every reconcile; returns (CPU, reconciles).
fn round(host: &Host, ns: &str, n: usize) -> (Duration, f64) {
    host.quiet("database", TIMEOUT);
    let (c0, r0) = (host.cpu(), host.reconciles("database"));
    kubectl_ok(
        &[
            "annotate",
            "-n",
            ns,
            "databases",
            "--all",
            "--overwrite",
            &format!("bench.kubeplug.io/round={n}"),
        ],
        None,
    );
    eventually("every database reconciled", TIMEOUT, || {
        (host.reconciles("database") - r0 >= PARENTS as f64).then_some(())
    });
    host.quiet("database", TIMEOUT);
    (host.cpu() - c0, host.reconciles("database") - r0)
}

fn shadow_ready(host: &Host, differing: bool) {
    eventually("the shadow to compare every parent", TIMEOUT, || {
        let s = host.plugin("database")?["shadow"].clone();
        let compared = s["parentsCompared"].as_u64()?;
        let d = s["parentsDiffering"].as_u64()?;
        (compared >= PARENTS as u64 && (d == compared) == differing).then_some(())
    });
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn hostile(name: &str) -> String {
    format!(
        "apiVersion: test.kubeplug.io/v1\nkind: Hostile\nmetadata:\n  name: {name}\nspec:\n  behave: ok\n"
    )
}

/// Swap hostile to a version failing on every parent `SWAPS` times; the
/// times from the file in place to the rollback.
fn rollbacks(host: &Host, dir: &PluginDir) -> Vec<Duration> {
    let mut times = Vec::new();
    for i in 0..SWAPS {
        let started = Instant::now();
        dir.settings(
            "hostile",
            &format!("# swap {i}\nconfig:\n  behave: error\n"),
        );
        eventually("the rollback", TIMEOUT, || {
            host.plugin("hostile")
                .filter(|p| p["state"] == "rolled-back")
        });
        times.push(started.elapsed());
        dir.settings("hostile", &format!("# fixed {i}\nconfig: {{}}\n"));
        eventually("the fixed version", TIMEOUT, || {
            host.plugin("hostile").filter(|p| p["state"] == "running")
        });
        // Let the fixed version pass its probation (20 calls or 300 s):
        // reconcile every parent until it has.
        std::thread::sleep(Duration::from_secs(1));
    }
    times.sort();
    times
}

fn main() {
    install_crds();
    let ns = Namespace::new("bench-rollout");
    let dir = PluginDir::with(&["database"]);
    dir.settings("hostile", "config: {}\n");
    dir.install("hostile", "hostile");
    let host = Host::start(&dir);
    let docs: String = (0..PARENTS)
        .map(|i| {
            format!(
                "---\napiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: db{i}\nspec:\n  engine: mysql\n  version: 8.0.26\n"
            )
        })
        .collect();
    apply(&ns.name, &docs);
    eventually("every database to run", TIMEOUT, || {
        let list = get_json(&ns.name, "databases")?;
        let running = list["items"]
            .as_array()?
            .iter()
            .filter(|d| d["status"]["phase"] == "Running")
            .count();
        (running == PARENTS).then_some(())
    });

    // 1. CPU per reconcile, with and without a candidate.
    let bytes = std::fs::read(built("database")).expect("database.wasm");
    let mut totals = [(Duration::ZERO, 0.0); 3];
    let mut n = 0;
    for _ in 0..ROUNDS {
        for (i, total) in totals.iter_mut().enumerate() {
            match i {
                0 => {
                    let _ = std::fs::remove_file(dir.path.join("database.next.wasm"));
                    let _ = std::fs::remove_file(dir.path.join("database.next.yaml"));
                    eventually("the shadow to stop", TIMEOUT, || {
                        host.plugin("database")?["shadow"].is_null().then_some(())
                    });
                }
                1 => {
                    dir.put("database.next", &bytes);
                    shadow_ready(&host, false);
                }
                _ => {
                    dir.settings(
                        "database.next",
                        "config:\n  imageRegistry: mirror.example.com/library\n",
                    );
                    shadow_ready(&host, true);
                }
            }
            n += 1;
            let (c, r) = round(&host, &ns.name, n);
            total.0 += c;
            total.1 += r;
        }
    }
    let per = |(c, r): (Duration, f64)| c.as_secs_f64() * 1e6 / r.max(1.0);
    let base = per(totals[0]);
    println!(
        "shadow cost: host CPU per `database` reconcile ({PARENTS} parents touched per round, {ROUNDS} rounds per case, interleaved)"
    );
    for (label, total) in [
        "no candidate",
        "identical candidate in shadow",
        "differing candidate in shadow (every parent differs)",
    ]
    .iter()
    .zip(totals)
    {
        println!(
            "  {label:<54} {:>7.0} µs  ratio {:.2}  ({} reconciles, {:?} CPU)",
            per(total),
            per(total) / base,
            total.1,
            total.0
        );
    }

    // 2. Bad swap → rollback, default rollback settings.
    let _ = std::fs::remove_file(dir.path.join("database.next.wasm"));
    for (count, start) in [(3, 0), (30, 3)] {
        for i in start..count {
            apply(&ns.name, &hostile(&format!("h{i}")));
        }
        eventually("the ok ConfigMaps", TIMEOUT, || {
            (0..count)
                .all(|i| get_json(&ns.name, &format!("configmap/h{i}-ok")).is_some())
                .then_some(())
        });
        let times = rollbacks(&host, &dir);
        println!(
            "bad swap -> automatic rollback (failing on all {count} parents; defaults: 20 calls, 50%): p50 {:?}  max {:?}  ({SWAPS} swaps; includes the 0.5 s settle, the load and the 250 ms polling)",
            percentile(&times, 0.5),
            times.last().copied().unwrap_or_default()
        );
    }
}
