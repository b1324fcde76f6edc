//! `spec.storage` of a `Database` (`example.com/v2`), and the annotation
//! that carries it through `example.com/v1`, which has no field for it.
//!
//! The annotation's text is the storage object as `serde_json` writes it
//! (compact, keys sorted), and only that text is read back: a conversion
//! v1 → v2 → v1 must give back the very annotation it started from, so any
//! other spelling of the same object is refused by validation and left alone
//! by conversion.

use serde_json::Value;

/// The v1 annotation holding a v2 object's `spec.storage`.
pub const ANNOTATION: &str = "databases.example.com/storage";

/// The annotation's text for `storage`.
pub fn to_annotation(storage: &Value) -> String {
    storage.to_string()
}

/// The storage object the annotation's `text` holds, or why it holds none.
pub fn from_annotation(text: &str) -> Result<Value, String> {
    let storage: Value = serde_json::from_str(text).map_err(|e| {
        format!("{ANNOTATION} must be a JSON object such as {{\"size\":\"1Gi\"}}: {e}")
    })?;
    check(&storage).map_err(|reason| format!("{ANNOTATION}: {reason}"))?;
    let canonical = to_annotation(&storage);
    if canonical != text {
        return Err(format!(
            "{ANNOTATION} must be written as {canonical} (compact, keys sorted)"
        ));
    }
    Ok(storage)
}

/// Whether `storage` is what v2's schema admits for `spec.storage`: an
/// object with at most `size`, a byte quantity.
fn check(storage: &Value) -> Result<(), String> {
    let Some(fields) = storage.as_object() else {
        return Err(format!("{storage} is not an object"));
    };
    if let Some(unknown) = fields.keys().find(|k| *k != "size") {
        return Err(format!("unknown field {unknown:?} (storage has only size)"));
    }
    match fields.get("size") {
        None => Ok(()),
        Some(Value::String(size)) if is_size(size) => Ok(()),
        Some(size) => Err(format!(
            "size must be a byte quantity such as \"1Gi\" or \"500M\", got {size}"
        )),
    }
}

/// Binary and decimal suffixes a byte quantity may carry.
const SUFFIXES: [&str; 12] = [
    "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E",
];

/// A byte quantity as v2's schema spells it
/// (`^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$`): the part of
/// Kubernetes' quantities that makes sense for a volume's size (no milli,
/// no exponents, no sign).
pub fn is_size(size: &str) -> bool {
    let number = SUFFIXES
        .iter()
        .find_map(|s| size.strip_suffix(s))
        .unwrap_or(size);
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    match number.split_once('.') {
        Some((whole, fraction)) => digits(whole) && digits(fraction),
        None => digits(number),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_canonical_text_reads_back_as_the_object() {
        let storage = json!({"size": "10Gi"});
        let text = to_annotation(&storage);
        assert_eq!(text, r#"{"size":"10Gi"}"#);
        assert_eq!(from_annotation(&text), Ok(storage));
        assert_eq!(from_annotation("{}"), Ok(json!({})));
    }

    #[test]
    fn other_spellings_and_shapes_are_refused_with_the_reason() {
        let refused = |text: &str| from_annotation(text).unwrap_err();
        assert!(refused(r#"{ "size": "1Gi" }"#).contains(r#"must be written as {"size":"1Gi"}"#));
        assert!(refused("1Gi").contains("must be a JSON object"));
        assert!(refused(r#""1Gi""#).contains("is not an object"));
        assert!(refused(r#"{"size":"1Gi","class":"ssd"}"#).contains(r#"unknown field "class""#));
        assert!(refused(r#"{"size":1}"#).contains("size must be a byte quantity"));
        assert!(refused(r#"{"size":"lots"}"#).contains("got \"lots\""));
    }

    #[test]
    fn sizes_follow_the_schema_pattern() {
        for ok in ["1Gi", "1", "500M", "1.5Ti", "2k", "0", "10Ei"] {
            assert!(is_size(ok), "{ok}");
        }
        for bad in [
            "", "Gi", "1gi", "1.Gi", ".5Gi", "-1Gi", "1e3", "100m", "1 Gi", "1GiB",
        ] {
            assert!(!is_size(bad), "{bad}");
        }
    }
}
