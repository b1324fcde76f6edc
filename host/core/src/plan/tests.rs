//! Unit tests of [`super`]: the fence, the prepared children, and every
//! decision about whether to write. No wasm engine, no cluster. The
//! fixtures marked `pub(super)` are shared with [`super::decide`]'s tests.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;
use crate::manifest::{ApiResource, Manifest, Mode};

const PARENT_UID: &str = "6f1c1b2e-0000-4000-8000-000000000001";

pub(super) fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        namespaced: true,
    }
}

/// A composite plugin like `database`: Databases own StatefulSets, Services
/// and Secrets.
pub(super) fn composite() -> Manifest {
    Manifest {
        children: vec![
            resource("apps", "v1", "StatefulSet", "statefulsets"),
            resource("", "v1", "Service", "services"),
            resource("", "v1", "Secret", "secrets"),
        ],
        ..Manifest::new(
            "database",
            "0.1.0",
            resource("example.com", "v1", "Database", "databases"),
            Mode::Composite,
        )
    }
}

/// A decorator plugin like `pod-annotator`.
pub(super) fn decorator() -> Manifest {
    Manifest {
        name: "pod-annotator".into(),
        parent: resource("", "v1", "Pod", "pods"),
        mode: Mode::Decorator,
        children: Vec::new(),
        ..composite()
    }
}

pub(super) fn parent() -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Database",
        "metadata": {
            "name": "orders",
            "namespace": "shop",
            "uid": PARENT_UID,
            "resourceVersion": "41",
            "generation": 3,
        },
        "spec": {"engine": "postgresql", "version": "16.2.0", "replicas": 1},
    })
}

pub(super) fn service(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": {"app": "orders"}},
        "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]},
    })
}

/// Prepare one child, expecting the fence to let it through.
pub(super) fn prepared(child: Value) -> Value {
    children(&composite(), &parent(), &[child])
        .expect("child passes the fence")
        .remove(0)
}

/// What the API server hands back after applying `prepared`: the same
/// object plus fields it owns and defaults it fills in.
pub(super) fn as_served(prepared: &Value) -> Value {
    let mut served = prepared.clone();
    let meta = served["metadata"].as_object_mut().unwrap();
    meta.insert("uid".into(), "c0ffee00-0000-4000-8000-000000000002".into());
    meta.insert("resourceVersion".into(), "42".into());
    meta.insert("creationTimestamp".into(), "2026-11-29T18:00:00Z".into());
    meta.insert(
        "managedFields".into(),
        json!([{"manager": "kubeplug/database"}]),
    );
    served["spec"]["sessionAffinity"] = "None".into();
    served["spec"]["ports"][0]["protocol"] = "TCP".into();
    served["status"] = json!({"loadBalancer": {}});
    served
}

fn applied_hash(object: &Value) -> &str {
    object["metadata"]["annotations"][APPLIED_HASH]
        .as_str()
        .unwrap_or_default()
}

fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

// The fence.

#[test]
fn a_child_of_an_undeclared_kind_is_refused() {
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
    let error = children(&composite(), &parent(), &[service("orders"), config_map]).unwrap_err();
    assert_eq!(
        error,
        FenceError::UndeclaredKind {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "x".into(),
        }
    );
}

#[test]
fn a_declared_kind_under_another_api_version_is_refused() {
    let old = json!({"apiVersion": "apps/v1beta2", "kind": "StatefulSet", "metadata": {"name": "orders"}});
    let error = children(&composite(), &parent(), &[old]).unwrap_err();
    assert!(
        matches!(error, FenceError::UndeclaredKind { ref api_version, .. } if api_version == "apps/v1beta2"),
        "{error:?}"
    );
}

#[test]
fn a_child_in_a_foreign_namespace_is_refused() {
    let mut child = service("orders");
    child["metadata"]["namespace"] = "kube-system".into();
    let error = children(&composite(), &parent(), &[child]).unwrap_err();
    assert_eq!(
        error,
        FenceError::ForeignNamespace {
            kind: "Service".into(),
            name: "orders".into(),
            namespace: "kube-system".into(),
            parent: "shop".into(),
        }
    );
}

