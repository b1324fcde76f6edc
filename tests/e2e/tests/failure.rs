//! Correct under failure: fenced leadership, balanced replicas, API-server
//! restarts, expired watches, slow and throttling API servers. Real
//! processes throughout: host replicas are frozen (SIGSTOP), killed and
//! resumed; the control plane is stopped and started again on its data; a
//! loopback proxy adds latency and 429s (tests/cluster/proxy).
//!
//! Figures these tests print (`FIGURE ...` lines) are collected in
//! docs/benchmarks/failure.md.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kubeplug_e2e::*;

const TIMEOUT: Duration = Duration::from_secs(120);

/// Print the time since `since` as figure `name`, and check it is within
/// the lease duration plus a few retry periods.
fn took_over_in_time(name: &str, since: Instant) {
    let took = since.elapsed();
    println!("FIGURE {name} {:.1}", took.as_secs_f64());
    assert!(
        took < LEASE_DURATION + Duration::from_secs(5),
        "took over after {took:?}"
    );
}

fn replica_args(ns: &Namespace) -> Vec<&str> {
    let mut args = vec!["--leader-elect", "--lease-namespace", ns.name.as_str()];
    args.extend(LEASE);
    args
}

fn database(name: &str, replicas: u32) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: {name}\nspec:\n  engine: postgresql\n  version: 16.4.0\n  replicas: {replicas}\n"
    )
}

fn databases(prefix: &str, count: usize) -> String {
    (0..count)
        .map(|i| database(&format!("{prefix}-{i}"), 1))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Delete every Database of `ns` and wait until they are gone, so that the
/// next test's host does not start with a backlog of this test's parents
/// (namespaces are deleted without waiting).
fn delete_databases(ns: &str) {
    kubectl_ok(
        &[
            "delete",
            "databases",
            "--all",
            "-n",
            ns,
            "--wait=true",
            "--timeout=180s",
        ],
        None,
    );
}

/// Names of the Databases in `ns` whose phase is Running.
fn running(ns: &str) -> BTreeSet<String> {
    let Some(list) = get_json(ns, "databases") else {
        return BTreeSet::new();
    };
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["status"]["phase"] == "Running")
        .filter_map(|d| d["metadata"]["name"].as_str().map(String::from))
        .collect()
}

