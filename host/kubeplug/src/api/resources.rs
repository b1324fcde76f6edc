//! What the group serves, as Kubernetes clients expect to read it: the
//! `Plugin` object, its Table form for `kubectl get`, discovery documents
//! and the OpenAPI v3 schema `kubectl explain` reads.

use serde_json::{Value, json};

use super::{GROUP, VERSION};
use kubeplug_operator::registry::Status;

pub const KIND: &str = "Plugin";
pub const RESOURCE: &str = "plugins";

/// The label every `Plugin` carries with its state (`running`, `degraded`,
/// `failed`, `rolled-back` or `blocked`, as `status.state`), so that
/// `kubectl get plugins -l kubeplug.io/state=failed` finds the broken ones.
pub const STATE_LABEL: &str = "kubeplug.io/state";

/// The label of a serving plugin's manifest mode (`composite` or
/// `decorator`, as `spec.manifest.mode`); absent while nothing serves.
pub const MODE_LABEL: &str = "kubeplug.io/mode";

fn group_version() -> String {
    format!("{GROUP}/{VERSION}")
}

/// The object name of a `/plugins` row: the plugin's name, or for a file
/// that never loaded, the file's stem.
pub fn name_of(row: &Status) -> String {
    row.name.clone().unwrap_or_else(|| {
        std::path::Path::new(&row.file)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    })
}

/// Who writes for a plugin: the holder of its Lease, or for a sharded
/// plugin the holder of each shard's.
#[derive(Debug, Default, PartialEq)]
pub struct Owners {
    /// The replica leading a plugin that is not sharded.
    pub leader: Option<String>,
    /// A sharded plugin's shards in order, each with its owner (`None`:
    /// free now, being handed over).
    pub shards: Vec<Option<String>>,
}

impl Owners {
    /// From the Leases' holders (unit → holder, see
    /// [`kubeplug_kube::leader::balance::unit`]).
    pub fn from_leases(
        name: &str,
        row: &Status,
        holders: &std::collections::BTreeMap<String, String>,
    ) -> Owners {
        use kubeplug_kube::leader::balance::unit;
        match &row.shards {
            None => Owners {
                leader: holders.get(name).cloned(),
                shards: Vec::new(),
            },
            Some(shards) => Owners {
                leader: None,
                shards: (0..shards.count)
                    .map(|s| holders.get(&unit(name, Some(s))).cloned())
                    .collect(),
            },
        }
    }

    /// Without leader election: this replica, `identity`, owns everything.
    pub fn this_replica(row: &Status, identity: &str) -> Owners {
        if row.detail.is_none() {
            return Owners::default();
        }
        match &row.shards {
            None => Owners {
                leader: Some(identity.to_string()),
                shards: Vec::new(),
            },
            Some(shards) => Owners {
                leader: None,
                shards: vec![Some(identity.to_string()); shards.count as usize],
            },
        }
    }

    /// The leader column: the leader, or each owner with how many shards it
    /// owns (`host-a (4), host-b (4)`).
    fn summary(&self) -> Option<String> {
        if self.shards.is_empty() {
            return self.leader.clone();
        }
        let mut counts = std::collections::BTreeMap::<&str, usize>::new();
        for owner in self.shards.iter().flatten() {
            *counts.entry(owner).or_default() += 1;
        }
        let free = self.shards.iter().filter(|o| o.is_none()).count();
        let mut parts: Vec<String> = counts.iter().map(|(o, n)| format!("{o} ({n})")).collect();
        if free > 0 {
            parts.push(format!("free ({free})"));
        }
        Some(parts.join(", "))
    }
}

