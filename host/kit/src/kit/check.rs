//! Run one case through a loaded plugin and compare its answer with the
//! case's `expect`. The request is the case's, verbatim (no filtering of
//! observed or related objects; the objects the parent's references find
//! in `cluster` are added after them), and a reconcile or finalize answer goes
//! through the host's own decision ([`kubeplug_core::plan::decide`],
//! [`kubeplug_core::plan::fence_finalize`]): what the fence refuses there, a case
//! sees refused. So do `validate`, `mutate` and `convert` answers, through
//! the host's webhook decisions ([`crate::webhook`]).

use std::fmt::Write as _;

use serde_json::Value;

use super::diff;
use super::fixture::Case;
use super::outcome::{Call, Outcome, error_value, events_value};
use crate::references::{Unresolved, referenced};
use crate::webhook::{self, admit, convert};
use kubeplug_core::plan;
use kubeplug_core::policy::Policy;
use kubeplug_core::webhook::Webhook;
use kubeplug_runtime::{CallError, Desired, Finalized, GuestError, Plugin, Request};

/// A case whose answer cannot be compared at all.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// The call failed in a way no fixture can expect (a trap, a deadline,
    /// a malformed answer): only the plugin's own errors are answers.
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("the policy is strict and grants nothing to plugin {0}")]
    NoGrant(String),
    /// The live host would not ask the plugin this at all: the case tests
    /// nothing it would do.
    #[error("the live host would not ask: {0}")]
    NotAsked(String),
}

