//! Which observed objects become a plugin's inputs for a parent: the rule
//! the live host applies over its caches (`kubeplug_operator::inputs`),
//! stated once over plain metadata so that it is tested without a cluster.
//!
//! The object's kind is the caller's to check: the live host reads one
//! cache per declared kind (some metadata-only, whose objects do not carry
//! their kind), files carry every kind.

use std::collections::BTreeMap;

use crate::manifest::Related;

/// A parent, as selection sees it.
#[derive(Debug, Clone, Copy)]
pub struct Parent<'a> {
    pub name: &'a str,
    /// `None`: cluster-scoped.
    pub namespace: Option<&'a str>,
    pub uid: &'a str,
}

/// An observed object, as selection sees it.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// `None` or empty: cluster-scoped.
    pub namespace: Option<&'a str>,
    pub labels: Option<&'a BTreeMap<String, String>>,
}

/// One of an object's ownerReferences: the owner's uid and its
/// `controller` flag.
pub type Owner<'a> = (&'a str, Option<bool>);

/// True if `child` (with `owners`) is one of `parent`'s observed children:
/// it names the parent as its controller (`controller: true`; a plain
/// ownerReference is a claim anyone who may write the object can make, and
/// another controller's object is never the plugin's to see or prune), and
/// a namespaced parent's child lives in its namespace, as Kubernetes'
/// garbage collector binds a namespaced owner's dependents.
pub fn observed<'o>(
    parent: &Parent,
    child: &Seen,
    owners: impl IntoIterator<Item = Owner<'o>>,
) -> bool {
    let namespace = child.namespace.filter(|ns| !ns.is_empty());
    let parent_namespace = parent.namespace.filter(|ns| !ns.is_empty());
    parent_namespace.is_none_or(|ns| namespace == Some(ns))
        && owners
            .into_iter()
            .any(|(uid, controller)| uid == parent.uid && controller == Some(true))
}

/// True if `object` is one of `parent`'s related objects by `related`: in
/// the parent's namespace if its kind is namespaced, and selected by the
/// entry's labels (see [`Related::selects`]).
pub fn related(related: &Related, parent: &Parent, object: &Seen) -> bool {
    let namespace = object.namespace.filter(|ns| !ns.is_empty());
    (!related.resource.namespaced || namespace == parent.namespace.filter(|ns| !ns.is_empty()))
        && related.selects(object.labels, parent.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: Parent = Parent {
        name: "orders",
        namespace: Some("shop"),
        uid: "u-1",
    };

    fn seen(namespace: &str) -> Seen<'_> {
        Seen {
            namespace: Some(namespace),
            labels: None,
        }
    }

    #[test]
    fn a_child_naming_its_parent_as_controller_is_observed() {
        assert!(observed(&PARENT, &seen("shop"), [("u-1", Some(true))]));
    }

    #[test]
    fn a_child_without_the_controller_owner_reference_is_not_observed() {
        assert!(!observed(&PARENT, &seen("shop"), []));
        assert!(!observed(&PARENT, &seen("shop"), [("u-1", None)]));
        assert!(!observed(&PARENT, &seen("shop"), [("u-1", Some(false))]));
        assert!(!observed(&PARENT, &seen("shop"), [("u-2", Some(true))]));
    }

    #[test]
    fn a_namespaced_parent_observes_its_own_namespace_only() {
        assert!(!observed(&PARENT, &seen("other"), [("u-1", Some(true))]));
        let cluster = Parent {
            namespace: None,
            ..PARENT
        };
        assert!(observed(&cluster, &seen("other"), [("u-1", Some(true))]));
    }

    #[test]
    fn a_related_object_is_selected_by_its_labels_in_the_parents_namespace() {
        use crate::manifest::{ApiResource, LabelValue};
        let pods = Related {
            resource: ApiResource::new("", "v1", "Pod", "pods", true),
            match_labels: vec![
                ("app".into(), LabelValue::Literal("db".into())),
                ("instance".into(), LabelValue::ParentName),
            ],
        };
        let labels = |instance: &str| -> BTreeMap<String, String> {
            [("app", "db"), ("instance", instance)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let (ours, theirs) = (labels("orders"), labels("billing"));
        let at = |namespace, labels| Seen {
            namespace: Some(namespace),
            labels: Some(labels),
        };
        assert!(related(&pods, &PARENT, &at("shop", &ours)));
        assert!(!related(&pods, &PARENT, &at("shop", &theirs)));
        assert!(!related(&pods, &PARENT, &at("other", &ours)));
        assert!(!related(
            &pods,
            &PARENT,
            &Seen {
                namespace: Some("shop"),
                labels: None
            }
        ));
    }
}
