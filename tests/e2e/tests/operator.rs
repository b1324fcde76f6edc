//! Acceptance tests of the operator: the shipped plugins (`database`, `myapp`,
//! `pod-annotator`) and the hostile test plugin, run by the built host
//! against the real local control plane (kwok nodes make pods Ready).
//!
//! Each test installs the CRDs, makes its own namespace, plugin directory and
//! host, and waits with generous timeouts: the test machine has two cores and
//! runs a whole control plane beside the host.

use std::time::{Duration, Instant};

use kubeplug_e2e::{
    Host, Namespace, PluginDir, apply, events_for, eventually, get_json, host_binary, install_crds,
    kubectl, kubectl_ok, resource_versions,
};
use serde_json::Value;

/// How long anything the host and the control plane do together may take.
const CONVERGE: Duration = Duration::from_secs(90);

/// How long to watch for something that must *not* happen.
const QUIET: Duration = Duration::from_secs(4);

/// Poll `ns`/`what` until `check` accepts it; fail with the last observation.
fn wait_for(ns: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let seen = get_json(ns, what);
        if let Some(object) = &seen
            && check(object)
        {
            return object.clone();
        }
        if started.elapsed() > CONVERGE {
            let last = seen.map_or("<absent>".to_string(), |o| {
                serde_json::to_string_pretty(&serde_json::json!({
                    "metadata": o["metadata"],
                    "spec": o["spec"],
                    "status": o["status"],
                }))
                .unwrap_or_default()
            });
            panic!("timed out after {CONVERGE:?} waiting for {what} in {ns}; last seen:\n{last}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Wait until `ns`/`what` no longer exists.
fn wait_gone(ns: &str, what: &str) {
    eventually(&format!("{what} in {ns} to be gone"), CONVERGE, || {
        get_json(ns, what).is_none().then_some(())
    });
}

/// Assert `ns`/`what` does not come to exist within [`QUIET`].
fn assert_never_appears(ns: &str, what: &str) {
    let started = Instant::now();
    while started.elapsed() < QUIET {
        assert!(
            get_json(ns, what).is_none(),
            "{what} must never exist in {ns}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn database(name: &str, engine: &str, version: &str, replicas: u32) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: {name}\nspec:\n  engine: {engine}\n  version: \"{version}\"\n  replicas: {replicas}\n"
    )
}

fn myapp(name: &str, image: &str, replicas: u32) -> String {
    format!(
        "apiVersion: example.com/v1alpha1\nkind: MyApp\nmetadata:\n  name: {name}\nspec:\n  replicas: {replicas}\n  image: {image}\n"
    )
}

fn hostile(name: &str, behave: &str) -> String {
    format!(
        "apiVersion: test.kubeplug.io/v1\nkind: Hostile\nmetadata:\n  name: {name}\nspec:\n  behave: {behave}\n"
    )
}

fn pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n    - name: app\n      image: nginx:1.27\n"
    )
}

/// Settings that point pod-annotator at `namespace` (the shipped settings
/// name team-a). Written before the host starts.
fn annotate_namespace(dir: &PluginDir, namespace: &str) {
    dir.settings(
        "pod-annotator",
        &format!("config:\n  namespaces: [{namespace}]\n"),
    );
}

/// The Database's status is Running with exactly `pods` ready (as `pods`
/// and, as the seeds' operators name them, `nodes`) and written for its
/// current generation.
fn database_running(db: &Value, pods: &[&str]) -> bool {
    let status = &db["status"];
    status["phase"] == "Running"
        && status["pods"] == serde_json::json!(pods)
        && status["nodes"] == serde_json::json!(pods)
        && status["readyReplicas"] == pods.len()
        && status["observedGeneration"] == db["metadata"]["generation"]
}

fn container(workload: &Value) -> &Value {
    &workload["spec"]["template"]["spec"]["containers"][0]
}

fn controlled_by(child: &Value, kind: &str, name: &str) -> bool {
    child["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r["kind"] == kind && r["name"] == name && r["controller"] == true)
}

/// A Database's StatefulSet, headless Service and Secret look as its spec
/// says, each controlled by the Database.
fn assert_database_children(ns: &str, name: &str, image: &str, port: u16, replicas: u32) {
    let sts = wait_for(ns, &format!("statefulset/{name}"), |s| {
        s["spec"]["replicas"] == replicas && container(s)["image"] == image
    });
    assert_eq!(container(&sts)["ports"][0]["containerPort"], port, "{sts}");
    assert!(controlled_by(&sts, "Database", name), "{sts}");

    let svc = wait_for(ns, &format!("service/{name}"), |_| true);
    assert_eq!(svc["spec"]["clusterIP"], "None", "headless: {svc}");
    assert_eq!(svc["spec"]["ports"][0]["port"], port, "{svc}");
    assert!(controlled_by(&svc, "Database", name), "{svc}");

    let secret = wait_for(ns, &format!("secret/{name}-credentials"), |_| true);
    for key in ["username", "password"] {
        let value = secret["data"][key].as_str().unwrap_or_default();
        assert!(!value.is_empty(), "secret has no {key}: {secret}");
    }
    assert!(controlled_by(&secret, "Database", name), "{secret}");
}

fn password(ns: &str, db: &str) -> String {
    get_json(ns, &format!("secret/{db}-credentials")).expect("credentials exist")["data"]
        ["password"]
        .as_str()
        .expect("a password")
        .to_string()
}

/// Warning events on `kind/name` with `reason`, as their notes.
fn warnings(ns: &str, kind: &str, name: &str, reason: &str) -> Vec<String> {
    events_for(ns, kind, name)
        .into_iter()
        .filter(|(ty, r, _)| ty == "Warning" && r == reason)
        .map(|(_, _, note)| note)
        .collect()
}

/// Wait for a Warning event with `reason` whose note mentions `needle`.
fn wait_for_warning(ns: &str, kind: &str, name: &str, reason: &str, needle: &str) -> String {
    eventually(
        &format!("a {reason} warning mentioning {needle:?} on {kind} {name}"),
        CONVERGE,
        || {
            warnings(ns, kind, name, reason)
                .into_iter()
                .find(|note| note.to_lowercase().contains(needle))
        },
    )
}

/// How often an event with `reason` was recorded on `kind/name`: a repeated
/// event is one object whose `series.count` grows.
fn occurrences(ns: &str, kind: &str, name: &str, reason: &str) -> u64 {
    let Some(list) = get_json(ns, "events.events.k8s.io") else {
        return 0;
    };
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["regarding"]["kind"] == kind
                && e["regarding"]["name"] == name
                && e["reason"] == reason
        })
        .map(|e| e["series"]["count"].as_u64().unwrap_or(1))
        .sum()
}

fn reconciles(host: &Host, plugin: &str, result: &str) -> f64 {
    host.metric(
        "kubeplug_reconciles_total",
        &format!("plugin=\"{plugin}\",result=\"{result}\""),
    )
}

#[test]
fn a_mysql_database_gets_a_stateful_set_a_headless_service_and_credentials_and_runs() {
    install_crds();
    let ns = Namespace::new("db-mysql");
    let dir = PluginDir::with(&["database"]);
    let _host = Host::start(&dir);

    apply(&ns.name, &database("production-db", "mysql", "8.0.26", 3));

    assert_database_children(&ns.name, "production-db", "mysql:8.0.26", 3306, 3);
    wait_for(&ns.name, "database/production-db", |db| {
        database_running(
            db,
            &["production-db-0", "production-db-1", "production-db-2"],
        )
    });
}

#[test]
fn postgresql_and_mongodb_databases_get_their_images_and_ports() {
    install_crds();
    let ns = Namespace::new("db-engines");
    let dir = PluginDir::with(&["database"]);
    let _host = Host::start(&dir);

    apply(&ns.name, &database("orders", "postgresql", "16.2.0", 1));
    apply(&ns.name, &database("catalog", "mongodb", "7.0.5", 2));

    assert_database_children(&ns.name, "orders", "postgres:16.2.0", 5432, 1);
    assert_database_children(&ns.name, "catalog", "mongo:7.0.5", 27017, 2);
    wait_for(&ns.name, "database/orders", |db| {
        database_running(db, &["orders-0"])
    });
    wait_for(&ns.name, "database/catalog", |db| {
        database_running(db, &["catalog-0", "catalog-1"])
    });
}

#[test]
fn scaling_and_editing_a_database_reach_its_stateful_set_and_keep_its_password() {
    install_crds();
    let ns = Namespace::new("db-scale");
    let dir = PluginDir::with(&["database"]);
    let _host = Host::start(&dir);
    let n = ns.name.as_str();

    apply(n, &database("production-db", "mysql", "8.0.26", 3));
    wait_for(n, "database/production-db", |db| {
        database_running(
            db,
            &["production-db-0", "production-db-1", "production-db-2"],
        )
    });
    let original = password(n, "production-db");

    kubectl_ok(
        &["scale", "-n", n, "db/production-db", "--replicas=5"],
        None,
    );
    wait_for(n, "statefulset/production-db", |s| {
        s["spec"]["replicas"] == 5
    });
    let five = [
        "production-db-0",
        "production-db-1",
        "production-db-2",
        "production-db-3",
        "production-db-4",
    ];
    wait_for(n, "database/production-db", |db| {
        database_running(db, &five)
    });

    kubectl_ok(
        &[
            "patch",
            "-n",
            n,
            "db/production-db",
            "--type=merge",
            "-p",
            r#"{"spec":{"version":"8.0.27"}}"#,
        ],
        None,
    );
    wait_for(n, "statefulset/production-db", |s| {
        container(s)["image"] == "mysql:8.0.27" && s["spec"]["replicas"] == 5
    });
    wait_for(n, "database/production-db", |db| {
        db["spec"]["version"] == "8.0.27" && database_running(db, &five)
    });

    assert_eq!(
        password(n, "production-db"),
        original,
        "reconciles must never rotate the password"
    );
}

#[test]
fn the_api_server_rejects_a_database_outside_its_schema() {
    install_crds();
    let ns = Namespace::new("db-invalid");
    for (name, yaml, field) in [
        (
            "bad-engine",
            database("bad-engine", "oracle", "8.0.26", 1),
            "spec.engine",
        ),
        (
            "bad-version",
            database("bad-version", "mysql", "8", 1),
            "spec.version",
        ),
        (
            "bad-replicas",
            database("bad-replicas", "mysql", "8.0.26", 11),
            "spec.replicas",
        ),
    ] {
        let out = kubectl(&["apply", "-n", &ns.name, "-f", "-"], Some(&yaml));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name} was accepted");
        assert!(
            stderr.contains(field),
            "{name}: the rejection should name {field}: {stderr}"
        );
        assert!(
            get_json(&ns.name, &format!("database/{name}")).is_none(),
            "{name} must not exist"
        );
    }
}