/// The `Plugin` object of a row (without `resourceVersion`, which the
/// tracker assigns).
pub fn plugin(row: &Status, owners: &Owners) -> Value {
    let detail = row.detail.as_ref();
    let manifest = detail.map(|d| &d.manifest);
    // Both spellings are fixed lowercase words: valid label values as they
    // are (a test holds every one to the selector's rules).
    let mut labels = serde_json::Map::new();
    labels.insert(STATE_LABEL.into(), json!(row.state.as_str()));
    if let Some(manifest) = manifest {
        labels.insert(MODE_LABEL.into(), json!(manifest.mode));
    }
    let mut object = json!({
        "apiVersion": group_version(),
        "kind": KIND,
        "metadata": {
            "name": name_of(row),
            "labels": labels,
        },
        "spec": {
            "file": row.file,
        },
        "status": {
            "state": row.state,
            "synced": row.synced,
        },
    });
    if let Some(loaded) = &row.loaded_at {
        object["metadata"]["creationTimestamp"] = json!(loaded);
        object["status"]["loadedAt"] = json!(loaded);
    }
    if let Some(manifest) = manifest {
        let spec = &mut object["spec"]["manifest"];
        *spec = json!({
            "parent": kind_name(&manifest.parent),
            "mode": manifest.mode,
            "children": manifest.children.iter().map(kind_name).collect::<Vec<_>>(),
            "related": manifest.related.iter().map(|r| kind_name(&r.resource)).collect::<Vec<_>>(),
            "namespaces": manifest.namespaces,
        });
        if let Some(finalizer) = &manifest.finalizer {
            spec["finalizer"] = json!(finalizer);
        }
        if let Some(seconds) = manifest.resync_seconds {
            spec["resyncSeconds"] = json!(seconds);
        }
    }
    let status = &mut object["status"];
    for (key, value) in [
        ("version", row.version.clone()),
        ("digest", row.digest.clone()),
        ("reason", row.reason.clone()),
        ("lastError", row.last_error.clone()),
        ("leader", owners.summary()),
    ] {
        if let Some(value) = value {
            status[key] = json!(value);
        }
    }
    if !owners.shards.is_empty() {
        status["shards"] = owners
            .shards
            .iter()
            .enumerate()
            .map(|(shard, owner)| json!({"shard": shard, "owner": owner}))
            .collect();
    }
    if let Some(shadow) = &row.shadow {
        status["shadow"] = json!(shadow);
    }
    if let Some(error) = &row.candidate_error {
        status["candidateError"] = json!(error);
    }
    if let Some(promotion) = &row.promotion {
        status["promotion"] = json!(promotion);
    }
    if let Some(detail) = detail {
        status["reconciles"] = json!(detail.reconciles);
        status["errors"] = json!(detail.errors);
        status["queueDepth"] = json!(detail.queue_depth);
    }
    object
}

/// Fields of a `Plugin` that carry text a plugin or its file can fill with
/// anything, including cluster data it was handed: shown only to callers who
/// may `get` `plugins/details` (as `/plugins` shows them only to loopback
/// clients).
const DETAIL_FIELDS: [&str; 3] = ["reason", "lastError", "candidateError"];

/// What `status.withheld` says on a redacted object.
pub const WITHHELD: &str = "reason, lastError, candidateError, shadow examples, what-if details and the file's directory are shown to callers who may get plugins/details";

/// `object` as a caller without `get` on `plugins/details` sees it: no
/// error texts, no shadow examples, the file's name without its directory
/// (as [`kubeplug_operator::registry::Status::summary`] gives `/plugins` to others than
/// loopback clients).
pub fn redacted(mut object: Value) -> Value {
    if let Some(status) = object["status"].as_object_mut() {
        for field in DETAIL_FIELDS {
            status.remove(field);
        }
        if let Some(shadow) = status.get_mut("shadow").and_then(Value::as_object_mut) {
            shadow.remove("examples");
            if let Some(whatif) = shadow.get_mut("whatIf").and_then(Value::as_object_mut) {
                whatif.remove("details");
            }
            if let Some(file) = shadow.get("file").and_then(Value::as_str) {
                let name = file_name(file);
                shadow.insert("file".into(), json!(name));
            }
        }
        if let Some(whatif) = status
            .get_mut("promotion")
            .and_then(|p| p.get_mut("whatIf"))
            .and_then(Value::as_object_mut)
        {
            whatif.remove("details");
        }
        status.insert("withheld".into(), json!(WITHHELD));
    }
    if let Some(file) = object["spec"]["file"].as_str() {
        object["spec"]["file"] = json!(file_name(file));
    }
    object
}

