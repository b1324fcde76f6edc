//! Conversion of `Database` objects between `example.com/v1` (what the
//! plugin reconciles and the API server stores) and `example.com/v2`.
//!
//! | v1                                              | v2                     |
//! |-------------------------------------------------|------------------------|
//! | `spec.engine`                                   | `spec.engine.name`     |
//! | `spec.version`                                  | `spec.engine.version`  |
//! | `spec.replicas`                                 | `spec.replicas`        |
//! | annotation `databases.example.com/storage`      | `spec.storage`         |
//!
//! Nothing is lost either way: v1 → v2 → v1 and v2 → v1 → v2 give back the
//! input field by field, for every object the API server sends (the
//! versions' schemas prune a v1 `spec.storage` or a v2 `spec.version`, and
//! ObjectMeta stores no empty annotations map). Any other spec field passes
//! as it is; metadata other than that one annotation, and status, are never
//! touched. The annotation is the conversion's: in a v2 object that has a
//! `spec.storage`, the storage replaces it. An annotation that is not a
//! storage object ([`storage::from_annotation`]) stays where it is and v2
//! gets no storage: a conversion that failed would make the object
//! unreadable at every version.

use kubeplug_sdk::Error;
use serde_json::{Map, Value};

use crate::storage;

pub const V1: &str = "example.com/v1";
pub const V2: &str = "example.com/v2";

/// Convert every object to `api_version`, in order.
pub fn convert(objects: Vec<Value>, api_version: &str) -> Result<Vec<Value>, Error> {
    if api_version != V1 && api_version != V2 {
        return Err(Error::Failed(format!(
            "cannot convert Databases to {api_version}: this plugin converts between {V1} and {V2}"
        )));
    }
    objects
        .into_iter()
        .map(|object| convert_one(object, api_version))
        .collect()
}

fn convert_one(mut object: Value, to: &str) -> Result<Value, Error> {
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or("?")
        .to_string();
    let Some(fields) = object.as_object_mut() else {
        return Err(Error::InvalidInput(format!(
            "a Database to convert must be an object, got {object}"
        )));
    };
    let from = fields.get("apiVersion").and_then(Value::as_str);
    match (from, to) {
        (Some(from), to) if from == to => return Ok(object),
        (Some(V1), V2) => up(fields),
        (Some(V2), V1) => down(fields, &name)?,
        (from, to) => {
            return Err(Error::InvalidInput(format!(
                "cannot convert Database {name} from {} to {to}: this plugin converts between {V1} and {V2}",
                from.unwrap_or("an unknown apiVersion")
            )));
        }
    }
    fields.insert("apiVersion".into(), to.into());
    Ok(object)
}

/// v1 → v2.
fn up(object: &mut Map<String, Value>) {
    // Read only into a spec that exists and has no storage of its own: a
    // spec made for it, or a storage overwritten, would not convert back.
    let has_room = object
        .get("spec")
        .and_then(Value::as_object)
        .is_some_and(|spec| !spec.contains_key("storage"));
    let storage = if has_room {
        take_annotation(object)
    } else {
        None
    };
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let name = spec.remove("engine");
    let version = spec.remove("version");
    if name.is_some() || version.is_some() {
        let mut engine = Map::new();
        engine.extend(name.map(|n| ("name".to_string(), n)));
        engine.extend(version.map(|v| ("version".to_string(), v)));
        spec.insert("engine".into(), Value::Object(engine));
    }
    if let Some(storage) = storage {
        spec.insert("storage".into(), storage);
    }
}

/// The storage object the annotation holds, taking the annotation away,
/// and the annotations map when nothing is left in it (v2 → v1 made the
/// map for it, or had an empty one, which the API server never stores);
/// `None`, touching nothing, when it holds none.
fn take_annotation(object: &mut Map<String, Value>) -> Option<Value> {
    let annotations = object
        .get_mut("metadata")?
        .get_mut("annotations")?
        .as_object_mut()?;
    let storage = storage::from_annotation(annotations.get(storage::ANNOTATION)?.as_str()?).ok()?;
    annotations.remove(storage::ANNOTATION);
    if annotations.is_empty()
        && let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut)
    {
        metadata.remove("annotations");
    }
    Some(storage)
}

