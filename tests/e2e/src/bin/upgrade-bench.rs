//! Live-upgrade benchmark (run by `tests/bench/upgrade`, not a test).
//!
//! Prints, over repeated swaps of `database` between v1 and v2 on a running
//! host:
//! - from the new file being in place to the first child written by the new
//!   version (p50/p99): load + compile + swap + re-queue + reconcile + write;
//! - the reconcile latency of another plugin (`myapp`, kept busy by spec
//!   edits) during swaps compared with the same load without swaps (ratio of
//!   means from the host's latency histogram).
//!
//! Needs `KUBECONFIG`/`KUBECTL` of a running cluster and built plugins/host.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use kubeplug_e2e::*;

const SWAPS: usize = 20;
const DATABASES: usize = 5;

fn revision_of_service(ns: &str, name: &str) -> Option<String> {
    let svc = get_json(ns, &format!("service/{name}"))?;
    Some(
        svc["metadata"]["labels"]["example.com/plugin-revision"]
            .as_str()
            .unwrap_or("v1")
            .to_string(),
    )
}

/// (sum, count) of myapp's reconcile latency histogram.
fn myapp_latency(host: &Host) -> (f64, f64) {
    (
        host.metric(
            "kubeplug_reconcile_duration_seconds_sum",
            "plugin=\"myapp\"",
        ),
        host.metric(
            "kubeplug_reconcile_duration_seconds_count",
            "plugin=\"myapp\"",
        ),
    )
}

/// Keep myapp busy for `window`, optionally swapping database meanwhile;
/// returns myapp's mean reconcile latency in that window.
fn myapp_mean_latency(host: &Host, ns: &str, window: Duration, mut swap: impl FnMut()) -> f64 {
    let (s0, c0) = myapp_latency(host);
    let started = Instant::now();
    let mut i = 0u32;
    while started.elapsed() < window {
        let replicas = 1 + (i % 3);
        kubectl_ok(
            &[
                "patch",
                "-n",
                ns,
                "myapp/busy",
                "--type=merge",
                "-p",
                &format!("{{\"spec\":{{\"replicas\":{replicas}}}}}"),
            ],
            None,
        );
        if i.is_multiple_of(4) {
            swap();
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    let (s1, c1) = myapp_latency(host);
    (s1 - s0) / (c1 - c0).max(1.0)
}

/// `component` with a custom section appended: a new digest (so the host
/// compiles and swaps it as a new version) with identical behaviour.
fn with_tag(component: &[u8], tag: u32) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"kubeplug-bench";
    let payload = tag.to_le_bytes();
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name);
    body.extend_from_slice(&payload);
    let mut out = component.to_vec();
    out.push(0);
    leb(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    install_crds();
    let ns = Namespace::new("bench-upgrade");
    let dir = PluginDir::with(&["database", "myapp"]);
    let host = Host::start(&dir);
    for i in 0..DATABASES {
        apply(
            &ns.name,
            &format!(
                "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: db{i}\nspec:\n  engine: mysql\n  version: 8.0.26\n"
            ),
        );
    }
    apply(
        &ns.name,
        "apiVersion: example.com/v1alpha1\nkind: MyApp\nmetadata:\n  name: busy\nspec:\n  replicas: 1\n",
    );
    eventually("databases converged", Duration::from_secs(120), || {
        (0..DATABASES)
            .all(|i| revision_of_service(&ns.name, &format!("db{i}")).as_deref() == Some("v1"))
            .then_some(())
    });

    // 1. File in place → first child written by the new version.
    let mut swap_times = Vec::new();
    for n in 0..SWAPS {
        let (file, want) = if n % 2 == 0 {
            ("database-v2", "v2")
        } else {
            ("database", "v1")
        };
        let started = Instant::now();
        dir.install(file, "database");
        eventually(
            "the new version's first write",
            Duration::from_secs(60),
            || {
                (0..DATABASES)
                    .any(|i| {
                        revision_of_service(&ns.name, &format!("db{i}")).as_deref() == Some(want)
                    })
                    .then_some(())
            },
        );
        swap_times.push(started.elapsed());
        // Let the rest converge before the next swap.
        eventually("all converged", Duration::from_secs(60), || {
            (0..DATABASES)
                .all(|i| revision_of_service(&ns.name, &format!("db{i}")).as_deref() == Some(want))
                .then_some(())
        });
    }
    swap_times.sort();

    // 2. Other plugins' latency with and without swaps. Back on v1 first.
    dir.install("database", "database");
    std::thread::sleep(Duration::from_secs(3));
    let window = Duration::from_secs(15);
    let quiet = myapp_mean_latency(&host, &ns.name, window, || {});
    // (a) swaps to new digests with the same behaviour: the cost of the swap
    // machinery itself (compile off the hot path, swap, re-queue).
    let v1 = std::fs::read(built("database")).expect("database.wasm");
    let mut tag = 0;
    let same = myapp_mean_latency(&host, &ns.name, window, || {
        tag += 1;
        dir.put("database", &with_tag(&v1, tag));
    });
    // (b) swaps between v1 and v2: the new version changes every child, so
    // the cluster does real work (StatefulSets roll their pods).
    let mut flip = false;
    let busy = myapp_mean_latency(&host, &ns.name, window, || {
        flip = !flip;
        dir.install(if flip { "database-v2" } else { "database" }, "database");
    });

    println!(
        "live upgrade of `database` ({SWAPS} swaps, {DATABASES} parents; includes the kubectl polling interval of 250 ms)"
    );
    println!(
        "  file in place -> first child written by the new version: p50 {:?}  p99 {:?}  max {:?}",
        percentile(&swap_times, 0.5),
        percentile(&swap_times, 0.99),
        swap_times.last().copied().unwrap_or_default()
    );
    let q = quiet.max(f64::EPSILON);
    println!(
        "  myapp mean reconcile latency (myapp patched every 100 ms, database swapped every 400 ms):"
    );
    println!(
        "    no swaps                          {:.2} ms",
        quiet * 1e3
    );
    println!(
        "    swaps, same behaviour (new digest) {:.2} ms  ratio {:.2}",
        same * 1e3,
        same / q
    );
    println!(
        "    swaps v1 <-> v2 (children change)  {:.2} ms  ratio {:.2}",
        busy * 1e3,
        busy / q
    );
}
