//! Running the host as it is deployed: with the ServiceAccount and RBAC of
//! `deploy/base/rbac.yaml`, and as several replicas with leader election.

use std::time::Duration;

use kubeplug_e2e::*;

const TIMEOUT: Duration = Duration::from_secs(90);

/// A namespace, the three seed plugins (pod-annotator pointed at that
/// namespace) and a kubeconfig of the host's ServiceAccount.
fn seed_plugins_as_service_account(prefix: &str) -> (Namespace, PluginDir, std::path::PathBuf) {
    install_crds();
    let ns = Namespace::new(prefix);
    let dir = PluginDir::with(&["database", "myapp", "pod-annotator"]);
    dir.settings(
        "pod-annotator",
        &format!("config:\n  namespaces: [{}]\n", ns.name),
    );
    let kubeconfig = service_account_kubeconfig(&dir);
    (ns, dir, kubeconfig)
}

fn database(name: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: {name}\nspec:\n  engine: postgresql\n  version: 16.4.0\n  replicas: 1\n"
    )
}

fn phase(ns: &str, name: &str) -> Option<String> {
    get_json(ns, &format!("database/{name}"))?["status"]["phase"]
        .as_str()
        .map(String::from)
}

#[test]
fn the_host_runs_all_three_plugins_with_the_service_account_of_deploy_rbac() {
    let (ns, dir, kubeconfig) = seed_plugins_as_service_account("sa");
    // The token really is not admin: it may not list nodes.
    let denied = kubectl(
        &["--kubeconfig", kubeconfig.to_str().unwrap(), "get", "nodes"],
        None,
    );
    assert!(
        !denied.status.success(),
        "the ServiceAccount must not be admin"
    );

    // Leases where deploy/base/rbac.yaml allows them: the host's namespace.
    let host = Host::start_as(
        &dir,
        &["--leader-elect", "--lease-namespace", "kubeplug-system"],
        &kubeconfig,
    );
    apply(&ns.name, &database("sa-db"));
    apply(
        &ns.name,
        "apiVersion: example.com/v1alpha1\nkind: MyApp\nmetadata:\n  name: sa-app\nspec:\n  replicas: 1\n",
    );
    apply(
        &ns.name,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: sa-pod\nspec:\n  containers:\n  - name: c\n    image: busybox:1.36\n",
    );
    eventually("the database to run", TIMEOUT, || {
        (phase(&ns.name, "sa-db").as_deref() == Some("Running")).then_some(())
    });
    eventually("the app to run", TIMEOUT, || {
        let app = get_json(&ns.name, "myapp/sa-app")?;
        (app["status"]["phase"] == "Running").then_some(())
    });
    eventually("the pod to be stamped", TIMEOUT, || {
        let pod = get_json(&ns.name, "pod/sa-pod")?;
        (pod["metadata"]["annotations"]["example.com/injected"] == "true").then_some(())
    });
    assert!(
        !std::fs::read_to_string(&host.log)
            .unwrap_or_default()
            .contains("forbidden"),
        "the host hit a forbidden request:\n{}",
        host.log_tail()
    );
    // SIGTERM: a clean exit that hands its Leases back.
    assert!(host.terminate(), "the host exits cleanly on SIGTERM");
    let held = lease_holders("kubeplug-system");
    assert!(held.is_empty(), "every Lease is released: {held:?}");
}

/// Who holds the `database` plugin's Lease in `ns` (none once released).
fn lease_holder(ns: &Namespace) -> Option<String> {
    get_json(&ns.name, "lease/kubeplug-database")?["spec"]["holderIdentity"]
        .as_str()
        .filter(|h| !h.is_empty())
        .map(String::from)
}

/// Two replicas with leader election (and the lease `timing` flags, if
/// any) and their Leases in `ns`: the leader, its identity, and the
/// follower started after it.
fn two_replicas(ns: &Namespace, dir: &PluginDir, timing: &[&str]) -> (Host, String, Host) {
    let mut args = vec!["--leader-elect", "--lease-namespace", ns.name.as_str()];
    args.extend_from_slice(timing);
    let first = Host::start_with(dir, &args);
    let leader = eventually("a leader", TIMEOUT, || lease_holder(ns));
    let second = Host::start_with(dir, &args);
    (first, leader, second)
}

