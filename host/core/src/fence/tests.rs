//! Unit tests of the fence: namespaces, conversions, mutations.

use serde_json::{Value, json};

use super::*;
use crate::manifest::ApiResource;
use crate::policy::{Grant, NamespaceScope, Policy};

fn database() -> Manifest {
    Manifest::new(
        "database",
        "0.1.0",
        ApiResource::new("example.com", "v1", "Database", "databases", true),
        Mode::Composite,
    )
}

fn pod_decorator() -> Manifest {
    Manifest::new(
        "stamper",
        "0.1.0",
        ApiResource::new("", "v1", "Pod", "pods", true),
        Mode::Decorator,
    )
}

fn effective(name: &str, grant: Grant) -> Effective {
    Policy::default()
        .with_grant(name, grant)
        .grant(name)
        .expect("granted")
}

fn in_namespaces(named: &[&str]) -> Grant {
    Grant {
        namespaces: NamespaceScope {
            all: false,
            named: named.iter().map(|n| n.to_string()).collect(),
        },
        ..Grant::safe_default()
    }
}

fn conversion(objects: &[(&str, &str)]) -> ConversionCall {
    ConversionCall {
        uid: "u".into(),
        desired_api_version: "example.com/v2".into(),
        objects: objects
            .iter()
            .map(|(ns, name)| {
                json!({"apiVersion": "example.com/v1", "kind": "Database",
                       "metadata": {"namespace": ns, "name": name}})
            })
            .collect(),
    }
}

#[test]
fn namespaces_are_the_grants_and_never_the_system_ones_or_the_hosts_by_default() {
    let all = effective("database", Grant::safe_default());
    let manifest = database();
    let fence = Fence::new(&all, &manifest);
    assert!(fence.sees(Some("team-a")));
    assert!(fence.sees(None), "cluster-scoped objects have no namespace");
    for system in [
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "kubeplug-system",
    ] {
        assert!(!fence.sees(Some(system)), "{system}");
    }
    let one = effective("database", in_namespaces(&["team-a", "kube-system"]));
    let fence = Fence::new(&one, &manifest);
    assert!(fence.sees(Some("team-a")));
    assert!(fence.sees(Some("kube-system")), "named, so granted");
    assert!(!fence.sees(Some("team-b")));
}

#[test]
fn a_conversion_holding_another_namespaces_object_is_refused_whole() {
    let grant = effective("database", in_namespaces(&["team-a"]));
    let manifest = database();
    let fence = Fence::new(&grant, &manifest);
    fence
        .check_conversion(&conversion(&[("team-a", "x"), ("team-a", "y")]))
        .unwrap();
    let refused = fence
        .check_conversion(&conversion(&[("team-a", "x"), ("team-b", "theirs")]))
        .unwrap_err()
        .to_string();
    assert_eq!(
        refused,
        "plugin database converts objects in its own namespaces only, and team-b/theirs is outside them (its grant's namespaces): the review is refused and nothing of it is stored"
    );
    // Every namespace but the system ones: kube-system's are not its.
    let all = effective("database", Grant::safe_default());
    assert!(
        Fence::new(&all, &manifest)
            .check_conversion(&conversion(&[("kube-system", "x")]))
            .is_err()
    );
}

