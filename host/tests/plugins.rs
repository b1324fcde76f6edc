//! Golden tests of the shipped plugins, run through the real runtime with the
//! `.wasm` files `make plugins` builds, and the compile cache and concurrency
//! of the runtime with those plugins.
//!
//! Every request has a fixed `now` and fixed entropy, so outputs are exact.
//! Golden files live in `tests/fixtures/golden/`; `UPDATE_GOLDEN=1` rewrites
//! them.

mod common;

use std::sync::OnceLock;

use common::*;
use kubeplug::manifest::{LabelValue, Mode};
use kubeplug::plan;
use kubeplug::runtime::{
    CallError, Desired, GuestError, LoadError, Origin, Plugin, PluginOptions, Request, Runtime,
};
use serde_json::{Value, json};

fn database_plugin() -> Plugin {
    static PLUGIN: OnceLock<Plugin> = OnceLock::new();
    PLUGIN.get_or_init(|| load("database", None)).clone()
}

fn myapp_plugin() -> Plugin {
    static PLUGIN: OnceLock<Plugin> = OnceLock::new();
    PLUGIN.get_or_init(|| load("myapp", None)).clone()
}

fn annotator_plugin() -> Plugin {
    static PLUGIN: OnceLock<Plugin> = OnceLock::new();
    PLUGIN
        .get_or_init(|| load("pod-annotator", Some(json!({"namespaces": ["team-a"]}))))
        .clone()
}

fn reconcile(plugin: &Plugin, request: &Request) -> Desired {
    plugin
        .reconcile(request)
        .unwrap_or_else(|e| panic!("reconcile failed: {e}"))
}

/// The children exactly as the operator would apply them.
fn prepared(plugin: &Plugin, parent: &Value, desired: &Desired) -> Vec<Value> {
    plan::children(plugin.manifest(), parent, &desired.children)
        .unwrap_or_else(|e| panic!("the plugin crossed its fence: {e}"))
}

/// What the operator would write, as one value for golden files.
fn writes(plugin: &Plugin, parent: &Value, desired: &Desired) -> Value {
    json!({
        "children": prepared(plugin, parent, desired),
        "status": plan::status_update(
            parent,
            desired.status.as_ref(),
            &plugin.manifest().field_manager(),
        ),
        "events": desired.events,
    })
}

fn reasons(desired: &Desired) -> Vec<&str> {
    desired.events.iter().map(|e| e.reason.as_str()).collect()
}

fn guest_error(result: Result<Desired, CallError>) -> GuestError {
    match result {
        Err(CallError::Guest { error, .. }) => error,
        other => panic!("expected a guest error, got {other:?}"),
    }
}

fn secret_data(desired: &Desired) -> Value {
    child(&desired.children, "Secret")["data"].clone()
}

fn stateful_set(db: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": db, "namespace": "shop", "uid": "sts-uid"},
        "spec": {"replicas": replicas},
        "status": {"replicas": replicas},
    })
}

/// A database with 3 replicas, its StatefulSet observed, and these pods.
fn database_status_with(pods: &[Value]) -> Value {
    let parent = database("orders", "postgresql", "16.2.0", 3);
    let desired = reconcile(
        &database_plugin(),
        &request(&parent, &[stateful_set("orders", 3)], pods),
    );
    desired.status.expect("database always returns a status")
}

// database: manifest and children.

#[test]
fn database_declares_its_parent_children_and_related_pods() {
    let plugin = database_plugin();
    let m = plugin.manifest();
    assert_eq!((m.name.as_str(), m.version.as_str()), ("database", "0.1.0"));
    assert_eq!(m.parent.to_string(), "Database.example.com/v1");
    assert_eq!(m.parent.plural, "databases");
    assert_eq!(m.mode, Mode::Composite);
    let children: Vec<String> = m.children.iter().map(|c| c.to_string()).collect();
    assert_eq!(children, ["StatefulSet.apps/v1", "Service.v1", "Secret.v1"]);
    assert_eq!(m.related.len(), 1);
    assert_eq!(m.related[0].resource.to_string(), "Pod.v1");
    assert_eq!(
        m.related[0].match_labels,
        [
            (
                "app.kubernetes.io/name".to_string(),
                LabelValue::Literal("database".into())
            ),
            (
                "app.kubernetes.io/instance".to_string(),
                LabelValue::ParentName
            ),
        ]
    );
    assert_eq!(m.finalizer, None);
}

