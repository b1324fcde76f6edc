//! Run one case through a loaded plugin and compare its answer with the
//! case's `expect`. The request is the case's, verbatim (no filtering of
//! observed or related objects), and a reconcile or finalize answer goes
//! through the host's own decision ([`kubeplug_core::plan::decide`],
//! [`kubeplug_core::plan::fence_finalize`]): what the fence refuses there, a case
//! sees refused.

use serde_json::Value;

use super::diff;
use super::fixture::Case;
use super::outcome::{Call, Outcome, error_value, events_value};
use kubeplug_core::plan;
use kubeplug_core::policy::Policy;
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
    /// Unified diff of the expected value (`-`) against the actual (`+`),
    /// both as YAML.
    pub diff: String,
}

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
    if case.call == Call::Manifest {
        let manifest = serde_json::to_value(plugin.manifest()).expect("manifests serialize");
        set(&mut outcome, "manifest", manifest);
        return Ok(outcome);
    }
    let parent = case.parent.as_ref().expect("fixture checked: a parent");
    let request = Request {
        parent: parent.to_string().into(),
        observed: case.observed.iter().map(|o| o.to_string().into()).collect(),
        related: case.related.iter().map(|o| o.to_string().into()).collect(),
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

/// The fence's refusal of the answer, if any, as `kubeplug render` prints it.
fn refused(outcome: &mut Outcome, fenced: Option<plan::Fenced>) {
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
            diff: diff::unified(&yaml(expected.get(field)), &yaml(actual.get(field))),
        })
        .collect()
}

fn yaml(value: &Value) -> String {
    kubeplug_core::yaml::to_string(value)
}