/// The plugin a case runs against: loaded with the case's configuration,
/// or that configuration refused by the plugin's `manifest()`.
#[derive(Clone, Copy)]
pub enum Subject<'a> {
    Loaded(&'a Plugin),
    Refused(&'a GuestError),
}

/// One field where the answer is not the expected one.
#[derive(Debug, Clone)]
pub struct FieldDiff {
    pub field: &'static str,
    /// What the `-` and `+` lines are.
    pub sides: &'static str,
    /// Unified diff of the expected value (`-`) against the actual (`+`),
    /// both as YAML.
    pub diff: String,
}

const EXPECTED_ACTUAL: &str = "- expected, + actual";

/// The answer of `subject` to `case`, in the canonical shape of `expect`.
pub fn answer(case: &Case, subject: Subject<'_>, policy: &Policy) -> Result<Outcome, CaseError> {
    let mut outcome = Outcome::empty(case.call);
    let plugin = match subject {
        Subject::Loaded(plugin) => plugin,
        Subject::Refused(error) => {
            set(&mut outcome, "error", error_value(error));
            return Ok(outcome);
        }
    };
    match case.call {
        Call::Manifest => {
            let manifest = serde_json::to_value(plugin.manifest()).expect("manifests serialize");
            set(&mut outcome, "manifest", manifest);
            return Ok(outcome);
        }
        Call::Validate | Call::Mutate => return admission(case, plugin, policy, outcome),
        Call::Convert => return conversion(case, plugin, outcome),
        Call::Reconcile | Call::Finalize => {}
    }
    let parent = case.parent.as_ref().expect("fixture checked: a parent");
    // What its references find in `cluster`, handed after `related`; a
    // reference outside the fence fails the call, as on the live host.
    let referenced = match referenced(plugin, parent, &case.cluster) {
        Ok(found) => found,
        Err(Unresolved::Fence(fenced)) => {
            refused(&mut outcome, Some(fenced));
            return Ok(outcome);
        }
        Err(Unresolved::Call(CallError::Guest { error, .. })) => {
            set(&mut outcome, "error", error_value(&error));
            return Ok(outcome);
        }
        Err(Unresolved::Call(other)) => return Err(other.into()),
    };
    let request = Request {
        parent: parent.to_string().into(),
        observed: case.observed.iter().map(|o| o.to_string().into()).collect(),
        related: case
            .related
            .iter()
            .chain(referenced.iter().filter(|o| !case.related.contains(o)))
            .map(|o| o.to_string().into())
            .collect(),
        now: case.now.clone(),
        entropy: case.entropy.clone(),
    };
    let grant = || {
        policy
            .grant(plugin.name())
            .ok_or_else(|| CaseError::NoGrant(plugin.name().into()))
    };
    let result = match case.call {
        Call::Finalize => plugin.finalize(&request).map(|f| {
            let fenced = plan::fence_finalize(plugin.manifest(), &grant()?, &f);
            refused(&mut outcome, fenced.err());
            finalized(&mut outcome, f)
        }),
        _ => plugin.reconcile(&request).map(|desired| {
            // The case expects the answer as the plugin gave it; the plan
            // only says whether the fence lets it through.
            let planned = plan::decide(
                plugin.manifest(),
                &grant()?,
                parent,
                &case.observed,
                desired.clone(),
            );
            refused(&mut outcome, planned.err());
            reconciled(&mut outcome, desired);
            Ok(())
        }),
    };
    match result {
        Ok(checked) => checked.map(|()| outcome),
        Err(CallError::Guest { error, .. }) => {
            set(&mut outcome, "error", error_value(&error));
            Ok(outcome)
        }
        Err(other) => Err(other.into()),
    }
}

/// A `validate` or `mutate` case: the plugin's answer as the live host
/// takes it.
fn admission(
    case: &Case,
    plugin: &Plugin,
    policy: &Policy,
    mut outcome: Outcome,
) -> Result<Outcome, CaseError> {
    let review = case.review.as_ref().expect("fixture checked: a review");
    let export = match case.call {
        Call::Validate => Webhook::Validate,
        _ => Webhook::Mutate,
    };
    if let Some(why) = admit::unasked(plugin, review).or_else(|| webhook::missing(export, plugin)) {
        return Err(CaseError::NotAsked(why));
    }
    let answered = match export {
        Webhook::Validate => admit::validate(plugin, review, &case.now).map(|validation| {
            for (field, value) in admit::verdict_fields(&validation.verdict) {
                set(&mut outcome, &field, value);
            }
            validation.refused
        }),
        _ => {
            let grant = policy
                .grant(plugin.name())
                .ok_or_else(|| CaseError::NoGrant(plugin.name().into()))?;
            admit::mutate(plugin, &grant, review, &case.now).map(|mutation| {
                set(&mut outcome, "patch", Value::Array(mutation.patch));
                mutation.refused
            })
        }
    };
    settled(outcome, answered)
}

/// A `convert` case: the plugin's answer as the live host takes it.
fn conversion(case: &Case, plugin: &Plugin, mut outcome: Outcome) -> Result<Outcome, CaseError> {
    let asked = case.conversion.as_ref().expect("fixture checked: objects");
    if let Some(why) = convert::unasked(plugin, &asked.objects, &asked.api_version)
        .or_else(|| webhook::missing(Webhook::Convert, plugin))
    {
        return Err(CaseError::NotAsked(why));
    }
    let answered = convert::convert(plugin, &asked.objects, &asked.api_version).map(|converted| {
        set(&mut outcome, "objects", Value::Array(converted.objects));
        converted.refused
    });
    settled(outcome, answered)
}

/// The outcome with the host's refusal, or the plugin's own error; any
/// other failure is no answer.
fn settled(
    mut outcome: Outcome,
    answered: Result<Option<String>, CallError>,
) -> Result<Outcome, CaseError> {
    match answered {
        Ok(refused) => {
            if let Some(refused) = refused {
                set(&mut outcome, "refused", refused.into());
            }
            Ok(outcome)
        }
        Err(CallError::Guest { error, .. }) => {
            set(&mut outcome, "error", error_value(&error));
            Ok(outcome)
        }
        Err(other) => Err(other.into()),
    }
}

/// For a `convert` case with `roundTrip: true`: what converting the
/// plugin's answer (`actual`) back to each object's own version loses, as
/// one more differing field (never an `expect`: nothing may be lost).
pub fn round_trip(
    case: &Case,
    subject: Subject<'_>,
    actual: &Outcome,
) -> Result<Option<FieldDiff>, CaseError> {
    let (Some(asked), Subject::Loaded(plugin)) = (&case.conversion, subject) else {
        return Ok(None);
    };
    if !asked.round_trip {
        return Ok(None);
    }
    let lost = |diff: String| {
        Some(FieldDiff {
            field: "roundTrip",
            sides: "- original, + back",
            diff,
        })
    };
    if !actual.get("error").is_null() || !actual.get("refused").is_null() {
        return Ok(lost(format!(
            " no round trip: the conversion to {} gave no objects to convert back\n",
            asked.api_version
        )));
    }
    let converted = actual
        .get("objects")
        .as_array()
        .cloned()
        .unwrap_or_default();
    let losses = convert::round_trip(plugin, &asked.objects, &converted, &asked.api_version)?;
    if losses.is_empty() {
        return Ok(None);
    }
    let mut shown = String::new();
    for loss in losses {
        let _ = writeln!(
            shown,
            " object {} ({}): {}",
            loss.index, loss.name, loss.trip
        );
        if let Some(failed) = loss.failed {
            let _ = writeln!(shown, " {failed}");
        }
        for field in loss.fields {
            let _ = writeln!(shown, "-{}: {}", field.field, field.original);
            let _ = writeln!(shown, "+{}: {}", field.field, field.back);
        }
    }
    Ok(lost(shown))
}

/// The fence's refusal of the answer, if any, as `kubeplug render` prints it.
fn refused(outcome: &mut Outcome, fenced: Option<kubeplug_core::fence::Fenced>) {
    if let Some(fenced) = fenced {
        let reason = format!("{:#}", anyhow::Error::from(fenced));
        set(outcome, "refused", reason.into());
    }
}

fn set(outcome: &mut Outcome, field: &str, value: Value) {
    outcome
        .set(field, value)
        .expect("the host's own answers have the canonical shape");
}

fn reconciled(outcome: &mut Outcome, desired: Desired) {
    set(outcome, "children", Value::Array(desired.children));
    set(outcome, "status", desired.status.unwrap_or(Value::Null));
    let patch = desired
        .parent_patch
        .map(|p| serde_json::json!({"labels": p.labels, "annotations": p.annotations}));
    set(outcome, "parentPatch", patch.unwrap_or(Value::Null));
    let requeue = desired.requeue_after.map(|d| d.as_secs());
    set(outcome, "requeueAfterSeconds", requeue.into());
    set(outcome, "events", events_value(&desired.events));
}

fn finalized(outcome: &mut Outcome, finalized: Finalized) -> Result<(), CaseError> {
    set(outcome, "done", finalized.done.into());
    let requeue = finalized.requeue_after.map(|d| d.as_secs());
    set(outcome, "requeueAfterSeconds", requeue.into());
    set(outcome, "events", events_value(&finalized.events));
    Ok(())
}

/// The fields where `actual` is not `expected`, each with its diff.
pub fn compare(expected: &Outcome, actual: &Outcome) -> Vec<FieldDiff> {
    expected
        .differing(actual)
        .into_iter()
        .map(|field| FieldDiff {
            field,
            sides: EXPECTED_ACTUAL,
            diff: diff::unified(&yaml(expected.get(field)), &yaml(actual.get(field))),
        })
        .collect()
}

fn yaml(value: &Value) -> String {
    kubeplug_core::yaml::to_string(value)
}