#[test]
fn database_runs_each_engine_on_its_port_and_official_image() {
    let plugin = database_plugin();
    for (engine, port, image, golden) in [
        ("mysql", 3306, "mysql:8.4.3", "database-mysql"),
        ("postgresql", 5432, "postgres:16.2.0", "database-postgresql"),
        ("mongodb", 27017, "mongo:7.0.14", "database-mongodb"),
    ] {
        let version = image.split_once(':').unwrap().1;
        let parent = database("orders", engine, version, 1);
        let desired = reconcile(&plugin, &request(&parent, &[], &[]));

        let sts = child(&desired.children, "StatefulSet");
        let container = &sts["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], image, "{engine}");
        assert_eq!(container["ports"][0]["containerPort"], port, "{engine}");
        let service = child(&desired.children, "Service");
        assert_eq!(service["spec"]["ports"][0]["port"], port, "{engine}");
        assert_eq!(service["spec"]["clusterIP"], "None", "{engine}");
        assert_eq!(sts["spec"]["serviceName"], "orders", "{engine}");
        assert_eq!(
            child(&desired.children, "Secret")["metadata"]["name"],
            "orders-credentials"
        );
        assert_golden(golden, &writes(&plugin, &parent, &desired));
    }
}

#[test]
fn database_pulls_from_the_configured_registry_and_refuses_a_bad_one() {
    let mirrored = load(
        "database",
        Some(json!({"imageRegistry": "mirror.example.com/library"})),
    );
    let parent = database("orders", "postgresql", "16.2.0", 1);
    let desired = reconcile(&mirrored, &request(&parent, &[], &[]));
    let sts = child(&desired.children, "StatefulSet");
    assert_eq!(
        sts["spec"]["template"]["spec"]["containers"][0]["image"],
        "mirror.example.com/library/postgres:16.2.0"
    );
    for bad in [
        json!({"imageRegistry": "mirror/"}),
        json!({"registry": "x"}),
    ] {
        let error = runtime()
            .load(
                &plugin_bytes("database"),
                PluginOptions {
                    config: Some(bad.clone()),
                    ..Default::default()
                },
            )
            .err()
            .unwrap_or_else(|| panic!("{bad} was accepted"));
        assert!(
            matches!(
                &error,
                LoadError::Manifest(CallError::Guest {
                    error: GuestError::InvalidConfig(_),
                    ..
                })
            ),
            "{bad}: {error:?}"
        );
    }
}

#[test]
fn database_reads_its_password_from_the_secret_it_creates() {
    let parent = database("orders", "postgresql", "16.2.0", 1);
    let desired = reconcile(&database_plugin(), &request(&parent, &[], &[]));
    let container =
        &child(&desired.children, "StatefulSet")["spec"]["template"]["spec"]["containers"][0];
    let password = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "POSTGRES_PASSWORD")
        .expect("POSTGRES_PASSWORD is set");
    assert_eq!(
        password["valueFrom"]["secretKeyRef"],
        json!({"name": "orders-credentials", "key": "password"})
    );
}

#[test]
fn database_refuses_zero_and_eleven_replicas_as_invalid_input() {
    let plugin = database_plugin();
    for replicas in [0, 11] {
        let parent = database("orders", "mysql", "8.4.3", replicas);
        let error = guest_error(plugin.reconcile(&request(&parent, &[], &[])));
        assert_eq!(
            error,
            GuestError::InvalidInput(format!(
                "spec.replicas must be between 1 and 10, got {replicas}"
            ))
        );
    }
}

#[test]
fn database_accepts_one_and_ten_replicas() {
    let plugin = database_plugin();
    for replicas in [1, 10] {
        let parent = database("orders", "mysql", "8.4.3", replicas);
        let desired = reconcile(&plugin, &request(&parent, &[], &[]));
        assert_eq!(
            child(&desired.children, "StatefulSet")["spec"]["replicas"],
            replicas
        );
    }
}

