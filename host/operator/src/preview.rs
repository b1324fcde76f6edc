//! A dry run of a plugin against the live cluster: what one reconcile of a
//! parent would do right now, computed exactly as [`crate::reconcile`] does
//! (same caches, same request, same fence checks, same write decisions), with
//! every write left out. Served as `previews` by the aggregated API.
//!
//! The caller is not the plugin: a preview shows values of the live cluster
//! (`diff[].live`) that its caller may not be allowed to read (a Secret the
//! plugin's ServiceAccount reads for it). The API works out which of the
//! plugin's child and related kinds the caller may not read ([`Target::
//! withheld`]); of those kinds, no value is shown (rows keep their action,
//! kind and name), and neither is anything the plugin wrote (its error, its
//! events' messages); and wherever the plugin's answer (a child's desired
//! values, its status, its parent patch) copies a value of those objects,
//! that value is taken out ([`Redaction`]).

use serde_json::{Value, json};

use crate::error::ReconcileError;
use crate::inputs::{Inputs, Serves, plan};
use crate::serving::{Run, Serving};
use kubeplug_core::fence::redact::Redaction;
use kubeplug_core::manifest::ApiResource;
use kubeplug_core::plan::Action;
use kubeplug_core::plan::diff::Fields;
use kubeplug_kube::informers::Object;
use kubeplug_kube::report::format_chain;
use kubeplug_runtime::Plugin;

impl Serving {
    /// What one reconcile of `parent` would do now, by the version serving
    /// or by `candidate`, which must watch what the serving one watches
    /// (the preview reads the serving version's caches). Of the kinds in
    /// `withheld` (the caller may not read them) no value is shown, nor the
    /// plugin's own text (see the module doc).
    pub async fn run(
        &self,
        parent: &Object,
        candidate: Option<Plugin>,
        withheld: &[ApiResource],
    ) -> Result<Value, String> {
        let plugin = match candidate {
            Some(candidate) => self
                .candidate(candidate, Run::Preview)
                .map_err(|e| e.to_string())?,
            None => self.plugin(),
        };
        let target = Target {
            plugin: &plugin,
            serving: self.serves(),
            withheld,
        };
        preview(&target, parent).await.map_err(|e| match &e {
            // A plugin's error text may quote what it was handed.
            ReconcileError::Call(call) if !withheld.is_empty() => {
                format!("the plugin failed ({}) {WITHHELD_TEXT}", call.label(),)
            }
            _ => format_chain(&e),
        })
    }
}

/// What the preview runs on: the plugin's controller parts.
pub struct Target<'a> {
    pub plugin: &'a Plugin,
    /// The serving version's caches and fence.
    pub serving: &'a dyn Serves,
    /// Child and related kinds the caller may not read: their values, and
    /// the plugin's own text, are left out of the answer.
    pub withheld: &'a [ApiResource],
}

/// The name of a kind as RBAC names it, `plural.group` (`plural` for core).
pub fn rbac_name(kind: &ApiResource) -> String {
    if kind.group.is_empty() {
        kind.plural.clone()
    } else {
        format!("{}.{}", kind.plural, kind.group)
    }
}