#[test]
fn a_second_replica_takes_over_when_the_leader_dies() {
    install_crds();
    let ns = Namespace::new("leader");
    let dir = PluginDir::with(&["database"]);
    let (first, leader, second) = two_replicas(&ns, &dir, &[]);

    apply(&ns.name, &database("led-db"));
    eventually("the leader to reconcile", TIMEOUT, || {
        (phase(&ns.name, "led-db").as_deref() == Some("Running")).then_some(())
    });
    assert!(first.writes("database") > 0, "the first replica leads");
    assert_eq!(second.writes("database"), 0, "a follower never writes");

    first.stop();
    eventually("the lease to move", TIMEOUT, || {
        lease_holder(&ns).filter(|h| *h != leader)
    });
    apply(&ns.name, &database("after-failover"));
    eventually("the new leader to reconcile", TIMEOUT, || {
        (phase(&ns.name, "after-failover").as_deref() == Some("Running")).then_some(())
    });
    assert!(
        second.writes("database") > 0,
        "the second replica took over"
    );
}

#[test]
fn a_replica_shutting_down_hands_its_lease_over_at_once() {
    install_crds();
    let ns = Namespace::new("handover");
    let dir = PluginDir::with(&["database"]);
    // A lease of a minute: without the release, the follower could not take
    // over before it expires, about a minute after the leader's last
    // renewal; with it, its next attempt (every 2 s) does. The gap leaves
    // room for a busy machine on both sides.
    let timing = [
        "--lease-duration",
        "60s",
        "--renew-deadline",
        "40s",
        "--retry-period",
        "2s",
    ];
    let (first, leader, second) = two_replicas(&ns, &dir, &timing);

    let stopped = std::time::Instant::now();
    assert!(first.terminate(), "the host exits cleanly on SIGTERM");
    eventually("the lease to move", TIMEOUT, || {
        lease_holder(&ns).filter(|h| *h != leader)
    });
    let took = stopped.elapsed();
    println!("figures: the lease moved {took:?} after SIGTERM (a 60 s lease)");
    assert!(
        took < Duration::from_secs(30),
        "takeover took {took:?}: the lease was not released"
    );
    apply(&ns.name, &database("after-handover"));
    eventually("the new leader to reconcile", TIMEOUT, || {
        (phase(&ns.name, "after-handover").as_deref() == Some("Running")).then_some(())
    });
    assert!(second.writes("database") > 0);
}

const HOST_USER: &str = "system:serviceaccount:kubeplug-system:kubeplug";

