//! From a plugin's answer to the exact writes: pure functions, no I/O.
//!
//! [`decide`] is the one decision: the operator, previews, shadows,
//! `kubeplug render` and `kubeplug test` all go through it, so what `render`
//! prints is what the operator applies. Everything that decides whether a
//! write is needed lives here too, which is what keeps a restarted host from
//! rewriting an unchanged cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::contract::{Desired, Finalized};
use crate::fence::check_mode;
use crate::manifest::{ApiResource, Manifest};
use crate::policy::Effective;
use crate::shard::{SHARD_LABEL, is_stray, label_pod_template, shard_label_of};

mod decide;

pub use decide::{Action, Plan, Step, decide};
// The fence's errors' old path, which the operator and the tests use.
pub use crate::fence::{FenceError, Fenced};
// The diff's old path, which the webhook checks and the operator still use.
pub use crate::diff;
use crate::diff::pointer_escape;

/// Label set on every child: which plugin owns it. Pruning only ever
/// considers children carrying this plugin's name.
pub const PLUGIN_LABEL: &str = "kubeplug.io/plugin";
/// Annotation set on every child: hash of what was applied, so an unchanged
/// child is not re-applied (see [`needs_apply`]).
pub const APPLIED_HASH: &str = "kubeplug.io/applied-hash";

/// Annotation a plugin sets on a child (value `"true"`) to have it created
/// once and never re-applied: generated credentials, anything whose content
/// must not change after creation. Part of the contract (see the WIT).
pub const CREATE_ONLY: &str = "kubeplug.io/create-only";

/// True if the plugin marked `child` create-only.
pub fn create_only(child: &Value) -> bool {
    str_at(
        child,
        &format!("/metadata/annotations/{}", pointer_escape(CREATE_ONLY)),
    ) == "true"
}

/// Metadata fields the API server owns; never sent in an apply.
pub const SERVER_OWNED_FIELDS: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "managedFields",
    "selfLink",
];

