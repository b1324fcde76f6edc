//! The fences, tried as a hostile team would: plugins built against the
//! contract that ask for more than the platform granted, lie about scopes,
//! claim objects they do not control, flood, bomb. Each attack must be
//! refused or contained with a clear message, nothing written outside the
//! grant, and the host and every other plugin serving on.
//!
//! Each test runs its own host with the seed plugins' grants
//! (`deploy/base/policy.yaml`) plus a policy of its own for the hostile variants
//! (`plugins/hostile`, configured through `<name>.yaml` settings files).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kubeplug_e2e::*;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(90);

/// The `/plugins` row of `<file>.wasm` once it failed to load.
fn refused(host: &Host, file: &str) -> String {
    let row = eventually(&format!("{file} to be refused"), TIMEOUT, || {
        host.plugin_file(&format!("{file}.wasm"))
            .filter(|p| p["state"] == "failed")
    });
    row["lastError"].as_str().unwrap_or_default().to_string()
}

fn assert_mentions(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }
}

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

#[test]
fn plugins_asking_beyond_their_grant_are_refused_at_load_naming_every_missing_grant() {
    install_crds();
    let ns = Namespace::new("fence-load");
    let dir = PluginDir::with(&["database"]);
    let policy = format!(
        "strict: true
plugins:
  escalate:
    serviceAccount: kubeplug-plugin-hostile
    parent: [Hostile.test.kubeplug.io]
    children: [ConfigMap]
  escalate-granted:
    serviceAccount: kubeplug-plugin-hostile
    parent: [Hostile.test.kubeplug.io]
    children: [ConfigMap, ClusterRoleBinding.rbac.authorization.k8s.io, Namespace, ValidatingWebhookConfiguration.admissionregistration.k8s.io]
    clusterScoped: [ClusterRoleBinding.rbac.authorization.k8s.io, Namespace, ValidatingWebhookConfiguration.admissionregistration.k8s.io]
  spawner:
    serviceAccount: kubeplug-plugin-hostile
    parent: [Hostile.test.kubeplug.io]
    children: [\"*\"]
  secret-keeper:
    serviceAccount: kubeplug-plugin-hostile
    parent: [\"*\"]
    children: [ConfigMap]
  finalizer-thief:
    serviceAccount: kubeplug-plugin-hostile
    parent: [Hostile.test.kubeplug.io]
    children: [ConfigMap]
  pinned:
    serviceAccount: kubeplug-plugin-hostile
    parent: [Hostile.test.kubeplug.io]
    children: [ConfigMap]
    sha256: [\"{}\"]
",
        "0".repeat(64)
    );
    let host = host_with_policy(&dir, &policy);
    let escalation = "children: [clusterrolebinding, namespace, validatingwebhookconfiguration]";
    hostile_as(&dir, "escalate", escalation);
    hostile_as(&dir, "escalate-granted", escalation);
    hostile_as(&dir, "spawner", "children: [hostile]");
    hostile_as(
        &dir,
        "secret-keeper",
        "claim: secrets\nnamespaces: [kube-system]",
    );
    hostile_as(
        &dir,
        "finalizer-thief",
        "finalizer: kubernetes.io/pvc-protection",
    );
    hostile_as(&dir, "pinned", "");
    hostile_as(&dir, "stranger", "");

    assert_mentions(
        &refused(&host, "escalate"),
        &[
            "cluster-scoped child kind ClusterRoleBinding.rbac.authorization.k8s.io/v1 cannot belong to a namespaced parent",
            "child kind ClusterRoleBinding.rbac.authorization.k8s.io;",
            "cluster-scoped Namespace (grant it under clusterScoped)",
            "child kind ValidatingWebhookConfiguration.admissionregistration.k8s.io;",
        ],
    );
    // Granted or not, a namespaced parent can never own cluster-scoped
    // objects (garbage collection would never remove them).
    let granted = refused(&host, "escalate-granted");
    assert_mentions(
        &granted,
        &["cluster-scoped child kind Namespace.v1 cannot belong to a namespaced parent"],
    );
    assert!(
        !granted.contains("grant it under clusterScoped"),
        "{granted}"
    );
    // Its own parent kind, dressed up as another version and plural.
    assert_mentions(
        &refused(&host, "spawner"),
        &["a plugin may not create its own parent kind Hostile.test.kubeplug.io/v2"],
    );
    assert_mentions(
        &refused(&host, "secret-keeper"),
        &[
            "parent kind Secret (sensitive kinds must be named)",
            "namespace kube-system",
        ],
    );
    assert_mentions(
        &refused(&host, "finalizer-thief"),
        &[
            "finalizer kubernetes.io/pvc-protection (a plugin may use finalizer-thief.kubeplug.io/* unless granted more)",
        ],
    );
    assert_mentions(
        &refused(&host, "pinned"),
        &["is not pinned for plugin pinned by the policy"],
    );
    assert_mentions(
        &refused(&host, "stranger"),
        &["plugin stranger has no grant in the policy, which is strict"],
    );

    // Nothing any of them asked for exists, and the others serve on.
    apply(&ns.name, &hostile("escalator", "cluster-child", ""));
    apply(&ns.name, &database("still-served"));
    database_runs(&ns.name, "still-served");
    for what in [
        "clusterrolebinding/escalator-escalate",
        "namespace/escalator-ns",
        "validatingwebhookconfiguration/escalator-webhook",
    ] {
        assert!(get_json("default", what).is_none(), "{what} must not exist");
    }
    assert_eq!(
        host.plugin("database").map(|p| p["state"].clone()),
        Some("running".into())
    );
}

#[test]
fn a_scope_lie_is_corrected_so_secrets_of_other_namespaces_never_reach_a_plugin() {
    install_crds();
    let ns = Namespace::new("fence-scope");
    let victim = Namespace::new("fence-victim");
    let dir = PluginDir::with(&[]);
    let host = host_with_policy(
        &dir,
        "strict: true
plugins:
  thief:
    serviceAccount: kubeplug-plugin-hostile
    parent: [Hostile.test.kubeplug.io]
    children: [ConfigMap]
    related: [Secret]
",
    );
    hostile_as(
        &dir,
        "thief",
        "children: [configmap-lie]\nrelated: [secrets-everywhere]",
    );
    running(&host, "thief");
    let secret = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  labels:\n    kubeplug-test/steal: \"yes\"\nstringData:\n  password: hunter2\n"
        )
    };
    apply(&victim.name, &secret("crown-jewels"));
    apply(&ns.name, &secret("own"));
    apply(&ns.name, &hostile("robber", "steal", ""));

    let loot = eventually("the loot ConfigMap", TIMEOUT, || {
        get_json(&ns.name, "configmap/robber-loot")
    });
    let keys: Vec<&String> = loot["data"]
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    assert_eq!(keys, vec![&format!("{}.own", ns.name)], "{loot}");
    let status = eventually("the loot status", TIMEOUT, || {
        let parent = get_json(&ns.name, "hostile/robber")?;
        parent["status"]["loot"].as_array().cloned()
    });
    assert_eq!(status, vec![Value::from(format!("{}/own", ns.name))]);
    // The ConfigMap declared cluster-scoped went to the parent's namespace.
    assert_eq!(loot["metadata"]["namespace"], ns.name.as_str());
}

#[test]
fn a_child_named_like_an_object_the_parent_does_not_control_is_never_overwritten_adopted_or_pruned()
{
    install_crds();
    let ns = Namespace::new("fence-clash");
    let dir = PluginDir::with(&["hostile"]);
    let host = Host::start(&dir);
    kubectl_ok(
        &[
            "create",
            "configmap",
            "precious",
            "-n",
            &ns.name,
            "--from-literal=keep=me",
        ],
        None,
    );
    let before = get_json(&ns.name, "configmap/precious").expect("precious exists");
    apply(&ns.name, &hostile("first", "ok", ""));
    eventually("first's child", TIMEOUT, || {
        get_json(&ns.name, "configmap/first-ok")
    });
    let first_child = get_json(&ns.name, "configmap/first-ok").unwrap();

    apply(
        &ns.name,
        &hostile("adopter", "adopt", "  target: precious\n"),
    );
    apply(
        &ns.name,
        &hostile("grabber", "adopt", "  target: first-ok\n"),
    );
    let note = warning(&ns.name, "adopter", "ChildClash", "precious");
    assert_mentions(
        &note,
        &[
            "ConfigMap precious exists and is not controlled by this Hostile (no controller); kubeplug leaves it untouched",
        ],
    );
    let note = warning(&ns.name, "grabber", "ChildClash", "first-ok");
    assert_mentions(&note, &["(controller Hostile first)"]);
    assert!(host.metric("kubeplug_child_clashes_total", "plugin=\"hostile\"") >= 2.0);

    // The adopter drops the child: nothing it does not control is pruned.
    apply(&ns.name, &hostile("adopter", "ok", ""));
    eventually("adopter's own child", TIMEOUT, || {
        get_json(&ns.name, "configmap/adopter-ok")
    });
    std::thread::sleep(Duration::from_secs(2));
    let after = get_json(&ns.name, "configmap/precious").expect("precious still exists");
    assert_eq!(
        after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
        "precious was written to: {after}"
    );
    assert_eq!(after["data"], before["data"]);
    assert!(after["metadata"]["ownerReferences"].is_null(), "{after}");
    let first_after = get_json(&ns.name, "configmap/first-ok").unwrap();
    assert_eq!(
        first_after["metadata"]["ownerReferences"], first_child["metadata"]["ownerReferences"],
        "first-ok changed hands: {first_after}"
    );
}

#[test]
fn an_event_and_requeue_flood_is_held_to_the_plugins_quotas() {
    install_crds();
    let ns = Namespace::new("fence-flood");
    let dir = PluginDir::with(&["hostile"]);
    let host = host_with_policy(
        &dir,
        "strict: true
plugins:
  hostile:
    parent: [Hostile.test.kubeplug.io]
    children: [ConfigMap]
    quotas: {eventsPerParentPerMinute: 15, requeueFloorSeconds: 2}
",
    );
    // Ten events per answer (the per-answer quota), again after 0 s.
    apply(&ns.name, &hostile("flood", "events", "  count: 10\n"));
    eventually("flood's child", TIMEOUT, || {
        get_json(&ns.name, "configmap/flood-ok")
    });
    let ok = || host.metric("kubeplug_reconciles_total", "result=\"ok\"");
    let before = ok();
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(10));
    // On a busy machine the requeues may come late: the window is longer
    // then, never shorter (the rate below is per second of it).
    eventually("the parent to be requeued", TIMEOUT, || {
        (ok() - before >= 3.0).then_some(())
    });
    let took = started.elapsed().as_secs_f64();
    let reconciles = ok() - before;
    let events = host.metric("kubeplug_api_writes_total", "verb=\"event\"");
    let dropped = host.metric("kubeplug_events_dropped_total", "plugin=\"hostile\"");
    // Without the floor a 0 s requeue reconciles hundreds of times a
    // second; with it, once per 2 s (plus the first few).
    assert!(
        reconciles <= took / 2.0 + 4.0,
        "{reconciles} reconciles in {took:.1} s"
    );
    assert!(reconciles >= 3.0, "the parent was requeued: {reconciles}");
    // The plugin's events, plus one Warning per failed reconcile (none
    // expected; counted so that a transient API error is not mistaken for
    // a leak in the budget).
    let failed: f64 = host
        .series("kubeplug_reconciles_total")
        .iter()
        .filter(|(labels, _)| !labels.contains("result=\"ok\""))
        .map(|(_, v)| v)
        .sum();
    assert!(
        events <= 15.0 + failed,
        "{events} event writes ({failed} failed reconciles): {:?}",
        events_for(&ns.name, "Hostile", "flood")
    );
    assert!(dropped >= 10.0, "{dropped} events dropped");
}