#[test]
fn a_child_naming_its_parents_namespace_is_accepted() {
    let mut child = service("orders");
    child["metadata"]["namespace"] = "shop".into();
    assert_eq!(prepared(child)["metadata"]["namespace"], "shop");
}

#[test]
fn the_same_child_returned_twice_is_refused() {
    let error = children(
        &composite(),
        &parent(),
        &[service("orders"), service("orders")],
    )
    .unwrap_err();
    assert_eq!(
        error,
        FenceError::Duplicate {
            kind: "Service".into(),
            name: "orders".into(),
        }
    );
}

#[test]
fn two_children_sharing_a_name_but_not_a_kind_are_accepted() {
    let sts =
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "orders"}});
    let out = children(&composite(), &parent(), &[service("orders"), sts]).unwrap();
    assert_eq!(out.len(), 2);
}

#[test]
fn a_decorators_children_are_its_declared_attachments() {
    // pod-annotator declares no attachment kind: a child is undeclared.
    let error = children(&decorator(), &parent(), &[service("orders")]).unwrap_err();
    assert!(
        matches!(error, FenceError::UndeclaredKind { .. }),
        "{error}"
    );
    // One that declares Services attaches them to the decorated object,
    // owned by it like a composite's children.
    let mut attacher = decorator();
    attacher.children = vec![composite().children[1].clone()];
    assert_eq!(attacher.children[0].kind, "Service");
    let out = children(&attacher, &parent(), &[service("orders")]).unwrap();
    assert_eq!(out[0]["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(
        out[0]["metadata"]["ownerReferences"][0]["uid"],
        parent()["metadata"]["uid"]
    );
}

#[test]
fn a_decorator_returning_no_children_is_accepted() {
    assert_eq!(children(&decorator(), &parent(), &[]), Ok(Vec::new()));
}

#[test]
fn a_composite_returning_a_parent_patch_is_refused() {
    assert_eq!(
        check_mode(&composite(), true, false),
        Err(FenceError::WrongMode {
            mode: "composite",
            what: "a parent patch",
        })
    );
    assert_eq!(check_mode(&composite(), false, true), Ok(()));
}

#[test]
fn a_decorator_may_patch_its_parent() {
    assert_eq!(check_mode(&decorator(), true, false), Ok(()));
}

#[test]
fn a_parent_without_uid_cannot_own_children() {
    let mut parent = parent();
    parent["metadata"].as_object_mut().unwrap().remove("uid");
    assert_eq!(
        children(&composite(), &parent, &[service("orders")]),
        Err(FenceError::ParentWithoutUid)
    );
    assert_eq!(children(&composite(), &parent, &[]), Ok(Vec::new()));
}

// What the host adds and removes.

#[test]
fn children_get_a_controller_owner_reference_to_the_parent() {
    let child = prepared(service("orders"));
    assert_eq!(
        child["metadata"]["ownerReferences"],
        json!([{
            "apiVersion": "example.com/v1",
            "kind": "Database",
            "name": "orders",
            "uid": PARENT_UID,
            "controller": true,
            "blockOwnerDeletion": true,
        }])
    );
}

#[test]
fn an_owner_reference_the_plugin_wrote_is_replaced_by_the_parents() {
    let mut child = service("orders");
    child["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "Namespace", "name": "shop", "uid": "x"}]);
    let refs = prepared(child)["metadata"]["ownerReferences"].clone();
    assert_eq!(refs.as_array().unwrap().len(), 1);
    assert_eq!(refs[0]["uid"], PARENT_UID);
}

#[test]
fn children_get_the_parents_namespace_when_they_name_none() {
    assert_eq!(prepared(service("orders"))["metadata"]["namespace"], "shop");
}

#[test]
fn cluster_scoped_children_get_no_namespace() {
    let mut manifest = composite();
    manifest.children.push(ApiResource {
        namespaced: false,
        ..resource(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
        )
    });
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "orders-reader"},
    });
    let out = children(&manifest, &parent(), &[role]).unwrap();
    assert_eq!(out[0]["metadata"].get("namespace"), None);
}

