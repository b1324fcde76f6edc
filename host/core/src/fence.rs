//! The fence: what one plugin may be handed and what its answers may change,
//! derived from its grant (and its admitted manifest) in one place.
//!
//! Every path that hands a plugin objects or applies what it answers asks
//! this module instead of reading the grant itself: admission and
//! conversion reviews (`kubeplug_operator::webhooks`), references
//! ([`crate::reference`]), reconcile answers ([`Effective::check_answer`]).
//! What it decides:
//!
//! - **Namespaces.** A plugin acts in the namespaces its grant names, or in
//!   every namespace but the system ones and the host's own
//!   ([`NamespaceScope::grants`]); whatever its parent's scope, so a
//!   cluster-scoped parent's plugin is handed nothing from elsewhere either.
//! - **Conversion.** A CRD has one conversion webhook for every namespace;
//!   a plugin converts the objects of its own namespaces only, and a review
//!   holding any other is refused whole (nothing of it is stored), so one
//!   team's plugin never rewrites another team's objects at rest.
//! - **Mutation.** A mutating answer may change the fields the grant names
//!   (`mutableFields`; by default all of `spec` for a composite plugin,
//!   whose parent kind is its own, nothing for a decorator of others'
//!   objects) and the label and annotation keys the grant allows
//!   (`decoratorKeys`: a decorator's always, a composite plugin's when the
//!   grant lists them), never the host's own keys, status, or any other
//!   metadata.
//! - **Answers.** What a `reconcile` or `finalize` answer holds stays within
//!   the plugin's quotas, the finalizers and keys its grant covers, the
//!   labels only the host sets, and its mode ([`Effective::check_answer`],
//!   [`check_mode`]; refused with a [`FenceError`]).
//! - **Readers.** What a plugin answers in a preview is shown to a caller
//!   who may not read all it was handed; [`redact::Redaction`] takes out of
//!   the answer every value of those objects the plugin copied.

use serde_json::Value;

use crate::manifest::{Manifest, Mode};
use crate::policy::Effective;
use crate::webhook::{ConversionCall, HOST_DOMAIN, host_key};

/// A conversion review holding an object (`namespace/name`) outside the
/// plugin's namespaces.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "plugin {plugin} converts objects in its own namespaces only, and {object} is outside them (its grant's namespaces): the review is refused and nothing of it is stored"
)]
pub struct ConversionScopeError {
    pub plugin: String,
    pub object: String,
}

/// A change (at a JSON pointer) that a mutation may not make.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MutationError {
    /// A label or annotation (`what`) key in the host's domain.
    #[error("{what} key {key:?} is the host's ({HOST_DOMAIN}/)")]
    HostKey { what: &'static str, key: String },
    /// A label or annotation key the grant's `decoratorKeys` do not allow.
    #[error("{what} key {key:?} is not among the keys its grant allows (decoratorKeys)")]
    KeyNotGranted { what: &'static str, key: String },
    /// A field outside labels and annotations, no field being mutable.
    #[error(
        "{pointer} is outside metadata.labels and metadata.annotations (a decorator's mutation changes no field unless its grant names it under mutableFields)"
    )]
    NoField { pointer: String },
    /// A field outside the mutable ones (dotted, without a leading dot).
    #[error("{pointer} is outside {}, metadata.labels and metadata.annotations", fields.join(", "))]
    Outside {
        pointer: String,
        fields: Vec<String>,
    },
}

/// One plugin's fence: its grant and the manifest admitted under it.
#[derive(Clone, Copy)]
pub struct Fence<'a> {
    grant: &'a Effective,
    manifest: &'a Manifest,
}

impl<'a> Fence<'a> {
    pub fn new(grant: &'a Effective, manifest: &'a Manifest) -> Self {
        Fence { grant, manifest }
    }