/// Each credentials Secret in `ns`: name → (password, resourceVersion).
fn passwords(ns: &str) -> BTreeMap<String, (String, String)> {
    let list = get_json(ns, "secrets").expect("list secrets");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| {
            s["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-credentials"))
        })
        .map(|s| {
            (
                s["metadata"]["name"].as_str().unwrap().to_string(),
                (
                    s["data"]["password"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    s["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                ),
            )
        })
        .collect()
}

/// Writes of a host replica recorded by the API server since `since`
/// (audit-log time), Leases left out (a stale leader may still try to renew
/// its own, which the Lease's resourceVersion refuses).
fn writes_by(host: &Host, since: &str) -> Vec<AuditedWrite> {
    let pid = format!("-{})", host.pid());
    audited_writes()
        .into_iter()
        .filter(|w| w.user_agent.ends_with(&pid) && w.received.as_str() >= since)
        .filter(|w| w.resource != "leases")
        .collect()
}

#[test]
fn a_frozen_leader_writes_nothing_once_its_lease_is_gone_and_no_password_changes() {
    install_crds();
    let ns = Namespace::new("fence");
    let n = ns.name.as_str();
    let dir = PluginDir::with(&["database"]);
    let args = replica_args(&ns);
    let first = Host::start_with(&dir, &args);
    let leader_id = eventually("a leader", TIMEOUT, || {
        lease_holders(n).get("database").cloned()
    });
    let second = Host::start_with(&dir, &args);
    assert!(first.is(&leader_id), "the first replica leads");

    apply(n, &databases("db", 5));
    eventually("every database to run", TIMEOUT, || {
        (running(n).len() == 5).then_some(())
    });
    let before = passwords(n);
    assert_eq!(before.len(), 5);

    // Work for the leader, then freeze it before it is done.
    for i in 0..5 {
        kubectl_ok(
            &[
                "patch",
                "-n",
                n,
                &format!("database/db-{i}"),
                "--type=merge",
                "-p",
                r#"{"spec":{"replicas":2}}"#,
            ],
            None,
        );
    }
    first.signal("STOP");
    let frozen = Instant::now();
    // From here on the old leader may write nothing: frozen, then resumed
    // after its lease is gone.
    let frozen_at = audit_now();
    let new_leader = eventually("the standby to take over", TIMEOUT, || {
        lease_holders(n)
            .get("database")
            .filter(|h| second.is(h))
            .cloned()
    });
    took_over_in_time("takeover_after_freeze_seconds", frozen);
    eventually("the new leader to converge", TIMEOUT, || {
        let all_two = get_json(n, "statefulsets")?["items"]
            .as_array()?
            .iter()
            .all(|s| s["spec"]["replicas"] == 2);
        (all_two && running(n).len() == 5).then_some(())
    });

    // Resume the old leader: it must notice at once that its term is over.
    first.signal("CONT");
    std::thread::sleep(LEASE_DURATION * 2);
    let stale = writes_by(&first, &frozen_at);
    println!("FIGURE writes_by_stale_leader {}", stale.len());
    assert!(
        stale.is_empty(),
        "the old leader wrote after losing its lease: {stale:#?}"
    );
    assert!(
        !writes_by(&second, &frozen_at).is_empty(),
        "the audit log names the new leader's writes"
    );
    assert_eq!(lease_holders(n).get("database"), Some(&new_leader));
    let log = std::fs::read_to_string(&first.log).unwrap_or_default();
    assert!(
        log.contains("leadership changed") || log.contains("renew deadline"),
        "the old leader logs that it stopped leading:\n{}",
        first.log_tail()
    );

    let after = passwords(n);
    assert_eq!(before, after, "no password changed, no Secret was written");
    let creates: BTreeMap<String, usize> = audited_writes()
        .into_iter()
        .filter(|w| w.namespace == n && w.resource == "secrets" && w.code == 201)
        .fold(BTreeMap::new(), |mut m, w| {
            *m.entry(w.name).or_default() += 1;
            m
        });
    assert!(
        creates.values().all(|c| *c == 1),
        "each Secret was created once: {creates:?}"
    );
}

#[test]
fn three_replicas_share_the_plugins_and_a_dead_ones_move_within_the_lease_duration() {
    install_crds();
    let ns = Namespace::new("share");
    let n = ns.name.as_str();
    let dir = PluginDir::with(&["database", "myapp", "pod-annotator"]);
    dir.settings("pod-annotator", &format!("config:\n  namespaces: [{n}]\n"));
    let args = replica_args(&ns);
    let hosts: Vec<Host> = (0..3).map(|_| Host::start_with(&dir, &args)).collect();

    let balanced = eventually("each replica to lead one plugin", TIMEOUT, || {
        let holders = lease_holders(n);
        let distinct: BTreeSet<&String> = holders.values().collect();
        (holders.len() == 3 && distinct.len() == 3).then_some(holders)
    });
    // Stays balanced: no lease moves once shared.
    std::thread::sleep(LEASE_DURATION);
    assert_eq!(lease_holders(n), balanced, "the shares are stable");

    let (victim_plugin, victim_id) = balanced
        .iter()
        .find(|(p, _)| *p == "database")
        .map(|(p, h)| (p.clone(), h.clone()))
        .unwrap();
    let mut hosts = hosts;
    let index = hosts.iter().position(|h| h.is(&victim_id)).unwrap();
    let victim = hosts.remove(index);
    victim.stop(); // SIGKILL: no release
    let killed = Instant::now();
    let heir = eventually("the dead replica's plugin to move", TIMEOUT, || {
        lease_holders(n)
            .get(&victim_plugin)
            .filter(|h| **h != victim_id)
            .cloned()
    });
    took_over_in_time("takeover_after_kill_seconds", killed);
    assert!(hosts.iter().any(|h| h.is(&heir)));
    let loads: BTreeMap<String, usize> =
        lease_holders(n)
            .into_values()
            .fold(BTreeMap::new(), |mut m, h| {
                *m.entry(h).or_default() += 1;
                m
            });
    assert_eq!(
        loads.values().copied().collect::<BTreeSet<_>>(),
        BTreeSet::from([1, 2])
    );

    apply(n, &database("after-kill", 1));
    eventually("the heir to reconcile", TIMEOUT, || {
        get_json(n, "statefulset/after-kill").map(|_| ())
    });
    let heir_host = hosts.iter().find(|h| h.is(&heir)).unwrap();
    assert!(heir_host.writes("database") > 0, "the heir wrote it");
}

/// `/readyz` of `host` as a bool.
fn ready(host: &Host) -> bool {
    host.get("/readyz").is_ok_and(|(code, _)| code == 200)
}

/// Restart the API server in the middle of a burst of 200 parents: the
/// host reports not ready while it is gone, reconnects to the same address,
/// and every parent converges with nothing created twice.
#[test]
fn an_api_server_restart_in_a_burst_converges_every_parent_and_writes_nothing_twice() {
    install_crds();
    let ns = Namespace::new("restart");
    let n = ns.name.as_str();
    let dir = PluginDir::with(&["database"]);
    let since = audit_now();
    // The burst is the host's: 200 parents waiting when it starts, and the
    // API server goes away once the host has logged 150 of the burst's 600
    // children, a moment read from its log file. Whether the stop really
    // came in the middle is read afterwards from the audit log (below):
    // asking the API server at the stop would let the burst run on while
    // the question is answered.
    apply(n, &databases("burst", 200));
    let host = Host::start(&dir);
    eventually_every(
        "the host's first children",
        TIMEOUT,
        Duration::from_millis(10),
        || (host.logged("child written") >= 150).then_some(()),
    );
    let stopped_at = audit_now();
    let stopped = Instant::now();
    let outage = Outage::begin();
    eventually("the host to report not ready", TIMEOUT, || {
        (!ready(&host)).then_some(())
    });
    let unready_after = stopped.elapsed();
    outage.end();
    eventually("the host to be ready again", TIMEOUT, || {
        ready(&host).then_some(())
    });
    let back_after = stopped.elapsed();
    println!(
        "FIGURE apiserver_outage_seconds {:.1} (not ready after {:.1})",
        back_after.as_secs_f64(),
        unready_after.as_secs_f64()
    );
    eventually("all 200 databases to run", Duration::from_secs(600), || {
        (running(n).len() == 200).then_some(())
    });
    println!(
        "FIGURE restart_burst_converged_seconds {:.1}",
        stopped.elapsed().as_secs_f64()
    );

    let writes: Vec<AuditedWrite> = audited_writes()
        .into_iter()
        .filter(|w| w.namespace == n && w.received >= since)
        // The host's writes (its User-Agent); the StatefulSet controller and
        // the simulated kubelet recreate pods after a restart, as they should.
        .filter(|w| w.user_agent.starts_with("kubeplug/"))
        .collect();
    // Created: a create, or a server-side apply (a patch), answered 201.
    let mut created: BTreeMap<(String, String), usize> = BTreeMap::new();
    for w in writes.iter().filter(|w| w.code == 201) {
        *created
            .entry((w.resource.clone(), w.name.clone()))
            .or_default() += 1;
    }
    let twice: Vec<_> = created.iter().filter(|(_, c)| **c > 1).collect();
    assert!(twice.is_empty(), "created twice: {twice:?}");
    let before_stop = writes
        .iter()
        .filter(|w| w.code == 201 && w.resource == "statefulsets")
        .filter(|w| w.received < stopped_at)
        .count();
    println!("FIGURE restart_burst_created_before_stop {before_stop} of 200");
    assert!(
        (1..200).contains(&before_stop),
        "the stop came in the middle of the burst ({before_stop} of 200 StatefulSets were created before it)"
    );
    let secrets = created.keys().filter(|(r, _)| r == "secrets").count();
    assert_eq!(secrets, 200, "one Secret per Database");
    assert_eq!(passwords(n).len(), 200);
    let sts = get_json(n, "statefulsets").expect("statefulsets");
    for s in sts["items"].as_array().unwrap() {
        assert_eq!(
            s["metadata"]["generation"], 1,
            "a StatefulSet's spec was written once: {}",
            s["metadata"]["name"]
        );
    }
    println!("FIGURE restart_writes_doubled 0");
    delete_databases(n);
}

/// A watch resumed after the API server lost its history gets 410 Gone; the
/// host relists and still sees the deletion that happened meanwhile. The
/// host reaches the API server through the fault proxy, which cuts its
/// connections and refuses new ones while a Database is deleted and the API
/// server restarts (its watch cache then starts after the host's
/// resourceVersion).
#[test]
fn an_expired_watch_relists_without_losing_a_deletion() {
    install_crds();
    let ns = Namespace::new("gone");
    let n = ns.name.as_str();
    let proxy = Proxy::start();
    let dir = PluginDir::with(&["database"]);
    let host = Host::start_as(&dir, &[], &proxy.kubeconfig);
    apply(n, &databases("keep", 3));
    eventually("the databases to run", TIMEOUT, || {
        (running(n).len() == 3).then_some(())
    });
    let cached = |host: &Host| host.metric("kubeplug_cached_objects", "Database.example.com/v1");
    let before = cached(&host);
    assert!(before >= 3.0);

    proxy.faults("down=true&cut=true");
    kubectl_ok(&["delete", "-n", n, "database/keep-1", "--wait=true"], None);
    Outage::begin().end();
    proxy.faults("down=false");
    eventually(
        "the host to relist and drop the deleted parent",
        TIMEOUT,
        || (cached(&host) == before - 1.0).then_some(()),
    );
    let log = std::fs::read_to_string(&host.log).unwrap_or_default();
    assert!(
        log.lines()
            .any(|l| l.contains("410 Gone") && l.contains("Database.example.com")),
        "the Database watch expired and was relisted:\n{}",
        host.log_tail()
    );
    apply(n, &database("keep-after", 1));
    let started = Instant::now();
    while !running(n).contains("keep-after") {
        // What a failure needs to be told apart: the simulated kubelet's
        // Pod (never ready?), the status the host wrote, and what the host
        // logged about the parent.
        if started.elapsed() > TIMEOUT {
            let pods = kubectl(
                &["get", "pods", "-n", n, "-o", "wide", "--show-labels"],
                None,
            );
            let status = get_json(n, "database/keep-after").map(|d| d["status"].clone());
            let log = std::fs::read_to_string(&host.log).unwrap_or_default();
            let about: Vec<&str> = log
                .lines()
                .filter(|l| l.contains("keep-after") || l.contains("Pod.v1"))
                .collect();
            panic!(
                "keep-after not Running after {TIMEOUT:?}: its status {status:?}\npods:\n{}\nthe host on it and on Pods:\n{}",
                String::from_utf8_lossy(&pods.stdout),
                about.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Latency and throttling from a proxy in front of the API server: the
/// queue stays bounded, a second plugin is not starved, and 429s are
/// retried no sooner than the server's Retry-After.
#[test]
fn a_slow_and_throttling_api_server_neither_floods_the_queue_nor_starves_a_plugin() {
    install_crds();
    let ns = Namespace::new("slow");
    let n = ns.name.as_str();
    // The queue bound below counts this test's parents only: wait until
    // the Databases of earlier tests' namespaces are gone.
    eventually("earlier tests' databases to go", TIMEOUT, || {
        let all = kubectl_ok(
            &["get", "databases", "--all-namespaces", "-o", "name"],
            None,
        );
        all.trim().is_empty().then_some(())
    });
    let proxy = Proxy::start();
    proxy.faults("latency=150ms");
    let dir = PluginDir::with(&["database", "myapp"]);
    let host = Host::start_as(&dir, &[], &proxy.kubeconfig);

    apply(n, &databases("slow", 40));
    apply(
        n,
        "apiVersion: example.com/v1alpha1\nkind: MyApp\nmetadata:\n  name: not-starved\nspec:\n  replicas: 1\n",
    );
    let started = Instant::now();
    eventually(
        "the app to run while databases are still pending",
        TIMEOUT,
        || {
            let app = get_json(n, "myapp/not-starved")?;
            (app["status"]["phase"] == "Running").then_some(())
        },
    );
    let app_took = started.elapsed();
    let depth = host.metric("kubeplug_queue_depth", "plugin=\"database\"");
    println!(
        "FIGURE slow_api_app_converged_seconds {:.1}",
        app_took.as_secs_f64()
    );
    assert!(
        depth <= 40.0,
        "the queue holds each parent at most once: {depth}"
    );

    // 429s on requests naming one Database (status writes, reads by name):
    // each such path is unique, so the proxy can match a retry to its 429.
    proxy.faults("latency=0s&reject429=0.3&retryAfter=1&match=/databases/");
    apply(n, &databases("throttled", 10));
    eventually(
        "every database to run despite 429s",
        Duration::from_secs(300),
        || (running(n).len() == 50).then_some(()),
    );
    let stats = proxy.stats();
    let rejected = stats["rejected429"].as_u64().unwrap_or_default();
    println!("FIGURE throttled_429s {rejected}");
    assert!(rejected > 0, "the proxy sent 429s: {stats}");
    let rejections = stats["rejections"].as_array().cloned().unwrap_or_default();
    let retried: Vec<&serde_json::Value> = rejections
        .iter()
        .filter(|r| r["retrySeq"].is_number())
        .collect();
    assert!(!retried.is_empty(), "429s were retried: {stats}");
    let early: Vec<&&serde_json::Value> = retried
        .iter()
        .filter(|r| r["retriedEarly"] == true)
        .collect();
    assert!(
        early.is_empty(),
        "requests retried before Retry-After: {early:#?}"
    );
    drop(host);
    delete_databases(n);
}
