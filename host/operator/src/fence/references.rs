//! The objects a parent names (a plugin's optional `references` export):
//! asked of the plugin once per version of the parent, held to the fence
//! (`kubeplug_core::reference`), found in the caches, and indexed so that a
//! change to any of them reconciles every parent that names it.
//!
//! The index is what kube-rs users build by hand with `watches_with` and a
//! reverse map, and controller-runtime users with a field index and
//! `EnqueueRequestsFromMapFunc`: here the host keeps it from what each
//! parent's last reconcile named and was handed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;

use kubeplug_core::manifest::ApiResource;
use kubeplug_core::reference::{Reference, Target};
use kubeplug_kube::informers::{Object, ObjectKey};

/// An object as the index names it: its kind, namespace and name.
type Named = (ApiResource, Option<String>, String);
/// Where a label reference looks: a kind in a namespace.
type Scoped = (ApiResource, Option<String>);

/// What a parent named at one version of itself and of the plugin.
struct Entry {
    /// The parent's resourceVersion and the plugin (digest and config)
    /// the references were asked of.
    asked_at: (String, String),
    references: Arc<[Reference]>,
    names: Vec<Named>,
    scopes: Vec<Scoped>,
}

#[derive(Default)]
struct Index {
    parents: HashMap<ObjectKey, Entry>,
    /// Objects named, or handed through a label reference (so that one
    /// whose labels stop matching still reconciles the parent that had it).
    by_name: HashMap<Named, HashSet<ObjectKey>>,
    /// Parents with a label reference in a namespace.
    by_scope: HashMap<Scoped, HashSet<ObjectKey>>,
}

impl Index {
    fn unlink(&mut self, key: &ObjectKey) -> Option<Entry> {
        let entry = self.parents.remove(key)?;
        for name in &entry.names {
            if let Some(set) = self.by_name.get_mut(name) {
                set.remove(key);
                if set.is_empty() {
                    self.by_name.remove(name);
                }
            }
        }
        for scope in &entry.scopes {
            if let Some(set) = self.by_scope.get_mut(scope) {
                set.remove(key);
                if set.is_empty() {
                    self.by_scope.remove(scope);
                }
            }
        }
        Some(entry)
    }
}

/// Each parent's references, and who references what.
#[derive(Default)]
pub struct Referrers {
    index: Mutex<Index>,
}

impl Referrers {
    /// The references of the parent at `key`, if asked at this version of
    /// the parent (`parent_version`) and of the plugin (`plugin`).
    pub fn cached(
        &self,
        key: &ObjectKey,
        parent_version: &str,
        plugin: &str,
    ) -> Option<Arc<[Reference]>> {
        let index = self.index.lock();
        let entry = index.parents.get(key)?;
        (entry.asked_at.0 == parent_version && entry.asked_at.1 == plugin)
            .then(|| entry.references.clone())
    }

    /// The parent at `key` names `references` (asked at `parent_version`
    /// of `plugin`), and was handed `found` (each with its referenced kind).
    pub fn record(
        &self,
        key: &ObjectKey,
        parent_version: &str,
        plugin: &str,
        references: Arc<[Reference]>,
        found: &[(ApiResource, Arc<Object>)],
    ) {
        let mut names: Vec<Named> = Vec::new();
        let mut scopes: Vec<Scoped> = Vec::new();
        for reference in references.iter() {
            match &reference.target {
                Target::Name(name) => names.push((
                    reference.resource.clone(),
                    reference.namespace.clone(),
                    name.clone(),
                )),
                Target::Labels(_) => {
                    scopes.push((reference.resource.clone(), reference.namespace.clone()))
                }
            }
        }
        for (kind, object) in found {
            names.push((
                kind.clone(),
                object
                    .metadata
                    .namespace
                    .clone()
                    .filter(|ns| !ns.is_empty()),
                object.metadata.name.clone().unwrap_or_default(),
            ));
        }
        names.sort_by(|a, b| (&a.0.kind, &a.1, &a.2).cmp(&(&b.0.kind, &b.1, &b.2)));
        names.dedup();
        scopes.dedup();
        let mut index = self.index.lock();
        index.unlink(key);
        for name in &names {
            index
                .by_name
                .entry(name.clone())
                .or_default()
                .insert(key.clone());
        }
        for scope in &scopes {
            index
                .by_scope
                .entry(scope.clone())
                .or_default()
                .insert(key.clone());
        }
        index.parents.insert(
            key.clone(),
            Entry {
                asked_at: (parent_version.to_string(), plugin.to_string()),
                references,
                names,
                scopes,
            },
        );
    }

    /// The parent is gone, or no longer this replica's.
    pub fn forget(&self, key: &ObjectKey) {
        self.index.lock().unlink(key);
    }

