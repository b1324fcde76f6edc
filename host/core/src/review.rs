//! What the host answers a webhook review, decided once for the live host
//! (`kubeplug_operator::webhooks`) and for the offline kit
//! (`kubeplug_kit::webhook`): pure functions of the review ([`webhook`]'s
//! calls), the plugin's manifest and grant (its [`Fence`]) and the plugin's
//! answer. Every refusal text the host writes into a review is spelled
//! here.
//!
//! The steps, in the order a review meets them: is the plugin asked at all
//! ([`admission_scope`], [`conversion_scope`])? what does its answer come
//! to ([`validated`], [`mutated`], [`converted`])? and what is the API
//! server told ([`AdmissionAnswer::response`], [`ConversionAnswer::response`]),
//! a failure answered by the grant's [`FailurePolicy`]. Calling the plugin,
//! and its deadline, are the caller's.

use serde_json::Value;

use crate::fence::{ConversionScopeError, Fence, MutationError};
use crate::webhook::{
    self, AdmissionCall, ConversionCall, ConvertedError, FailurePolicy, Operation, ReviewError,
    Verdict, VerdictError,
};

/// What starts every message the host writes into a review for a plugin
/// that failed: the API server shows it after the webhook's name.
pub const HOST_PREFIX: &str = "kubeplug: ";

/// Why the host fails a review for the plugin: the plugin failed, or its
/// answer is refused whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The call failed: a trap, its deadline or memory, its own error.
    #[error("{0}")]
    Call(String),
    /// A verdict over its quotas ([`webhook::check_verdict`]).
    #[error("answered with {0}")]
    Verdict(VerdictError),
    /// A mutation its fence refuses ([`Fence::mutation`]).
    #[error("its mutation is refused by its fence: {0}")]
    Mutation(MutationError),
    /// A conversion that is not the same objects at the desired version
    /// ([`webhook::check_converted`]).
    #[error("its conversion is refused by its fence: {0}")]
    Conversion(ConvertedError),
}

impl Refusal {
    /// The refusal as a review words it, without [`HOST_PREFIX`].
    pub fn failed(&self, plugin: &str) -> String {
        format!("plugin {plugin} failed: {self}")
    }
}

/// What the host answers an admission review.
#[derive(Debug, Clone, PartialEq)]
pub enum AdmissionAnswer {
    /// Allowed without asking the plugin: a parent outside its namespaces.
    OutOfScope,
    /// Allowed as it is: nothing to patch (a delete, no answer, no change).
    Unchanged,
    /// Allowed by the plugin's verdict, with its warnings.
    Allowed { warnings: Vec<String> },
    /// Allowed with this JSON patch (RFC 6902; never empty).
    Patched { patch: Vec<Value> },
    /// Denied by the plugin's verdict: its message and `(field, message)`
    /// causes.
    Denied {
        message: String,
        causes: Vec<(String, String)>,
    },
    /// The plugin failed: its grant's failure policy answers.
    Failed(Refusal),
}

/// Is the plugin asked about `call`? A review of another kind or version
/// than its parent's is refused ([`AdmissionCall::check_kind`]); a parent in
/// a namespace outside its fence is allowed without asking it
/// ([`AdmissionAnswer::OutOfScope`]).
pub fn admission_scope(
    call: &AdmissionCall,
    plugin: &str,
    fence: &Fence,
) -> Result<Option<AdmissionAnswer>, ReviewError> {
    let parent = &fence.manifest().parent;
    call.check_kind(plugin, parent)?;
    Ok((parent.namespaced && !fence.sees(Some(&call.namespace)))
        .then_some(AdmissionAnswer::OutOfScope))
}

/// The object a `mutate` is asked about: none on delete (nothing to patch),
/// when the plugin is not asked and the write is [`AdmissionAnswer::Unchanged`].
pub fn mutation_input(call: &AdmissionCall) -> Option<&Value> {
    match call.operation {
        Operation::Delete => None,
        Operation::Create | Operation::Update => call.object.as_ref(),
    }
}

/// What a `validate` answer comes to: the verdict, unless it is over its
/// quotas.
pub fn validated(verdict: Verdict) -> AdmissionAnswer {
    if let Err(over) = webhook::check_verdict(&verdict) {
        return AdmissionAnswer::Failed(Refusal::Verdict(over));
    }
    match verdict {
        Verdict::Allowed { warnings } => AdmissionAnswer::Allowed { warnings },
        Verdict::Denied { message, causes } => AdmissionAnswer::Denied { message, causes },
    }
}

/// What a `mutate` answer (`after`, none: leave the object as it is) to the
/// object `before` comes to within the plugin's fence.
pub fn mutated(fence: &Fence, before: &Value, after: Option<&Value>) -> AdmissionAnswer {
    let Some(after) = after else {
        return AdmissionAnswer::Unchanged;
    };
    match fence.mutation(before, after) {
        Ok(patch) if patch.is_empty() => AdmissionAnswer::Unchanged,
        Ok(patch) => AdmissionAnswer::Patched { patch },
        Err(refused) => AdmissionAnswer::Failed(Refusal::Mutation(refused)),
    }
}

/// An admission response as the API server reads it (`admission.k8s.io/v1`
/// `AdmissionResponse` without its uid).
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionResponse {
    pub allowed: bool,
    pub warnings: Vec<String>,
    /// A JSON patch to apply.
    pub patch: Option<Vec<Value>>,
    /// Why the write is denied.
    pub status: Option<Denial>,
}

/// A denied write's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// 403 for the plugin's own denial (as controller-runtime denies), 500
    /// for a plugin that failed.
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `(field, message)`, each a `FieldValueInvalid` cause.
    pub causes: Vec<(String, String)>,
}

