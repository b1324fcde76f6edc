//! The in-memory index behind one informer: a plain data structure fed by
//! watch events, testable without a cluster (kubert's `index.rs` habit).
//!
//! # The byte budget
//!
//! A watch of children or related objects caches whatever carries its labels,
//! and anyone who may create labelled objects in a served namespace decides
//! what that is. So each cache holds at most its budget in bytes (as
//! [`Object::size`] counts them), first come, first served:
//!
//! - an object that does not fit is *left out*: not cached, its key and size
//!   noted (at most [`LEFT_OUT_KEYS`] of them), so that a later deletion or
//!   change of it is recognised;
//! - a change that makes a cached object too big drops the cached copy as
//!   well (a stale copy would be a lie the host acts on);
//! - objects already cached keep their place: filling the cache up does not
//!   push out what the plugins saw before.
//!
//! Guarantees: [`Cache::bytes`] never exceeds the budget. While anything is
//! left out, [`Cache::left_out`] says how much; once the objects left out
//! would fit, [`Cache::wants_relist`] says so, and the informer relists to
//! fetch them again (nothing else re-sends an object that did not change).
//!
//! Caveats: which objects are left out depends on the order the watch
//! delivers them in (a relist lists by name). A plugin reading a cache that
//! leaves objects out sees part of the truth; it is reported `degraded`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use super::Object;

use kubeplug_core::key::ObjectKey;

/// `(namespace, label value)`: a slot of a label index.
type LabelSlot = (String, String);

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

/// How many keys of objects left out a cache notes, at most. Beyond it the
/// cache no longer knows exactly what it lacks and relists once it is half
/// empty (see [`Cache::wants_relist`]). A key costs ~100 bytes: 10,000 cost
/// about 1 MiB whatever the objects weigh.
pub const LEFT_OUT_KEYS: usize = 10_000;

/// Objects of one resource type, indexed by key, by owner uid and by the
/// values of the label keys someone looks objects up by, holding at most a
/// byte budget of them (see the module docs).
pub struct Cache {
    objects: BTreeMap<ObjectKey, Arc<Object>>,
    by_owner: HashMap<String, HashSet<ObjectKey>>,
    /// Label key → (namespace, value) → objects, for the keys in
    /// [`Cache::index_label`].
    by_label: HashMap<String, HashMap<LabelSlot, BTreeSet<ObjectKey>>>,
    /// Keys listed since the last `Init`, while a (re)list is running.
    relisting: Option<HashSet<ObjectKey>>,
    /// Bytes of the objects held (see [`Object::size`]).
    bytes: usize,
    /// The most `bytes` may reach.
    budget: usize,
    /// Objects delivered that did not fit: key → their size.
    left_out: HashMap<ObjectKey, usize>,
    /// The sizes in `left_out`, summed.
    left_out_bytes: usize,
    /// More objects were left out than `left_out` notes ([`LEFT_OUT_KEYS`]);
    /// only a relist tells what the cache lacks.
    lost_track: bool,
}

impl Default for Cache {
    /// A cache without a budget.
    fn default() -> Self {
        Cache::with_budget(usize::MAX)
    }
}

/// What a cache over its budget lacks (see [`Cache::left_out`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeftOut {
    /// Objects not cached (at least this many when `more`).
    pub objects: usize,
    /// Their bytes, as last seen.
    pub bytes: usize,
    /// The cache stopped noting them: there are more.
    pub more: bool,
}

impl Cache {
    /// A cache holding at most `budget` bytes of objects.
    pub fn with_budget(budget: usize) -> Self {
        Cache {
            objects: BTreeMap::new(),
            by_owner: HashMap::new(),
            by_label: HashMap::new(),
            relisting: None,
            bytes: 0,
            budget,
            left_out: HashMap::new(),
            left_out_bytes: 0,
            lost_track: false,
        }
    }

    /// The most this cache holds, in bytes.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// What the cache lacks because of its budget; `None`: nothing.
    pub fn left_out(&self) -> Option<LeftOut> {
        (!self.left_out.is_empty() || self.lost_track).then_some(LeftOut {
            objects: self.left_out.len(),
            bytes: self.left_out_bytes,
            more: self.lost_track,
        })
    }