#[test]
fn database_refuses_a_version_that_is_not_x_y_z() {
    let parent = database("orders", "mysql", "8.4", 1);
    let error = guest_error(database_plugin().reconcile(&request(&parent, &[], &[])));
    assert!(
        matches!(&error, GuestError::InvalidInput(m) if m.contains("x.y.z")),
        "{error:?}"
    );
}

#[test]
fn database_refuses_an_unknown_engine() {
    let parent = database("orders", "oracle", "19.3.0", 1);
    let error = guest_error(database_plugin().reconcile(&request(&parent, &[], &[])));
    assert!(
        matches!(&error, GuestError::InvalidInput(m) if m.contains("unknown variant `oracle`")),
        "{error:?}"
    );
}

// database: the Secret.

#[test]
fn database_creates_credentials_from_the_hosts_entropy_and_says_so() {
    let plugin = database_plugin();
    let parent = database("orders", "postgresql", "16.2.0", 1);
    let first = reconcile(&plugin, &request(&parent, &[], &[]));
    assert_eq!(reasons(&first), ["CredentialsCreated"]);
    assert_eq!(first.events[0].message, "created Secret orders-credentials");
    assert!(!first.events[0].warning);

    let again = reconcile(&plugin, &request(&parent, &[], &[]));
    assert_eq!(secret_data(&first), secret_data(&again), "same entropy");

    let fresh = Request {
        entropy: other_entropy(),
        ..request(&parent, &[], &[])
    };
    assert_ne!(
        secret_data(&first)["password"],
        secret_data(&reconcile(&plugin, &fresh))["password"],
        "fresh entropy, fresh password"
    );
}

/// Reconcile `parent`, store what was applied, and reconcile again later
/// with other entropy, as the operator would after the watch caught up.
/// Returns both answers and the stored children in between.
fn reconcile_twice(plugin: &Plugin, parent: &Value) -> (Desired, Vec<Value>, Desired) {
    let first = reconcile(plugin, &request(parent, &[], &[]));
    let stored: Vec<Value> = prepared(plugin, parent, &first)
        .iter()
        .map(|c| as_stored(c, "child-uid"))
        .collect();
    let second = Request {
        now: LATER.into(),
        entropy: other_entropy(),
        ..request(parent, &stored, &[])
    };
    let second = reconcile(plugin, &second);
    (first, stored, second)
}

#[test]
fn database_keeps_the_observed_secret_instead_of_rotating_it() {
    let plugin = database_plugin();
    let parent = database("orders", "postgresql", "16.2.0", 1);
    let (first, _, second) = reconcile_twice(&plugin, &parent);
    assert_eq!(secret_data(&second), secret_data(&first));
    assert!(reasons(&second).is_empty(), "{:?}", second.events);
}

#[test]
fn database_writes_no_child_again_once_they_are_observed_unchanged() {
    let plugin = database_plugin();
    let parent = database("orders", "mysql", "8.4.3", 1);
    let (_, stored, second) = reconcile_twice(&plugin, &parent);
    let again = prepared(&plugin, &parent, &second);
    assert_eq!(again.len(), 3);
    for want in &again {
        let key = plan::ObjectKey::of(want);
        let observed = stored.iter().find(|o| plan::ObjectKey::of(o) == key);
        assert!(observed.is_some(), "{key} was observed");
        assert!(
            !plan::needs_apply(want, observed),
            "{key} would be re-applied"
        );
    }
    assert!(plan::prune(plugin.manifest(), &stored, &again).is_empty());
}

// database: status.

#[test]
fn database_is_running_with_sorted_pod_names_when_every_pod_is_ready() {
    let status = database_status_with(&[
        database_pod("orders", 2, true),
        database_pod("orders", 0, true),
        database_pod("orders", 1, true),
    ]);
    assert_eq!(status["phase"], "Running");
    assert_eq!(status["pods"], json!(["orders-0", "orders-1", "orders-2"]));
    assert_eq!(status["replicas"], 3);
    assert_eq!(status["readyReplicas"], 3);
    assert_eq!(
        status["selector"],
        "app.kubernetes.io/name=database,app.kubernetes.io/instance=orders"
    );
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(
        status["conditions"],
        json!([{
            "type": "Ready",
            "status": "True",
            "reason": "AllReplicasReady",
            "message": "3/3 replicas ready",
            "lastTransitionTime": NOW,
            "observedGeneration": 1,
        }])
    );
}

