//! The defaults of a MyApp's spec, in one place: the mutating webhook stores
//! them ([`apply`]), and reconcile reads a spec through the same functions
//! ([`MyAppSpec`](crate::MyAppSpec)), so that a MyApp stored before the
//! webhook existed, or where the platform does not serve it, is reconciled
//! exactly as if they had been stored.

use serde_json::Value;

/// Image used when `spec.image` is missing, null or empty: a pinned, widely
/// mirrored tag.
pub const DEFAULT_IMAGE: &str = "nginx:1.27";

/// Replicas when `spec.replicas` is missing (also the CRD's schema default).
pub const DEFAULT_REPLICAS: i32 = 1;

/// `spec.replicas` when missing (serde's `default` of the field).
pub fn replicas() -> i32 {
    DEFAULT_REPLICAS
}

/// The image a spec's `image` stands for: its own, or [`DEFAULT_IMAGE`] when
/// missing, null (`None`) or empty.
pub fn image(image: Option<&str>) -> &str {
    image.filter(|i| !i.is_empty()).unwrap_or(DEFAULT_IMAGE)
}

/// Store the defaults in `spec`; true when anything changed. Only what is
/// missing, null or empty is filled: a field of another type, or a spec that
/// is not an object, is left for the schema (and reconcile) to refuse.
pub fn apply(spec: &mut Value) -> bool {
    let Some(spec) = spec.as_object_mut() else {
        return false;
    };
    let mut changed = false;
    let given = match spec.get("image") {
        None | Some(Value::Null) => Some(None),
        Some(Value::String(given)) => Some(Some(given.as_str())),
        Some(_) => None,
    };
    if let Some(given) = given {
        let image = image(given);
        if Some(image) != given {
            spec.insert("image".into(), image.to_string().into());
            changed = true;
        }
    }
    if !spec.contains_key("replicas") {
        spec.insert("replicas".into(), replicas().into());
        changed = true;
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_is_missing_null_or_empty_is_filled_in() {
        for mut spec in [
            json!({}),
            json!({"image": null}),
            json!({"image": ""}),
            json!({"image": "", "replicas": 1}),
        ] {
            assert!(apply(&mut spec), "{spec}");
            assert_eq!(spec, json!({"image": "nginx:1.27", "replicas": 1}));
        }
    }

    #[test]
    fn what_is_given_is_kept() {
        for spec in [
            json!({"image": "ghcr.io/acme/web:1.4", "replicas": 0}),
            json!({"image": 5, "replicas": "3"}),
            json!({"image": "x", "replicas": null}),
            json!(null),
            json!(["web"]),
        ] {
            let mut applied = spec.clone();
            assert!(!apply(&mut applied), "{spec}");
            assert_eq!(applied, spec);
        }
    }

    #[test]
    fn the_image_stands_for_itself_unless_unset() {
        assert_eq!(image(Some("ghcr.io/acme/web:1.4")), "ghcr.io/acme/web:1.4");
        assert_eq!(image(Some("")), DEFAULT_IMAGE);
        assert_eq!(image(None), DEFAULT_IMAGE);
    }
}
