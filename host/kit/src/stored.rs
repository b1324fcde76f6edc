//! An object read from a file as if the API server had stored it: what
//! `render`, the fixtures and the webhook runs fill in where a file says
//! nothing (it was never stored).

use serde_json::Value;

/// Used as the parent's uid when its file has none (it was never stored).
pub const PLACEHOLDER_UID: &str = "00000000-0000-0000-0000-000000000000";

/// Fill in what the API server would have set on a stored parent.
pub(crate) fn as_stored(mut parent: Value) -> Value {
    if let Some(meta) = parent["metadata"].as_object_mut() {
        meta.entry("namespace").or_insert_with(|| "default".into());
        meta.entry("uid").or_insert_with(|| PLACEHOLDER_UID.into());
        meta.entry("generation").or_insert_with(|| 1.into());
    }
    parent
}