#[test]
fn database_is_pending_until_its_statefulset_is_observed() {
    let parent = database("orders", "postgresql", "16.2.0", 1);
    let desired = reconcile(
        &database_plugin(),
        &request(&parent, &[], &[database_pod("orders", 0, true)]),
    );
    let status = desired.status.unwrap();
    assert_eq!(status["phase"], "Pending");
    assert_eq!(status["conditions"][0]["status"], "False");
    assert_eq!(status["conditions"][0]["reason"], "Provisioning");
}

#[test]
fn database_is_creating_while_some_pods_are_not_ready() {
    let status = database_status_with(&[
        database_pod("orders", 0, true),
        database_pod("orders", 1, false),
        database_pod("orders", 2, true),
    ]);
    assert_eq!(status["phase"], "Creating");
    assert_eq!(status["readyReplicas"], 2);
    assert_eq!(status["replicas"], 3);
    assert_eq!(status["conditions"][0]["message"], "2/3 replicas ready");
}

#[test]
fn database_is_creating_while_pods_are_missing() {
    let status = database_status_with(&[
        database_pod("orders", 0, true),
        database_pod("orders", 1, true),
    ]);
    assert_eq!(status["phase"], "Creating");
    assert_eq!(status["replicas"], 2);
}

#[test]
fn database_has_failed_when_a_pod_failed() {
    let mut failed = database_pod("orders", 1, false);
    failed["status"]["phase"] = "Failed".into();
    let status = database_status_with(&[
        database_pod("orders", 0, true),
        failed,
        database_pod("orders", 2, true),
    ]);
    assert_eq!(status["phase"], "Failed");
    assert_eq!(status["conditions"][0]["reason"], "PodFailed");
}

#[test]
fn database_does_not_count_pods_that_are_being_deleted() {
    let mut leaving = database_pod("orders", 3, true);
    leaving["metadata"]["deletionTimestamp"] = NOW.into();
    let status = database_status_with(&[
        database_pod("orders", 0, true),
        database_pod("orders", 1, true),
        database_pod("orders", 2, true),
        leaving,
    ]);
    assert_eq!(status["phase"], "Running");
    assert_eq!(status["pods"], json!(["orders-0", "orders-1", "orders-2"]));
}

#[test]
fn database_keeps_last_transition_time_while_its_status_is_unchanged() {
    let plugin = database_plugin();
    let pods = [database_pod("orders", 0, true)];
    let observed = [stateful_set("orders", 1)];
    let mut parent = database("orders", "postgresql", "16.2.0", 1);
    let first = reconcile(&plugin, &request(&parent, &observed, &pods));
    parent["status"] = first.status.clone().unwrap();

    let later = Request {
        now: LATER.into(),
        ..request(&parent, &observed, &pods)
    };
    let second = reconcile(&plugin, &later);
    assert_eq!(
        second.status.as_ref().unwrap()["conditions"][0]["lastTransitionTime"],
        NOW
    );
    assert_eq!(second.status, first.status);
    assert_eq!(
        plan::status_update(
            &parent,
            second.status.as_ref(),
            &plugin.manifest().field_manager()
        ),
        None,
        "an unchanged status is not written again"
    );
}

#[test]
fn database_moves_last_transition_time_when_readiness_changes() {
    let plugin = database_plugin();
    let observed = [stateful_set("orders", 1)];
    let mut parent = database("orders", "postgresql", "16.2.0", 1);
    let creating = reconcile(
        &plugin,
        &request(&parent, &observed, &[database_pod("orders", 0, false)]),
    );
    parent["status"] = creating.status.unwrap();
    assert_eq!(parent["status"]["phase"], "Creating");

    let later = Request {
        now: LATER.into(),
        ..request(&parent, &observed, &[database_pod("orders", 0, true)])
    };
    let running = reconcile(&plugin, &later).status.unwrap();
    assert_eq!(running["phase"], "Running");
    assert_eq!(running["conditions"][0]["status"], "True");
    assert_eq!(running["conditions"][0]["lastTransitionTime"], LATER);
}