#[test]
fn children_get_the_plugin_label_next_to_their_own_labels() {
    let child = prepared(service("orders"));
    assert_eq!(
        child["metadata"]["labels"],
        json!({"app": "orders", PLUGIN_LABEL: "database"})
    );
}

#[test]
fn children_without_labels_still_get_the_plugin_label() {
    let child = prepared(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}));
    assert_eq!(
        child["metadata"]["labels"],
        json!({PLUGIN_LABEL: "database"})
    );
}

/// [`parent`] labelled with shard `value`.
pub(super) fn parent_in_shard(value: &str) -> Value {
    let mut parent = parent();
    parent["metadata"]["labels"] = json!({ crate::shard::SHARD_LABEL: value });
    parent
}

/// The database plugin's grant with `shards` shards.
pub(super) fn sharded(shards: u16) -> crate::policy::Effective {
    grant(&format!(
        "plugins:\n  database:\n    parent: [Database.example.com]\n    shards: {shards}\n"
    ))
}

/// The children [`fence`] prepares for `parent` from two Services.
fn fenced_children(grant: &crate::policy::Effective, parent: &Value) -> Vec<Value> {
    let desired = Desired {
        children: vec![service("orders"), service("orders-replicas")],
        ..Desired::default()
    };
    let children = fence(&composite(), grant, parent, &desired).expect("passes the fence");
    children.into_iter().map(|(_, child)| child).collect()
}

#[test]
fn a_sharded_plugins_children_get_their_parents_shard_label() {
    use crate::shard::SHARD_LABEL;
    let children = fenced_children(&sharded(4), &parent_in_shard("3"));
    assert_eq!(children.len(), 2);
    for child in &children {
        assert_eq!(
            child["metadata"]["labels"],
            json!({"app": "orders", PLUGIN_LABEL: "database", SHARD_LABEL: "3"})
        );
    }
    // The label is part of what was applied: moving a parent to another
    // shard re-applies its children.
    let moved = fenced_children(&sharded(4), &parent_in_shard("1"));
    assert_ne!(applied_hash(&children[0]), applied_hash(&moved[0]));
}

#[test]
fn an_unsharded_plugins_children_are_byte_for_byte_as_before_whatever_the_parent_carries() {
    let before: Vec<String> = [service("orders"), service("orders-replicas")]
        .into_iter()
        .map(|s| prepared(s).to_string())
        .collect();
    let unsharded = grant("plugins:\n  database:\n    parent: [Database.example.com]\n");
    for parent in [parent(), parent_in_shard("3")] {
        for grant in [&unsharded, &sharded(1)] {
            let after: Vec<String> = fenced_children(grant, &parent)
                .iter()
                .map(Value::to_string)
                .collect();
            assert_eq!(after, before);
        }
    }
}

#[test]
fn a_sharded_plugins_children_get_no_shard_label_while_their_parent_is_stray() {
    let unlabelled: Vec<Value> = [service("orders"), service("orders-replicas")]
        .into_iter()
        .map(prepared)
        .collect();
    // No label, one past the count (it was lowered), one not canonical.
    let mut stray = vec![parent()];
    stray.extend(["4", "03", "x"].map(parent_in_shard));
    for parent in stray {
        assert_eq!(
            fenced_children(&sharded(4), &parent),
            unlabelled,
            "{}",
            parent["metadata"]
        );
    }
}

/// A StatefulSet child whose pod template carries `labels`.
fn stateful_set(labels: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "orders"},
        "spec": {
            "selector": {"matchLabels": {"app": "orders"}},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": []}},
        },
    })
}

