//! What part of a resource type one informer watches: one namespace or all
//! but some, and an equality label selector. The API server does the
//! filtering, so nothing outside a plugin's scope is ever sent or cached:
//! `pod-annotator` configured for one namespace caches that namespace's
//! Pods, not the cluster's.
//!
//! The Kubernetes API watches one namespace or all of them, so a plugin
//! bound to three namespaces costs three watches of each kind it reads;
//! plugins whose scopes coincide share them (see [`super::Informers`]).

use std::fmt;

use kube::runtime::watcher;

use kubeplug_core::manifest::{ApiResource, LabelValue, Manifest, Related};

/// The part of a resource type an informer lists and watches.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope {
    /// One namespace; `None`: every namespace but `excluded` (and every
    /// object, for a cluster-scoped kind).
    pub namespace: Option<String>,
    /// Namespaces left out of an all-namespaces watch (sorted).
    pub excluded: Vec<String>,
    /// Equality selector: only objects with all these labels (sorted).
    pub labels: Vec<(String, String)>,
    /// Set selector: only objects whose label `key` is none of `values`
    /// (or absent), as `key notin (a,b)`. A sharded plugin's watch of the
    /// parents no shard holds yet (see the operator's `controller::shards`).
    pub not_in: Option<(String, Vec<String>)>,
    /// Watch and cache metadata only (`apiVersion`, `kind`, `metadata`).
    pub metadata_only: bool,
}

impl Scope {
    /// Does this scope hold the objects of `namespace`?
    pub fn covers(&self, namespace: &str) -> bool {
        match &self.namespace {
            Some(ns) => ns == namespace,
            None => !self.excluded.iter().any(|n| n == namespace),
        }
    }

    /// Does the selector hold an object with these labels? (The namespace
    /// is [`Scope::covers`]'s.)
    pub fn matches(&self, labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
        let value = |k: &str| labels.and_then(|l| l.get(k));
        self.labels
            .iter()
            .all(|(k, v)| value(k).is_some_and(|have| have == v))
            && self
                .not_in
                .as_ref()
                .is_none_or(|(k, values)| value(k).is_none_or(|have| !values.contains(have)))
    }

    /// The labels as a selector: `k=v,k2=v2,k3 notin (a,b)`.
    fn selector(&self) -> String {
        let mut labels: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if let Some((key, values)) = &self.not_in {
            labels.push(format!("{key} notin ({})", values.join(",")));
        }
        labels.join(",")
    }

    /// The list/watch parameters that make the API server filter for us.
    pub fn watcher_config(&self) -> watcher::Config {
        let mut config = watcher::Config::default();
        if !self.labels.is_empty() || self.not_in.is_some() {
            config = config.labels(&self.selector());
        }
        if self.namespace.is_none() && !self.excluded.is_empty() {
            let fields: Vec<String> = self
                .excluded
                .iter()
                .map(|n| format!("metadata.namespace!={n}"))
                .collect();
            config = config.fields(&fields.join(","));
        }
        config
    }

    /// The scopes of `resource` that `manifest`'s plugin reads, filtered by
    /// `labels` (and metadata-only if `metadata_only`): one per namespace it
    /// is bound to, or one for all namespaces but those it is kept out of.
    /// Cluster-scoped kinds have one scope.
    pub fn for_plugin(
        manifest: &Manifest,
        resource: &ApiResource,
        labels: Vec<(String, String)>,
        metadata_only: bool,
    ) -> Vec<Scope> {
        let mut labels = labels;
        labels.sort();
        labels.dedup();
        if !resource.namespaced {
            return vec![Scope {
                labels,
                metadata_only,
                ..Scope::default()
            }];
        }
        if manifest.namespaces.is_empty() {
            let mut excluded = manifest.excluded_namespaces.clone();
            excluded.sort();
            excluded.dedup();
            return vec![Scope {
                namespace: None,
                excluded,
                labels,
                not_in: None,
                metadata_only,
            }];
        }
        let mut namespaces = manifest.namespaces.clone();
        namespaces.sort();
        namespaces.dedup();
        namespaces
            .into_iter()
            .map(|ns| Scope {
                namespace: Some(ns),
                excluded: Vec::new(),
                labels: labels.clone(),
                not_in: None,
                metadata_only,
            })
            .collect()
    }

    /// The fixed part of a related selector (its literal entries): what the
    /// API server can filter on. Entries naming the parent vary per parent
    /// and are matched by the host ([`super::Cache::labelled`]).
    pub fn literal_labels(related: &Related) -> Vec<(String, String)> {
        related
            .match_labels
            .iter()
            .filter_map(|(k, v)| match v {
                LabelValue::Literal(v) => Some((k.clone(), v.clone())),
                LabelValue::ParentName => None,
            })
            .collect()
    }
}