fn file_name(path: &str) -> String {
    std::path::Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// `0.2.0: 3/10 differ, what-if 67/200 change`, or nothing without a
/// candidate.
fn shadow_cell(shadow: &Value) -> String {
    let Some(version) = shadow["version"].as_str() else {
        return String::new();
    };
    let mut cell = format!(
        "{version}: {}/{} differ",
        shadow["parentsDiffering"].as_u64().unwrap_or(0),
        shadow["parentsCompared"].as_u64().unwrap_or(0)
    );
    let whatif = &shadow["whatIf"];
    if whatif["phase"] == "complete" {
        cell.push_str(&format!(
            ", what-if {}/{} change",
            whatif["changed"].as_u64().unwrap_or(0),
            whatif["parents"].as_u64().unwrap_or(0)
        ));
    }
    cell
}

/// The Reason column: why the plugin is degraded or failed, shown to
/// callers who may get `plugins/details`; to everyone, why the promotion
/// gate keeps its latest version out (counts and kinds, no cluster data).
fn reason_cell(status: &Value) -> String {
    match (
        status["reason"].as_str(),
        status["promotion"]["blocked"].as_str(),
    ) {
        (Some(reason), _) => reason.to_string(),
        (None, Some(blocked)) => format!("promotion gate: {blocked}"),
        (None, None) => String::new(),
    }
}

/// `Kind.group` (or `Kind` for the core group), as grants name kinds.
fn kind_name(resource: &kubeplug_core::manifest::ApiResource) -> String {
    if resource.group.is_empty() {
        resource.kind.clone()
    } else {
        format!("{}.{}", resource.kind, resource.group)
    }
}

/// A `PluginList`.
pub fn list(items: Vec<Value>, resource_version: u64) -> Value {
    json!({
        "apiVersion": group_version(),
        "kind": "PluginList",
        "metadata": {"resourceVersion": resource_version.to_string()},
        "items": items,
    })
}

/// `kubectl get plugins` columns.
pub fn table(objects: &[Value], resource_version: u64) -> Value {
    let column = |name: &str, kind: &str, format: &str, description: &str, priority: u8| json!({"name": name, "type": kind, "format": format, "description": description, "priority": priority});
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let s = &o["status"];
            json!({
                "cells": [
                    o["metadata"]["name"],
                    s["version"].as_str().unwrap_or(""),
                    s["state"],
                    s["leader"].as_str().unwrap_or(""),
                    s["reconciles"].as_u64().unwrap_or(0),
                    s["errors"].as_u64().unwrap_or(0),
                    s["queueDepth"].as_u64().unwrap_or(0),
                    o["spec"]["manifest"]["parent"].as_str().unwrap_or(""),
                    shadow_cell(&s["shadow"]),
                    reason_cell(s),
                ],
                "object": {
                    "apiVersion": "meta.k8s.io/v1",
                    "kind": "PartialObjectMetadata",
                    "metadata": o["metadata"],
                },
            })
        })
        .collect();
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "Table",
        "metadata": {"resourceVersion": resource_version.to_string()},
        "columnDefinitions": [
            column("Name", "string", "name", "The plugin's name.", 0),
            column("Version", "string", "", "The version serving.", 0),
            column("State", "string", "", "running, degraded, rolled-back, blocked (by the promotion gate) or failed.", 0),
            column("Leader", "string", "", "The replica that writes for it.", 0),
            column("Reconciles", "integer", "", "Reconciles finished by this replica.", 0),
            column("Errors", "integer", "", "Of those, how many failed.", 0),
            column("Queue", "integer", "", "Parents waiting.", 0),
            column("Parent", "string", "", "The parent kind.", 1),
            column("Shadow", "string", "", "The candidate in shadow: its version, how many parents it decides differently, and how many its what-if would change.", 1),
            column("Reason", "string", "", "Why it is degraded, failed or blocked.", 1),
        ],
        "rows": rows,
    })
}