    /// True when objects were left out and would fit now: only a relist
    /// brings them back. Without a full account of them
    /// ([`LEFT_OUT_KEYS`]), once the cache is at most half full.
    pub fn wants_relist(&self) -> bool {
        if self.relisting.is_some() {
            return false;
        }
        if self.lost_track {
            return self.bytes <= self.budget / 2;
        }
        !self.left_out.is_empty() && self.bytes.saturating_add(self.left_out_bytes) <= self.budget
    }

    fn forget_left_out(&mut self, key: &ObjectKey) {
        if let Some(size) = self.left_out.remove(key) {
            self.left_out_bytes -= size;
        }
    }

    fn leave_out(&mut self, key: ObjectKey, size: usize) {
        self.forget_left_out(&key);
        if self.left_out.len() >= LEFT_OUT_KEYS {
            self.lost_track = true;
            return;
        }
        self.left_out_bytes += size;
        self.left_out.insert(key, size);
    }

    /// Cache `object` if it fits the budget (in place of its older copy),
    /// else leave it out and drop the older copy. True if cached.
    fn admit(&mut self, object: Arc<Object>) -> bool {
        let key = object.key();
        let size = object.size();
        let held = self.objects.get(&key).map_or(0, |o| o.size());
        if (self.bytes - held).saturating_add(size) <= self.budget {
            self.forget_left_out(&key);
            self.index(object);
            true
        } else {
            self.unindex(&key);
            self.leave_out(key, size);
            false
        }
    }

