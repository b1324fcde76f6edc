//! The one decision: a plugin's answer, checked against its fence, turned
//! into a [`Plan`] of exactly what one reconcile of its parent writes.
//!
//! The operator executes a plan (`reconcile`), a preview and
//! `kubeplug render` print one, a shadow compares two, `kubeplug test`
//! checks a fixture's answer with one. Pure: observed objects are plain
//! JSON, so nothing here needs a cluster, a cache or a Wasm engine.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

use super::{Fenced, TypedKey};
use crate::contract::Desired;
use crate::manifest::{ApiResource, Manifest};
use crate::policy::Effective;

/// What one reconcile writes, decided from a checked answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The answer as the plugin gave it (it passed the fence): what shadows
    /// compare, with [`Plan::children`]' prepared objects.
    pub answer: Desired,
    /// Every desired child, prepared for applying (see
    /// [`super::children`]), with what to do about it.
    pub children: Vec<Step>,
    /// Observed children to delete (see [`super::prune`]).
    pub prune: Vec<Value>,
    /// The status to write; `None`: none asked, or the parent has it (see
    /// [`super::status_update`]).
    pub status: Option<Value>,
    /// The merge patch of the parent's labels and annotations; `None`:
    /// nothing would change (see [`super::parent_patch`]).
    pub parent_patch: Option<Value>,
    /// When to reconcile again: the plugin's ask raised to its floor.
    pub requeue_after: Option<Duration>,
}

impl Plan {
    /// True if executing the plan changes nothing in the cluster: every
    /// child unchanged, nothing pruned, no status, no parent patch, and no
    /// requeue asked (events aside: they report, they change nothing the
    /// next call reads). Such a call can be skipped when its inputs recur.
    pub fn writes_nothing(&self) -> bool {
        self.children.iter().all(|s| s.action == Action::Unchanged)
            && self.prune.is_empty()
            && self.status.is_none()
            && self.parent_patch.is_none()
            && self.requeue_after.is_none()
    }
}

/// One desired child, what to do about it, and what that sends
/// ([`Step::sent`]): all a write needs, so the operator's write loop sends
/// what the plan says and derives nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The child's declared resource (the manifest's entry for its kind):
    /// where it is written.
    pub resource: ApiResource,
    /// The child exactly as it would be applied: what `render` prints and
    /// a shadow compares.
    pub child: Value,
    pub action: Action,
}

impl Step {
    /// The step of `action` on `child`, a prepared child (see
    /// [`super::children`]) of the declared `resource`.
    pub fn new(resource: ApiResource, child: Value, action: Action) -> Step {
        Step {
            resource,
            child,
            action,
        }
    }

    /// The object sent for [`Step::action`]: the child as an apply that can
    /// only create ([`super::if_absent`]) for [`Action::Create`], as it is
    /// for [`Action::CreateOnce`] (a plain create), guarded by the observed
    /// uid ([`super::guarded`]) for [`Action::Update`]; `None` for
    /// [`Action::Unchanged`]: nothing is sent. Made when the write is, not
    /// when the plan is: previews, shadows and what-ifs never send it.
    pub fn sent(&self) -> Option<Value> {
        match &self.action {
            Action::Create => Some(super::if_absent(&self.child)),
            Action::CreateOnce => Some(self.child.clone()),
            Action::Update { uid, .. } => Some(super::guarded(&self.child, uid.as_deref())),
            Action::Unchanged => None,
        }
    }

    /// The child as an update of the object of its name whose uid is
    /// `uid`: sent when its create is refused because that object exists
    /// and this parent controls it (made earlier, not in the cache yet).
    /// The one write a plan cannot hold: the uid is known only then.
    pub fn update_of(&self, uid: Option<&str>) -> Value {
        super::guarded(&self.child, uid)
    }
}

/// What to do about a desired child, given the observed ones.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Not observed: create it, never overwriting an object of that name
    /// made by anyone (see [`super::if_absent`]).
    Create,
    /// Create-only ([`super::CREATE_ONLY`]) and not observed: create it
    /// once; it is never re-applied.
    CreateOnce,
    /// Observed and not as desired: apply it, guarded by the observed uid
    /// (see [`super::guarded`]).
    Update {
        uid: Option<String>,
        /// The observed child it updates, for showing what changes.
        live: Value,
    },
    /// Observed and as desired, or create-only and observed: no write.
    Unchanged,
}

impl Action {
    /// The action as previews name it.
    pub fn label(&self) -> &'static str {
        match self {
            Action::Create | Action::CreateOnce => "create",
            Action::Update { .. } => "update",
            Action::Unchanged => "unchanged",
        }
    }
}

/// Check `answer` against the plugin's fence and `grant` (see
/// [`super::fence`]), then decide every write it takes for `parent`, whose
/// controlled children are `observed`. The fence's refusal is an `Err`, and
/// then nothing may be written.
pub fn decide(
    manifest: &Manifest,
    grant: &Effective,
    parent: &Value,
    observed: &[Value],
    answer: Desired,
) -> Result<Plan, Fenced> {
    let prepared = super::fence(manifest, grant, parent, &answer)?;
    let by_key: HashMap<TypedKey, &Value> = observed.iter().map(|o| (TypedKey::of(o), o)).collect();
    let prune = super::prune(manifest, observed, prepared.iter().map(|(_, child)| child))
        .into_iter()
        .cloned()
        .collect();
    let children = prepared
        .into_iter()
        .map(|(resource, child)| {
            let create_only = super::create_only(&child);
            let action = match by_key.get(&TypedKey::of(&child)) {
                None if create_only => Action::CreateOnce,
                None => Action::Create,
                // Created once, never re-applied (e.g. generated credentials).
                Some(_) if create_only => Action::Unchanged,
                Some(live) if !super::needs_apply(&child, Some(live)) => Action::Unchanged,
                Some(live) => Action::Update {
                    uid: live["metadata"]["uid"].as_str().map(String::from),
                    live: (*live).clone(),
                },
            };
            Step::new(resource, child, action)
        })
        .collect();
    let status =
        super::status_update(parent, answer.status.as_ref(), &manifest.field_manager()).cloned();
    let parent_patch = answer
        .parent_patch
        .as_ref()
        .and_then(|p| super::parent_patch(parent, &p.labels, &p.annotations));
    let requeue_after = super::requeue_after(answer.requeue_after, grant.quotas.requeue_floor());
    Ok(Plan {
        answer,
        children,
        prune,
        status,
        parent_patch,
        requeue_after,
    })
}

#[cfg(test)]
mod tests;
