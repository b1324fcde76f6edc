//! What a plugin's answer may hold, whatever it asks for: the answer checks
//! of the fence. Quotas (children, status size, events), the finalizers and
//! label and annotation keys its grant covers, the labels only the host
//! sets, and what its mode lets it return. Children are checked once more as
//! they are prepared for writing ([`crate::plan::fence`]), where their kinds
//! and namespaces are resolved.
//!
//! Here rather than on the grant or in the plan: the grant says what is
//! allowed, the plan turns an allowed answer into writes, and each of the
//! two asks this module (neither asks the other).

use crate::contract::Desired;
use crate::manifest::{Manifest, Mode};
use crate::policy::{Effective, derived_finalizer_domain, reserved_key};
use crate::shard::SHARD_LABEL;

/// A desired child that crosses the plugin's fence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenceError {
    /// The child's kind is not in the manifest's `children`.
    #[error("child {kind}/{name}: {api_version} {kind} is not declared in the manifest")]
    UndeclaredKind {
        api_version: String,
        kind: String,
        name: String,
    },
    /// The child names a namespace other than its parent's.
    #[error("child {kind}/{name}: namespace {namespace:?} is not the parent's {parent:?}")]
    ForeignNamespace {
        kind: String,
        name: String,
        namespace: String,
        parent: String,
    },
    /// Two children with the same kind and name.
    #[error("child {kind}/{name} is returned twice")]
    Duplicate { kind: String, name: String },
    /// A decorator returned a status, or a composite plugin a parent patch.
    #[error("a {mode} plugin may not return {what}")]
    WrongMode {
        mode: &'static str,
        what: &'static str,
    },
    /// The parent has no `metadata.uid`, so no ownerReference can be built.
    #[error("the parent has no metadata.uid")]
    ParentWithoutUid,
    /// More children than the plugin's quota.
    #[error("{count} children, over the quota of {max} per parent")]
    TooManyChildren { count: usize, max: usize },
    /// A status larger than the plugin's quota.
    #[error("a status of {bytes} bytes, over the quota of {max}")]
    StatusTooLarge { bytes: usize, max: usize },
    /// More events in one answer than the plugin's quota.
    #[error("{count} events in one answer, over the quota of {max}")]
    TooManyEvents { count: usize, max: usize },
    /// A decorator set a label or annotation its grant does not cover.
    #[error("key {key} is {}", if *.reserved { "reserved (kubeplug, Kubernetes and kubectl own it) and not granted" } else { "not among the granted decorator keys" })]
    KeyNotGranted { key: String, reserved: bool },
    /// The answer sets a label only the host writes
    /// ([`crate::shard::SHARD_LABEL`]): moving an object between shards
    /// would hide it from the replica that owns it. No grant unlocks it.
    #[error("{on}: label {key} is the host's to set (no grant unlocks it)")]
    HostLabel {
        /// `child Kind/name`, or `the parent patch`.
        on: String,
        key: String,
    },
    /// A reference outside the fence (see [`crate::reference::check`]).
    #[error(transparent)]
    Reference(#[from] crate::reference::ReferenceError),
    /// A child carries a finalizer the plugin's grant does not cover:
    /// nothing would ever remove it, and the child (and its namespace)
    /// would hang in deletion.
    #[error(
        "child {child}: finalizer {finalizer} is not granted (a plugin may use {domain}* unless granted more)"
    )]
    FinalizerNotGranted {
        /// `Kind/name`.
        child: String,
        finalizer: String,
        domain: String,
    },
}

/// A [`FenceError`] naming the plugin that crossed its fence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugin {plugin} crossed its fence")]
pub struct Fenced {
    pub plugin: String,
    #[source]
    pub source: FenceError,
}

/// Refuse answers that do not fit the plugin's mode: a parent patch from a
/// composite plugin (composites own children and status; the parent's
/// metadata belongs to its author), a status from a decorator (it decorates
/// objects it does not own, such as Pods).
pub fn check_mode(
    manifest: &Manifest,
    has_patch: bool,
    has_status: bool,
) -> Result<(), FenceError> {
    match manifest.mode {
        Mode::Composite if has_patch => Err(FenceError::WrongMode {
            mode: "composite",
            what: "a parent patch",
        }),
        Mode::Decorator if has_status => Err(FenceError::WrongMode {
            mode: "decorator",
            what: "a status",
        }),
        _ => Ok(()),
    }
}

impl Effective {
    /// Check an answer against the quotas and key rules. Size quotas on the
    /// raw response are enforced earlier, by the runtime, before parsing.
    pub fn check_answer(&self, manifest: &Manifest, desired: &Desired) -> Result<(), FenceError> {
        let q = &self.quotas;
        if desired.children.len() > q.children_per_parent {
            return Err(FenceError::TooManyChildren {
                count: desired.children.len(),
                max: q.children_per_parent,
            });
        }
        if let Some(status) = &desired.status {
            let bytes = status.to_string().len();
            if bytes > q.status_bytes {
                return Err(FenceError::StatusTooLarge {
                    bytes,
                    max: q.status_bytes,
                });
            }
        }
        self.check_events(desired.events.len())?;
        for child in &desired.children {
            self.check_child_finalizers(child)?;
        }
        if manifest.mode == Mode::Decorator
            && let Some(patch) = &desired.parent_patch
            && patch.labels.contains_key(SHARD_LABEL)
        {
            return Err(FenceError::HostLabel {
                on: "the parent patch".into(),
                key: SHARD_LABEL.into(),
            });
        }
        if manifest.mode == Mode::Decorator
            && let Some(patch) = &desired.parent_patch
            && let Some(key) = patch
                .labels
                .keys()
                .chain(patch.annotations.keys())
                .find(|k| !self.key_allowed(k))
        {
            return Err(FenceError::KeyNotGranted {
                key: key.clone(),
                reserved: reserved_key(key),
            });
        }
        Ok(())
    }

    /// Check the number of events in one answer (`reconcile` or `finalize`)
    /// against the plugin's quota.
    pub fn check_events(&self, count: usize) -> Result<(), FenceError> {
        let max = self.quotas.events_per_answer;
        if count > max {
            return Err(FenceError::TooManyEvents { count, max });
        }
        Ok(())
    }

    /// A child may carry only finalizers the plugin may use: one nothing
    /// removes would leave the child, and its namespace, hanging in deletion.
    fn check_child_finalizers(&self, child: &serde_json::Value) -> Result<(), FenceError> {
        let Some(list) = child["metadata"]["finalizers"].as_array() else {
            return Ok(());
        };
        // A non-string entry is shown as its JSON text, and refused: no
        // finalizer name is granted that way.
        let refused = list.iter().find_map(|f| match f.as_str() {
            Some(name) if self.finalizer_allowed(name) => None,
            Some(name) => Some(name.to_string()),
            None => Some(f.to_string()),
        });
        match refused {
            None => Ok(()),
            Some(finalizer) => Err(FenceError::FinalizerNotGranted {
                child: format!(
                    "{}/{}",
                    child["kind"].as_str().unwrap_or_default(),
                    child["metadata"]["name"].as_str().unwrap_or_default()
                ),
                finalizer,
                domain: derived_finalizer_domain(&self.plugin),
            }),
        }
    }
}