/// `""` for everything; else ` in <ns>` / ` but <a>,<b>`, ` with <labels>`
/// and ` (metadata)`, appended to a resource's name in logs and metrics.
impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, " in {ns}")?,
            None if !self.excluded.is_empty() => write!(f, " but {}", self.excluded.join(","))?,
            None => {}
        }
        if !self.labels.is_empty() || self.not_in.is_some() {
            write!(f, " with {}", self.selector())?;
        }
        if self.metadata_only {
            write!(f, " (metadata)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeplug_core::manifest::Mode;

    fn res(kind: &str, namespaced: bool) -> ApiResource {
        ApiResource {
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
            namespaced,
        }
    }

    fn manifest(namespaces: &[&str], excluded: &[&str]) -> Manifest {
        Manifest {
            name: "p".into(),
            version: "0.1.0".into(),
            parent: res("Pod", true),
            mode: Mode::Decorator,
            children: Vec::new(),
            related: Vec::new(),
            namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
            finalizer: None,
            resync_seconds: None,
            excluded_namespaces: excluded.iter().map(|s| s.to_string()).collect(),
            metadata_only: Vec::new(),
            references: Vec::new(),
            webhooks: Default::default(),
        }
    }

    #[test]
    fn a_plugin_bound_to_namespaces_watches_each_of_them_only() {
        let scopes = Scope::for_plugin(
            &manifest(&["b", "a", "a"], &[]),
            &res("Pod", true),
            vec![],
            false,
        );
        assert_eq!(scopes.len(), 2);
        assert_eq!(scopes[0].namespace.as_deref(), Some("a"));
        assert!(scopes[0].covers("a") && !scopes[0].covers("b"));
        assert_eq!(scopes[0].to_string(), " in a");
    }

    #[test]
    fn an_all_namespaces_plugin_leaves_its_excluded_namespaces_to_the_api_server() {
        let scopes = Scope::for_plugin(
            &manifest(&[], &["kube-system", "kube-public"]),
            &res("Pod", true),
            vec![("app".into(), "db".into())],
            true,
        );
        assert_eq!(scopes.len(), 1);
        let scope = &scopes[0];
        assert!(!scope.covers("kube-system") && scope.covers("team-a"));
        let config = scope.watcher_config();
        assert_eq!(
            config.field_selector.as_deref(),
            Some("metadata.namespace!=kube-public,metadata.namespace!=kube-system")
        );
        assert_eq!(config.label_selector.as_deref(), Some("app=db"));
        // Bookmarks are what tell an idle host its API server still answers
        // (crate::health): every watch asks for them.
        assert!(config.bookmarks);
        assert_eq!(
            scope.to_string(),
            " but kube-public,kube-system with app=db (metadata)"
        );
    }

    #[test]
    fn a_set_selector_leaves_out_the_listed_values_and_keeps_objects_without_the_label() {
        let strays = Scope {
            not_in: Some(("kubeplug.io/shard".into(), vec!["0".into(), "1".into()])),
            ..Scope::default()
        };
        assert_eq!(
            strays.watcher_config().label_selector.as_deref(),
            Some("kubeplug.io/shard notin (0,1)")
        );
        let labels = |v: &str| {
            std::collections::BTreeMap::from([("kubeplug.io/shard".to_string(), v.to_string())])
        };
        assert!(strays.matches(None), "no label: a stray");
        assert!(strays.matches(Some(&labels("7"))), "out of range: a stray");
        assert!(!strays.matches(Some(&labels("1"))));
        let shard = Scope {
            labels: vec![("kubeplug.io/shard".into(), "1".into())],
            ..Scope::default()
        };
        assert!(shard.matches(Some(&labels("1"))) && !shard.matches(None));
    }

    #[test]
    fn a_cluster_scoped_kind_has_one_unfiltered_scope() {
        let scopes = Scope::for_plugin(
            &manifest(&["a"], &["x"]),
            &res("Namespace", false),
            vec![],
            false,
        );
        assert_eq!(scopes, vec![Scope::default()]);
        assert!(scopes[0].watcher_config().field_selector.is_none());
        assert_eq!(scopes[0].to_string(), "");
    }

    #[test]
    fn only_the_literal_entries_of_a_related_selector_go_to_the_api_server() {
        let related = Related {
            resource: res("Pod", true),
            match_labels: vec![
                ("app".into(), LabelValue::Literal("database".into())),
                ("instance".into(), LabelValue::ParentName),
            ],
        };
        assert_eq!(
            Scope::literal_labels(&related),
            vec![("app".to_string(), "database".to_string())]
        );
    }
}