/// `GET /apis`: this server's one group.
pub fn group_list() -> Value {
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group()]})
}

/// `GET /apis/kubeplug.io`.
pub fn group() -> Value {
    let version = json!({"groupVersion": group_version(), "version": VERSION});
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [version],
        "preferredVersion": version,
    })
}

/// `GET /apis/kubeplug.io/v1alpha1`.
pub fn resource_list() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version(),
        "resources": [{
            "name": RESOURCE,
            "singularName": "plugin",
            "namespaced": false,
            "kind": KIND,
            "verbs": ["get", "list", "watch"],
            "categories": ["kubeplug"],
        }, {
            // The object with its error texts and shadow examples; `get` on
            // it is what RBAC grants to see them in `plugins` as well.
            "name": format!("{RESOURCE}/{}", super::DETAILS),
            "singularName": "",
            "namespaced": false,
            "kind": KIND,
            "verbs": ["get"],
        }, {
            "name": "previews",
            "singularName": "preview",
            "namespaced": true,
            "kind": "Preview",
            "verbs": ["create"],
        }],
    })
}

/// `GET /openapi/v3`: where the group's document is.
pub fn openapi_index() -> Value {
    json!({"paths": {
        format!("apis/{GROUP}/{VERSION}"): {
            "serverRelativeURL": format!("/openapi/v3/apis/{GROUP}/{VERSION}?hash={}", openapi_hash()),
        }
    }})
}

fn openapi_hash() -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(openapi().to_string().as_bytes())[..16])
}