#[test]
fn with_shard_pods_the_pod_templates_carry_the_shard_and_without_they_are_untouched() {
    use crate::shard::SHARD_LABEL;
    let desired = Desired {
        children: vec![stateful_set(json!({"app": "orders"})), service("orders")],
        ..Desired::default()
    };
    let template = |grant: &crate::policy::Effective, parent: &Value| {
        let children = fence(&composite(), grant, parent, &desired).expect("passes");
        children[0].1["spec"]["template"]["metadata"]["labels"].clone()
    };
    let pods = grant(
        "plugins:\n  database:\n    parent: [Database.example.com]\n    shards: 4\n    shardPods: true\n",
    );
    assert_eq!(
        template(&pods, &parent_in_shard("2")),
        json!({"app": "orders", SHARD_LABEL: "2"})
    );
    // Not granted, or the parent is stray: the template is the plugin's.
    assert_eq!(
        template(&sharded(4), &parent_in_shard("2")),
        json!({"app": "orders"})
    );
    assert_eq!(template(&pods, &parent()), json!({"app": "orders"}));
    // A plugin may not set it in a template the host labels.
    let planted = Desired {
        children: vec![stateful_set(json!({SHARD_LABEL: "0"}))],
        ..Desired::default()
    };
    let refused = fence(&composite(), &pods, &parent_in_shard("2"), &planted).unwrap_err();
    assert_eq!(
        refused.source.to_string(),
        "child StatefulSet/orders at /spec/template/metadata/labels: label kubeplug.io/shard is the host's to set (no grant unlocks it)"
    );
}

#[test]
fn a_child_may_not_carry_the_shard_label_sharded_or_not() {
    let mut child = service("orders");
    child["metadata"]["labels"][crate::shard::SHARD_LABEL] = "0".into();
    let expected = FenceError::HostLabel {
        on: "child Service/orders".into(),
        key: crate::shard::SHARD_LABEL.into(),
    };
    assert_eq!(
        children(&composite(), &parent(), std::slice::from_ref(&child)),
        Err(expected.clone())
    );
    let desired = Desired {
        children: vec![child],
        ..Desired::default()
    };
    let refused = fence(&composite(), &sharded(4), &parent_in_shard("0"), &desired).unwrap_err();
    assert_eq!(refused.source, expected);
    assert_eq!(
        refused.source.to_string(),
        "child Service/orders: label kubeplug.io/shard is the host's to set (no grant unlocks it)"
    );
}

#[test]
fn children_get_an_applied_hash_next_to_their_own_annotations() {
    let mut child = service("orders");
    child["metadata"]["annotations"] = json!({"team": "payments"});
    let child = prepared(child);
    let annotations = child["metadata"]["annotations"].as_object().unwrap();
    assert_eq!(annotations["team"], "payments");
    let hash = applied_hash(&child);
    assert_eq!(hash.len(), 24, "12 bytes of SHA-256, hex: {hash}");
    assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()));
}

#[test]
fn server_owned_fields_and_status_are_stripped_from_children() {
    let served = as_served(&prepared(service("orders")));
    let mut returned = served.clone();
    returned["metadata"]["generation"] = 7.into();
    returned["metadata"]["deletionTimestamp"] = "2026-11-29T18:00:00Z".into();
    returned["metadata"]["selfLink"] = "/api/v1/namespaces/shop/services/orders".into();
    let child = prepared(returned);
    let meta = child["metadata"].as_object().unwrap();
    for field in SERVER_OWNED_FIELDS {
        assert!(!meta.contains_key(*field), "{field} was kept: {child:#}");
    }
    assert_eq!(child.get("status"), None);
    assert_eq!(
        child["spec"]["sessionAffinity"], "None",
        "spec is left alone"
    );
}

#[test]
fn the_applied_hash_ignores_key_order_and_server_owned_fields() {
    let a = prepared(service("orders"));
    let reordered: Value = serde_json::from_str(
        r#"{"spec": {"ports": [{"port": 5432, "name": "pg"}], "clusterIP": "None"},
            "metadata": {"labels": {"app": "orders"}, "name": "orders", "uid": "u", "resourceVersion": "9"},
            "kind": "Service", "apiVersion": "v1", "status": {"x": 1}}"#,
    )
    .unwrap();
    let b = prepared(reordered);
    assert_eq!(applied_hash(&a), applied_hash(&b));
    assert_eq!(a, b);
}

