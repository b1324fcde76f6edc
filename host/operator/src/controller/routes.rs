//! Which parents to reconcile when an object changes: pure functions.

use kubeplug_core::manifest::{LabelValue, Manifest, Related};
use kubeplug_kube::informers::{Object, ObjectKey};
use kubeplug_kube::owner::controller_of;

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

/// Log (at debug) which change queued the parent at `key`: `via` is
/// `parent`, `child`, `related`, `referenced` or `stray`.
pub fn trace_trigger(via: &'static str, object: &Object, key: &ObjectKey) {
    tracing::debug!(
        via,
        kind = %object.types.kind,
        name = object.metadata.name.as_deref().unwrap_or_default(),
        resource_version = object.metadata.resource_version.as_deref().unwrap_or_default(),
        parent = %key,
        "parent queued by a change"
    );
}

/// A changed parent: itself, if the plugin watches its namespace. A
/// cluster-scoped parent has none: the plugin's namespaces narrow what it
/// reads (see `kubeplug_core::fence`), not which of those parents it serves.
pub fn parent_key(manifest: &Manifest, object: &Object) -> Option<ObjectKey> {
    let key = object.key();
    (!manifest.parent.namespaced || manifest.watches_namespace(&key.namespace)).then_some(key)
}

/// A changed child: its controller owner, if that is one of our parents.
/// Versions may differ (an owner reference written at v1beta1 still names
/// the same object), so group and kind are compared.
pub fn owner_key(manifest: &Manifest, object: &Object) -> Option<ObjectKey> {
    let owner = controller_of(&object.metadata)?;
    let parent = &manifest.parent;
    if owner.kind != parent.kind || group_of(&owner.api_version) != parent.group {
        return None;
    }
    let namespace = object.metadata.namespace.clone().unwrap_or_default();
    manifest
        .watches_namespace(&namespace)
        .then(|| ObjectKey::new(namespace, owner.name.clone()))
}

/// A changed related object: the parents whose selector matches it. When the
/// selector names the parent (`ParentName`), that label gives the parent
/// directly; otherwise every parent in the namespace is a candidate.
pub fn related_keys(
    manifest: &Manifest,
    related: &Related,
    object: &Object,
    parents_in: impl Fn(&str) -> Vec<String>,
) -> Vec<ObjectKey> {
    let namespace = object.metadata.namespace.clone().unwrap_or_default();
    if !manifest.watches_namespace(&namespace) {
        return Vec::new();
    }
    let labels = object.metadata.labels.clone().unwrap_or_default();
    let mut parent_from_label = None;
    for (key, value) in &related.match_labels {
        let have = labels.get(key);
        match value {
            LabelValue::Literal(want) if have != Some(want) => return Vec::new(),
            LabelValue::Literal(_) => {}
            LabelValue::ParentName => match have {
                Some(name) => parent_from_label = Some(name.clone()),
                None => return Vec::new(),
            },
        }
    }
    match parent_from_label {
        Some(name) => vec![ObjectKey::new(namespace, name)],
        None => parents_in(&namespace)
            .into_iter()
            .map(|name| ObjectKey::new(namespace.clone(), name))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::core::{DynamicObject, ObjectMeta};
    use kubeplug_core::manifest::{ApiResource, Mode};

    fn res(group: &str, kind: &str) -> ApiResource {
        ApiResource {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
            namespaced: true,
        }
    }

    fn manifest(namespaces: &[&str]) -> Manifest {
        Manifest {
            children: vec![res("apps", "StatefulSet")],
            related: vec![pods_related()],
            namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
            ..Manifest::new(
                "database",
                "0.1.0",
                res("example.com", "Database"),
                Mode::Composite,
            )
        }
    }

    fn pods_related() -> Related {
        Related {
            resource: res("", "Pod"),
            match_labels: vec![
                ("app".into(), LabelValue::Literal("database".into())),
                ("instance".into(), LabelValue::ParentName),
            ],
        }
    }

    fn object(ns: &str, labels: &[(&str, &str)], owner: Option<(&str, &str, &str)>) -> Object {
        Object::new(DynamicObject {
            types: None,
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some("x".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                owner_references: owner.map(|(api_version, kind, name)| {
                    vec![OwnerReference {
                        api_version: api_version.into(),
                        kind: kind.into(),
                        name: name.into(),
                        controller: Some(true),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            data: serde_json::Value::Null,
        })
    }

    #[test]
    fn a_child_routes_to_its_controller_owner_of_the_parent_kind() {
        let m = manifest(&[]);
        let child = object("ns", &[], Some(("example.com/v1", "Database", "db1")));
        assert_eq!(owner_key(&m, &child), Some(ObjectKey::new("ns", "db1")));
        let foreign = object("ns", &[], Some(("apps/v1", "Deployment", "d")));
        assert_eq!(owner_key(&m, &foreign), None);
    }

    #[test]
    fn an_owner_reference_at_another_version_still_routes() {
        let m = manifest(&[]);
        let child = object("ns", &[], Some(("example.com/v2", "Database", "db1")));
        assert_eq!(owner_key(&m, &child), Some(ObjectKey::new("ns", "db1")));
    }

    #[test]
    fn objects_outside_the_plugins_namespaces_route_nowhere() {
        let m = manifest(&["team-a"]);
        assert_eq!(parent_key(&m, &object("team-b", &[], None)), None);
        assert!(parent_key(&m, &object("team-a", &[], None)).is_some());
    }

    #[test]
    fn a_cluster_scoped_parent_routes_whatever_the_plugins_namespaces() {
        let mut m = manifest(&["team-a"]);
        m.parent.namespaced = false;
        let parent = Object::new(DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some("team-b".into()),
                ..Default::default()
            },
            data: serde_json::Value::Null,
        });
        assert!(parent_key(&m, &parent).is_some());
    }

    #[test]
    fn a_related_pod_routes_to_the_parent_named_by_its_label() {
        let m = manifest(&[]);
        let pod = object("ns", &[("app", "database"), ("instance", "db1")], None);
        let keys = related_keys(&m, &pods_related(), &pod, |_| vec!["other".into()]);
        assert_eq!(keys, vec![ObjectKey::new("ns", "db1")]);
        assert!(pods_related().selects(pod.metadata.labels.as_ref(), "db1"));
        assert!(!pods_related().selects(pod.metadata.labels.as_ref(), "db2"));
    }

    #[test]
    fn a_pod_with_a_wrong_literal_label_routes_nowhere() {
        let m = manifest(&[]);
        let pod = object("ns", &[("app", "web"), ("instance", "db1")], None);
        assert!(related_keys(&m, &pods_related(), &pod, |_| vec![]).is_empty());
    }

    #[test]
    fn a_literal_only_selector_routes_to_every_parent_in_the_namespace() {
        let m = manifest(&[]);
        let related = Related {
            resource: res("", "Pod"),
            match_labels: vec![("app".into(), LabelValue::Literal("database".into()))],
        };
        let pod = object("ns", &[("app", "database")], None);
        let keys = related_keys(&m, &related, &pod, |_| vec!["a".into(), "b".into()]);
        assert_eq!(keys.len(), 2);
    }
}
