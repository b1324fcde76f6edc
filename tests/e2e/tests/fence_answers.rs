//! The answer fence on every path an answer takes (issue 21, class 5 and
//! the create-only race of class 7), tried on the local control plane with
//! the hostile guest (`plugins/hostile`, configured through `<name>.yaml`
//! settings files):
//!
//! - a `finalize` answer is held to the same quotas as a `reconcile`
//!   answer: events per answer, the parent's event budget, the requeue floor;
//! - a child carrying a finalizer its plugin may not use is refused;
//! - an object created between the host's decision and its write is never
//!   adopted;
//! - `release-finalizers` pointed at a namespace without the host's Leases
//!   refuses instead of reading it as "nobody leads".

use std::time::{Duration, Instant};

use kubeplug_e2e::*;

const TIMEOUT: Duration = Duration::from_secs(90);

/// Warning events with `reason` on a Hostile parent, eventually one
/// containing `needle`.
fn warning(ns: &str, parent: &str, reason: &str, needle: &str) -> String {
    eventually(
        &format!("a {reason} warning on {parent} mentioning {needle:?}"),
        TIMEOUT,
        || {
            events_for(ns, "Hostile", parent)
                .into_iter()
                .find(|(t, r, note)| t == "Warning" && r == reason && note.contains(needle))
                .map(|(_, _, note)| note)
        },
    )
}