#[test]
fn the_applied_hash_changes_with_the_content() {
    let mut other = service("orders");
    other["spec"]["ports"][0]["port"] = 5433.into();
    assert_ne!(
        applied_hash(&prepared(service("orders"))),
        applied_hash(&prepared(other))
    );
}

#[test]
fn the_applied_hash_changes_with_the_parent_uid() {
    let a = prepared(service("orders"));
    let mut recreated = parent();
    recreated["metadata"]["uid"] = "another-uid".into();
    let b = children(&composite(), &recreated, &[service("orders")]).unwrap();
    assert_ne!(applied_hash(&a), applied_hash(&b[0]));
}

// needs_apply.

#[test]
fn a_child_not_yet_observed_needs_applying() {
    assert!(needs_apply(&prepared(service("orders")), None));
}

#[test]
fn an_unchanged_child_as_the_server_returns_it_is_skipped() {
    let want = prepared(service("orders"));
    assert!(!needs_apply(&want, Some(&as_served(&want))));
}

#[test]
fn a_child_whose_desired_content_changed_is_applied() {
    let observed = as_served(&prepared(service("orders")));
    let mut changed = service("orders");
    changed["spec"]["ports"][0]["port"] = 5433.into();
    assert!(needs_apply(&prepared(changed), Some(&observed)));
}

#[test]
fn a_child_someone_edited_since_the_last_apply_is_applied_again() {
    let want = prepared(service("orders"));
    let mut observed = as_served(&want);
    observed["spec"]["ports"][0]["port"] = 1234.into();
    assert!(needs_apply(&want, Some(&observed)));
}

#[test]
fn a_child_whose_plugin_label_someone_removed_is_applied_again() {
    let want = prepared(service("orders"));
    let mut observed = as_served(&want);
    observed["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove(PLUGIN_LABEL);
    assert!(needs_apply(&want, Some(&observed)));
}

#[test]
fn a_child_applied_by_someone_else_without_our_hash_is_applied() {
    let want = prepared(service("orders"));
    let mut observed = as_served(&want);
    observed["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(APPLIED_HASH);
    assert!(needs_apply(&want, Some(&observed)));
}

#[test]
fn a_child_whose_desired_field_was_removed_is_applied() {
    // Last apply had `publishNotReadyAddresses`; the plugin no longer wants
    // it. The new desired object is a subset of what is observed, so only the
    // hash tells that an apply (which drops the field) is needed.
    let mut before = service("orders");
    before["spec"]["publishNotReadyAddresses"] = true.into();
    let observed = as_served(&prepared(before));
    let want = prepared(service("orders"));
    assert!(is_subset(&want["spec"], &observed["spec"]));
    assert_ne!(applied_hash(&want), applied_hash(&observed));
    assert!(needs_apply(&want, Some(&observed)));
}

#[test]
fn a_list_with_an_extra_item_observed_is_applied() {
    let want = prepared(service("orders"));
    let mut observed = as_served(&want);
    observed["spec"]["ports"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "metrics", "port": 9187}));
    assert!(needs_apply(&want, Some(&observed)));
}

// is_subset.

#[test]
fn a_null_in_desired_matches_a_missing_field() {
    assert!(is_subset(&json!({"a": null}), &json!({})));
    assert!(is_subset(&json!({"a": {"b": null}}), &json!({"a": null})));
    assert!(!is_subset(&json!({"a": 1}), &json!({})));
}

#[test]
fn server_defaults_inside_list_items_count_as_contained() {
    assert!(is_subset(
        &json!({"containers": [{"name": "db", "image": "postgres:16.2.0"}]}),
        &json!({"containers": [{"name": "db", "image": "postgres:16.2.0",
                                "imagePullPolicy": "IfNotPresent"}]}),
    ));
}

#[test]
fn list_items_compare_in_order() {
    assert!(!is_subset(&json!([1, 2]), &json!([2, 1])));
    assert!(!is_subset(&json!([1]), &json!([1, 2])));
}

// prune.