/// The group's OpenAPI v3 document: schemas with their GVK, which `kubectl
/// explain` looks up.
pub fn openapi() -> Value {
    let string = |d: &str| json!({"type": "string", "description": d});
    let integer = |d: &str| json!({"type": "integer", "format": "int64", "description": d});
    let strings = |d: &str| json!({"type": "array", "items": {"type": "string"}, "description": d});
    let gvk = json!({"group": GROUP, "version": VERSION, "kind": KIND});
    let returns = |schema: &str| json!({"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}}});
    let base = format!("/apis/{GROUP}/{VERSION}/{RESOURCE}");
    json!({
        "openapi": "3.0.0",
        "info": {"title": "kubeplug", "version": VERSION},
        // `kubectl explain` finds the kind through these operations.
        "paths": {
            base.clone(): {"get": {
                "description": "list or watch objects of kind Plugin",
                "operationId": "listKubeplugIoV1alpha1Plugin",
                "x-kubernetes-action": "list",
                "x-kubernetes-group-version-kind": gvk,
                "responses": returns("io.kubeplug.v1alpha1.PluginList"),
            }},
            format!("/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/previews"): {
                "post": {
                    "description": "create a Preview: what a plugin would do to a parent now, with nothing written",
                    "operationId": "createKubeplugIoV1alpha1NamespacedPreview",
                    "x-kubernetes-action": "post",
                    "x-kubernetes-group-version-kind": {"group": GROUP, "version": VERSION, "kind": "Preview"},
                    "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/io.kubeplug.v1alpha1.Preview"}}}},
                    "responses": {"201": {"description": "Created", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/io.kubeplug.v1alpha1.Preview"}}}}},
                },
                "parameters": [{"name": "namespace", "in": "path", "required": true, "schema": {"type": "string"}}],
            },
            format!("{base}/{{name}}"): {
                "get": {
                    "description": "read the specified Plugin",
                    "operationId": "readKubeplugIoV1alpha1Plugin",
                    "x-kubernetes-action": "get",
                    "x-kubernetes-group-version-kind": gvk,
                    "responses": returns("io.kubeplug.v1alpha1.Plugin"),
                },
                "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
            },
        },
        "components": {"schemas": {
            "io.kubeplug.v1alpha1.Plugin": {
                "type": "object",
                "description": "A Wasm reconcile plugin loaded by the kubeplug host: what it asks for, which version serves, and how it is doing. Read-only: plugins are shipped as files.",
                "x-kubernetes-group-version-kind": [{"group": GROUP, "version": VERSION, "kind": KIND}],
                "properties": {
                    "apiVersion": string("APIVersion: kubeplug.io/v1alpha1."),
                    "kind": string("Kind: Plugin."),
                    "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "The plugin's name, when the serving version was loaded (creationTimestamp), and the labels kubeplug.io/state (status.state) and kubeplug.io/mode (spec.manifest.mode, while a version serves), which label selectors match."},
                    "spec": {"type": "object", "description": "Where the plugin comes from and what its manifest asks for.", "properties": {
                        "file": string("The .wasm file in the host's plugin directory."),
                        "manifest": {"type": "object", "description": "The manifest of the serving version.", "properties": {
                            "parent": string("The parent kind (Kind.group)."),
                            "mode": string("composite (owns children) or decorator (patches its parents)."),
                            "children": strings("Child kinds it may create."),
                            "related": strings("Kinds it reads besides its children."),
                            "namespaces": strings("Namespaces it watches (empty: all its grant allows)."),
                            "finalizer": string("Finalizer it keeps on its parents, if any."),
                            "resyncSeconds": integer("Resync period."),
                        }},
                    }},
                    "status": {"type": "object", "description": "How the plugin is doing on the replica that answered.", "properties": {
                        "state": string("running, degraded (an older version serves, or it cannot see all it needs), rolled-back (the latest version failed its probation; the previous one serves again) or failed (nothing serves)."),
                        "reason": string("Why it is degraded or failed (shown to callers who may get plugins/details)."),
                        "lastError": string("The last load error (shown to callers who may get plugins/details)."),
                        "version": string("The version serving."),
                        "digest": string("sha256 of the serving component."),
                        "loadedAt": string("When the serving version was loaded (RFC 3339)."),
                        "synced": {"type": "boolean", "description": "Every cache it reads has listed once."},
                        "leader": string("The replica that leads it (writes for it); for a sharded plugin, each owner with how many shards it owns."),
                        "shards": {"type": "array", "description": "A sharded plugin's shards, each with the replica that owns it (none while it is handed over).", "items": {"type": "object", "properties": {
                            "shard": integer("The shard number (the kubeplug.io/shard label of its parents)."),
                            "owner": string("The replica that owns it."),
                        }}},
                        "reconciles": integer("Reconciles finished by the answering replica."),
                        "errors": integer("Of those, how many failed."),
                        "queueDepth": integer("Parents waiting in its queue."),
                        "shadow": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "The candidate <plugin>.next.wasm deciding beside the serving version, writing nothing: file, version, digest, since, comparisons, parentsCompared, parentsDiffering, candidateErrors, examples (parent, differences: what child/status/parentPatch/events/error differs, with field paths and both values), and whatIf (the candidate run once against every parent: phase, parents, changed, unchanged, refused, failed, creates, updates per kind and field, prunes, status fields, parentPatches; details names the parents)."},
                        "candidateError": string("Why the candidate file cannot run in shadow."),
                        "promotion": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "A new version the grant's promotion gate keeps out of service while the previous one serves: blocked (each rule its what-if breaks), version, digest, and whatIf (the report it was judged on)."},
                        "withheld": string("Set when reason, lastError, candidateError, shadow examples and what-if details are left out: they are shown to callers who may get plugins/details."),
                    }},
                },
            },
            "io.kubeplug.v1alpha1.Preview": {
                "type": "object",
                "description": "A dry run: what a plugin would do to a parent right now against the live cluster (children to create, update with a field-level diff, or prune; the status, parent patch and events), with nothing written. Create only.",
                "x-kubernetes-group-version-kind": [{"group": GROUP, "version": VERSION, "kind": "Preview"}],
                "properties": {
                    "apiVersion": string("APIVersion: kubeplug.io/v1alpha1."),
                    "kind": string("Kind: Preview."),
                    "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "spec": {"type": "object", "required": ["plugin"], "properties": {
                        "plugin": string("The plugin to run."),
                        "parentName": string("A live parent in this namespace, as the plugin's cache holds it."),
                        "candidate": {"type": "boolean", "description": "Run the candidate version <plugin>.next.wasm beside the serving file instead of the serving version: what the upgrade would change."},
                        "parent": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "Or a parent object (e.g. a live one with a changed spec); its namespace is the preview's."},
                    }},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "children (action create/update/unchanged/prune, kind, name, diff of path/live/desired), status (changes, desired, diff), parentPatch, events; or error, the plugin's or the fence's refusal."},
                },
            },
            "io.kubeplug.v1alpha1.PluginList": {
                "type": "object",
                "description": "A list of plugins.",
                "x-kubernetes-group-version-kind": [{"group": GROUP, "version": VERSION, "kind": "PluginList"}],
                "properties": {
                    "apiVersion": string("APIVersion."),
                    "kind": string("Kind."),
                    "metadata": {"type": "object"},
                    "items": {"type": "array", "items": {"$ref": "#/components/schemas/io.kubeplug.v1alpha1.Plugin"}},
                },
            },
        }},
    })
}

