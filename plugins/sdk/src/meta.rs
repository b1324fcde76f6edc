//! [`Meta`]: the parts of `metadata` plugins read.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::Time;

/// An object's `metadata` as plugins read it: a small part of `ObjectMeta`
/// that is cheap to deserialize. Use it in your own views of objects:
///
/// ```
/// use kubeplug_sdk::Meta;
/// use serde::Deserialize;
///
/// /// The fields of a Pod this plugin reads.
/// #[derive(Deserialize)]
/// struct PodView {
///     #[serde(default)]
///     metadata: Meta,
/// }
/// ```
///
/// Every field is optional, as in `ObjectMeta`; fields not listed here are
/// skipped unread.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Meta {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub generation: Option<i64>,
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
    /// Set once the object is being deleted.
    pub deletion_timestamp: Option<Time>,
}