#[test]
fn a_myapp_gets_a_deployment_and_reports_its_available_replicas() {
    install_crds();
    let ns = Namespace::new("myapp");
    let dir = PluginDir::with(&["myapp"]);
    let _host = Host::start(&dir);

    apply(&ns.name, &myapp("demo-app", "nginx:1.23", 3));

    let deploy = wait_for(&ns.name, "deployment/demo-app-deploy", |d| {
        d["spec"]["replicas"] == 3 && container(d)["image"] == "nginx:1.23"
    });
    assert!(controlled_by(&deploy, "MyApp", "demo-app"), "{deploy}");
    wait_for(&ns.name, "myapp/demo-app", |app| {
        app["status"]["phase"] == "Running" && app["status"]["availableReplicas"] == 3
    });
}

#[test]
fn pods_in_the_configured_namespace_are_stamped_once_and_others_are_untouched() {
    install_crds();
    let ns = Namespace::new("stamped");
    let other = Namespace::new("unstamped");
    let dir = PluginDir::with(&["pod-annotator"]);
    annotate_namespace(&dir, &ns.name);
    let host = Host::start(&dir);

    apply(&other.name, &pod("web"));
    apply(&ns.name, &pod("web"));

    let stamped = wait_for(&ns.name, "pod/web", |p| {
        p["metadata"]["annotations"]["example.com/injected"] == "true"
    });
    let at = stamped["metadata"]["annotations"]["example.com/injected-at"].clone();
    assert!(
        at.as_str().is_some_and(|s| !s.is_empty()),
        "injected-at is set: {stamped}"
    );
    let stamps = || occurrences(&ns.name, "Pod", "web", "Annotated");
    eventually("the stamp's event", CONVERGE, || {
        (stamps() >= 1).then_some(())
    });

    // Touch the pod: the host reconciles it again, and leaves the stamp.
    let before = host.metric("kubeplug_reconciles_total", "plugin=\"pod-annotator\"");
    kubectl_ok(&["label", "-n", &ns.name, "pod/web", "touched=yes"], None);
    eventually(
        "pod-annotator to reconcile the touched pod",
        CONVERGE,
        || {
            (host.metric("kubeplug_reconciles_total", "plugin=\"pod-annotator\"") > before)
                .then_some(())
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    let touched = get_json(&ns.name, "pod/web").expect("pod exists");
    assert_eq!(touched["metadata"]["labels"]["touched"], "yes");
    assert_eq!(
        touched["metadata"]["annotations"]["example.com/injected-at"], at,
        "the stamp is written once"
    );
    assert_eq!(stamps(), 1, "the pod is stamped once");

    let untouched = get_json(&other.name, "pod/web").expect("pod exists");
    let annotations = &untouched["metadata"]["annotations"];
    assert!(
        annotations["example.com/injected"].is_null()
            && annotations["example.com/injected-at"].is_null(),
        "a pod outside the configured namespaces is left alone: {untouched}"
    );
}

#[test]
fn deleting_a_database_garbage_collects_its_children() {
    install_crds();
    let ns = Namespace::new("db-gc");
    let dir = PluginDir::with(&["database"]);
    let _host = Host::start(&dir);
    let n = ns.name.as_str();

    apply(n, &database("scratch", "postgresql", "16.2.0", 1));
    assert_database_children(n, "scratch", "postgres:16.2.0", 5432, 1);

    kubectl_ok(
        &["delete", "-n", n, "database/scratch", "--wait=false"],
        None,
    );
    for child in [
        "statefulset/scratch",
        "service/scratch",
        "secret/scratch-credentials",
    ] {
        wait_gone(n, child);
    }
    wait_gone(n, "database/scratch");
}

/// Wait until no parent of the operator's kinds is left from earlier tests.
/// Their namespaces are deleted without waiting; until their parents are
/// gone, any host reconciles them: it writes to them (muddling a test that
/// counts writes), and a plugin with a finalizer holds them (their namespace
/// then never goes). Their children may linger: without a parent, a
/// reconcile writes nothing.
fn wait_for_earlier_parents_to_go() {
    let leftovers = || -> Vec<String> {
        let out = kubectl_ok(
            &[
                "get",
                "databases,myapps,hostiles",
                "--all-namespaces",
                "-o",
                "name",
            ],
            None,
        );
        out.lines().map(String::from).collect()
    };
    let started = Instant::now();
    loop {
        let left = leftovers();
        if left.is_empty() {
            return;
        }
        if started.elapsed() > CONVERGE {
            panic!("parents of earlier tests are still there: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_parent_with_a_finalizer_stays_until_finalize_reports_done() {
    install_crds();
    // This host puts its finalizer on every Hostile in the cluster.
    wait_for_earlier_parents_to_go();
    let ns = Namespace::new("finalizer");
    let dir = PluginDir::with(&["hostile"]);
    dir.settings("hostile", "config:\n  finalizer: true\n");
    let _host = Host::start(&dir);
    let n = ns.name.as_str();

    apply(n, &hostile("held", "ok"));
    wait_for(n, "hostile/held", |h| {
        h["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == "test.kubeplug.io/hold"))
    });
    wait_for(n, "configmap/held-ok", |_| true);

    kubectl_ok(&["delete", "-n", n, "hostile/held", "--wait=false"], None);
    std::thread::sleep(QUIET);
    let held = get_json(n, "hostile/held").expect("a finalized parent stays until released");
    assert!(
        held["metadata"]["deletionTimestamp"].is_string(),
        "deletion is pending: {held}"
    );

    kubectl_ok(
        &[
            "annotate",
            "-n",
            n,
            "hostile/held",
            "test.kubeplug.io/release=true",
        ],
        None,
    );
    wait_gone(n, "hostile/held");
    wait_gone(n, "configmap/held-ok");
}

/// A plugin with a finalizer is removed: its deleted parents would hang in
/// Terminating. The host says so, and `kubeplug release-finalizers` frees
/// them (only the plugin's finalizer, only on parents being deleted).
#[test]
fn a_removed_plugins_finalizer_is_released_by_the_documented_command() {
    install_crds();
    wait_for_earlier_parents_to_go();
    let ns = Namespace::new("orphan");
    let n = ns.name.as_str();
    let dir = PluginDir::with(&["hostile"]);
    dir.settings(
        "hostile",
        &format!("config:\n  finalizer: true\n  namespaces: [{n}]\n"),
    );
    let host = Host::start(&dir);
    apply(n, &hostile("orphaned", "ok"));
    apply(n, &hostile("kept", "ok"));
    for name in ["orphaned", "kept"] {
        wait_for(n, &format!("hostile/{name}"), |h| {
            h["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f == "test.kubeplug.io/hold"))
        });
    }
    // Someone else's finalizer on the same parent is never touched.
    kubectl_ok(
        &[
            "patch",
            "-n",
            n,
            "hostile/orphaned",
            "--type=json",
            "-p",
            r#"[{"op":"add","path":"/metadata/finalizers/-","value":"example.com/other"}]"#,
        ],
        None,
    );

    dir.remove("hostile");
    eventually("the plugin to be removed", CONVERGE, || {
        host.plugin("hostile").is_none().then_some(())
    });
    let log = std::fs::read_to_string(&host.log).unwrap_or_default();
    assert!(
        log.contains("release-finalizers hostile --resource hostiles.test.kubeplug.io"),
        "the host says how to release the parents:\n{}",
        host.log_tail()
    );
    kubectl_ok(
        &["delete", "-n", n, "hostile/orphaned", "--wait=false"],
        None,
    );
    std::thread::sleep(QUIET);
    assert!(
        get_json(n, "hostile/orphaned").is_some(),
        "stuck in Terminating"
    );

    let release = |extra: &[&str]| {
        let out = std::process::Command::new(host_binary())
            .args([
                "release-finalizers",
                "hostile",
                "--resource",
                "hostiles.test.kubeplug.io",
            ])
            .args(["--finalizer", "test.kubeplug.io/hold", "--namespace", n])
            // This host runs without leader election, so it keeps no Leases
            // for the command to check: it refuses unless forced.
            .arg("--force")
            .args(extra)
            .env("KUBECONFIG", std::env::var("KUBECONFIG").unwrap())
            .output()
            .expect("run release-finalizers");
        assert!(
            out.status.success(),
            "release-finalizers failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let dry = release(&["--dry-run"]);
    assert!(dry.contains("would release 1"), "{dry}");
    assert!(
        get_json(n, "hostile/orphaned").unwrap()["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.len() == 2)
    );

    let done = release(&[]);
    assert!(done.contains("released 1"), "{done}");
    let left = get_json(n, "hostile/orphaned").expect("held by the other finalizer");
    assert_eq!(
        left["metadata"]["finalizers"],
        serde_json::json!(["example.com/other"])
    );
    let kept = get_json(n, "hostile/kept").expect("not being deleted");
    assert!(
        kept["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == "test.kubeplug.io/hold")),
        "a parent that is not being deleted keeps the finalizer without --all"
    );
    kubectl_ok(
        &[
            "patch",
            "-n",
            n,
            "hostile/orphaned",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
        None,
    );
    wait_gone(n, "hostile/orphaned");
    release(&["--all"]);
    kubectl_ok(&["delete", "-n", n, "hostile/kept", "--wait=false"], None);
    wait_gone(n, "hostile/kept");
}

#[test]
fn a_panicking_plugin_backs_off_without_stopping_other_parents_or_plugins() {
    install_crds();
    let ns = Namespace::new("panic");
    let dir = PluginDir::with(&["hostile", "database", "myapp"]);
    let host = Host::start(&dir);
    let n = ns.name.as_str();

    apply(n, &hostile("boom", "panic"));
    apply(n, &hostile("fine", "ok"));
    apply(n, &database("steady-db", "mysql", "8.0.26", 1));
    apply(n, &myapp("steady-app", "nginx:1.23", 2));

    // Backoff: after the first trap, retries follow at 0.5, 1.5, 3.5, 7.5 s
    // (the delay doubles), so six seconds hold a handful, never a hot loop.
    eventually("the first trap", CONVERGE, || {
        (reconciles(&host, "hostile", "trap") >= 1.0).then_some(())
    });
    let first_trap = Instant::now();

    // Counted before anything else is waited for: on a busy machine those
    // waits could stretch the window to the sixth trap (~15.5 s).
    std::thread::sleep(Duration::from_secs(6).saturating_sub(first_trap.elapsed()));
    let traps = reconciles(&host, "hostile", "trap");
    assert!(
        (2.0..6.0).contains(&traps),
        "the failing parent is retried, with backoff: {traps} traps in ~6 s"
    );

    let note = wait_for_warning(n, "Hostile", "boom", "PluginFailed", "panic");
    assert!(
        note.contains("trap"),
        "the note says the plugin trapped: {note}"
    );
    wait_for(n, "configmap/fine-ok", |_| true);

    wait_for(n, "database/steady-db", |db| {
        database_running(db, &["steady-db-0"])
    });
    wait_for(n, "myapp/steady-app", |app| {
        app["status"]["phase"] == "Running" && app["status"]["availableReplicas"] == 2
    });
    assert!(
        get_json(n, "configmap/boom-ok").is_none(),
        "the panicking parent got no child"
    );
}

#[test]
fn a_plugin_past_its_deadline_is_interrupted_and_the_host_keeps_reconciling() {
    install_crds();
    let ns = Namespace::new("deadline");
    let dir = PluginDir::with(&["hostile", "myapp"]);
    let host = Host::start(&dir);
    let n = ns.name.as_str();

    apply(n, &hostile("spin", "loop"));
    wait_for_warning(n, "Hostile", "spin", "PluginFailed", "deadline");
    assert!(reconciles(&host, "hostile", "deadline") >= 1.0);

    apply(n, &hostile("calm", "ok"));
    apply(n, &myapp("steady-app", "nginx:1.23", 1));
    wait_for(n, "configmap/calm-ok", |_| true);
    wait_for(n, "myapp/steady-app", |app| {
        app["status"]["phase"] == "Running" && app["status"]["availableReplicas"] == 1
    });
    assert!(
        host.get("/healthz").is_ok_and(|(code, _)| code == 200),
        "the host is healthy"
    );
}

#[test]
fn a_child_of_an_undeclared_kind_is_refused_as_a_fence_violation() {
    install_crds();
    let ns = Namespace::new("fence");
    let dir = PluginDir::with(&["hostile"]);
    let _host = Host::start(&dir);
    let n = ns.name.as_str();

    apply(n, &hostile("sneaky", "undeclared"));
    let note = wait_for_warning(n, "Hostile", "sneaky", "FenceViolation", "secret");
    assert!(note.contains("not declared"), "{note}");
    assert_never_appears(n, "secret/sneaky-smuggled");
}

#[test]
fn a_restarted_host_writes_nothing_when_nothing_changed() {
    install_crds();
    wait_for_earlier_parents_to_go();
    let ns = Namespace::new("restart");
    let dir = PluginDir::with(&["database", "myapp", "pod-annotator"]);
    annotate_namespace(&dir, &ns.name);
    let host = Host::start(&dir);
    let n = ns.name.as_str();

    apply(n, &database("steady-db", "mysql", "8.0.26", 2));
    apply(n, &myapp("steady-app", "nginx:1.23", 1));
    apply(n, &pod("lonely"));
    wait_for(n, "database/steady-db", |db| {
        database_running(db, &["steady-db-0", "steady-db-1"])
    });
    wait_for(n, "myapp/steady-app", |app| {
        app["status"]["phase"] == "Running" && app["status"]["availableReplicas"] == 1
    });
    wait_for(n, "pod/lonely", |p| {
        p["metadata"]["annotations"]["example.com/injected"] == "true"
    });

    let objects = [
        "database/steady-db",
        "statefulset/steady-db",
        "service/steady-db",
        "secret/steady-db-credentials",
        "myapp/steady-app",
        "deployment/steady-app-deploy",
        "pod/lonely",
        "pod/steady-db-0",
        "pod/steady-db-1",
    ];
    // Wait for quiet: the first host and the control plane are done.
    let before = eventually("the namespace to settle", CONVERGE, || {
        let a = resource_versions(n, &objects);
        std::thread::sleep(Duration::from_secs(3));
        (resource_versions(n, &objects) == a).then_some(a)
    });

    host.stop();
    let host = Host::start(&dir);
    for plugin in ["database", "myapp", "pod-annotator"] {
        eventually(
            &format!("the new host to reconcile with {plugin}"),
            CONVERGE,
            || {
                (host.metric("kubeplug_reconciles_total", &format!("plugin=\"{plugin}\"")) >= 1.0)
                    .then_some(())
            },
        );
    }
    std::thread::sleep(Duration::from_secs(3));

    for plugin in ["database", "myapp", "pod-annotator"] {
        assert_eq!(host.writes(plugin), 0, "{plugin} wrote after a restart");
    }
    assert_eq!(
        resource_versions(n, &objects),
        before,
        "nothing changed in the cluster"
    );
}