/// Identity of an object: API group, kind, namespace, name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TypedKey {
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl TypedKey {
    /// The key of a JSON object (group taken from `apiVersion`).
    pub fn of(object: &Value) -> Self {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let group = api_version
            .rsplit_once('/')
            .map(|(g, _)| g)
            .unwrap_or_default();
        TypedKey {
            group: group.to_string(),
            kind: object["kind"].as_str().unwrap_or_default().to_string(),
            namespace: object["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            name: object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        }
    }
}

impl std::fmt::Display for TypedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.kind, self.name)
        } else {
            write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The controller ownerReference that ties a child to `parent`.
pub fn owner_reference(parent: &Value) -> Result<Value, FenceError> {
    let uid = str_at(parent, "/metadata/uid");
    if uid.is_empty() {
        return Err(FenceError::ParentWithoutUid);
    }
    Ok(json!({
        "apiVersion": parent["apiVersion"],
        "kind": parent["kind"],
        "name": parent["metadata"]["name"],
        "uid": uid,
        "controller": true,
        "blockOwnerDeletion": true,
    }))
}

/// Check `desired` children against the fence and turn them into the exact
/// objects to apply: namespace defaulted to the parent's, a controller
/// ownerReference to the parent, the plugin label, the applied-hash
/// annotation, and no server-owned fields. The children of an unsharded
/// plugin; [`fence`] prepares a sharded one's.
pub fn children(
    manifest: &Manifest,
    parent: &Value,
    desired: &[Value],
) -> Result<Vec<Value>, FenceError> {
    let prepared = prepare(manifest, parent, desired, None)?;
    Ok(prepared.into_iter().map(|(_, child)| child).collect())
}

/// How a sharded plugin's children are labelled: the shard, and whether
/// their pod templates carry it too (grant `shardPods`).
#[derive(Debug, Clone, Copy)]
struct ChildShard {
    shard: u16,
    pod_templates: bool,
}

/// The shard a sharded plugin's children are labelled with: their parent's
/// [`SHARD_LABEL`], so that the replica whose watches hold the parent holds
/// them too. `None` for an unsharded plugin, and for a parent not (yet)
/// labelled with one of its shards ([`is_stray`]): its children get
/// their label once it has one.
fn child_shard(grant: &Effective, parent: &Value) -> Option<ChildShard> {
    let shards = grant.grant.shards;
    let label = shard_label_of(parent);
    if is_stray(label, shards) {
        return None;
    }
    label.filter(|_| shards > 1).map(|shard| ChildShard {
        shard,
        pod_templates: grant.grant.shard_pods,
    })
}

/// [`children`], labelled with `shard` when there is one, each with its
/// declared resource.
fn prepare(
    manifest: &Manifest,
    parent: &Value,
    desired: &[Value],
    shard: Option<ChildShard>,
) -> Result<Vec<(ApiResource, Value)>, FenceError> {
    // A decorator's children (its attachments) pass the same checks as a
    // composite's: of a declared kind, in the decorated object's namespace,
    // owned by it.
    let parent_ns = str_at(parent, "/metadata/namespace");
    let owner = if desired.is_empty() {
        Value::Null
    } else {
        owner_reference(parent)?
    };
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(desired.len());
    for child in desired {
        let api_version = str_at(child, "/apiVersion");
        let kind = str_at(child, "/kind");
        let name = str_at(child, "/metadata/name").to_string();
        let Some(ty) = manifest.child_type(api_version, kind) else {
            return Err(FenceError::UndeclaredKind {
                api_version: api_version.into(),
                kind: kind.into(),
                name,
            });
        };
        let mut child = child.clone();
        let meta = child["metadata"]
            .as_object_mut()
            .expect("runtime checked children have metadata");
        if ty.namespaced {
            let ns = meta
                .get("namespace")
                .and_then(Value::as_str)
                .unwrap_or(parent_ns);
            if ns != parent_ns {
                return Err(FenceError::ForeignNamespace {
                    kind: kind.into(),
                    name,
                    namespace: ns.into(),
                    parent: parent_ns.into(),
                });
            }
            meta.insert("namespace".into(), parent_ns.into());
        }
        for server_owned in SERVER_OWNED_FIELDS {
            meta.remove(*server_owned);
        }
        meta.insert("ownerReferences".into(), json!([owner.clone()]));
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(labels) = labels {
            if labels.contains_key(SHARD_LABEL) {
                return Err(FenceError::HostLabel {
                    on: format!("child {kind}/{name}"),
                    key: SHARD_LABEL.into(),
                });
            }
            labels.insert(PLUGIN_LABEL.into(), manifest.name.clone().into());
            if let Some(ChildShard { shard, .. }) = shard {
                labels.insert(SHARD_LABEL.into(), shard.to_string().into());
            }
        }
        if let Some(ChildShard {
            shard,
            pod_templates: true,
        }) = shard
        {
            label_pod_template(&mut child, ty, shard).map_err(|path| FenceError::HostLabel {
                on: format!("child {kind}/{name} at {path}"),
                key: SHARD_LABEL.into(),
            })?;
        }
        child
            .as_object_mut()
            .expect("runtime checked children are objects")
            .remove("status");
        let hash = content_hash(&child);
        let meta = child["metadata"].as_object_mut().expect("metadata exists");
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(annotations) = annotations {
            annotations.insert(APPLIED_HASH.into(), hash.into());
        }
        let key = TypedKey::of(&child);
        if !seen.insert(key.clone()) {
            return Err(FenceError::Duplicate {
                kind: key.kind,
                name: key.name,
            });
        }
        out.push((ty.clone(), child));
    }
    Ok(out)
}

/// `prepared` (from [`children`]) made safe to send: carrying the uid of the
/// observed child it updates, so that if that object was deleted and another
/// of the same name made since, the API server refuses the apply (the uid is
/// immutable) instead of overwriting someone else's object.
pub fn guarded(prepared: &Value, uid: Option<&str>) -> Value {
    let mut child = prepared.clone();
    if let (Some(meta), Some(uid)) = (child["metadata"].as_object_mut(), uid) {
        meta.insert("uid".into(), uid.into());
    }
    child
}

/// A resourceVersion no stored object has: etcd revisions are signed 64-bit
/// numbers, this is the largest unsigned one. See [`if_absent`].
pub const NO_STORED_VERSION: &str = "18446744073709551615";

/// `prepared` (from [`children`]) as an apply that can only create: it
/// carries a resourceVersion no stored object has, so the API server
/// creates the object if none of its name exists and refuses the apply
/// (409 Conflict), writing nothing, if one does, whoever made it and however
/// recently. (On a create the API server ignores the resourceVersion; the
/// object's fields are then owned by the plugin's apply, as with any apply.)
pub fn if_absent(prepared: &Value) -> Value {
    let mut child = prepared.clone();
    if let Some(meta) = child["metadata"].as_object_mut() {
        meta.insert("resourceVersion".into(), NO_STORED_VERSION.into());
    }
    child
}

/// Check a `reconcile` answer against the plugin's fence and `grant`, before
/// anything is written: the children exactly as they would be applied (a
/// sharded plugin's labelled with their parent's shard, see
/// [`SHARD_LABEL`]), each with its declared resource. The one fence check of a `reconcile` answer: [`decide`]
/// makes it, and the live host, previews, shadows, `kubeplug render` and
/// `kubeplug test` all decide through there.
pub fn fence(
    manifest: &Manifest,
    grant: &Effective,
    parent: &Value,
    desired: &Desired,
) -> Result<Vec<(ApiResource, Value)>, Fenced> {
    let fenced = |source| Fenced {
        plugin: manifest.name.clone(),
        source,
    };
    grant.check_answer(manifest, desired).map_err(fenced)?;
    let shard = child_shard(grant, parent);
    let children = prepare(manifest, parent, &desired.children, shard).map_err(fenced)?;
    check_mode(
        manifest,
        desired.parent_patch.is_some(),
        desired.status.is_some(),
    )
    .map_err(fenced)?;
    Ok(children)
}

/// Check a `finalize` answer against the plugin's fence and `grant`: the
/// same quotas as a `reconcile` answer's events (see
/// [`Effective::check_events`]).
pub fn fence_finalize(
    manifest: &Manifest,
    grant: &Effective,
    finalized: &Finalized,
) -> Result<(), Fenced> {
    grant
        .check_events(finalized.events.len())
        .map_err(|source| Fenced {
            plugin: manifest.name.clone(),
            source,
        })
}

/// Wait before asking a plugin again whether its cleanup is done, when its
/// `finalize` answer names no time.
pub const FINALIZE_RETRY: Duration = Duration::from_secs(5);

/// When to reconcile again after an answer asking for `asked`: never sooner
/// than the plugin's requeue `floor` (a plugin asking for 0 s would spin).
pub fn requeue_after(asked: Option<Duration>, floor: Duration) -> Option<Duration> {
    asked.map(|after| after.max(floor))
}

/// When to call `finalize` again: never once it is done; otherwise after
/// what it asked for ([`FINALIZE_RETRY`] if nothing), never sooner than the
/// requeue `floor`.
pub fn finalize_requeue_after(finalized: &Finalized, floor: Duration) -> Option<Duration> {
    if finalized.done {
        return None;
    }
    requeue_after(
        Some(finalized.requeue_after.unwrap_or(FINALIZE_RETRY)),
        floor,
    )
}

/// SHA-256 of an object's canonical JSON (serde_json sorts object keys).
fn content_hash(object: &Value) -> String {
    let digest = Sha256::digest(object.to_string().as_bytes());
    hex::encode(&digest[..12])
}

/// True when every field of `desired` is present with the same value in
/// `current`. A `null` in `desired` matches a missing field. Arrays compare
/// element by element, so an API server's defaults inside list items (e.g.
/// container fields) still count as "contained".
pub fn is_subset(desired: &Value, current: &Value) -> bool {
    match (desired, current) {
        (Value::Object(d), Value::Object(c)) => d.iter().all(|(k, dv)| match c.get(k) {
            Some(cv) => is_subset(dv, cv),
            // An empty map or list the server dropped counts as present.
            None => is_subset(dv, &Value::Null),
        }),
        (Value::Object(d), Value::Null) => d.values().all(|v| is_subset(v, &Value::Null)),
        (Value::Array(d), Value::Null) => d.is_empty(),
        (Value::Array(d), Value::Array(c)) => {
            d.len() == c.len() && d.iter().zip(c).all(|(dv, cv)| is_subset(dv, cv))
        }
        (d, c) => d == c,
    }
}

/// Does `prepared` (from [`children`]) need applying, given what is observed?
/// Skipped only when the last apply had the same content (same hash) and
/// nobody changed our fields since (subset check).
pub fn needs_apply(prepared: &Value, observed: Option<&Value>) -> bool {
    let Some(observed) = observed else {
        return true;
    };
    let want = str_at(
        prepared,
        &format!("/metadata/annotations/{}", pointer_escape(APPLIED_HASH)),
    );
    let have = str_at(
        observed,
        &format!("/metadata/annotations/{}", pointer_escape(APPLIED_HASH)),
    );
    want != have || !is_subset(prepared, observed)
}

/// Observed children to delete: those this plugin labelled as its own that
/// are not desired any more. Children of other plugins or of people are
/// never pruned.
pub fn prune<'a, 'p>(
    manifest: &Manifest,
    observed: &'a [Value],
    prepared: impl IntoIterator<Item = &'p Value>,
) -> Vec<&'a Value> {
    let wanted: BTreeSet<TypedKey> = prepared.into_iter().map(TypedKey::of).collect();
    observed
        .iter()
        .filter(|o| {
            o.pointer(&format!(
                "/metadata/labels/{}",
                pointer_escape(PLUGIN_LABEL)
            ))
            .and_then(Value::as_str)
                == Some(manifest.name.as_str())
        })
        .filter(|o| !wanted.contains(&TypedKey::of(o)))
        .collect()
}

