//! What a parent names (a plugin's optional `references` export): the
//! plugin's answer held to its fence, and which objects each reference
//! finds.
//!
//! The rules are Kubernetes' own for references (a Pod's `secretRef`, a
//! volume's ConfigMap): a namespaced parent reads by reference only in its
//! own namespace, so a tenant cannot reach another's objects by naming
//! them. The operator finds the objects in its caches, `kubeplug test` in a
//! fixture's `cluster:`; both through [`Reference::finds`].

use std::collections::BTreeMap;

use serde::Serialize;

use crate::manifest::{ApiResource, Manifest};

/// References one parent may name. Each is a lookup per reconcile and an
/// entry in the index that routes changes back to the parent.
pub const MAX_REFERENCES: usize = 32;

/// Which objects of a kind a reference names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Target {
    /// The object with this `metadata.name`.
    Name(String),
    /// Every object whose labels hold all these pairs.
    Labels(BTreeMap<String, String>),
}

/// A reference as the plugin answered it, before its fence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub resource: ApiResource,
    pub namespace: Option<String>,
    pub target: Target,
}

/// A reference that passed the fence: of a declared kind (as the host
/// resolved it through discovery), in the namespace it is looked up in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Reference {
    /// The declared kind.
    pub resource: ApiResource,
    /// Where it is looked up; `None` for a cluster-scoped kind.
    pub namespace: Option<String>,
    pub target: Target,
}

impl Reference {
    /// Does the object in `namespace` (`None`: cluster-scoped) named
    /// `name` with `labels` answer this reference? Its kind is the caller's
    /// to match (each kind has its own cache).
    pub fn finds(
        &self,
        namespace: Option<&str>,
        name: &str,
        labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        if self.resource.namespaced && self.namespace.as_deref() != namespace {
            return false;
        }
        match &self.target {
            Target::Name(want) => want == name,
            Target::Labels(want) => want
                .iter()
                .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v)),
        }
    }
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.resource.kind)?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        match &self.target {
            Target::Name(name) => write!(f, " named {name}"),
            Target::Labels(labels) => {
                let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, " labelled {}", pairs.join(","))
            }
        }
    }
}

/// A reference outside the plugin's fence. The reconcile fails with it and
/// nothing is looked up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    #[error("{count} references, over the limit of {MAX_REFERENCES} per parent")]
    TooMany { count: usize },
    #[error("reference {index}: {kind} is not among the kinds the plugin references")]
    Undeclared { index: usize, kind: String },
    #[error(
        "reference {index} to {kind}: namespace {namespace} is not the parent's ({parent}): a parent reads only its own namespace by reference"
    )]
    ForeignNamespace {
        index: usize,
        kind: String,
        namespace: String,
        parent: String,
    },
    #[error("reference {index} to {kind}: a cluster-scoped parent must name the namespace")]
    NoNamespace { index: usize, kind: String },
    #[error("reference {index} to {kind}: the plugin does not act in namespace {namespace}")]
    Unwatched {
        index: usize,
        kind: String,
        namespace: String,
    },
    #[error("reference {index} to {kind}: {what}")]
    Empty {
        index: usize,
        kind: String,
        what: &'static str,
    },
}

