//! A kind named in a grant, whatever its version: what the grant's kind
//! lists and the promotion gate's `noPrunes` are made of.

use crate::manifest::ApiResource;

/// A kind, whatever its version: `Kind.group`, or `Kind` for the core group.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KindRef {
    pub group: String,
    pub kind: String,
}

impl KindRef {
    pub fn of(r: &ApiResource) -> Self {
        KindRef {
            group: r.group.clone(),
            kind: r.kind.clone(),
        }
    }

    pub(crate) fn parse(text: &str) -> Result<Self, KindRefError> {
        let (kind, group) = text.split_once('.').unwrap_or((text, ""));
        if kind.is_empty() || !kind.starts_with(|c: char| c.is_ascii_uppercase()) {
            return Err(KindRefError { text: text.into() });
        }
        Ok(KindRef {
            group: group.into(),
            kind: kind.into(),
        })
    }
}

/// A kind in a grant not written `Kind.group`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "kind {text:?} must be written Kind.group (Kind for the core group), e.g. StatefulSet.apps"
)]
pub struct KindRefError {
    /// The kind as written.
    pub text: String,
}

impl std::fmt::Display for KindRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.kind)
        } else {
            write!(f, "{}.{}", self.kind, self.group)
        }
    }
}