    /// The parents to reconcile because `object`, of the referenced `kind`,
    /// changed: those that name it, had it, or select it by its labels now.
    pub fn referrers(&self, kind: &ApiResource, object: &Object) -> Vec<ObjectKey> {
        let namespace = object
            .metadata
            .namespace
            .clone()
            .filter(|ns| !ns.is_empty());
        let name = object.metadata.name.clone().unwrap_or_default();
        let index = self.index.lock();
        let mut keys: Vec<ObjectKey> = index
            .by_name
            .get(&(kind.clone(), namespace.clone(), name.clone()))
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        let labels = object.metadata.labels.as_ref();
        for key in index
            .by_scope
            .get(&(kind.clone(), namespace.clone()))
            .into_iter()
            .flatten()
        {
            let selects = index.parents.get(key).is_some_and(|entry| {
                entry.references.iter().any(|r| {
                    matches!(r.target, Target::Labels(_))
                        && r.resource == *kind
                        && r.finds(namespace.as_deref(), &name, labels)
                })
            });
            if selects && !keys.contains(key) {
                keys.push(key.clone());
            }
        }
        keys
    }

    /// Parents with references in the index (for tests and metrics).
    pub fn len(&self) -> usize {
        self.index.lock().parents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::{DynamicObject, ObjectMeta};
    use std::collections::BTreeMap;

    fn configmap() -> ApiResource {
        ApiResource::new("", "v1", "ConfigMap", "configmaps", true)
    }

    fn object(ns: &str, name: &str, labels: &[(&str, &str)]) -> Arc<Object> {
        Arc::new(Object::new(DynamicObject {
            types: None,
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            data: serde_json::Value::Null,
        }))
    }

    fn by_name(ns: &str, name: &str) -> Reference {
        Reference {
            resource: configmap(),
            namespace: Some(ns.into()),
            target: Target::Name(name.into()),
        }
    }

    fn by_labels(ns: &str, key: &str, value: &str) -> Reference {
        Reference {
            resource: configmap(),
            namespace: Some(ns.into()),
            target: Target::Labels(BTreeMap::from([(key.into(), value.into())])),
        }
    }

    fn record(r: &Referrers, parent: &ObjectKey, refs: Vec<Reference>, found: &[Arc<Object>]) {
        let found: Vec<_> = found.iter().map(|o| (configmap(), o.clone())).collect();
        r.record(parent, "1", "p", refs.into(), &found);
    }

    #[test]
    fn a_named_object_routes_to_every_parent_that_names_it_in_its_namespace() {
        let r = Referrers::default();
        let (web, api) = (ObjectKey::new("shop", "web"), ObjectKey::new("shop", "api"));
        record(&r, &web, vec![by_name("shop", "settings")], &[]);
        record(&r, &api, vec![by_name("shop", "settings")], &[]);
        let mut keys = r.referrers(&configmap(), &object("shop", "settings", &[]));
        keys.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(keys, vec![api.clone(), web.clone()]);
        assert!(
            r.referrers(&configmap(), &object("other", "settings", &[]))
                .is_empty()
        );
        assert!(
            r.referrers(&configmap(), &object("shop", "unrelated", &[]))
                .is_empty()
        );
    }

    #[test]
    fn a_new_version_of_the_parent_or_plugin_asks_again_and_replaces_the_entry() {
        let r = Referrers::default();
        let web = ObjectKey::new("shop", "web");
        record(&r, &web, vec![by_name("shop", "a")], &[]);
        assert!(r.cached(&web, "1", "p").is_some());
        assert!(r.cached(&web, "2", "p").is_none());
        assert!(r.cached(&web, "1", "q").is_none());
        record(&r, &web, vec![by_name("shop", "b")], &[]);
        assert!(
            r.referrers(&configmap(), &object("shop", "a", &[]))
                .is_empty()
        );
        assert_eq!(
            r.referrers(&configmap(), &object("shop", "b", &[])),
            vec![web.clone()]
        );
        r.forget(&web);
        assert!(
            r.referrers(&configmap(), &object("shop", "b", &[]))
                .is_empty()
        );
        assert!(r.is_empty());
    }

    #[test]
    fn a_label_reference_routes_matching_objects_and_those_it_was_handed() {
        let r = Referrers::default();
        let web = ObjectKey::new("shop", "web");
        let had = object("shop", "flags", &[("app", "web")]);
        record(&r, &web, vec![by_labels("shop", "app", "web")], &[had]);
        // A new match.
        assert_eq!(
            r.referrers(&configmap(), &object("shop", "more", &[("app", "web")])),
            vec![web.clone()]
        );
        // The one it had, whose label was removed.
        assert_eq!(
            r.referrers(&configmap(), &object("shop", "flags", &[])),
            vec![web.clone()]
        );
        assert!(
            r.referrers(&configmap(), &object("shop", "other", &[("app", "api")]))
                .is_empty()
        );
    }
}