fn can_i(verb: &str, resource: &str, namespace: &str) -> bool {
    let out = kubectl(
        &[
            "auth", "can-i", verb, resource, "--as", HOST_USER, "-n", namespace,
        ],
        None,
    );
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

#[test]
fn the_hosts_own_role_has_no_write_verb_on_any_kind_its_plugins_write() {
    install_crds();
    kubectl_ok(
        &[
            "apply",
            "-f",
            repo()
                .join("deploy/base/rbac.yaml")
                .to_str()
                .expect("utf-8 path"),
        ],
        None,
    );
    for resource in [
        "statefulsets.apps",
        "deployments.apps",
        "services",
        "secrets",
        "pods",
        "configmaps",
        "databases.example.com",
        "myapps.example.com",
        "databases.example.com/status",
        "events.events.k8s.io",
    ] {
        for verb in ["create", "update", "patch", "delete"] {
            assert!(
                !can_i(verb, resource, "default"),
                "the host may {verb} {resource}"
            );
        }
    }
    assert!(can_i("list", "statefulsets.apps", "default"));
    assert!(can_i(
        "impersonate",
        "serviceaccounts/kubeplug-plugin-database",
        "kubeplug-system"
    ));
    assert!(!can_i(
        "impersonate",
        "serviceaccounts/default",
        "kube-system"
    ));
    assert!(!can_i("impersonate", "users/admin", "default"));
}

/// Puts a plugin's role back as `deploy/base/plugin-rbac.yaml` has it, even when
/// the test fails (RBAC is cluster-wide; later tests need it).
struct RestoreRoles;

impl Drop for RestoreRoles {
    fn drop(&mut self) {
        let rbac = repo().join("deploy/base/plugin-rbac.yaml");
        let _ = kubectl(&["apply", "-f", rbac.to_str().unwrap_or_default()], None);
    }
}

/// myapp's ClusterRole with only `verbs` on `resource` (a [`RestoreRoles`]
/// puts it back).
fn restrict_myapp(resource: &str, verbs: &[&str]) {
    let role = kubectl_ok(
        &["get", "clusterrole", "kubeplug-plugin-myapp", "-o", "json"],
        None,
    );
    let mut role: serde_json::Value = serde_json::from_str(&role).expect("role JSON");
    for rule in role["rules"].as_array_mut().expect("rules") {
        if rule["resources"] == serde_json::json!([resource]) {
            rule["verbs"] = serde_json::json!(verbs);
        }
    }
    kubectl_ok(&["apply", "-f", "-"], Some(&role.to_string()));
}

#[test]
fn a_plugin_whose_role_loses_a_rule_fails_with_a_clear_event_while_the_others_go_on() {
    let (ns, dir, kubeconfig) = seed_plugins_as_service_account("rbac-cut");
    let _restore = RestoreRoles;
    // myapp's role keeps reading Deployments but may no longer write them.
    restrict_myapp("deployments", &["get", "list", "watch"]);

    let host = Host::start_as(&dir, &[], &kubeconfig);
    apply(
        &ns.name,
        "apiVersion: example.com/v1alpha1\nkind: MyApp\nmetadata:\n  name: cut-app\nspec:\n  replicas: 1\n",
    );
    apply(&ns.name, &database("cut-db"));
    apply(
        &ns.name,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: cut-pod\nspec:\n  containers:\n  - name: c\n    image: busybox:1.36\n",
    );
    let note = eventually("a WriteFailed event on the app", TIMEOUT, || {
        events_for(&ns.name, "MyApp", "cut-app")
            .into_iter()
            .find(|(t, r, _)| t == "Warning" && r == "WriteFailed")
            .map(|(_, _, note)| note)
    });
    for needle in [
        "failed to apply Deployment",
        "forbidden",
        "system:serviceaccount:kubeplug-system:kubeplug-plugin-myapp",
    ] {
        assert!(note.contains(needle), "{needle:?} not in {note}");
    }
    eventually("the database to run", TIMEOUT, || {
        (phase(&ns.name, "cut-db").as_deref() == Some("Running")).then_some(())
    });
    eventually("the pod to be stamped", TIMEOUT, || {
        let pod = get_json(&ns.name, "pod/cut-pod")?;
        (pod["metadata"]["annotations"]["example.com/injected"] == "true").then_some(())
    });
    assert!(get_json(&ns.name, "deployment/cut-app-deploy").is_none());
    // Its every reconcile fails: the plugin says so, in the API server's words.
    let reason = degraded_for(&host, "myapp");
    for needle in [
        "reconciles keep failing",
        "failed to apply Deployment",
        "cannot patch resource \"deployments\"",
        "(Forbidden, 403)",
    ] {
        assert!(reason.contains(needle), "{needle:?} not in {reason}");
    }
    assert_eq!(host.plugin("database").unwrap()["state"], "running");
    assert_one_line_failures(&host, "myapp");

    // The platform puts the rule back: the app converges on a retry, and
    // the plugin is running again.
    drop(_restore);
    eventually(
        "the app's deployment once the rule is back",
        TIMEOUT,
        || get_json(&ns.name, "deployment/cut-app-deploy"),
    );
    running_again(&host, "myapp");
}

/// A plugin whose ServiceAccount may not read its own parents (the issue a
/// new team meets first: a Role without `get`) is `degraded` with that
/// reason within 30 s, not `running` with every reconcile failing, and
/// `running` again once the platform adds the rule, with no restart.
#[test]
fn a_plugin_denied_a_read_it_needs_is_degraded_with_the_reason_and_recovers_when_granted() {
    let (ns, dir, kubeconfig) = seed_plugins_as_service_account("read-cut");
    let restore = RestoreRoles;
    restrict_myapp("myapps", &["list", "watch", "patch", "update"]);

    // Its own namespace only: other tests' MyApps are not this one's parents.
    let host = Host::start_as(&dir, &["--namespaces", &ns.name], &kubeconfig);
    apply(
        &ns.name,
        "apiVersion: example.com/v1alpha1\nkind: MyApp\nmetadata:\n  name: unread\nspec:\n  replicas: 1\n",
    );
    let started = std::time::Instant::now();
    let reason = degraded_for(&host, "myapp");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "degraded after {:?}",
        started.elapsed()
    );
    for needle in [
        "reconciles keep failing (1 of the 1 parents",
        &format!("{}/unread", ns.name),
        "kubeplug-plugin-myapp may not get myapps.example.com",
    ] {
        assert!(reason.contains(needle), "{needle:?} not in {reason}");
    }
    assert_one_line_failures(&host, "myapp");
    assert!(get_json(&ns.name, "deployment/unread-deploy").is_none());

    drop(restore);
    running_again(&host, "myapp");
    eventually("the app's deployment once it may read", TIMEOUT, || {
        get_json(&ns.name, "deployment/unread-deploy")
    });
}

/// The `reason` of `plugin` once it is `degraded`.
fn degraded_for(host: &Host, plugin: &str) -> String {
    let row = eventually(&format!("{plugin} to be degraded"), TIMEOUT, || {
        host.plugin(plugin).filter(|p| p["state"] == "degraded")
    });
    row["reason"].as_str().unwrap_or_default().to_string()
}