/// A composite plugin's own kind, under the default grant: all of spec,
/// any key outside the host's.
#[test]
fn a_composite_plugins_mutation_may_change_spec_and_keys_outside_the_hosts() {
    let grant = effective("database", Grant::safe_default());
    let manifest = database();
    let fence = Fence::new(&grant, &manifest);
    let before = json!({"metadata": {"name": "a"}, "spec": {}});
    let after = json!({"metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "a"}},
                       "spec": {"defaulted": true}});
    assert_eq!(fence.mutation(&before, &after).unwrap().len(), 2);
    for (after, why) in [
        (
            json!({"metadata": {"name": "b"}, "spec": {}}),
            "/metadata/name is outside spec, metadata.labels and metadata.annotations",
        ),
        (
            json!({"metadata": {"name": "a", "ownerReferences": [{"uid": "x"}]}, "spec": {}}),
            "ownerReferences is outside",
        ),
        (
            json!({"metadata": {"name": "a", "finalizers": ["x"]}, "spec": {}}),
            "finalizers is outside",
        ),
        (
            json!({"metadata": {"name": "a"}, "spec": {}, "status": {"phase": "Running"}}),
            "/status is outside",
        ),
        (
            json!({"kind": "Other", "metadata": {"name": "a"}, "spec": {}}),
            "/kind is outside",
        ),
        (
            json!({"metadata": {"name": "a", "labels": {"kubeplug.io/shard": "0"}}, "spec": {}}),
            "kubeplug.io/shard",
        ),
        (
            json!({"metadata": {"name": "a", "annotations": {"x.kubeplug.io/y": "0"}}, "spec": {}}),
            "x.kubeplug.io/y",
        ),
    ] {
        let refused = fence.mutation(&before, &after).unwrap_err().to_string();
        assert!(refused.contains(why), "{refused} should say {why}");
    }
    let labelled =
        json!({"metadata": {"name": "a", "labels": {"kubeplug.io/shard": "0"}}, "spec": {}});
    let unlabelled = json!({"metadata": {"name": "a", "labels": {}}, "spec": {}});
    assert!(
        fence
            .mutation(&labelled, &unlabelled)
            .unwrap_err()
            .to_string()
            .contains("kubeplug.io/shard")
    );
}

fn pod(labels: Value, image: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "team-a", "labels": labels},
           "spec": {"containers": [{"name": "main", "image": image}]}})
}

/// A decorator of others' objects (a Pod's): the keys its grant allows and
/// nothing of spec, unless its grant names the field.
#[test]
fn a_decorators_mutation_changes_only_its_granted_keys_and_no_spec() {
    let grant = effective(
        "stamper",
        Grant {
            decorator_keys: vec!["example.com/*".into()],
            ..Grant::safe_default()
        },
    );
    let manifest = pod_decorator();
    let fence = Fence::new(&grant, &manifest);
    let before = pod(json!({"app": "web"}), "nginx:1.27");
    let stamped = pod(
        json!({"app": "web", "example.com/stamped": "yes"}),
        "nginx:1.27",
    );
    assert_eq!(
        fence.mutation(&before, &stamped).unwrap(),
        vec![json!({"op": "add", "path": "/metadata/labels/example.com~1stamped", "value": "yes"})]
    );
    let image = pod(json!({"app": "web"}), "evil:latest");
    assert_eq!(
        fence.mutation(&before, &image).unwrap_err().to_string(),
        "/spec/containers is outside metadata.labels and metadata.annotations (a decorator's mutation changes no field unless its grant names it under mutableFields)"
    );
    let relabelled = pod(json!({"app": "other"}), "nginx:1.27");
    assert_eq!(
        fence
            .mutation(&before, &relabelled)
            .unwrap_err()
            .to_string(),
        "labels key \"app\" is not among the keys its grant allows (decoratorKeys)"
    );
    // A field the grant names is the decorator's to change, nothing more.
    let grant = effective(
        "stamper",
        Grant {
            decorator_keys: vec!["example.com/*".into()],
            mutable_fields: Some(vec!["/spec/priorityClassName".into()]),
            ..Grant::safe_default()
        },
    );
    let fence = Fence::new(&grant, &manifest);
    let mut prioritised = before.clone();
    prioritised["spec"]["priorityClassName"] = json!("high");
    assert_eq!(fence.mutation(&before, &prioritised).unwrap().len(), 1);
    assert_eq!(
        fence.mutation(&before, &image).unwrap_err().to_string(),
        "/spec/containers is outside spec.priorityClassName, metadata.labels and metadata.annotations"
    );
}

#[test]
fn mutable_fields_must_lie_under_spec() {
    let file = |fields: &str| {
        format!("plugins:\n  stamper:\n    parent: [Pod]\n    mutableFields: {fields}\n")
    };
    let load = |yaml: String| {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, yaml.as_bytes()).unwrap();
        Policy::load(&[f.path()])
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    load(file("[/spec/priorityClassName, /spec]")).unwrap();
    for bad in [
        "[/status]",
        "[/metadata/ownerReferences]",
        "[spec.replicas]",
        "[/specs]",
    ] {
        let error = load(file(bad)).unwrap_err();
        assert!(
            error.contains("is not a field under /spec"),
            "{bad}: {error}"
        );
    }
}
