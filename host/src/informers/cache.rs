//! The in-memory index behind one informer: a plain data structure fed by
//! watch events, testable without a cluster (kubert's `index.rs` habit).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use super::Object;

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type Key = (String, String);

fn owner_uids(object: &Object) -> impl Iterator<Item = &str> {
    object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|o| o.uid.as_str())
}

fn label<'a>(object: &'a Object, key: &str) -> Option<&'a String> {
    object.metadata.labels.as_ref().and_then(|l| l.get(key))
}

/// Objects of one resource type, indexed by key, by owner uid and by the
/// values of the label keys someone looks objects up by.
#[derive(Default)]
pub struct Cache {
    objects: BTreeMap<Key, Arc<Object>>,
    by_owner: HashMap<String, HashSet<Key>>,
    /// Label key → (namespace, value) → objects, for the keys in
    /// [`Cache::index_label`].
    by_label: HashMap<String, HashMap<Key, BTreeSet<Key>>>,
    /// Keys listed since the last `Init`, while a (re)list is running.
    relisting: Option<HashSet<Key>>,
    /// Bytes of the objects held (see [`Object::size`]).
    bytes: usize,
}

impl Cache {
    fn unindex(&mut self, key: &Key) -> Option<Arc<Object>> {
        let old = self.objects.remove(key)?;
        self.bytes -= old.size();
        for uid in owner_uids(&old) {
            if let Some(keys) = self.by_owner.get_mut(uid) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_owner.remove(uid);
                }
            }
        }
        for (label_key, index) in &mut self.by_label {
            if let Some(value) = label(&old, label_key) {
                let slot = (key.0.clone(), value.clone());
                if let Some(keys) = index.get_mut(&slot) {
                    keys.remove(key);
                    if keys.is_empty() {
                        index.remove(&slot);
                    }
                }
            }
        }
        Some(old)
    }

    fn index(&mut self, object: Arc<Object>) {
        let key = object.key();
        self.unindex(&key);
        for uid in owner_uids(&object) {
            self.by_owner
                .entry(uid.to_string())
                .or_default()
                .insert(key.clone());
        }
        for (label_key, index) in &mut self.by_label {
            if let Some(value) = label(&object, label_key) {
                index
                    .entry((key.0.clone(), value.clone()))
                    .or_default()
                    .insert(key.clone());
            }
        }
        self.bytes += object.size();
        self.objects.insert(key, object);
    }

    /// An object was added or changed.
    pub fn apply(&mut self, object: Arc<Object>) {
        self.index(object);
    }

    /// An object was deleted.
    pub fn delete(&mut self, key: &Key) {
        self.unindex(key);
    }

    /// A (re)list starts. Listed objects replace their cached versions as
    /// they arrive (never two copies of the cache at once); those not
    /// listed again are dropped at [`Cache::init_done`].
    pub fn init(&mut self) {
        self.relisting = Some(HashSet::new());
    }

    /// An object of the running (re)list.
    pub fn init_apply(&mut self, object: Arc<Object>) {
        self.relisting
            .get_or_insert_with(HashSet::new)
            .insert(object.key());
        self.index(object);
    }

    /// The (re)list is complete. Returns the objects that vanished while the
    /// watch was down, so their deletion can still be acted upon.
    pub fn init_done(&mut self) -> Vec<Arc<Object>> {
        let listed = self.relisting.take().unwrap_or_default();
        let gone: Vec<Key> = self
            .objects
            .keys()
            .filter(|k| !listed.contains(*k))
            .cloned()
            .collect();
        gone.iter().filter_map(|k| self.unindex(k)).collect()
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Object>> {
        self.objects
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Objects in `namespace` (in any, for `None`) with an ownerReference
    /// to `uid`. A uid is only a claim (anyone who may write an object can
    /// name any uid in its ownerReferences, and a preview's parent is the
    /// caller's text), so a namespaced owner's lookup is bound to its own
    /// namespace, as Kubernetes' garbage collector binds it: a namespaced
    /// owner's dependents live in its namespace.
    pub fn owned_by(&self, namespace: Option<&str>, uid: &str) -> Vec<Arc<Object>> {
        self.by_owner
            .get(uid)
            .into_iter()
            .flatten()
            .filter(|k| namespace.is_none_or(|ns| k.0 == ns))
            .filter_map(|k| self.objects.get(k).cloned())
            .collect()
    }

    /// Keep an index of label `key`'s values, for [`Cache::labelled`].
    pub fn index_label(&mut self, key: &str) {
        if self.by_label.contains_key(key) {
            return;
        }
        let mut index: HashMap<Key, BTreeSet<Key>> = HashMap::new();
        for (k, object) in &self.objects {
            if let Some(value) = label(object, key) {
                index
                    .entry((k.0.clone(), value.clone()))
                    .or_default()
                    .insert(k.clone());
            }
        }
        self.by_label.insert(key.to_string(), index);
    }

    /// Objects in `namespace` whose label `key` is `value`, by the index
    /// ([`Cache::index_label`]), or by a scan of the namespace without one.
    pub fn labelled(&self, namespace: &str, key: &str, value: &str) -> Vec<Arc<Object>> {
        match self.by_label.get(key) {
            Some(index) => index
                .get(&(namespace.to_string(), value.to_string()))
                .into_iter()
                .flatten()
                .filter_map(|k| self.objects.get(k).cloned())
                .collect(),
            None => self
                .list(Some(namespace))
                .into_iter()
                .filter(|o| label(o, key).is_some_and(|v| v == value))
                .collect(),
        }
    }

    /// Objects in `namespace` (all objects when `None`).
    pub fn list(&self, namespace: Option<&str>) -> Vec<Arc<Object>> {
        match namespace {
            None => self.objects.values().cloned().collect(),
            Some(ns) => self
                .objects
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, o)| o.clone())
                .collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Bytes of the objects held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::core::{DynamicObject, ObjectMeta};

    fn obj(ns: &str, name: &str, owner: Option<&str>) -> Arc<Object> {
        labelled(ns, name, owner, &[])
    }

    fn labelled(ns: &str, name: &str, owner: Option<&str>, labels: &[(&str, &str)]) -> Arc<Object> {
        Arc::new(Object::new(DynamicObject {
            types: None,
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                owner_references: owner.map(|uid| {
                    vec![OwnerReference {
                        uid: uid.into(),
                        ..Default::default()
                    }]
                }),
                labels: (!labels.is_empty()).then(|| {
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect()
                }),
                ..Default::default()
            },
            data: serde_json::Value::Null,
        }))
    }

    #[test]
    fn children_are_found_by_owner_uid_and_forgotten_on_delete() {
        let mut cache = Cache::default();
        cache.apply(obj("a", "x", Some("u1")));
        cache.apply(obj("a", "y", Some("u1")));
        cache.apply(obj("a", "z", Some("u2")));
        assert_eq!(cache.owned_by(None, "u1").len(), 2);
        cache.delete(&("a".into(), "x".into()));
        assert_eq!(cache.owned_by(None, "u1").len(), 1);
        assert!(cache.owned_by(None, "nobody").is_empty());
    }

    #[test]
    fn an_owner_lookup_in_a_namespace_never_returns_another_namespace_s_objects() {
        let mut cache = Cache::default();
        cache.apply(obj("a", "x", Some("u1")));
        cache.apply(obj("b", "spoofed", Some("u1")));
        let in_a = cache.owned_by(Some("a"), "u1");
        assert_eq!(in_a.len(), 1);
        assert_eq!(in_a[0].metadata.namespace.as_deref(), Some("a"));
        assert!(cache.owned_by(Some("c"), "u1").is_empty());
        assert_eq!(cache.owned_by(None, "u1").len(), 2);
    }

    #[test]
    fn an_owner_change_moves_the_object_in_the_owner_index() {
        let mut cache = Cache::default();
        cache.apply(obj("a", "x", Some("u1")));
        cache.apply(obj("a", "x", Some("u2")));
        assert!(cache.owned_by(None, "u1").is_empty());
        assert_eq!(cache.owned_by(None, "u2").len(), 1);
    }

    #[test]
    fn list_by_namespace_returns_only_that_namespace() {
        let mut cache = Cache::default();
        cache.apply(obj("a", "x", None));
        cache.apply(obj("ab", "y", None));
        cache.apply(obj("b", "z", None));
        assert_eq!(cache.list(Some("a")).len(), 1);
        assert_eq!(cache.list(None).len(), 3);
    }

    #[test]
    fn a_relist_reports_objects_that_vanished_while_the_watch_was_down() {
        let mut cache = Cache::default();
        cache.apply(obj("a", "kept", None));
        cache.apply(obj("a", "gone", Some("u1")));
        cache.init();
        cache.init_apply(obj("a", "kept", None));
        // Readers see the objects not listed yet during the relist, and
        // one copy of each: the listed one replaced the cached one.
        assert_eq!(cache.len(), 2);
        let vanished = cache.init_done();
        assert_eq!(vanished.len(), 1);
        assert_eq!(vanished[0].metadata.name.as_deref(), Some("gone"));
        assert_eq!(cache.len(), 1);
        assert!(cache.owned_by(None, "u1").is_empty());
    }

    #[test]
    fn labelled_lookups_follow_label_changes_with_or_without_an_index() {
        let mut cache = Cache::default();
        cache.apply(labelled("a", "p1", None, &[("instance", "db1")]));
        cache.apply(labelled("a", "p2", None, &[("instance", "db2")]));
        cache.apply(labelled("b", "p3", None, &[("instance", "db1")]));
        assert_eq!(cache.labelled("a", "instance", "db1").len(), 1);
        cache.index_label("instance");
        assert_eq!(cache.labelled("a", "instance", "db1").len(), 1);
        // p2 moves to db1; p1 is deleted.
        cache.apply(labelled("a", "p2", None, &[("instance", "db1")]));
        cache.delete(&("a".into(), "p1".into()));
        let found = cache.labelled("a", "instance", "db1");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].metadata.name.as_deref(), Some("p2"));
        assert!(cache.labelled("a", "instance", "db2").is_empty());
        assert_eq!(cache.labelled("b", "instance", "db1").len(), 1);
    }

    #[test]
    fn bytes_follow_what_is_held() {
        let mut cache = Cache::default();
        let o = obj("a", "x", None);
        let size = o.size();
        cache.apply(o.clone());
        cache.apply(o);
        assert_eq!(cache.bytes(), size);
        cache.delete(&("a".into(), "x".into()));
        assert_eq!(cache.bytes(), 0);
    }
}