pub(super) fn observed_child(kind: &str, name: &str, plugin: Option<&str>) -> Value {
    let api_version = if kind == "StatefulSet" {
        "apps/v1"
    } else {
        "v1"
    };
    let mut child = json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": "shop", "labels": {}},
    });
    if let Some(plugin) = plugin {
        child["metadata"]["labels"][PLUGIN_LABEL] = plugin.into();
    }
    child
}

fn pruned_names(observed: &[Value], desired: &[Value]) -> Vec<String> {
    let prepared = children(&composite(), &parent(), desired).unwrap();
    prune(&composite(), observed, &prepared)
        .into_iter()
        .map(|o| TypedKey::of(o).to_string())
        .collect()
}

#[test]
fn only_children_labelled_with_this_plugins_name_are_pruned() {
    let observed = [
        observed_child("Service", "orders", Some("database")),
        observed_child("Service", "orders-old", Some("database")),
        observed_child("Service", "orders-other", Some("another-plugin")),
        observed_child("Service", "orders-by-hand", None),
    ];
    assert_eq!(
        pruned_names(&observed, &[service("orders")]),
        ["Service/shop/orders-old"]
    );
}

#[test]
fn nothing_is_pruned_while_every_labelled_child_is_still_desired() {
    let observed = [observed_child("Service", "orders", Some("database"))];
    assert!(pruned_names(&observed, &[service("orders")]).is_empty());
}

#[test]
fn a_labelled_child_whose_kind_is_no_longer_desired_is_pruned() {
    let observed = [
        observed_child("Service", "orders", Some("database")),
        observed_child("StatefulSet", "orders", Some("database")),
    ];
    assert_eq!(
        pruned_names(&observed, &[service("orders")]),
        ["StatefulSet/shop/orders"]
    );
}

#[test]
fn an_empty_answer_prunes_every_labelled_child() {
    let observed = [
        observed_child("Service", "orders", Some("database")),
        observed_child("Secret", "orders-credentials", Some("database")),
        observed_child("Secret", "kept", None),
    ];
    assert_eq!(
        pruned_names(&observed, &[]),
        ["Service/shop/orders", "Secret/shop/orders-credentials"]
    );
}

// status_update.

const MANAGER: &str = "kubeplug/database";

fn status_update<'a>(parent: &Value, desired: Option<&'a Value>) -> Option<&'a Value> {
    super::status_update(parent, desired, MANAGER)
}

/// managedFields of a status written by `manager` (fields in `fields`).
fn status_owned_by(manager: &str, fields: &[&str]) -> Value {
    let owned: serde_json::Map<String, Value> = fields
        .iter()
        .map(|f| (format!("f:{f}"), json!({})))
        .collect();
    json!({
        "manager": manager,
        "operation": "Apply",
        "subresource": "status",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": owned},
    })
}

#[test]
fn no_status_is_written_when_the_plugin_returns_none() {
    assert_eq!(status_update(&parent(), None), None);
}

#[test]
fn a_field_the_plugin_no_longer_returns_is_removed() {
    let mut parent = parent();
    parent["status"] = json!({"phase": "Running", "nodes": ["orders-0"]});
    parent["metadata"]["managedFields"] = json!([status_owned_by(MANAGER, &["phase", "nodes"])]);
    let want = json!({"phase": "Running"});
    assert_eq!(status_update(&parent, Some(&want)), Some(&want));
}

#[test]
fn a_nested_field_the_plugin_no_longer_returns_is_removed() {
    let mut parent = parent();
    parent["status"] = json!({"endpoint": {"host": "h", "port": 1}});
    let mut owned = status_owned_by(MANAGER, &[]);
    owned["fieldsV1"]["f:status"] = json!({"f:endpoint": {"f:host": {}, "f:port": {}}});
    parent["metadata"]["managedFields"] = json!([owned]);
    let want = json!({"endpoint": {"host": "h"}});
    assert_eq!(status_update(&parent, Some(&want)), Some(&want));
}

