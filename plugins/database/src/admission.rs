//! Validation of `Database` writes: what the CRD's schema cannot say. The
//! host's webhook names `example.com/v1` (matchPolicy Equivalent), so every
//! write arrives here as v1, whichever version the client used.
//!
//! - `spec.engine` may not change: the StatefulSet's data directory holds
//!   one engine's files, and another engine's image cannot read them.
//! - `spec.version` must be a line the engine's image ships
//!   ([`versions`](crate::versions)).
//! - the storage annotation must read back as v2's `spec.storage`
//!   ([`storage`](crate::storage)), or a v2 client would see none.
//!
//! An update is judged on what it changes: a version or an annotation
//! stored before this check existed is kept with a warning while the update
//! leaves it as it is, so that unrelated writes (labels, finalizers, scale)
//! still go through. Deletes are always allowed.

use kubeplug_sdk::{AdmissionRequest, Cause, Operation, Verdict};
use serde::Deserialize;

use crate::{Engine, storage, versions};

/// The verdict on one write of a Database.
pub fn validate<C>(request: &AdmissionRequest<C>) -> Verdict {
    if request.operation == Operation::Delete {
        return Verdict::allow();
    }
    let Some(object) = &request.object else {
        return Verdict::allow();
    };
    let old = match request.operation {
        Operation::Update => request.old_object.as_ref(),
        _ => None,
    };
    let mut findings = Findings::default();

    let engine = &object["spec"]["engine"];
    let was = old
        .map(|old| &old["spec"]["engine"])
        .filter(|was| *was != engine);
    if let Some(was) = was {
        let was = was.as_str().map_or_else(|| was.to_string(), str::to_string);
        findings.deny(
            "spec.engine",
            format!("is immutable after creation (was {was})"),
        );
    }

    // Skipped when either is missing or the engine unknown: the schema
    // refuses those before validating webhooks are called.
    let version = &object["spec"]["version"];
    if let (Ok(parsed), Some(text)) = (Engine::deserialize(engine), version.as_str())
        && let Err(reason) = versions::check(parsed, text)
    {
        let changed = was.is_some() || old.is_none_or(|old| old["spec"]["version"] != *version);
        findings.judge(changed, "spec.version", reason);
    }

    let annotation = &object["metadata"]["annotations"][storage::ANNOTATION];
    if !annotation.is_null() {
        let read = annotation
            .as_str()
            .ok_or_else(|| format!("{} must be a string", storage::ANNOTATION))
            .and_then(storage::from_annotation);
        if let Err(reason) = read {
            let changed = old.is_none_or(|old| {
                old["metadata"]["annotations"][storage::ANNOTATION] != *annotation
            });
            findings.judge(changed, "metadata.annotations", reason);
        }
    }

    findings.verdict()
}

/// Causes to deny and warnings to give, gathered over every check so that
/// one answer names every problem.
#[derive(Default)]
struct Findings {
    causes: Vec<Cause>,
    warnings: Vec<String>,
}

impl Findings {
    fn deny(&mut self, field: &str, message: String) {
        self.causes.push(Cause {
            field: field.into(),
            message,
        });
    }

    /// Deny what this write changes; only warn about what it keeps.
    fn judge(&mut self, changed: bool, field: &str, message: String) {
        if changed {
            self.deny(field, message);
        } else {
            self.warnings.push(format!(
                "{field}: {message} (kept: this update leaves it unchanged)"
            ));
        }
    }