/// Hold the references a plugin asked for a parent in `parent_namespace`
/// (`None`: a cluster-scoped parent) to its fence, each turned into the
/// declared kind and the namespace it is looked up in. Duplicates collapse.
pub fn check(
    manifest: &Manifest,
    parent_namespace: Option<&str>,
    asked: Vec<Asked>,
) -> Result<Vec<Reference>, ReferenceError> {
    if asked.len() > MAX_REFERENCES {
        return Err(ReferenceError::TooMany { count: asked.len() });
    }
    let mut checked = Vec::with_capacity(asked.len());
    for (index, asked) in asked.into_iter().enumerate() {
        let kind = asked.resource.kind.clone();
        let Some(resource) = manifest.referenced_kind(&asked.resource) else {
            return Err(ReferenceError::Undeclared {
                index,
                kind: asked.resource.to_string(),
            });
        };
        let namespace = match (resource.namespaced, parent_namespace, asked.namespace) {
            (false, _, _) => None,
            (true, Some(parent), None) => Some(parent.to_string()),
            (true, Some(parent), Some(ns)) if ns == parent => Some(ns),
            (true, Some(parent), Some(namespace)) => {
                return Err(ReferenceError::ForeignNamespace {
                    index,
                    kind,
                    namespace,
                    parent: parent.into(),
                });
            }
            (true, None, None) => return Err(ReferenceError::NoNamespace { index, kind }),
            (true, None, Some(namespace)) if !manifest.watches_namespace(&namespace) => {
                return Err(ReferenceError::Unwatched {
                    index,
                    kind,
                    namespace,
                });
            }
            (true, None, Some(ns)) => Some(ns),
        };
        let empty = match &asked.target {
            Target::Name(name) if name.is_empty() => Some("an empty name"),
            Target::Labels(labels) if labels.is_empty() => {
                Some("no labels (that would select every object of the kind)")
            }
            _ => None,
        };
        if let Some(what) = empty {
            return Err(ReferenceError::Empty { index, kind, what });
        }
        let reference = Reference {
            resource: resource.clone(),
            namespace,
            target: asked.target,
        };
        if !checked.contains(&reference) {
            checked.push(reference);
        }
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Mode;

    fn configmap() -> ApiResource {
        ApiResource::new("", "v1", "ConfigMap", "configmaps", true)
    }

    fn manifest(parent_namespaced: bool) -> Manifest {
        Manifest {
            children: vec![ApiResource::new(
                "apps",
                "v1",
                "Deployment",
                "deployments",
                true,
            )],
            namespaces: vec!["shop".into(), "team-b".into()],
            references: vec![
                configmap(),
                ApiResource::new("", "v1", "Namespace", "namespaces", false),
            ],
            ..Manifest::new(
                "myapp",
                "0.1.0",
                ApiResource::new(
                    "example.com",
                    "v1alpha1",
                    "MyApp",
                    "myapps",
                    parent_namespaced,
                ),
                Mode::Composite,
            )
        }
    }

    fn named(resource: ApiResource, namespace: Option<&str>, name: &str) -> Asked {
        Asked {
            resource,
            namespace: namespace.map(String::from),
            target: Target::Name(name.into()),
        }
    }

    #[test]
    fn a_namespaced_reference_is_looked_up_in_the_parents_namespace() {
        let checked = check(
            &manifest(true),
            Some("shop"),
            vec![
                named(configmap(), None, "settings"),
                named(configmap(), Some("shop"), "settings"),
            ],
        )
        .unwrap();
        assert_eq!(checked.len(), 1, "the same reference twice is one");
        let reference = &checked[0];
        assert_eq!(reference.namespace.as_deref(), Some("shop"));
        assert!(reference.finds(Some("shop"), "settings", None));
        assert!(!reference.finds(Some("other"), "settings", None));
        assert!(!reference.finds(Some("shop"), "other", None));
    }

    #[test]
    fn a_namespaced_parent_may_not_name_another_namespace() {
        let error = check(
            &manifest(true),
            Some("shop"),
            vec![named(configmap(), Some("team-b"), "settings")],
        )
        .unwrap_err();
        assert!(matches!(error, ReferenceError::ForeignNamespace { .. }));
        assert_eq!(
            error.to_string(),
            "reference 0 to ConfigMap: namespace team-b is not the parent's (shop): a parent reads only its own namespace by reference"
        );
    }

    #[test]
    fn a_cluster_scoped_parent_names_one_of_the_plugins_namespaces() {
        let m = manifest(false);
        assert!(matches!(
            check(&m, None, vec![named(configmap(), None, "settings")]),
            Err(ReferenceError::NoNamespace { .. })
        ));
        assert!(matches!(
            check(&m, None, vec![named(configmap(), Some("kube-system"), "x")]),
            Err(ReferenceError::Unwatched { .. })
        ));
        let ok = check(&m, None, vec![named(configmap(), Some("team-b"), "x")]).unwrap();
        assert_eq!(ok[0].namespace.as_deref(), Some("team-b"));
    }

    #[test]
    fn an_undeclared_kind_is_refused_whatever_its_version() {
        let secret = ApiResource::new("", "v1", "Secret", "secrets", true);
        assert_eq!(
            check(
                &manifest(true),
                Some("shop"),
                vec![named(secret, None, "s")]
            ),
            Err(ReferenceError::Undeclared {
                index: 0,
                kind: "Secret.v1".into()
            })
        );
        // Another version of a declared kind is the declared kind.
        let v2 = ApiResource::new("", "v2", "ConfigMap", "whatever", false);
        let ok = check(&manifest(true), Some("shop"), vec![named(v2, None, "s")]).unwrap();
        assert_eq!(ok[0].resource, configmap());
    }

    #[test]
    fn cluster_scoped_kinds_are_found_by_labels_anywhere() {
        let namespace = ApiResource::new("", "v1", "Namespace", "namespaces", false);
        let asked = Asked {
            resource: namespace,
            namespace: Some("ignored".into()),
            target: Target::Labels(BTreeMap::from([("team".into(), "a".into())])),
        };
        let checked = check(&manifest(true), Some("shop"), vec![asked]).unwrap();
        let reference = &checked[0];
        assert_eq!(reference.namespace, None);
        let labels = BTreeMap::from([("team".to_string(), "a".to_string())]);
        assert!(reference.finds(None, "team-a", Some(&labels)));
        assert!(!reference.finds(None, "team-a", None));
        assert_eq!(reference.to_string(), "Namespace labelled team=a");
    }

    #[test]
    fn empty_targets_and_too_many_references_are_refused() {
        let m = manifest(true);
        assert!(matches!(
            check(&m, Some("shop"), vec![named(configmap(), None, "")]),
            Err(ReferenceError::Empty { .. })
        ));
        let everything = Asked {
            resource: configmap(),
            namespace: None,
            target: Target::Labels(BTreeMap::new()),
        };
        assert!(matches!(
            check(&m, Some("shop"), vec![everything]),
            Err(ReferenceError::Empty { .. })
        ));
        let many = (0..=MAX_REFERENCES)
            .map(|i| named(configmap(), None, &format!("c{i}")))
            .collect();
        assert_eq!(
            check(&m, Some("shop"), many),
            Err(ReferenceError::TooMany {
                count: MAX_REFERENCES + 1
            })
        );
    }
}