fn has_finalizer(ns: &str, parent: &str) -> bool {
    get_json(ns, &format!("hostile/{parent}")).is_some_and(|h| {
        h["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == "test.kubeplug.io/hold"))
    })
}

/// Let a parent held by the hostile finalizer go (its `finalize` is done
/// once annotated).
fn release(ns: &str, parent: &str) {
    kubectl_ok(
        &[
            "annotate",
            "-n",
            ns,
            &format!("hostile/{parent}"),
            "test.kubeplug.io/release=true",
        ],
        None,
    );
    eventually(&format!("{parent} to go"), TIMEOUT, || {
        get_json(ns, &format!("hostile/{parent}"))
            .is_none()
            .then_some(())
    });
}

/// Reconcile and finalize calls of `plugin`, whatever their result.
fn calls(host: &Host, plugin: &str) -> f64 {
    host.metric("kubeplug_reconciles_total", &format!("plugin=\"{plugin}\""))
}

fn event_writes(host: &Host, plugin: &str) -> f64 {
    host.metric(
        "kubeplug_api_writes_total",
        &format!("plugin=\"{plugin}\",verb=\"event\""),
    )
}

#[test]
fn a_finalize_flood_records_at_most_the_parents_event_budget_and_is_called_no_faster_than_the_floor()
 {
    install_crds();
    let ns = Namespace::new("fence-finalize");
    let n = ns.name.as_str();
    let dir = PluginDir::with(&[]);
    // Answers of 5,000 events pass the per-answer quota here, so that the
    // parent's budget (30 a minute) and the floor (5 s) are what hold.
    let host = host_with_policy(
        &dir,
        "strict: true
plugins:
  hostile:
    parent: [Hostile.test.kubeplug.io]
    children: [ConfigMap]
    finalizers: [test.kubeplug.io/hold]
    quotas: {eventsPerAnswer: 5000}
",
    );
    // Restricted to this test's namespace, so that its calls are all this
    // test's (parents of earlier tests may still be going).
    hostile_as(
        &dir,
        "hostile",
        &format!("finalizer: true\nnamespaces: [{n}]"),
    );
    running(&host, "hostile");
    apply(
        n,
        &hostile("flood", "ok", "  finalize: events\n  count: 5000\n"),
    );
    eventually(
        "flood to carry the finalizer and its child",
        TIMEOUT,
        || (has_finalizer(n, "flood") && get_json(n, "configmap/flood-ok").is_some()).then_some(()),
    );
    // The reconciles that follow (status, the child's events) done before
    // counting: none of them may be counted as a finalize call.
    host.quiet("hostile", TIMEOUT);
    let (calls_before, events_before) = (calls(&host, "hostile"), event_writes(&host, "hostile"));
    let dropped_before = host.metric("kubeplug_events_dropped_total", "plugin=\"hostile\"");

    kubectl_ok(&["delete", "-n", n, "hostile/flood", "--wait=false"], None);
    let started = Instant::now();
    eventually("the first finalize call", TIMEOUT, || {
        (calls(&host, "hostile") > calls_before).then_some(())
    });
    std::thread::sleep(Duration::from_secs(20).saturating_sub(started.elapsed()));
    // On a busy machine the requeues may come late: the window is longer
    // then, never shorter (the rate below is per second of it).
    eventually("finalize to be called again", TIMEOUT, || {
        (calls(&host, "hostile") - calls_before >= 3.0).then_some(())
    });
    let took = started.elapsed().as_secs_f64();
    let finalizes = calls(&host, "hostile") - calls_before;
    let events = event_writes(&host, "hostile") - events_before;
    let dropped =
        host.metric("kubeplug_events_dropped_total", "plugin=\"hostile\"") - dropped_before;
    let failed: f64 = host
        .series("kubeplug_reconciles_total")
        .iter()
        .filter(|(labels, _)| {
            labels.contains("plugin=\"hostile\"") && !labels.contains("result=\"ok\"")
        })
        .map(|(_, v)| v)
        .sum();
    // kube's recorder folds repeats into one Event with a series count.
    let flood: u64 = get_json(n, "events.events.k8s.io")
        .and_then(|list| list["items"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter(|e| e["regarding"]["name"] == "flood" && e["reason"] == "FinalizeFlood")
        .map(|e| e["series"]["count"].as_u64().unwrap_or(1))
        .sum();
    println!(
        "FIGURE finalize_flood: {finalizes} calls, {events} event writes ({flood} FinalizeFlood events), {dropped} dropped in {took:.1} s"
    );
    let still_finalizing = get_json(n, "hostile/flood").is_some();
    release(n, "flood");

    // A requeue of 0 s without the floor calls finalize hundreds of times a
    // second; with it, once per 5 s (the first call, then one per floor).
    assert!(
        finalizes <= took / 5.0 + 2.0,
        "{finalizes} finalize calls in {took:.1} s"
    );
    assert!(finalizes >= 3.0, "finalize was called again: {finalizes}");
    // The parent's budget, plus one Warning per failed call (none expected;
    // counted so that a transient API error is not mistaken for a leak).
    assert!(
        events <= 30.0 + failed,
        "{events} event writes ({failed} failed calls)"
    );
    assert!(
        (1..=30).contains(&flood),
        "{flood} FinalizeFlood events recorded"
    );
    assert!(
        dropped >= 5000.0 * (finalizes - 1.0),
        "{dropped} events dropped over {finalizes} calls"
    );
    assert!(still_finalizing, "the parent was not released");
}

#[test]
fn a_finalize_answer_over_the_per_answer_quota_is_refused_and_writes_nothing() {
    install_crds();
    let ns = Namespace::new("fence-finalize-quota");
    let n = ns.name.as_str();
    let dir = PluginDir::with(&[]);
    // The test guests' grants: eventsPerAnswer is the default (10).
    let host = Host::start(&dir);
    // Restricted to this test's namespace, so that its calls are all this
    // test's (parents of earlier tests may still be going).
    hostile_as(
        &dir,
        "hostile",
        &format!("finalizer: true\nnamespaces: [{n}]"),
    );
    running(&host, "hostile");
    apply(
        n,
        &hostile("chatty", "ok", "  finalize: events\n  count: 5000\n"),
    );
    eventually("chatty to carry the finalizer", TIMEOUT, || {
        has_finalizer(n, "chatty").then_some(())
    });
    kubectl_ok(&["delete", "-n", n, "hostile/chatty", "--wait=false"], None);

    let note = warning(n, "chatty", "FenceViolation", "events in one answer");
    assert_eq!(
        note,
        "plugin hostile crossed its fence: 5000 events in one answer, over the quota of 10"
    );
    std::thread::sleep(Duration::from_secs(3));
    let events = events_for(n, "Hostile", "chatty");
    assert!(
        events
            .iter()
            .all(|(_, reason, _)| reason != "FinalizeFlood"),
        "none of a refused answer's events is recorded: {events:?}"
    );
    assert!(has_finalizer(n, "chatty"), "the finalizer stays");
    release(n, "chatty");
}

#[test]
fn a_child_carrying_a_finalizer_its_plugin_may_not_use_is_refused_and_nothing_is_written() {
    install_crds();
    let ns = Namespace::new("fence-child-finalizer");
    let n = ns.name.as_str();
    let dir = PluginDir::with(&["hostile"]);
    let host = Host::start(&dir);
    running(&host, "hostile");
    apply(n, &hostile("sticky", "foreign-finalizer", ""));
    apply(
        n,
        &hostile(
            "thief",
            "foreign-finalizer",
            "  finalizer: kubernetes.io/pvc-protection\n",
        ),
    );
    apply(n, &hostile("fine", "ok", ""));

    let note = warning(n, "sticky", "FenceViolation", "example.com/never");
    assert_eq!(
        note,
        "plugin hostile crossed its fence: child ConfigMap/sticky-ok: finalizer example.com/never is not granted (a plugin may use hostile.kubeplug.io/* unless granted more)"
    );
    warning(
        n,
        "thief",
        "FenceViolation",
        "finalizer kubernetes.io/pvc-protection is not granted",
    );
    eventually("fine's child", TIMEOUT, || get_json(n, "configmap/fine-ok"));
    for child in ["sticky-ok", "thief-ok"] {
        assert!(
            get_json(n, &format!("configmap/{child}")).is_none(),
            "{child} must not be written"
        );
    }
    // It serves on; two of its three parents failing over and over makes
    // it `degraded`, with the fence's refusal as the reason.
    let row = host.plugin("hostile").expect("hostile row");
    match row["state"].as_str() {
        Some("running") => {}
        Some("degraded") => assert!(
            row["reason"]
                .as_str()
                .is_some_and(|r| r.contains("crossed its fence")),
            "{row}"
        ),
        _ => panic!("hostile must still serve: {row}"),
    }
}

#[test]
fn an_object_created_between_the_decision_and_the_write_is_never_adopted() {
    install_crds();
    let ns = Namespace::new("fence-race");
    let n = ns.name.as_str();
    let proxy = Proxy::start();
    let dir = PluginDir::with(&["hostile"]);
    let host = Host::start_as(&dir, &[], &proxy.kubeconfig);
    running(&host, "hostile");
    // The host's first write of race-ok gets a 429 asking it to come back
    // in 5 s: the window in which someone else creates the object.
    proxy.faults("match=/configmaps/race-ok&rejectWritesOnly=true&rejectNext=1&retryAfter=5");
    apply(n, &hostile("race", "ok", ""));
    eventually("the host's first write of race-ok", TIMEOUT, || {
        (proxy.stats()["rejected429"].as_u64() >= Some(1)).then_some(())
    });
    kubectl_ok(
        &[
            "create",
            "configmap",
            "race-ok",
            "-n",
            n,
            "--from-literal=mine=yes",
        ],
        None,
    );
    let before = get_json(n, "configmap/race-ok").expect("race-ok exists");

    let note = warning(n, "race", "ChildClash", "race-ok");
    assert!(
        note.contains(
            "ConfigMap race-ok exists and is not controlled by this Hostile (no controller); kubeplug leaves it untouched"
        ),
        "{note}"
    );
    std::thread::sleep(Duration::from_secs(2));
    let after = get_json(n, "configmap/race-ok").expect("race-ok still exists");
    assert_eq!(
        after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
        "race-ok was written to: {after}"
    );
    assert!(after["metadata"]["ownerReferences"].is_null(), "{after}");
    assert!(after["metadata"]["labels"].is_null(), "{after}");
}

#[test]
fn release_finalizers_refuses_a_leases_namespace_that_holds_no_kubeplug_leases() {
    install_crds();
    let empty = Namespace::new("no-leases");
    let run = |lease_namespace: &str| {
        std::process::Command::new(host_binary())
            .args([
                "release-finalizers",
                "hostile",
                "--resource",
                "hostiles.test.kubeplug.io",
                "--dry-run",
                "--lease-namespace",
                lease_namespace,
            ])
            .env("KUBECONFIG", std::env::var("KUBECONFIG").unwrap())
            .output()
            .expect("run release-finalizers")
    };
    for (namespace, what) in [
        (
            empty.name.clone(),
            format!("namespace {} holds no kubeplug Leases", empty.name),
        ),
        (
            "kubeplug-nowhere".to_string(),
            "namespace kubeplug-nowhere does not exist".to_string(),
        ),
    ] {
        let out = run(&namespace);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "it refused: {stderr}");
        assert!(
            stderr.contains(&format!(
                "{what}, so nothing shows whether a replica leads plugin hostile: pass the host's namespace as --lease-namespace"
            )),
            "{stderr}"
        );
    }
}