/// v2 → v1.
fn down(object: &mut Map<String, Value>, name: &str) -> Result<(), Error> {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    // Flattened only when it holds nothing else: whatever else is there
    // (v2's schema admits nothing else) stays rather than being dropped.
    let flat = spec
        .get("engine")
        .and_then(Value::as_object)
        .is_some_and(|e| e.keys().all(|k| k == "name" || k == "version"));
    if flat && let Some(Value::Object(engine)) = spec.remove("engine") {
        for (key, value) in engine {
            let key = if key == "name" { "engine" } else { "version" };
            spec.insert(key.into(), value);
        }
    }
    let Some(storage) = spec.remove("storage") else {
        return Ok(());
    };
    let text = storage::to_annotation(&storage);
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or_else(|| {
            Error::InvalidInput(format!("Database {name}: metadata is not an object"))
        })?;
    let annotations = metadata
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or_else(|| {
            Error::InvalidInput(format!(
                "Database {name}: metadata.annotations is not an object"
            ))
        })?;
    annotations.insert(storage::ANNOTATION.into(), text.into());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v1(spec: Value) -> Value {
        json!({
            "apiVersion": V1,
            "kind": "Database",
            "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1", "resourceVersion": "7", "generation": 2},
            "spec": spec,
        })
    }

    fn one(object: &Value, to: &str) -> Value {
        let mut out = convert(vec![object.clone()], to).expect("converts");
        assert_eq!(out.len(), 1);
        out.remove(0)
    }

    /// Both round trips, through every object given at either version.
    fn round_trips(object: &Value) {
        let (here, there) = if object["apiVersion"] == V1 {
            (V1, V2)
        } else {
            (V2, V1)
        };
        let converted = one(object, there);
        assert_eq!(converted["apiVersion"], there);
        assert_eq!(&one(&converted, here), object, "{here} → {there} → {here}");
        assert_eq!(one(&one(&converted, here), there), converted);
    }

    #[test]
    fn v1_becomes_v2_with_the_engine_as_an_object() {
        let db = v1(json!({"engine": "mysql", "version": "8.0.26", "replicas": 3}));
        let mut want = db.clone();
        want["apiVersion"] = json!(V2);
        want["spec"] = json!({"engine": {"name": "mysql", "version": "8.0.26"}, "replicas": 3});
        assert_eq!(one(&db, V2), want);
        assert_eq!(one(&want, V1), db);
    }

    #[test]
    fn storage_travels_through_v1_as_the_annotation() {
        let mut db = v1(
            json!({"engine": {"name": "postgresql", "version": "16.4.0"}, "replicas": 1, "storage": {"size": "5Gi"}}),
        );
        db["apiVersion"] = json!(V2);
        let down = one(&db, V1);
        assert_eq!(
            down["spec"],
            json!({"engine": "postgresql", "version": "16.4.0", "replicas": 1})
        );
        assert_eq!(
            down["metadata"]["annotations"],
            json!({"databases.example.com/storage": "{\"size\":\"5Gi\"}"})
        );
        let up = one(&down, V2);
        assert_eq!(up, db);
        assert!(up["metadata"].get("annotations").is_none());
    }

    #[test]
    fn other_annotations_stay_beside_the_storage_one() {
        let mut db = v1(
            json!({"engine": {"name": "mysql", "version": "8.4.3"}, "storage": {"size": "1Gi"}}),
        );
        db["apiVersion"] = json!(V2);
        db["metadata"]["annotations"] = json!({"team": "payments"});
        let down = one(&db, V1);
        assert_eq!(
            down["metadata"]["annotations"],
            json!({"team": "payments", "databases.example.com/storage": "{\"size\":\"1Gi\"}"})
        );
        assert_eq!(one(&down, V2), db);
    }

    #[test]
    fn an_unreadable_annotation_stays_and_v2_gets_no_storage() {
        for text in [
            "lots",
            r#"{ "size": "1Gi" }"#,
            r#"{"size":"huge"}"#,
            r#"{"size":"1Gi","x":1}"#,
        ] {
            let mut db = v1(json!({"engine": "mongodb", "version": "7.0.14"}));
            db["metadata"]["annotations"] = json!({"databases.example.com/storage": text});
            let up = one(&db, V2);
            assert!(up["spec"].get("storage").is_none(), "{text}");
            assert_eq!(up["metadata"], db["metadata"], "{text}");
            round_trips(&db);
            round_trips(&up);
        }
    }

    #[test]
    fn only_api_version_spec_and_annotations_change() {
        let mut db = v1(
            json!({"engine": {"name": "mysql", "version": "8.0.26"}, "storage": {"size": "2Gi"}}),
        );
        db["apiVersion"] = json!(V2);
        db["metadata"]["labels"] = json!({"tier": "gold"});
        db["metadata"]["finalizers"] = json!(["example.com/keep"]);
        db["status"] = json!({"phase": "Running", "pods": ["orders-0"], "readyReplicas": 1});
        let down = one(&db, V1);
        assert_eq!(down["status"], db["status"]);
        assert_eq!(down["kind"], db["kind"]);
        let mut meta = down["metadata"].clone();
        meta.as_object_mut().unwrap().remove("annotations");
        assert_eq!(meta, db["metadata"]);
    }

    #[test]
    fn every_object_survives_both_round_trips() {
        let status = json!({"phase": "Running", "pods": ["orders-0"], "nodes": ["orders-0"], "replicas": 1, "readyReplicas": 1,
            "conditions": [{"type": "Ready", "status": "True", "reason": "AllReplicasReady", "message": "1/1 replicas ready", "lastTransitionTime": "2026-11-29T18:00:00Z"}]});
        let with = |object: &Value, annotations: Value, status: Option<&Value>| {
            let mut o = object.clone();
            o["metadata"]["annotations"] = annotations;
            if let Some(status) = status {
                o["status"] = status.clone();
            }
            o
        };
        let ours = |text: &str| json!({"databases.example.com/storage": text, "team": "payments"});
        let v2 = |spec: Value| {
            let mut o = v1(spec);
            o["apiVersion"] = json!(V2);
            o
        };

        let mut objects = Vec::new();
        for db in [
            v1(json!({"engine": "mysql", "version": "8.0.26", "replicas": 3})),
            v1(json!({"engine": "postgresql", "version": "16.4.0"})),
            v1(
                json!({"engine": "mongodb", "version": "7.0.5", "replicas": 2, "future": {"x": [1, 2]}}),
            ),
            v1(json!({"engine": "mysql"})),
            v1(json!({})),
        ] {
            objects.push(with(&db, json!({"team": "payments"}), Some(&status)));
            objects.push(with(&db, json!({}), None));
            objects.push(with(&db, ours("{\"size\":\"3Gi\"}"), Some(&status)));
            objects.push(with(&db, ours("{\"size\": \"3Gi\"}"), None));
            objects.push(db);
        }
        for db in [
            v2(
                json!({"engine": {"name": "mysql", "version": "8.4.3"}, "replicas": 1, "storage": {"size": "1Gi"}}),
            ),
            v2(
                json!({"engine": {"name": "postgresql", "version": "17.0.0"}, "storage": {}, "future": true}),
            ),
        ] {
            objects.push(with(&db, json!({"team": "payments"}), Some(&status)));
            objects.push(db);
        }
        // Without storage (the API server defaults it, a conversion does not).
        for db in [
            v2(json!({"engine": {"name": "mysql", "version": "8.4.3"}, "replicas": 4})),
            v2(json!({})),
        ] {
            objects.push(with(&db, json!({}), Some(&status)));
            objects.push(with(&db, ours("not json"), None));
            objects.push(db);
        }
        let mut no_spec = with(&v1(Value::Null), ours("{\"size\":\"3Gi\"}"), None);
        no_spec.as_object_mut().unwrap().remove("spec");
        objects.push(no_spec);

        for object in &objects {
            round_trips(object);
        }
    }

    #[test]
    fn what_the_api_server_never_sends_is_not_kept() {
        // An empty annotations map: ObjectMeta omits it, so the API server
        // stores and sends none; the storage annotation's map goes with it.
        let mut db = v1(
            json!({"engine": {"name": "mysql", "version": "8.4.3"}, "storage": {"size": "1Gi"}}),
        );
        db["apiVersion"] = json!(V2);
        db["metadata"]["annotations"] = json!({});
        assert!(
            one(&one(&db, V1), V2)["metadata"]
                .get("annotations")
                .is_none()
        );
        // A v2 object's own copy of the annotation: spec.storage wins.
        db["metadata"]["annotations"] =
            json!({"databases.example.com/storage": "{\"size\":\"9Gi\"}"});
        assert_eq!(
            one(&db, V1)["metadata"]["annotations"],
            json!({"databases.example.com/storage": "{\"size\":\"1Gi\"}"})
        );
    }

    #[test]
    fn a_v1_annotation_becomes_storage_and_only_its_map_goes_when_empty() {
        let mut db = v1(json!({"engine": "mysql", "version": "8.0.26"}));
        db["metadata"]["annotations"] =
            json!({"databases.example.com/storage": "{\"size\":\"3Gi\"}"});
        let up = one(&db, V2);
        assert_eq!(
            up["spec"],
            json!({"engine": {"name": "mysql", "version": "8.0.26"}, "storage": {"size": "3Gi"}})
        );
        assert!(up["metadata"].get("annotations").is_none());
        let plain = v1(json!({"engine": "mysql", "version": "8.0.26"}));
        assert!(one(&plain, V2)["metadata"].get("annotations").is_none());
        assert!(
            one(&one(&plain, V2), V1)["metadata"]
                .get("annotations")
                .is_none()
        );
    }

    #[test]
    fn objects_keep_their_order_and_same_version_passes_unchanged() {
        let a = v1(json!({"engine": "mysql", "version": "8.0.26"}));
        let mut b = v1(json!({"engine": {"name": "mongodb", "version": "8.0.1"}}));
        b["apiVersion"] = json!(V2);
        let out = convert(vec![a.clone(), b.clone()], V2).unwrap();
        assert_eq!(out[0]["spec"]["engine"]["name"], "mysql");
        assert_eq!(out[1], b);
        assert_eq!(convert(vec![a.clone()], V1).unwrap(), vec![a]);
        assert_eq!(convert(Vec::new(), V2).unwrap(), Vec::<Value>::new());
    }

    #[test]
    fn unknown_versions_are_refused() {
        let a = v1(json!({"engine": "mysql", "version": "8.0.26"}));
        assert_eq!(
            convert(vec![a.clone()], "example.com/v3"),
            Err(Error::Failed(
                "cannot convert Databases to example.com/v3: this plugin converts between example.com/v1 and example.com/v2".into()
            ))
        );
        let mut old = a;
        old["apiVersion"] = json!("example.com/v1beta1");
        assert!(
            matches!(convert(vec![old], V2), Err(Error::InvalidInput(m)) if m.contains("from example.com/v1beta1"))
        );
    }
}
