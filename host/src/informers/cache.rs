//! The in-memory index behind one informer: a plain data structure fed by
//! watch events, testable without a cluster (kubert's `index.rs` habit).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use kube::core::DynamicObject;

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type Key = (String, String);

pub fn key_of(object: &DynamicObject) -> Key {
    (
        object.metadata.namespace.clone().unwrap_or_default(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

fn owner_uids(object: &DynamicObject) -> impl Iterator<Item = &str> {
    object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|o| o.uid.as_str())
}

/// Objects of one resource type, indexed by key and by owner uid.
#[derive(Default)]
pub struct Cache {
    objects: BTreeMap<Key, Arc<DynamicObject>>,
    by_owner: HashMap<String, HashSet<Key>>,
    /// Objects listed since the last `Init`, while a (re)list is running.
    relisting: Option<BTreeMap<Key, Arc<DynamicObject>>>,
}

impl Cache {
    fn unindex(&mut self, key: &Key) -> Option<Arc<DynamicObject>> {
        let old = self.objects.remove(key)?;
        for uid in owner_uids(&old) {
            if let Some(keys) = self.by_owner.get_mut(uid) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_owner.remove(uid);
                }
            }
        }
        Some(old)
    }

    fn index(&mut self, object: Arc<DynamicObject>) {
        let key = key_of(&object);
        self.unindex(&key);
        for uid in owner_uids(&object) {
            self.by_owner
                .entry(uid.to_string())
                .or_default()
                .insert(key.clone());
        }
        self.objects.insert(key, object);
    }

    /// An object was added or changed.
    pub fn apply(&mut self, object: Arc<DynamicObject>) {
        self.index(object);
    }

    /// An object was deleted.
    pub fn delete(&mut self, object: &DynamicObject) {
        self.unindex(&key_of(object));
    }

    /// A (re)list starts: objects listed next replace the current set at
    /// [`Cache::init_done`]. Until then readers keep seeing the old set.
    pub fn init(&mut self) {
        self.relisting = Some(BTreeMap::new());
    }

    /// An object of the running (re)list.
    pub fn init_apply(&mut self, object: Arc<DynamicObject>) {
        self.relisting
            .get_or_insert_with(BTreeMap::new)
            .insert(key_of(&object), object);
    }

    /// The (re)list is complete. Returns the objects that vanished while the
    /// watch was down, so their deletion can still be acted upon.
    pub fn init_done(&mut self) -> Vec<Arc<DynamicObject>> {
        let listed = self.relisting.take().unwrap_or_default();
        let vanished: Vec<Arc<DynamicObject>> = self
            .objects
            .iter()
            .filter(|(k, _)| !listed.contains_key(*k))
            .map(|(_, o)| o.clone())
            .collect();
        self.objects.clear();
        self.by_owner.clear();
        for object in listed.into_values() {
            self.index(object);
        }
        vanished
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        self.objects
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Objects with an ownerReference to `uid`.
    pub fn owned_by(&self, uid: &str) -> Vec<Arc<DynamicObject>> {
        self.by_owner
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|k| self.objects.get(k).cloned())
            .collect()
    }

    /// Objects in `namespace` (all objects when `None`).
    pub fn list(&self, namespace: Option<&str>) -> Vec<Arc<DynamicObject>> {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::core::ObjectMeta;

    fn obj(ns: &str, name: &str, owner: Option<&str>) -> Arc<DynamicObject> {
        Arc::new(DynamicObject {
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
                ..Default::default()
            },
            data: serde_json::Value::Null,
        })
    }

    #[test]
    fn children_are_found_by_owner_uid_and_forgotten_on_delete() {
        let mut cache = Cache::default();
        cache.apply(obj("a", "x", Some("u1")));
        cache.apply(obj("a", "y", Some("u1")));
        cache.apply(obj("a", "z", Some("u2")));
        assert_eq!(cache.owned_by("u1").len(), 2);
        cache.delete(&obj("a", "x", None));
        assert_eq!(cache.owned_by("u1").len(), 1);
        assert!(cache.owned_by("nobody").is_empty());
    }

    #[test]
    fn an_owner_change_moves_the_object_in_the_owner_index() {
        let mut cache = Cache::default();
        cache.apply(obj("a", "x", Some("u1")));
        cache.apply(obj("a", "x", Some("u2")));
        assert!(cache.owned_by("u1").is_empty());
        assert_eq!(cache.owned_by("u2").len(), 1);
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
        // Readers still see the old set during the relist.
        assert_eq!(cache.len(), 2);
        let vanished = cache.init_done();
        assert_eq!(vanished.len(), 1);
        assert_eq!(vanished[0].metadata.name.as_deref(), Some("gone"));
        assert_eq!(cache.len(), 1);
        assert!(cache.owned_by("u1").is_empty());
    }
}
