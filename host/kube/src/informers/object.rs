//! One cached object: its metadata parsed, for indexes and routing, and the
//! whole object as the JSON text plugins are handed, serialized once per
//! resourceVersion and shared by every call that reads it.
//!
//! Why text and not a `serde_json::Value` tree: a tree costs three to four
//! times the bytes of its text (a heap node per field), and every call
//! turned the tree into text anyway. The host parses a cached object only
//! where it compares fields (a parent's status, an observed child against
//! the desired one), once per reconcile.
//!
//! What the API server keeps for its own bookkeeping is dropped before
//! caching: `managedFields` (often a third of an object) and kubectl's
//! last-applied annotation (a second copy of the spec). Only the
//! `managedFields` entries of this host's own status writes stay: they tell
//! which status fields a plugin wrote before ([`kubeplug_core::plan::status_update`]).

use std::sync::Arc;

use kube::core::{DynamicObject, ObjectMeta, TypeMeta};
use serde_json::Value;

/// kubectl's client-side-apply copy of the object (`kubectl apply` without
/// `--server-side`).
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Field managers whose status entries in `managedFields` are kept.
const OWN_MANAGERS: &str = "kubeplug/";

/// A cached object. Cheap to share (`Arc<Object>`); immutable.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub types: TypeMeta,
    /// The object's metadata without annotations and `managedFields` (the
    /// JSON text has the annotations): what indexes, routes and events
    /// read.
    pub metadata: ObjectMeta,
    json: Arc<str>,
}

/// Drop what the host and plugins never read (see the module doc).
pub fn strip(object: &mut DynamicObject) {
    let meta = &mut object.metadata;
    if let Some(annotations) = &mut meta.annotations {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
    if let Some(entries) = &mut meta.managed_fields {
        entries.retain(|e| {
            e.subresource.as_deref() == Some("status")
                && e.manager
                    .as_deref()
                    .is_some_and(|m| m.starts_with(OWN_MANAGERS))
        });
        if entries.is_empty() {
            meta.managed_fields = None;
        }
    }
}

impl Object {
    /// Cache `object`: strip it, serialize it once, keep its metadata.
    pub fn new(mut object: DynamicObject) -> Object {
        strip(&mut object);
        let json: Arc<str> = serde_json::to_string(&object)
            .expect("a DynamicObject always serializes")
            .into();
        let mut metadata = object.metadata;
        metadata.annotations = None;
        metadata.managed_fields = None;
        Object {
            types: object.types.unwrap_or_default(),
            metadata,
            json,
        }
    }

    /// The object as JSON text, shared (no copy).
    pub fn json(&self) -> &Arc<str> {
        &self.json
    }

    /// The object parsed, for comparing fields.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(&self.json).expect("cached JSON always parses")
    }

    /// The object as kube-rs's dynamic type, parsed from the text.
    pub fn to_dynamic(&self) -> DynamicObject {
        serde_json::from_str(&self.json).expect("cached JSON always parses")
    }

    /// `(namespace, name)`.
    pub fn key(&self) -> super::ObjectKey {
        super::ObjectKey::new(
            self.metadata.namespace.clone().unwrap_or_default(),
            self.metadata.name.clone().unwrap_or_default(),
        )
    }

    /// Bytes held, roughly: the text plus this struct (the parsed
    /// metadata's own heap allocations are not counted).
    pub fn size(&self) -> usize {
        self.json.len() + std::mem::size_of::<Object>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(v: Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn managed_fields_and_last_applied_are_dropped_but_own_status_entries_stay() {
        let o = Object::new(object(json!({
            "apiVersion": "example.com/v1", "kind": "Database",
            "metadata": {
                "name": "db", "namespace": "ns",
                "annotations": {LAST_APPLIED: "{\"huge\":true}", "keep": "me"},
                "managedFields": [
                    {"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}},
                    {"manager": "kubeplug/database", "operation": "Apply", "subresource": "status", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}},
                    {"manager": "kubeplug/database", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}}
                ]
            },
            "spec": {"engine": "postgres"}
        })));
        let v = o.to_value();
        assert_eq!(v["metadata"]["annotations"], json!({"keep": "me"}));
        let managed = v["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(managed.len(), 1);
        assert_eq!(managed[0]["subresource"], "status");
        assert_eq!(v["spec"]["engine"], "postgres");
        assert_eq!(o.types.kind, "Database");
        assert_eq!(o.key(), super::super::ObjectKey::new("ns", "db"));
        // The parsed metadata keeps no annotations: the text has them.
        assert!(o.metadata.annotations.is_none());
    }

    #[test]
    fn an_object_with_nothing_to_strip_round_trips() {
        let raw = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}
        });
        let o = Object::new(object(raw.clone()));
        assert_eq!(o.to_value(), raw);
        assert_eq!(o.to_dynamic().metadata.labels, o.metadata.labels);
    }
}