    fn unindex(&mut self, key: &ObjectKey) -> Option<Arc<Object>> {
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
                let slot = (key.namespace.clone(), value.clone());
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
                    .entry((key.namespace.clone(), value.clone()))
                    .or_default()
                    .insert(key.clone());
            }
        }
        self.bytes += object.size();
        self.objects.insert(key, object);
    }

    /// An object was added or changed. False if it was left out (see the
    /// module docs).
    pub fn apply(&mut self, object: Arc<Object>) -> bool {
        self.admit(object)
    }

    /// An object was deleted.
    pub fn delete(&mut self, key: &ObjectKey) {
        self.unindex(key);
        self.forget_left_out(key);
    }

    /// A (re)list starts. Listed objects replace their cached versions as
    /// they arrive (never two copies of the cache at once); those not
    /// listed again are dropped at [`Cache::init_done`].
    pub fn init(&mut self) {
        self.relisting = Some(HashSet::new());
        // The list tells again what does not fit.
        self.lost_track = false;
    }

    /// An object of the running (re)list. False if it was left out.
    pub fn init_apply(&mut self, object: Arc<Object>) -> bool {
        self.relisting
            .get_or_insert_with(HashSet::new)
            .insert(object.key());
        self.admit(object)
    }

    /// The (re)list is complete. Returns the objects that vanished while the
    /// watch was down, so their deletion can still be acted upon.
    pub fn init_done(&mut self) -> Vec<Arc<Object>> {
        let listed = self.relisting.take().unwrap_or_default();
        let stale: Vec<ObjectKey> = self
            .left_out
            .keys()
            .filter(|k| !listed.contains(*k))
            .cloned()
            .collect();
        for key in &stale {
            self.forget_left_out(key);
        }
        let gone: Vec<ObjectKey> = self
            .objects
            .keys()
            .filter(|k| !listed.contains(*k))
            .cloned()
            .collect();
        gone.iter().filter_map(|k| self.unindex(k)).collect()
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Object>> {
        self.objects.get(&ObjectKey::new(namespace, name)).cloned()
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
            .filter(|k| namespace.is_none_or(|ns| k.namespace == ns))
            .filter_map(|k| self.objects.get(k).cloned())
            .collect()
    }

    /// Keep an index of label `key`'s values, for [`Cache::labelled`].
    pub fn index_label(&mut self, key: &str) {
        if self.by_label.contains_key(key) {
            return;
        }
        let mut index: HashMap<LabelSlot, BTreeSet<ObjectKey>> = HashMap::new();
        for (k, object) in &self.objects {
            if let Some(value) = label(object, key) {
                index
                    .entry((k.namespace.clone(), value.clone()))
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
                .range(ObjectKey::new(ns, "")..)
                .take_while(|(k, _)| k.namespace == ns)
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
        cache.delete(&ObjectKey::new("a", "x"));
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
        cache.delete(&ObjectKey::new("a", "p1"));
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
        cache.delete(&ObjectKey::new("a", "x"));
        assert_eq!(cache.bytes(), 0);
    }

    /// An object of `bytes` bytes of data (the cached size is a little more).
    fn sized(ns: &str, name: &str, bytes: usize) -> Arc<Object> {
        let mut object = obj(ns, name, None).to_dynamic();
        object.data = serde_json::json!({"data": {"k": "x".repeat(bytes)}});
        Arc::new(Object::new(object))
    }

    #[test]
    fn objects_beyond_the_budget_are_left_out_and_those_cached_first_keep_their_place() {
        let size = sized("a", "o0", 1000).size();
        let mut cache = Cache::with_budget(3 * size);
        for i in 0..5 {
            cache.apply(sized("a", &format!("o{i}"), 1000));
        }
        assert!(cache.bytes() <= cache.budget());
        let names: Vec<_> = cache
            .list(None)
            .iter()
            .map(|o| o.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["o0", "o1", "o2"], "first come, first served");
        assert_eq!(
            cache.left_out(),
            Some(LeftOut {
                objects: 2,
                bytes: 2 * size,
                more: false
            })
        );
        // A change of a cached object that still fits replaces it.
        assert!(cache.apply(sized("a", "o1", 1000)));
        assert!(!cache.wants_relist());
    }

    #[test]
    fn a_cached_object_that_grows_past_the_budget_is_dropped_not_kept_stale() {
        let size = sized("a", "o0", 1000).size();
        let mut cache = Cache::with_budget(2 * size);
        cache.apply(sized("a", "o0", 1000));
        cache.apply(sized("a", "o1", 1000));
        assert!(!cache.apply(sized("a", "o1", 5000)));
        assert!(cache.get("a", "o1").is_none(), "no stale copy");
        assert_eq!(cache.bytes(), size);
        assert_eq!(cache.left_out().map(|l| l.objects), Some(1));
    }

    #[test]
    fn deleting_what_was_left_out_recovers_without_a_relist() {
        let mut cache = Cache::with_budget(sized("a", "o0", 1000).size());
        cache.apply(sized("a", "o0", 1000));
        cache.apply(sized("a", "o1", 1000));
        assert!(cache.left_out().is_some());
        cache.delete(&ObjectKey::new("a", "o1"));
        assert_eq!(cache.left_out(), None);
        assert!(!cache.wants_relist());
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn once_what_was_left_out_fits_a_relist_is_wanted_and_brings_it_back() {
        let mut cache = Cache::with_budget(sized("a", "o0", 1000).size());
        cache.apply(sized("a", "o0", 1000));
        cache.apply(sized("a", "o1", 1000));
        assert!(!cache.wants_relist(), "o1 does not fit beside o0");
        cache.delete(&ObjectKey::new("a", "o0"));
        assert!(
            cache.wants_relist(),
            "o1 fits now; nothing re-sends it but a list"
        );
        cache.init();
        assert!(!cache.wants_relist(), "not while relisting");
        assert!(cache.init_apply(sized("a", "o1", 1000)));
        cache.init_done();
        assert_eq!(cache.left_out(), None);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_relist_forgets_left_out_objects_that_are_gone() {
        let mut cache = Cache::with_budget(sized("a", "o0", 1000).size());
        cache.apply(sized("a", "o0", 1000));
        cache.apply(sized("a", "o1", 1000));
        cache.init();
        cache.init_apply(sized("a", "o0", 1000));
        cache.init_done();
        assert_eq!(
            cache.left_out(),
            None,
            "o1 was deleted while the watch was down"
        );
    }

    #[test]
    fn past_the_keys_it_notes_a_cache_relists_once_half_empty() {
        let mut cache = Cache::with_budget(sized("a", "big", 5000).size());
        cache.apply(sized("a", "big", 5000));
        for i in 0..LEFT_OUT_KEYS + 5 {
            cache.apply(obj("a", &format!("n{i}"), None));
        }
        let left = cache.left_out().expect("over budget");
        assert!(left.more && left.objects == LEFT_OUT_KEYS, "{left:?}");
        assert!(!cache.wants_relist());
        cache.delete(&ObjectKey::new("a", "big"));
        assert!(cache.wants_relist());
        // The relist accounts for everything again.
        cache.init();
        for i in 0..3 {
            cache.init_apply(obj("a", &format!("n{i}"), None));
        }
        cache.init_done();
        assert_eq!(cache.left_out(), None);
        assert_eq!(cache.len(), 3);
    }
}