/// The status to write, or `None` when the parent already has it: every
/// desired field is there with its value, and no field `manager` applied
/// before is missing from `desired` (the apply of the whole status then
/// removes it).
pub fn status_update<'a>(
    parent: &Value,
    desired: Option<&'a Value>,
    manager: &str,
) -> Option<&'a Value> {
    let desired = desired?;
    let changed = !is_subset(desired, &parent["status"]) || drops_owned(parent, desired, manager);
    changed.then_some(desired)
}

/// True if `manager` owns a status field (per the parent's managedFields)
/// that `desired` no longer has. Without managedFields, any top-level
/// status field missing from `desired` counts (a write that changes nothing
/// is a no-op for the API server).
fn drops_owned(parent: &Value, desired: &Value, manager: &str) -> bool {
    let Some(entries) = parent["metadata"]["managedFields"].as_array() else {
        return parent["status"]
            .as_object()
            .is_some_and(|current| current.keys().any(|k| desired[k].is_null()));
    };
    entries
        .iter()
        .filter(|e| e["manager"] == manager && e["subresource"] == "status")
        .any(|e| lacks_owned(&e["fieldsV1"]["f:status"], desired))
}

/// Walks a `fieldsV1` tree: true if a field it names (`f:<name>`) is
/// missing from `desired`. List entries (`k:`, `v:`, `i:`) are compared by
/// value through [`is_subset`] instead.
fn lacks_owned(owned: &Value, desired: &Value) -> bool {
    let Some(owned) = owned.as_object() else {
        return false;
    };
    owned.iter().any(|(key, sub)| {
        let Some(field) = key.strip_prefix("f:") else {
            return false;
        };
        match desired.get(field) {
            None | Some(Value::Null) => true,
            Some(d @ Value::Object(_)) => lacks_owned(sub, d),
            Some(_) => false,
        }
    })
}

/// The merge patch for the parent's metadata, holding only labels and
/// annotations whose value differs; `None` when nothing would change.
pub fn parent_patch(
    parent: &Value,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Option<Value> {
    let changed = |field: &str, want: &BTreeMap<String, String>| -> Map<String, Value> {
        want.iter()
            .filter(|(k, v)| parent["metadata"][field][k.as_str()].as_str() != Some(v.as_str()))
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect()
    };
    let labels = changed("labels", labels);
    let annotations = changed("annotations", annotations);
    if labels.is_empty() && annotations.is_empty() {
        return None;
    }
    let mut meta = Map::new();
    if !labels.is_empty() {
        meta.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        meta.insert("annotations".into(), Value::Object(annotations));
    }
    Some(json!({ "metadata": meta }))
}

#[cfg(test)]
mod tests;