// myapp.

fn myapp(spec: Value) -> Value {
    json!({
        "apiVersion": "example.com/v1alpha1",
        "kind": "MyApp",
        "metadata": {"name": "web", "namespace": "shop", "uid": PARENT_UID, "generation": 2},
        "spec": spec,
    })
}

fn deployment(available: Option<i64>) -> Value {
    let mut deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web-deploy", "namespace": "shop", "uid": "deploy-uid"},
        "spec": {"replicas": 3},
    });
    if let Some(available) = available {
        deployment["status"] = json!({"availableReplicas": available});
    }
    deployment
}

fn myapp_phase(observed: &[Value]) -> Value {
    let parent = myapp(json!({"replicas": 3}));
    let desired = reconcile(&myapp_plugin(), &request(&parent, observed, &[]));
    desired.status.unwrap()["phase"].clone()
}

#[test]
fn myapp_creates_a_deployment_named_after_the_app() {
    let plugin = myapp_plugin();
    let parent = myapp(json!({"replicas": 3}));
    let desired = reconcile(&plugin, &request(&parent, &[], &[]));
    assert_eq!(desired.children.len(), 1);
    let deployment = child(&desired.children, "Deployment");
    assert_eq!(deployment["apiVersion"], "apps/v1");
    assert_eq!(deployment["metadata"]["name"], "web-deploy");
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert!(desired.events.is_empty());
    assert_golden("myapp", &writes(&plugin, &parent, &desired));
}

#[test]
fn myapp_runs_the_default_image_when_none_is_given() {
    for spec in [json!({}), json!({"image": ""})] {
        let parent = myapp(spec);
        let desired = reconcile(&myapp_plugin(), &request(&parent, &[], &[]));
        let deployment = child(&desired.children, "Deployment");
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx:1.27"
        );
        assert_eq!(deployment["spec"]["replicas"], 1, "one replica by default");
    }
}

#[test]
fn myapp_runs_the_image_it_is_given() {
    let parent = myapp(json!({"image": "ghcr.io/example/web:2.1.0"}));
    let desired = reconcile(&myapp_plugin(), &request(&parent, &[], &[]));
    assert_eq!(
        child(&desired.children, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"],
        "ghcr.io/example/web:2.1.0"
    );
}

#[test]
fn myapp_is_pending_until_its_deployment_is_observed() {
    assert_eq!(myapp_phase(&[]), "Pending");
}

#[test]
fn myapp_is_progressing_while_fewer_replicas_are_available_than_wanted() {
    assert_eq!(myapp_phase(&[deployment(None)]), "Progressing");
    assert_eq!(myapp_phase(&[deployment(Some(2))]), "Progressing");
}

#[test]
fn myapp_is_running_once_available_replicas_reach_replicas() {
    assert_eq!(myapp_phase(&[deployment(Some(3))]), "Running");
    assert_eq!(myapp_phase(&[deployment(Some(4))]), "Running");
    let parent = myapp(json!({"replicas": 3}));
    let desired = reconcile(
        &myapp_plugin(),
        &request(&parent, &[deployment(Some(3))], &[]),
    );
    let status = desired.status.unwrap();
    assert_eq!(status["availableReplicas"], 3);
    assert_eq!(status["observedGeneration"], 2);
    assert_eq!(status["conditions"][0]["type"], "Available");
    assert_eq!(status["conditions"][0]["status"], "True");
}

#[test]
fn myapp_refuses_negative_replicas() {
    let parent = myapp(json!({"replicas": -1}));
    let error = guest_error(myapp_plugin().reconcile(&request(&parent, &[], &[])));
    assert_eq!(
        error,
        GuestError::InvalidInput("spec.replicas must not be negative, got -1".into())
    );
}

// pod-annotator.

fn pod(namespace: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": namespace,
            "uid": PARENT_UID,
            "annotations": annotations,
        },
        "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
    })
}

fn annotate(pod: &Value) -> Desired {
    reconcile(&annotator_plugin(), &request(pod, &[], &[]))
}