#[test]
fn answers_over_their_quotas_are_refused_before_anything_is_written() {
    install_crds();
    let ns = Namespace::new("fence-bombs");
    let dir = PluginDir::with(&["hostile"]);
    let host = Host::start(&dir);
    apply(&ns.name, &hostile("bomb", "children", "  count: 2000\n"));
    apply(
        &ns.name,
        &hostile("fat", "status-bomb", "  bytes: 5000000\n"),
    );
    apply(&ns.name, &hostile("chatty", "log-bomb", "  count: 1000\n"));
    apply(&ns.name, &hostile("fine", "ok", ""));

    warning(
        &ns.name,
        "bomb",
        "PluginFailed",
        "answered with 2000 children (quota 64)",
    );
    warning(&ns.name, "fat", "PluginFailed", "(quota 4194304)");
    eventually("chatty's child", TIMEOUT, || {
        get_json(&ns.name, "configmap/chatty-ok")
    });
    eventually("fine's child", TIMEOUT, || {
        get_json(&ns.name, "configmap/fine-ok")
    });
    assert!(get_json(&ns.name, "configmap/bomb-0").is_none());
    let fat = get_json(&ns.name, "hostile/fat").unwrap();
    assert!(fat["status"].is_null(), "{}", fat["status"]);
    // 1,000 log lines of 1 MiB were asked for; 64 KiB per call are kept.
    let log = std::fs::metadata(&host.log).map(|m| m.len()).unwrap_or(0);
    assert!(log < 4 << 20, "host log is {log} bytes");
}