#[test]
fn without_managed_fields_a_missing_top_level_field_is_written_away() {
    let mut parent = parent();
    parent["status"] = json!({"phase": "Running", "old": 1});
    let want = json!({"phase": "Running"});
    assert_eq!(status_update(&parent, Some(&want)), Some(&want));
}

#[test]
fn no_status_is_written_when_the_parent_already_has_it() {
    let status = json!({"phase": "Running", "pods": ["orders-0"], "readyReplicas": 1});
    let mut parent = parent();
    parent["status"] = status.clone();
    assert_eq!(status_update(&parent, Some(&status)), None);
}

#[test]
fn no_status_is_written_when_the_rest_of_the_status_is_someone_elses() {
    let mut parent = parent();
    parent["status"] = json!({"phase": "Running", "setBySomeoneElse": true});
    parent["metadata"]["managedFields"] = json!([
        status_owned_by(MANAGER, &["phase"]),
        status_owned_by("someone-else", &["setBySomeoneElse"]),
    ]);
    assert_eq!(
        status_update(&parent, Some(&json!({"phase": "Running"}))),
        None
    );
}

#[test]
fn a_changed_status_is_written_whole() {
    let mut parent = parent();
    parent["status"] = json!({"phase": "Creating", "readyReplicas": 0});
    let want = json!({"phase": "Running", "readyReplicas": 1});
    assert_eq!(status_update(&parent, Some(&want)), Some(&want));
}

#[test]
fn a_first_status_is_written() {
    let want = json!({"phase": "Pending"});
    assert_eq!(status_update(&parent(), Some(&want)), Some(&want));
}

// parent_patch.

pub(super) fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": "team-a",
            "labels": {"app": "web"},
            "annotations": {"example.com/injected": "true", "owner": "alice"},
        },
    })
}

#[test]
fn a_parent_patch_holds_only_keys_whose_value_changes() {
    let patch = parent_patch(
        &pod(),
        &map(&[("app", "web"), ("tier", "front")]),
        &map(&[
            ("example.com/injected", "true"),
            ("owner", "bob"),
            ("example.com/injected-at", "2026-11-29T18:00:00Z"),
        ]),
    );
    assert_eq!(
        patch,
        Some(json!({"metadata": {
            "labels": {"tier": "front"},
            "annotations": {"owner": "bob", "example.com/injected-at": "2026-11-29T18:00:00Z"},
        }}))
    );
}

#[test]
fn a_parent_patch_omits_labels_when_only_annotations_change() {
    let patch = parent_patch(&pod(), &map(&[("app", "web")]), &map(&[("new", "1")]));
    assert_eq!(
        patch,
        Some(json!({"metadata": {"annotations": {"new": "1"}}}))
    );
}

#[test]
fn no_parent_patch_when_every_key_already_has_its_value() {
    let patch = parent_patch(
        &pod(),
        &map(&[("app", "web")]),
        &map(&[("example.com/injected", "true")]),
    );
    assert_eq!(patch, None);
}

#[test]
fn no_parent_patch_when_nothing_is_asked() {
    assert_eq!(parent_patch(&pod(), &map(&[]), &map(&[])), None);
}

#[test]
fn a_parent_patch_applies_to_a_parent_without_labels_or_annotations() {
    let bare = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    assert_eq!(
        parent_patch(&bare, &map(&[("a", "1")]), &map(&[])),
        Some(json!({"metadata": {"labels": {"a": "1"}}}))
    );
}

// TypedKey.

#[test]
fn an_object_key_takes_the_group_from_the_api_version() {
    let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                     "metadata": {"name": "orders", "namespace": "shop"}});
    let key = TypedKey::of(&sts);
    assert_eq!(key.group, "apps");
    assert_eq!(key.to_string(), "StatefulSet/shop/orders");
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}});
    assert_eq!(TypedKey::of(&ns).group, "");
    assert_eq!(TypedKey::of(&ns).to_string(), "Namespace/shop");
}

#[test]
fn a_decorator_may_not_return_a_status() {
    assert_eq!(
        check_mode(&decorator(), false, true),
        Err(FenceError::WrongMode {
            mode: "decorator",
            what: "a status",
        })
    );
}