/// The cause type of a denial's field causes.
pub const CAUSE_TYPE: &str = "FieldValueInvalid";

impl AdmissionAnswer {
    /// The label of the `webhook_answered` metric's `result`.
    pub fn result(&self) -> &'static str {
        match self {
            AdmissionAnswer::OutOfScope => "out_of_scope",
            AdmissionAnswer::Unchanged => "unchanged",
            AdmissionAnswer::Allowed { .. } => "allowed",
            AdmissionAnswer::Patched { .. } => "patched",
            AdmissionAnswer::Denied { .. } => "denied",
            AdmissionAnswer::Failed(_) => "failed",
        }
    }

    /// What the API server is told of `plugin`'s answer; a failure as its
    /// grant's `policy` says (`Fail`: denied with the reason; `Ignore`:
    /// allowed, the reason a warning).
    pub fn response(&self, plugin: &str, policy: FailurePolicy) -> AdmissionResponse {
        let allowed = |warnings: Vec<String>, patch| AdmissionResponse {
            allowed: true,
            warnings,
            patch,
            status: None,
        };
        let denied = |denial| AdmissionResponse {
            allowed: false,
            warnings: Vec::new(),
            patch: None,
            status: Some(denial),
        };
        match self {
            AdmissionAnswer::OutOfScope | AdmissionAnswer::Unchanged => allowed(Vec::new(), None),
            AdmissionAnswer::Allowed { warnings } => allowed(warnings.clone(), None),
            AdmissionAnswer::Patched { patch } => allowed(Vec::new(), Some(patch.clone())),
            // 403 Forbidden, as controller-runtime denies: the API server
            // prefixes the webhook's name, and the causes travel in the
            // details.
            AdmissionAnswer::Denied { message, causes } => denied(Denial {
                code: 403,
                reason: "Forbidden",
                message: message.clone(),
                causes: causes.clone(),
            }),
            AdmissionAnswer::Failed(refusal) => {
                let message = format!("{HOST_PREFIX}{}", refusal.failed(plugin));
                match policy {
                    FailurePolicy::Fail => denied(Denial {
                        code: 500,
                        reason: "InternalError",
                        message,
                        causes: Vec::new(),
                    }),
                    FailurePolicy::Ignore => allowed(
                        vec![warning(&format!(
                            "{message} (allowed: failurePolicy Ignore in its grant)"
                        ))],
                        None,
                    ),
                }
            }
        }
    }
}

/// Longest warning the API server passes on whole.
const WARNING_BYTES: usize = 256;

/// `text` as a warning the API server shows: one line (it drops warnings
/// with line breaks, which a trap's guest output has), at most
/// [`WARNING_BYTES`], the end kept since it names the policy.
fn warning(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.len() <= WARNING_BYTES {
        return line;
    }
    let tail_from = line.ceil_char_boundary(line.len() - (WARNING_BYTES / 2 - 1));
    let head_to = line.floor_char_boundary(WARNING_BYTES / 2 - 4);
    format!("{} ... {}", &line[..head_to], &line[tail_from..])
}

/// What the host answers a conversion review.
#[derive(Debug, Clone, PartialEq)]
pub enum ConversionAnswer {
    /// The objects at the desired version.
    Converted(Vec<Value>),
    /// Refused before the plugin is asked: objects of another kind, or a
    /// version of another group ([`ConversionCall::check_kind`]).
    NotGranted(ReviewError),
    /// Refused before the plugin is asked: an object outside its
    /// namespaces ([`Fence::check_conversion`]).
    OutOfScope(ConversionScopeError),
    /// The plugin failed, or its answer is refused.
    Failed(Refusal),
}

/// Is the plugin asked about `call`? Refused whole, unasked, for objects of
/// another kind or outside its namespaces.
pub fn conversion_scope(
    call: &ConversionCall,
    plugin: &str,
    fence: &Fence,
) -> Option<ConversionAnswer> {
    if let Err(refused) = call.check_kind(plugin, &fence.manifest().parent) {
        return Some(ConversionAnswer::NotGranted(refused));
    }
    fence
        .check_conversion(call)
        .err()
        .map(ConversionAnswer::OutOfScope)
}

/// What a `convert` answer comes to: the objects, if they are those of
/// `call` at the desired version.
pub fn converted(call: &ConversionCall, objects: Vec<Value>) -> ConversionAnswer {
    match webhook::check_converted(call, &objects) {
        Ok(()) => ConversionAnswer::Converted(objects),
        Err(refused) => ConversionAnswer::Failed(Refusal::Conversion(refused)),
    }
}

impl ConversionAnswer {
    /// The label of the `webhook_answered` metric's `result`.
    pub fn result(&self) -> &'static str {
        match self {
            ConversionAnswer::Converted(_) => "converted",
            ConversionAnswer::NotGranted(_) => "not_granted",
            ConversionAnswer::OutOfScope(_) => "out_of_scope",
            ConversionAnswer::Failed(_) => "failed",
        }
    }

    /// What the API server is told: the converted objects, or the
    /// failure's message.
    pub fn response(self, plugin: &str) -> Result<Vec<Value>, String> {
        match self {
            ConversionAnswer::Converted(objects) => Ok(objects),
            ConversionAnswer::NotGranted(refused) => Err(refused.to_string()),
            ConversionAnswer::OutOfScope(refused) => Err(refused.to_string()),
            ConversionAnswer::Failed(refusal) => {
                Err(format!("{HOST_PREFIX}{}", refusal.failed(plugin)))
            }
        }
    }
}

#[cfg(test)]
mod tests;