#[test]
fn a_decorator_may_not_set_keys_that_kubernetes_kubectl_or_kubeplug_own() {
    install_crds();
    let ns = Namespace::new("fence-keys");
    let dir = PluginDir::with(&[]);
    let host = host_with_policy(
        &dir,
        "strict: true
plugins:
  decor:
    serviceAccount: kubeplug-plugin-hostile
    parent: [Hostile.test.kubeplug.io]
    decoratorKeys: [\"example.com/*\"]
",
    );
    hostile_as(&dir, "decor", "mode: decorator");
    running(&host, "decor");
    apply(&ns.name, &hostile("sneaky", "reserved", ""));
    apply(&ns.name, &hostile("nice", "decorate", ""));
    let note = warning(&ns.name, "sneaky", "FenceViolation", "reserved");
    assert_mentions(&note, &["plugin decor crossed its fence"]);
    eventually("nice to be decorated", TIMEOUT, || {
        let nice = get_json(&ns.name, "hostile/nice")?;
        (nice["metadata"]["annotations"]["example.com/decorated"] == "true").then_some(())
    });
    let sneaky = get_json(&ns.name, "hostile/sneaky").unwrap();
    let labels = &sneaky["metadata"]["labels"];
    assert!(labels["kubeplug.io/plugin"].is_null(), "{sneaky}");
    assert!(labels["pod-template-hash"].is_null(), "{sneaky}");
}

fn compile_bomb() -> PathBuf {
    built("compile-bomb")
}

#[test]
fn a_compile_bomb_is_stopped_at_its_compile_quota_while_other_plugins_load() {
    install_crds();
    let ns = Namespace::new("fence-compile");
    let dir = PluginDir::with(&["database"]);
    // A compile cache of its own: the bomb compiled once by anyone else
    // (`kubeplug inspect` on this machine, with the default quotas) would
    // load from the shared one without compiling.
    let cache = tempfile::tempdir().expect("temp dir");
    let policy = with_policy(
        &dir,
        "strict: true
plugins:
  bomb:
    parent: [Hostile.test.kubeplug.io]
    quotas: {compileTimeoutSeconds: 3}
",
    );
    let host = Host::start_with(
        &dir,
        &[
            "--policy",
            &policy,
            "--cache-dir",
            cache.path().to_str().expect("utf-8 path"),
        ],
    );
    let pid = host.pid();
    dir.put(
        "bomb",
        &std::fs::read(compile_bomb()).expect("read the bomb"),
    );
    // Dropped while the bomb compiles: it must not wait for it.
    std::thread::sleep(Duration::from_millis(700));
    dir.install("myapp", "myapp");
    let started = Instant::now();
    running(&host, "myapp");
    let myapp_loaded = started.elapsed();
    let error = refused(&host, "bomb");
    assert_mentions(
        &error,
        &["compiling took longer than the compile quota of 3s; the compiler was stopped"],
    );
    // The bomb needs ~10 s of Cranelift; myapp (compiled in ~2 s on an
    // idle machine) did not wait for it. A sanity bound: on a busy machine
    // myapp's own compile (beside the bomb's) takes several times as long.
    println!("figures: myapp loaded {myapp_loaded:?} after it was dropped in beside the bomb");
    assert!(
        myapp_loaded < Duration::from_secs(30),
        "myapp took {myapp_loaded:?}"
    );
    apply(
        &ns.name,
        "apiVersion: example.com/v1alpha1\nkind: MyApp\nmetadata:\n  name: after-bomb\nspec:\n  replicas: 1\n",
    );
    apply(&ns.name, &database("after-bomb"));
    database_runs(&ns.name, "after-bomb");
    eventually("the app's deployment", TIMEOUT, || {
        get_json(&ns.name, "deployment/after-bomb-deploy")
    });
    assert_eq!(host.pid(), pid);
}

#[test]
fn a_grant_the_platform_withdraws_stops_the_plugin_and_a_new_one_starts_it_again() {
    install_crds();
    let ns = Namespace::new("fence-revoke");
    let dir = PluginDir::with(&["database"]);
    let seeds =
        std::fs::read_to_string(repo().join("deploy/base/policy.yaml")).expect("read policy");
    let policy = dir.path.with_extension("live-policy.yaml");
    std::fs::write(&policy, &seeds).expect("write policy");
    let host = Host::start_with(&dir, &["--policy", policy.to_str().expect("utf-8 path")]);
    apply(&ns.name, &database("granted"));
    database_runs(&ns.name, "granted");

    // The platform withdraws the grant (its ConfigMap changes).
    let without: String = {
        let start = seeds.find("  database:").expect("database grant");
        let end = seeds.find("  myapp:").expect("myapp grant");
        format!("{}{}", &seeds[..start], &seeds[end..])
    };
    std::fs::write(&policy, without).expect("write policy");
    assert_mentions(
        &refused(&host, "database"),
        &["plugin database has no grant in the policy, which is strict"],
    );
    apply(&ns.name, &database("ungranted"));
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        get_json(&ns.name, "statefulset/ungranted").is_none(),
        "a plugin whose grant was withdrawn still writes"
    );
    // The children of what it did while granted are kept.
    assert!(get_json(&ns.name, "statefulset/granted").is_some());

    // The grant comes back: the plugin serves again and catches up.
    std::fs::write(&policy, &seeds).expect("write policy");
    running(&host, "database");
    database_runs(&ns.name, "ungranted");
}