#[test]
fn pod_annotator_is_a_decorator_of_pods_in_its_configured_namespaces() {
    let plugin = load(
        "pod-annotator",
        Some(json!({"namespaces": ["team-a", "team-b"]})),
    );
    let m = plugin.manifest();
    assert_eq!(m.name, "pod-annotator");
    assert_eq!(m.mode, Mode::Decorator);
    assert_eq!(m.parent.to_string(), "Pod.v1");
    assert!(m.children.is_empty());
    assert_eq!(m.namespaces, ["team-a", "team-b"]);
    // It reads Pods' metadata only (its `reads` export): the host caches
    // them so. database reads its related Pods whole.
    let metadata_only: Vec<String> = m.metadata_only.iter().map(|r| r.to_string()).collect();
    assert_eq!(metadata_only, ["Pod.v1"]);
    assert!(load("database", None).manifest().metadata_only.is_empty());
}

#[test]
fn pod_annotator_stamps_a_pod_in_a_watched_namespace_once() {
    let pod = pod("team-a", json!({"owner": "alice"}));
    let desired = annotate(&pod);
    assert!(desired.children.is_empty());
    assert_eq!(desired.status, None);
    let patch = desired.parent_patch.clone().expect("a parent patch");
    assert!(patch.labels.is_empty());
    assert_eq!(
        plan::parent_patch(&pod, &patch.labels, &patch.annotations),
        Some(json!({"metadata": {"annotations": {
            "example.com/injected": "true",
            "example.com/injected-at": NOW,
        }}}))
    );
    assert_eq!(reasons(&desired), ["Annotated"]);
    assert_eq!(
        desired.events[0].message,
        "stamped pod web-0 with example.com/injected"
    );
    assert_golden(
        "pod-annotator",
        &serde_json::to_value(&desired).expect("Desired serializes"),
    );
}

#[test]
fn pod_annotator_leaves_an_already_stamped_pod_alone() {
    let stamped = pod(
        "team-a",
        json!({"example.com/injected": "true", "example.com/injected-at": NOW}),
    );
    let desired = Request {
        now: LATER.into(),
        ..request(&stamped, &[], &[])
    };
    let desired = reconcile(&annotator_plugin(), &desired);
    assert_eq!(desired.parent_patch, None);
    assert!(desired.events.is_empty());
}

#[test]
fn pod_annotator_leaves_pods_in_other_namespaces_alone() {
    let desired = annotate(&pod("team-b", json!({})));
    assert_eq!(desired.parent_patch, None);
    assert!(desired.events.is_empty());
}

fn annotator_load_error(config: Value) -> String {
    let error = runtime()
        .load(
            &plugin_bytes("pod-annotator"),
            PluginOptions {
                config: Some(config),
                ..Default::default()
            },
        )
        .expect_err("the configuration is refused");
    match error {
        LoadError::Manifest(CallError::Guest {
            error: GuestError::InvalidConfig(message),
            ..
        }) => message,
        other => panic!("expected the plugin's own InvalidConfig, got {other:?}"),
    }
}

#[test]
fn pod_annotator_refuses_to_load_without_namespaces_in_its_own_words() {
    for config in [json!({}), json!({"namespaces": []})] {
        assert_eq!(
            annotator_load_error(config),
            "`namespaces` must name at least one namespace"
        );
    }
}

#[test]
fn pod_annotator_refuses_to_load_with_an_invalid_namespace_name() {
    let message = annotator_load_error(json!({"namespaces": ["Team_A"]}));
    assert_eq!(
        message,
        "`namespaces`: \"Team_A\" is not a valid namespace name"
    );
}

#[test]
fn pod_annotator_refuses_to_load_with_a_misspelt_config_key() {
    let message = annotator_load_error(json!({"namespace": ["team-a"]}));
    assert!(message.contains("unknown field `namespace`"), "{message}");
}