/// `plugin` turns `running` by itself (a refused read is retried at least
/// every 30 s; the write the first test cut, with backoff).
fn running_again(host: &Host, plugin: &str) {
    eventually(&format!("{plugin} to be running again"), TIMEOUT, || {
        host.plugin(plugin).filter(|p| p["state"] == "running")
    });
}

/// The host's `reconcile failed` lines for `plugin` read as the API server
/// wrote its answer: no `Debug` dump of kube's `Status`.
fn assert_one_line_failures(host: &Host, plugin: &str) {
    let log = std::fs::read_to_string(&host.log).unwrap_or_default();
    let failures: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("reconcile failed") && l.contains(plugin))
        .collect();
    assert!(
        !failures.is_empty(),
        "no failure logged:\n{}",
        host.log_tail()
    );
    for line in failures {
        assert!(
            !line.contains("Status {"),
            "a Debug dump in the log: {line}"
        );
        assert!(line.len() < 1500, "{} bytes: {line}", line.len());
    }
}

/// A plugin whose parent kind the host's own RBAC does not let it watch (no
/// rule for `hostiles` in deploy/base/rbac.yaml) is `degraded` with the reason,
/// a metric and a warning, while the host is ready and the other plugins
/// serve.
#[test]
fn a_plugin_whose_kind_the_host_may_not_watch_is_degraded_and_holds_no_one_back() {
    let (ns, dir, kubeconfig) = seed_plugins_as_service_account("degraded");
    dir.install("hostile", "hostile");
    let host = Host::start_as(&dir, &[], &kubeconfig);
    assert_eq!(
        host.get("/readyz").expect("readyz").0,
        200,
        "one plugin that cannot watch does not make the host unready"
    );
    let hostile = eventually("hostile to be degraded", TIMEOUT, || {
        host.plugin("hostile").filter(|p| p["state"] == "degraded")
    });
    let reason = hostile["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("may not list or watch") && reason.contains("Hostile"),
        "the reason names the kind and the cause: {hostile}"
    );
    assert_eq!(host.plugin("database").unwrap()["state"], "running");
    assert!(host.metric("kubeplug_plugin_info", "state=\"degraded\"") >= 1.0);
    assert!(host.metric("kubeplug_watch_errors_total", "Hostile") >= 1.0);
    assert!(
        std::fs::read_to_string(&host.log)
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains("WARN") && l.contains("list or watch failed")),
        "the watch error is a warning:\n{}",
        host.log_tail()
    );
    apply(&ns.name, &database("beside-degraded"));
    eventually(
        "the database to run beside a degraded plugin",
        TIMEOUT,
        || (phase(&ns.name, "beside-degraded").as_deref() == Some("Running")).then_some(()),
    );
}

/// `--log-format json`: every line of the host's log is a JSON object, and a
/// reconcile's lines carry the plugin, the kind and the object (from the
/// reconcile span) as fields a log pipeline can index.
#[test]
fn json_logs_parse_and_name_the_plugin_and_object_of_a_reconcile() {
    install_crds();
    let ns = Namespace::new("json-logs");
    let dir = PluginDir::with(&["hostile"]);
    dir.settings(
        "hostile",
        &format!("config:\n  namespaces: [{}]\n", ns.name),
    );
    let host = Host::start_with(&dir, &["--log-format", "json"]);
    apply(
        &ns.name,
        "apiVersion: test.kubeplug.io/v1\nkind: Hostile\nmetadata:\n  name: noisy\nspec:\n  behave: error\n",
    );
    let failed = eventually("a failed reconcile in the log", TIMEOUT, || {
        let log = std::fs::read_to_string(&host.log).ok()?;
        log.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|l| {
                l["message"] == "reconcile failed"
                    && l["span"]["namespace"] == ns.name.as_str()
                    && l["span"]["object"] == format!("{}/noisy", ns.name).as_str()
            })
    });
    assert_eq!(failed["level"], "WARN");
    assert_eq!(failed["span"]["plugin"], "hostile");
    assert_eq!(failed["span"]["kind"], "Hostile");
    assert_eq!(failed["span"]["group"], "test.kubeplug.io");
    assert!(
        failed["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{failed}"
    );
    let log = std::fs::read_to_string(&host.log).unwrap();
    for line in log.lines() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok_and(|v| v.is_object()),
            "not a JSON object: {line}"
        );
    }
    assert!(!log.contains('\u{1b}'), "no colour codes in a file");
}