/// The `managedFields` entries of `what` in `ns` as (manager, operation,
/// subresource); kubectl hides them unless asked.
fn managers(ns: &str, what: &str) -> Vec<(String, String, String)> {
    let text = kubectl_ok(
        &["get", "-n", ns, what, "-o", "json", "--show-managed-fields"],
        None,
    );
    let object: Value = serde_json::from_str(&text).expect("kubectl's JSON");
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let s = |k: &str| m[k].as_str().unwrap_or_default().to_string();
            (s("manager"), s("operation"), s("subresource"))
        })
        .collect()
}

/// The fence at no request cost: a child is created by one apply that can
/// only create (a resourceVersion no stored object has), so its fields
/// belong to the plugin's apply manager from the create on, and a later
/// answer that drops a field removes it from the live object. The version
/// switch is the field drop: `database-v2` labels every child
/// `example.com/plugin-revision: v2`, `database` (v1) does not. The clash
/// case (a same-named object this parent does not control is refused, never
/// adopted) is the test above. Also counts, with the host's own counter,
/// the requests the plugin's client sent for one Database: no GET.
#[test]
fn a_child_created_by_the_create_only_apply_loses_a_field_a_later_answer_drops() {
    const REVISION: &str = "example.com/plugin-revision";
    install_crds();
    let ns = Namespace::new("fence-drop");
    let n = ns.name.as_str();
    let dir = PluginDir::with(&[]);
    dir.install("database-v2", "database");
    let host = Host::start(&dir);
    running(&host, "database");
    apply(n, &database("dropped"));
    database_runs(n, "dropped");
    for child in ["statefulset/dropped", "service/dropped"] {
        let live = get_json(n, child).expect("child exists");
        assert_eq!(
            live["metadata"]["labels"][REVISION], "v2",
            "{child}: {live}"
        );
        let managers = managers(n, child);
        let applies: Vec<_> = managers.iter().filter(|m| m.1 == "Apply").collect();
        assert_eq!(applies.len(), 1, "{child}: one apply manager: {managers:?}");
        // The StatefulSet controller writes its status subresource; nothing
        // else may have written the object with an Update.
        let updates: Vec<_> = managers
            .iter()
            .filter(|m| m.1 == "Update" && m.2.is_empty())
            .collect();
        assert!(updates.is_empty(), "{child}: Update entries: {managers:?}");
    }
    // What the plugin's client sent for this one Database (create, status):
    // creates are applies, and none is preceded by a GET.
    let sent = host
        .series("kubeplug_api_requests_total")
        .into_iter()
        .filter(|(labels, _)| labels.contains("client=\"database\""))
        .collect::<Vec<_>>();
    let total: f64 = sent.iter().map(|(_, v)| v).sum();
    println!("FIGURE requests_for_one_database {total} {sent:?}");
    let gets: f64 = sent
        .iter()
        .filter(|(labels, _)| labels.contains("method=\"GET\""))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(gets, 0.0, "no GET before a create: {sent:?}");

    // v1's answers drop the label: it leaves the live objects.
    dir.install("database", "database");
    for child in ["statefulset/dropped", "service/dropped"] {
        eventually(&format!("{child} to lose {REVISION}"), TIMEOUT, || {
            let live = get_json(n, child)?;
            live["metadata"]["labels"][REVISION].is_null().then_some(())
        });
        let live = get_json(n, child).expect("child still exists");
        assert_eq!(
            live["metadata"]["labels"]["app.kubernetes.io/managed-by"], "kubeplug",
            "{child} keeps the fields still answered: {live}"
        );
    }
}