/// What one reconcile of `parent` would do: children to create, update
/// (with a field-level diff against the live object) or prune, the status
/// and parent patch it would write, the events it would record. The
/// plugin's or the fence's refusal is an `Err`, as in a reconcile.
pub async fn preview(target: &Target<'_>, parent_obj: &Object) -> Result<Value, ReconcileError> {
    let namespace = parent_obj.metadata.namespace.clone().unwrap_or_default();
    let (
        Inputs {
            parent, request, ..
        },
        plan,
    ) = plan(target.plugin, target.serving, parent_obj).await?;

    // Of what the plugin was handed, the caller may not read some: then no
    // value the plugin wrote is shown, only what would happen to what.
    let masked = !target.withheld.is_empty();
    let mut children = Vec::new();
    for step in &plan.children {
        let (child, ty) = (&step.child, &step.resource);
        let changes = match &step.action {
            Action::Update { live, .. } => diff(live, child),
            _ => Vec::new(),
        };
        let mut row = json!({
            "action": step.action.label(),
            "apiVersion": child["apiVersion"],
            "kind": ty.kind,
            "name": child["metadata"]["name"],
        });
        if kubeplug_core::plan::create_only(child) {
            row["createOnly"] = json!(true);
        }
        if target.withheld.contains(ty) {
            if !changes.is_empty() {
                row["withheld"] = json!(format!(
                    "the diff is not shown: you may not get {} in {namespace}",
                    rbac_name(ty)
                ));
            }
        } else if !changes.is_empty() {
            row["diff"] = Value::Array(changes);
        }
        children.push(row);
    }
    for gone in &plan.prune {
        children.push(json!({
            "action": "prune",
            "apiVersion": gone["apiVersion"],
            "kind": gone["kind"],
            "name": gone["metadata"]["name"],
        }));
    }
    let desired = &plan.answer;
    let status = plan.status.as_ref();
    let mut events = serde_json::to_value(&desired.events).unwrap_or_default();
    if !target.withheld.is_empty() {
        for event in events.as_array_mut().into_iter().flatten() {
            if event.get("message").is_some() {
                event["message"] = json!(WITHHELD_TEXT);
            }
        }
    }
    let mut answer = json!({
        "children": children,
        "status": {
            "changes": status.is_some(),
            "desired": desired.status,
            "diff": status.map(|s| diff(&parent["status"], s)).unwrap_or_default(),
        },
        "parentPatch": plan.parent_patch,
        "events": events,
    });
    if masked {
        // What the plugin wrote may copy what it was handed: the values of
        // the withheld objects are taken out wherever they appear.
        let handed = request.observed.iter().chain(&request.related);
        let redaction = Redaction::of(handed.map(|o| &**o), |group, kind| {
            target
                .withheld
                .iter()
                .any(|w| w.group == group && w.kind == kind)
        });
        let redacted: usize = ["children", "status", "parentPatch", "events"]
            .iter()
            .map(|key| redaction.apply(&mut answer[*key]))
            .sum();
        answer["withheld"] = withheld_note(target.withheld, &namespace);
        if redacted > 0 {
            answer["withheld"]["redacted"] = json!(redacted);
        }
    }
    Ok(answer)
}

/// What replaces text the plugin wrote when the caller may not read all it
/// was handed.
pub const WITHHELD_TEXT: &str =
    "(not shown: the plugin was handed objects you may not read, which its text may quote)";

/// The answer's `withheld`: which kinds the caller may not read, so their
/// values and the plugin's text are left out.
pub fn withheld_note(withheld: &[ApiResource], namespace: &str) -> Value {
    json!({
        "kinds": withheld.iter().map(rbac_name).collect::<Vec<_>>(),
        "reason": format!(
            "you may not read these kinds in {namespace}: their live values, and the plugin's error and event messages, are not shown"
        ),
    })
}

/// Field by field, where `desired` differs from `live`: the fields the
/// apply would set (see [`Fields::After`]), each with its JSON Pointer, the
/// live value and the desired one. Lists are compared whole.
pub fn diff(live: &Value, desired: &Value) -> Vec<Value> {
    kubeplug_core::plan::diff::diff(live, desired, Fields::After)
        .into_iter()
        .map(|c| json!({"path": c.path, "live": c.before, "desired": c.after}))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_each_changed_field_with_both_values() {
        let live = json!({"spec": {"replicas": 1, "template": {"image": "postgres:16"}}, "metadata": {"name": "a"}});
        let desired = json!({"spec": {"replicas": 3, "template": {"image": "postgres:16"}, "serviceName": "a"}, "metadata": {"name": "a"}});
        assert_eq!(
            diff(&live, &desired),
            vec![
                json!({"path": "/spec/replicas", "live": 1, "desired": 3}),
                json!({"path": "/spec/serviceName", "live": null, "desired": "a"}),
            ]
        );
        assert!(diff(&desired, &desired).is_empty());
    }
}