/// The same schemas as Swagger 2.0 (`/openapi/v2`), which the aggregator
/// also merges into the cluster's document.
pub fn openapi_v2() -> Value {
    let schemas = openapi()["components"]["schemas"]
        .to_string()
        .replace("#/components/schemas/", "#/definitions/");
    json!({
        "swagger": "2.0",
        "info": {"title": "kubeplug", "version": VERSION},
        "paths": {},
        "definitions": serde_json::from_str::<Value>(&schemas).expect("valid JSON"),
    })
}

/// A `Status` error body, as every Kubernetes API answers errors.
pub fn error(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::selectors::Selector;
    use kubeplug_core::manifest::{ApiResource, Manifest, Mode};
    use kubeplug_core::rollout::State;
    use kubeplug_operator::registry::PluginDetail;

    #[test]
    fn the_table_shows_the_whatif_and_the_gate_to_everyone() {
        let shadow = json!({"version": "0.2.0", "parentsDiffering": 3, "parentsCompared": 10,
            "whatIf": {"phase": "complete", "changed": 67, "parents": 200}});
        assert_eq!(
            shadow_cell(&shadow),
            "0.2.0: 3/10 differ, what-if 67/200 change"
        );
        let redacted = json!({"promotion": {"blocked": "67 of 200 parents (33.5 %) would change"}});
        assert_eq!(
            reason_cell(&redacted),
            "promotion gate: 67 of 200 parents (33.5 %) would change"
        );
        assert_eq!(
            reason_cell(&json!({"reason": "serving the previous version"})),
            "serving the previous version"
        );
    }

    /// A row of `state`, serving a plugin of `mode` unless `None`.
    fn row(state: State, mode: Option<Mode>) -> Status {
        let parent = ApiResource {
            group: "example.com".into(),
            version: "v1".into(),
            kind: "Database".into(),
            plural: "databases".into(),
            namespaced: true,
        };
        let detail = mode.map(|mode| PluginDetail {
            manifest: Manifest {
                name: "database".into(),
                version: "0.1.0".into(),
                parent,
                mode,
                children: Vec::new(),
                related: Vec::new(),
                namespaces: Vec::new(),
                finalizer: None,
                resync_seconds: None,
                excluded_namespaces: Vec::new(),
                metadata_only: Vec::new(),
                references: Vec::new(),
                webhooks: Default::default(),
            },
            reconciles: 0,
            errors: 0,
            queue_depth: 0,
        });
        Status {
            file: "/plugins/database.wasm".into(),
            name: Some("database".into()),
            version: None,
            digest: None,
            state,
            loaded_at: None,
            last_error: None,
            reason: None,
            synced: true,
            leading: true,
            shards: None,
            shadow: None,
            candidate_error: None,
            promotion: None,
            detail,
        }
    }

    #[test]
    fn every_plugin_is_labelled_with_its_state_and_mode_and_selectable_by_them() {
        let states = [
            State::Running,
            State::Degraded,
            State::Failed,
            State::RolledBack,
            State::Blocked,
        ];
        for state in states {
            for mode in [Mode::Composite, Mode::Decorator] {
                let object = plugin(&row(state, Some(mode)), &Owners::default());
                let labels = &object["metadata"]["labels"];
                assert_eq!(labels[STATE_LABEL], state.as_str());
                assert_eq!(labels[MODE_LABEL], object["spec"]["manifest"]["mode"]);
                // Valid keys and values, or the selector would refuse them.
                let selector = format!(
                    "{STATE_LABEL}={},{MODE_LABEL}={}",
                    state.as_str(),
                    labels[MODE_LABEL].as_str().expect("a string")
                );
                let selector = Selector::parse(Some(&selector), None)
                    .unwrap_or_else(|e| panic!("{selector}: {e}"));
                assert!(selector.matches(&object), "{object}");
            }
        }
        let decorator = plugin(
            &row(State::Running, Some(Mode::Decorator)),
            &Owners::default(),
        );
        assert_eq!(decorator["metadata"]["labels"][MODE_LABEL], "decorator");
        // Nothing serves: a state, no mode.
        let failed = plugin(&row(State::Failed, None), &Owners::default());
        assert_eq!(failed["metadata"]["labels"], json!({STATE_LABEL: "failed"}));
        // The Table carries the labels for `--show-labels` and `-L`.
        let table = table(std::slice::from_ref(&decorator), 1);
        assert_eq!(
            table["rows"][0]["object"]["metadata"]["labels"],
            decorator["metadata"]["labels"]
        );
        assert_eq!(table["rows"][0]["cells"][2], "running");
    }

    #[test]
    fn a_redacted_plugin_has_no_error_texts_shadow_examples_or_directories() {
        let full = json!({
            "metadata": {"name": "database"},
            "spec": {"file": "/plugins/team-a/database.wasm"},
            "status": {
                "state": "degraded",
                "reason": "secret: hunter2",
                "lastError": "hunter2",
                "candidateError": "hunter2",
                "shadow": {"file": "/plugins/team-a/database.next.wasm", "parentsDiffering": 1, "examples": [{"parent": "a/b"}],
                    "whatIf": {"changed": 1, "details": {"changed": ["hunter2/db"]}}},
                "promotion": {"blocked": "1 of 1 parents (100.0 %) would change", "whatIf": {"changed": 1, "details": {"changed": ["hunter2/db"]}}},
            },
        });
        let seen = redacted(full);
        assert!(!seen.to_string().contains("hunter2"), "{seen}");
        assert!(!seen.to_string().contains("team-a"), "{seen}");
        assert_eq!(seen["spec"]["file"], "database.wasm");
        assert_eq!(seen["status"]["state"], "degraded");
        assert_eq!(seen["status"]["shadow"]["parentsDiffering"], 1);
        assert!(seen["status"]["shadow"].get("examples").is_none());
        assert_eq!(seen["status"]["shadow"]["whatIf"]["changed"], 1);
        assert_eq!(seen["status"]["promotion"]["whatIf"]["changed"], 1);
        assert!(seen["status"]["promotion"]["blocked"].is_string());
        assert_eq!(seen["status"]["withheld"], WITHHELD);
    }
}