    /// The admitted manifest it fences.
    pub fn manifest(&self) -> &'a Manifest {
        self.manifest
    }

    /// May the plugin be handed an object in `namespace` (`None`: a
    /// cluster-scoped object), or decide for one there?
    pub fn sees(&self, namespace: Option<&str>) -> bool {
        match namespace {
            None => true,
            Some(ns) => {
                self.grant
                    .grant
                    .namespaces
                    .grants(ns, &self.grant.identity_namespace)
                    && self.manifest.watches_namespace(ns)
            }
        }
    }

    /// Refuse a conversion review that holds an object outside the plugin's
    /// namespaces: the CRD's one webhook is sent every namespace's objects,
    /// and what it answers is stored. Refused whole, so the API server
    /// stores none of it; the plugin is not called.
    pub fn check_conversion(&self, call: &ConversionCall) -> Result<(), ConversionScopeError> {
        if !self.manifest.parent.namespaced {
            return Ok(());
        }
        let outside = call.objects.iter().find_map(|object| {
            let ns = object["metadata"]["namespace"].as_str().unwrap_or_default();
            (!self.sees(Some(ns))).then(|| {
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                format!("{ns}/{name}")
            })
        });
        match outside {
            None => Ok(()),
            Some(object) => Err(ConversionScopeError {
                plugin: self.grant.plugin.clone(),
                object,
            }),
        }
    }

    /// The JSON patch that turns `before` into `after`, if every change is
    /// one the plugin may make (see the module's doc), or the first it may
    /// not, with the reason.
    pub fn mutation(&self, before: &Value, after: &Value) -> Result<Vec<Value>, MutationError> {
        crate::webhook::patch(before, after, |pointer| {
            self.may_mutate(pointer, before, after)
        })
    }

    /// The field prefixes (JSON pointers) a mutation may change.
    fn mutable_fields(&self) -> Vec<String> {
        match &self.grant.grant.mutable_fields {
            Some(fields) => fields.clone(),
            None if self.manifest.mode == Mode::Composite => vec!["/spec".into()],
            None => Vec::new(),
        }
    }

    fn may_mutate(
        &self,
        pointer: &str,
        before: &Value,
        after: &Value,
    ) -> Result<(), MutationError> {
        let fields = self.mutable_fields();
        if fields.iter().any(|field| within(pointer, field)) {
            return Ok(());
        }
        for map in ["/metadata/labels", "/metadata/annotations"] {
            let keys = |v: &Value| -> Vec<String> {
                v.pointer(pointer)
                    .and_then(Value::as_object)
                    .map(|o| o.keys().cloned().collect())
                    .unwrap_or_default()
            };
            let changed: Vec<String> = if pointer == map {
                keys(before).into_iter().chain(keys(after)).collect()
            } else if let Some(key) = pointer.strip_prefix(&format!("{map}/")) {
                vec![key.replace("~1", "/").replace("~0", "~")]
            } else {
                continue;
            };
            let what = &map["/metadata/".len()..];
            if let Some(key) = changed.iter().find(|k| host_key(k)) {
                return Err(MutationError::HostKey {
                    what,
                    key: key.clone(),
                });
            }
            // A decorator's keys (others' objects) are the grant's; a
            // composite plugin's kind is its own, and any key outside the
            // host's is its to set unless the grant lists keys.
            let keys_ruled = self.manifest.mode == Mode::Decorator
                || !self.grant.grant.decorator_keys.is_empty();
            if keys_ruled && let Some(key) = changed.iter().find(|k| !self.grant.key_allowed(k)) {
                return Err(MutationError::KeyNotGranted {
                    what,
                    key: key.clone(),
                });
            }
            return Ok(());
        }
        if fields.is_empty() {
            return Err(MutationError::NoField {
                pointer: pointer.into(),
            });
        }
        let fields: Vec<String> = fields
            .iter()
            .map(|f| f.trim_start_matches('/').replace('/', "."))
            .collect();
        Err(MutationError::Outside {
            pointer: pointer.into(),
            fields,
        })
    }
}

/// Is `pointer` the field `field` or inside it?
fn within(pointer: &str, field: &str) -> bool {
    pointer == field
        || pointer
            .strip_prefix(field)
            .is_some_and(|rest| rest.starts_with('/'))
}

mod answer;
pub mod redact;

pub use answer::{FenceError, Fenced, check_mode};

#[cfg(test)]
mod tests;