#[test]
fn a_refused_config_reads_as_the_plugins_message_in_the_error_chain() {
    let error = runtime()
        .load(
            &plugin_bytes("pod-annotator"),
            PluginOptions {
                label: Some("pod-annotator.wasm".into()),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert_eq!(
        format!("{:#}", anyhow::Error::from(error)),
        "manifest refused: plugin pod-annotator.wasm returned an error: \
         invalid config: `namespaces` must name at least one namespace"
    );
}

// The compile cache.

#[test]
fn a_component_is_compiled_once_then_loaded_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = plugin_bytes("myapp");
    let runtime = Runtime::new(Some(dir.path().to_path_buf())).unwrap();
    let first = runtime.load(&bytes, PluginOptions::default()).unwrap();
    assert_eq!(first.origin(), Origin::Compiled);
    let second = runtime.load(&bytes, PluginOptions::default()).unwrap();
    assert_eq!(second.origin(), Origin::Cached);

    let restarted = Runtime::new(Some(dir.path().to_path_buf())).unwrap();
    let third = restarted.load(&bytes, PluginOptions::default()).unwrap();
    assert_eq!(third.origin(), Origin::Cached, "a restart reuses the cache");

    let parent = myapp(json!({"replicas": 2}));
    let answer = reconcile(&first, &request(&parent, &[], &[]));
    assert_eq!(reconcile(&third, &request(&parent, &[], &[])), answer);
}

fn artefacts(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect()
}

#[test]
fn a_corrupted_artefact_is_discarded_and_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = plugin_bytes("myapp");
    let runtime = Runtime::new(Some(dir.path().to_path_buf())).unwrap();
    runtime.load(&bytes, PluginOptions::default()).unwrap();
    let [artefact] = artefacts(dir.path()).try_into().expect("one artefact");
    let good = std::fs::read(&artefact).unwrap();

    let corruptions: [(&str, Vec<u8>); 3] = [
        ("garbage", b"definitely not an ELF file".to_vec()),
        ("truncated", good[..good.len() / 2].to_vec()),
        ("empty", Vec::new()),
    ];
    for (what, corrupted) in corruptions {
        std::fs::write(&artefact, corrupted).unwrap();
        let plugin = runtime
            .load(&bytes, PluginOptions::default())
            .unwrap_or_else(|e| panic!("{what} artefact: {e:?}"));
        assert_eq!(plugin.origin(), Origin::Compiled, "{what} artefact");
        let parent = myapp(json!({}));
        reconcile(&plugin, &request(&parent, &[], &[]));
        let again = runtime.load(&bytes, PluginOptions::default()).unwrap();
        assert_eq!(again.origin(), Origin::Cached, "rewritten after {what}");
    }
}

#[test]
fn a_missing_cache_dir_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("a/b/compiled");
    let runtime = Runtime::new(Some(nested.clone())).unwrap();
    let plugin = runtime
        .load(&plugin_bytes("myapp"), PluginOptions::default())
        .unwrap();
    assert_eq!(plugin.origin(), Origin::Compiled);
    assert_eq!(artefacts(&nested).len(), 1);
}

#[test]
fn a_cache_dir_that_cannot_be_written_costs_only_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, "").unwrap();
    let runtime = Runtime::new(Some(not_a_dir)).unwrap();
    for _ in 0..2 {
        let plugin = runtime
            .load(&plugin_bytes("myapp"), PluginOptions::default())
            .unwrap();
        assert_eq!(plugin.origin(), Origin::Compiled);
    }
}

#[test]
fn without_a_cache_dir_every_load_compiles() {
    let runtime = Runtime::new(None).unwrap();
    let plugin = runtime
        .load(&plugin_bytes("myapp"), PluginOptions::default())
        .unwrap();
    assert_eq!(plugin.origin(), Origin::Compiled);
    assert_eq!(plugin.size(), plugin_bytes("myapp").len());
    assert_eq!(plugin.digest().len(), 64);
}

// Concurrency.

#[test]
fn one_plugin_serves_many_threads_at_once() {
    const THREADS: usize = 8;
    const CALLS: usize = 10;
    let plugin = database_plugin();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let plugin = &plugin;
            s.spawn(move || {
                let name = format!("db-{t}");
                let parent = database(&name, "mysql", "8.4.3", (t % 10 + 1) as i64);
                for _ in 0..CALLS {
                    let desired = reconcile(plugin, &request(&parent, &[], &[]));
                    let sts = child(&desired.children, "StatefulSet");
                    assert_eq!(sts["metadata"]["name"], name.as_str());
                    assert_eq!(sts["spec"]["replicas"], t % 10 + 1);
                }
            });
        }
    });
}