// The fence of a whole answer, reconcile or finalize, and when to call again.

pub(super) fn grant(yaml: &str) -> crate::policy::Effective {
    use std::io::Write as _;
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(yaml.as_bytes()).unwrap();
    crate::policy::Policy::load(&[file.path()])
        .unwrap()
        .grant("database")
        .unwrap()
}

pub(super) fn events(count: usize) -> Vec<crate::contract::Event> {
    let event = crate::contract::Event {
        warning: false,
        reason: "R".into(),
        message: "m".into(),
    };
    vec![event; count]
}

#[test]
fn a_finalize_answer_over_the_event_quota_is_refused_like_a_reconcile_answer() {
    let g = grant("plugins:\n  database:\n    quotas: {eventsPerAnswer: 2}\n");
    let finalized = |count| Finalized {
        done: false,
        requeue_after: None,
        events: events(count),
    };
    assert_eq!(fence_finalize(&composite(), &g, &finalized(2)), Ok(()));
    let refused = fence_finalize(&composite(), &g, &finalized(5000)).unwrap_err();
    assert_eq!(
        crate::report::format_chain(&refused),
        "plugin database crossed its fence: 5000 events in one answer, over the quota of 2"
    );
    let desired = Desired {
        events: events(5000),
        ..Desired::default()
    };
    assert_eq!(
        fence(&composite(), &g, &parent(), &desired)
            .unwrap_err()
            .source,
        refused.source
    );
}

#[test]
fn a_reconcile_answer_with_a_child_carrying_a_foreign_finalizer_is_refused() {
    let g = grant("plugins:\n  database:\n    children: [Service]\n");
    let mut child = service("db");
    child["metadata"]["finalizers"] = json!(["example.com/never"]);
    let desired = Desired {
        children: vec![child],
        ..Desired::default()
    };
    assert_eq!(
        fence(&composite(), &g, &parent(), &desired)
            .unwrap_err()
            .source,
        FenceError::FinalizerNotGranted {
            child: "Service/db".into(),
            finalizer: "example.com/never".into(),
            domain: "database.kubeplug.io/".into(),
        }
    );
}

#[test]
fn a_requeue_of_zero_is_raised_to_the_floor() {
    let floor = Duration::from_secs(5);
    assert_eq!(requeue_after(None, floor), None);
    assert_eq!(requeue_after(Some(Duration::ZERO), floor), Some(floor));
    assert_eq!(
        requeue_after(Some(Duration::from_secs(60)), floor),
        Some(Duration::from_secs(60))
    );
}

#[test]
fn a_pending_finalize_is_called_again_no_sooner_than_the_floor_and_a_done_one_never() {
    let floor = Duration::from_secs(10);
    let answer = |done, requeue_after| Finalized {
        done,
        requeue_after,
        events: Vec::new(),
    };
    assert_eq!(
        finalize_requeue_after(&answer(true, Some(Duration::ZERO)), floor),
        None
    );
    assert_eq!(
        finalize_requeue_after(&answer(false, Some(Duration::ZERO)), floor),
        Some(floor)
    );
    assert_eq!(
        finalize_requeue_after(&answer(false, None), Duration::from_secs(1)),
        Some(FINALIZE_RETRY)
    );
    assert_eq!(
        finalize_requeue_after(&answer(false, Some(Duration::from_secs(60))), floor),
        Some(Duration::from_secs(60))
    );
}

#[test]
fn a_create_carries_a_resource_version_no_stored_object_has() {
    let child = prepared(service("db"));
    let create = if_absent(&child);
    assert_eq!(
        create["metadata"]["resourceVersion"], NO_STORED_VERSION,
        "the API server refuses it (409) if any object of that name exists"
    );
    // Above every etcd revision (a signed 64-bit number).
    assert!(NO_STORED_VERSION.parse::<u64>().unwrap() > i64::MAX as u64);
    let mut without = create.clone();
    without["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    assert_eq!(without, child, "nothing else changes");
}