    fn verdict(self) -> Verdict {
        if self.causes.is_empty() {
            return Verdict::Allowed {
                warnings: self.warnings,
            };
        }
        let message = self
            .causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect::<Vec<_>>()
            .join("; ");
        Verdict::Denied {
            message,
            causes: self.causes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn db(engine: &str, version: &str) -> Value {
        json!({
            "apiVersion": "example.com/v1",
            "kind": "Database",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": {"engine": engine, "version": version, "replicas": 1},
        })
    }

    fn annotated(mut db: Value, text: &str) -> Value {
        db["metadata"]["annotations"] = json!({storage::ANNOTATION: text});
        db
    }

    fn create(object: Value) -> Verdict {
        validate(&AdmissionRequest::new(
            Operation::Create,
            Some(object),
            None,
            (),
        ))
    }

    fn update(old: Value, object: Value) -> Verdict {
        validate(&AdmissionRequest::new(
            Operation::Update,
            Some(object),
            Some(old),
            (),
        ))
    }

    #[test]
    fn the_samples_are_allowed() {
        assert_eq!(create(db("mysql", "8.0.26")), Verdict::allow());
        assert_eq!(create(db("postgresql", "16.4.0")), Verdict::allow());
        assert_eq!(create(db("mongodb", "7.0.14")), Verdict::allow());
        assert_eq!(
            update(db("mysql", "8.0.26"), db("mysql", "8.0.27")),
            Verdict::allow()
        );
    }

    #[test]
    fn the_engine_cannot_change() {
        assert_eq!(
            update(db("mysql", "8.0.26"), db("postgresql", "16.4.0")),
            Verdict::deny_field("spec.engine", "is immutable after creation (was mysql)")
        );
    }

    #[test]
    fn a_version_the_image_does_not_ship_is_denied_on_create_and_update() {
        let denied = Verdict::deny_field(
            "spec.version",
            "postgresql 12.1.0 is not shipped by the postgres image this plugin supports: \
             supported lines 13, 14, 15, 16, 17, 18",
        );
        assert_eq!(create(db("postgresql", "12.1.0")), denied);
        assert_eq!(
            update(db("postgresql", "16.4.0"), db("postgresql", "12.1.0")),
            denied
        );
    }

    #[test]
    fn an_unsupported_version_stored_before_is_kept_with_a_warning() {
        let old = db("mysql", "5.6.51");
        let mut labelled = old.clone();
        labelled["metadata"]["labels"] = json!({"tier": "gold"});
        let Verdict::Allowed { warnings } = update(old, labelled) else {
            panic!("an unchanged version is allowed");
        };
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].starts_with("spec.version: mysql 5.6.51 is not shipped"),
            "{warnings:?}"
        );
    }

    #[test]
    fn every_problem_is_named_at_once() {
        let Verdict::Denied { message, causes } = update(
            db("mysql", "8.0.26"),
            annotated(db("mongodb", "4.4.0"), "10Gi"),
        ) else {
            panic!("denied");
        };
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            ["spec.engine", "spec.version", "metadata.annotations"]
        );
        assert!(message.starts_with(
            "spec.engine: is immutable after creation (was mysql); spec.version: mongodb 4.4.0"
        ));
    }

    #[test]
    fn a_storage_annotation_must_read_back_as_storage() {
        assert_eq!(
            create(annotated(db("mysql", "8.4.3"), r#"{"size":"10Gi"}"#)),
            Verdict::allow()
        );
        let Verdict::Denied { causes, .. } =
            create(annotated(db("mysql", "8.4.3"), r#"{ "size": "10Gi" }"#))
        else {
            panic!("denied");
        };
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "metadata.annotations");
        assert_eq!(
            causes[0].message,
            r#"databases.example.com/storage must be written as {"size":"10Gi"} (compact, keys sorted)"#
        );
        for bad in ["10Gi", r#"{"size":"ten"}"#, r#"{"class":"ssd"}"#] {
            assert!(
                matches!(
                    create(annotated(db("mysql", "8.4.3"), bad)),
                    Verdict::Denied { .. }
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_bad_annotation_is_denied_when_written_and_kept_when_left() {
        let old = annotated(db("mysql", "8.4.3"), "junk");
        let kept = update(old.clone(), old.clone());
        assert!(matches!(kept, Verdict::Allowed { ref warnings } if warnings.len() == 1));
        let fresh = annotated(db("mysql", "8.4.3"), r#"{"size":"1Gi"}"#);
        assert!(matches!(update(fresh, old.clone()), Verdict::Denied { .. }));
    }

    #[test]
    fn deletes_are_always_allowed() {
        let old = db("postgresql", "12.1.0");
        let request = AdmissionRequest::new(Operation::Delete, None, Some(old), ());
        assert_eq!(validate(&request), Verdict::allow());
    }
}
