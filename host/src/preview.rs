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
//! kind and name), and neither is text the plugin wrote (its error, its
//! events' messages), which may quote what it was handed.

use std::collections::HashMap;

use crate::informers::Object;
use serde_json::{Value, json};

use crate::manifest::ApiResource;
use crate::plan::{self, ObjectKey};
use crate::reconcile::{Fence, Inputs, ReconcileError, Sources, child_type, decide, inputs};
use crate::runtime::Plugin;

/// What the preview runs on: the plugin's controller parts.
pub struct Target<'a> {
    pub plugin: &'a Plugin,
    pub sources: &'a Sources,
    pub fence: &'a Fence,
    /// The controller's field manager (decides whether a status write is due).
    pub field_manager: &'a str,
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
    let manifest = target.plugin.manifest();
    let namespace = parent_obj.metadata.namespace.clone().unwrap_or_default();
    target.fence.check_reads(manifest, &namespace).await?;
    let Inputs {
        parent,
        observed,
        request,
    } = inputs(target.sources, parent_obj);
    let (desired, prepared) = decide(
        target.plugin,
        target.fence,
        &parent,
        std::sync::Arc::new(request),
    )
    .await?;

    let by_key: HashMap<ObjectKey, &Value> =
        observed.iter().map(|o| (ObjectKey::of(o), o)).collect();
    let mut children = Vec::new();
    for child in &prepared {
        let ty = child_type(manifest, child);
        let create_only = plan::create_only(child);
        let live = by_key.get(&ObjectKey::of(child)).copied();
        let (action, changes) = match live {
            None => ("create", Vec::new()),
            Some(_) if create_only => ("unchanged", Vec::new()),
            Some(live) if !plan::needs_apply(child, Some(live)) => ("unchanged", Vec::new()),
            Some(live) => ("update", diff(live, child)),
        };
        let mut row = json!({
            "action": action,
            "apiVersion": child["apiVersion"],
            "kind": ty.kind,
            "name": child["metadata"]["name"],
        });
        if create_only {
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
    for gone in plan::prune(manifest, &observed, &prepared) {
        children.push(json!({
            "action": "prune",
            "apiVersion": gone["apiVersion"],
            "kind": gone["kind"],
            "name": gone["metadata"]["name"],
        }));
    }
    let status = plan::status_update(&parent, desired.status.as_ref(), target.field_manager);
    let parent_patch = desired
        .parent_patch
        .as_ref()
        .and_then(|p| plan::parent_patch(&parent, &p.labels, &p.annotations));
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
        "parentPatch": parent_patch,
        "events": events,
    });
    if !target.withheld.is_empty() {
        answer["withheld"] = withheld_note(target.withheld, &namespace);
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
/// apply would set, each with its path, the live value and the desired one.
/// Lists are compared whole (their path names the list).
pub fn diff(live: &Value, desired: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    walk(live, desired, String::new(), &mut out);
    out
}

fn walk(live: &Value, desired: &Value, path: String, out: &mut Vec<Value>) {
    match desired {
        Value::Object(fields) => {
            for (key, want) in fields {
                let at = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                walk(live.get(key).unwrap_or(&Value::Null), want, at, out);
            }
        }
        want if want != live => out.push(json!({"path": path, "live": live, "desired": want})),
        _ => {}
    }
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
                json!({"path": "spec.replicas", "live": 1, "desired": 3}),
                json!({"path": "spec.serviceName", "live": null, "desired": "a"}),
            ]
        );
        assert!(diff(&desired, &desired).is_empty());
    }
}
