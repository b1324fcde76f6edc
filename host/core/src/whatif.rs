//! Fleet-wide what-if: what a candidate version would do to every parent,
//! tallied from the [`Plan`]s it decides (nothing is written), and the
//! promotion gate a platform sets on that tally.
//!
//! A shadow compares a candidate on the reconciles that happen to arrive; a
//! preview shows one parent. A what-if runs the candidate once against every
//! cached parent and counts, per parent, what its plan would write: children
//! created, updated (per kind and field) or pruned, status fields changed,
//! parent patches, answers the fence refuses and calls that fail. A parent
//! counts once per kind and field however many children change it.
//!
//! Field paths read as `kubectl explain` and JSONPath write them:
//! `spec.template.spec.containers[0].image`, with keys that are not plain
//! names bracketed (`metadata.labels["app.kubernetes.io/name"]`). Lists of
//! the same length are compared item by item; a list that grows or shrinks
//! is named whole.
//!
//! Those paths are cluster data: a key is whatever the plugin wrote, and a
//! candidate handed a Secret's value can spell it as a label key. So the
//! [`Summary`], which any reader of the plugin's status sees, names only
//! the schema part of a path ([`schema_part`]: `metadata.labels`, `spec`,
//! `status`), and the paths themselves are in [`Details`], shown to those
//! who may read the details.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::plan::{APPLIED_HASH, Action, Plan};
use crate::policy::{Gate, KindRef};

/// Parents kept by name (in [`Details::changed`]) at most.
pub const NAMES: usize = 1000;
/// Examples (parents with what would change) kept at most.
pub const EXAMPLES: usize = 5;
/// Parents named per kind and field at most.
const PARENTS_PER_ROW: usize = 3;

/// What a field path says when the plan would remove fields: the apply of a
/// child drops fields its previous apply set and this one does not, and the
/// host keeps only the hash of what it applied, not the fields.
pub const REMOVED_FIELDS: &str = "(fields the candidate no longer sets)";

/// Parents per kind (creates, prunes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindCount {
    pub kind: String,
    pub parents: usize,
}

/// Parents per kind and field (updates, status changes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldCount {
    pub kind: String,
    pub field: String,
    pub parents: usize,
    /// A few of those parents (`namespace/name`): in [`Details`] only, as
    /// parent names are cluster data.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
}

/// The counts of a what-if: kinds, the schema part of fields
/// ([`schema_part`]) and numbers, no cluster values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Parents the candidate was run against.
    pub parents: usize,
    /// Parents whose plan writes something (any row below).
    pub changed: usize,
    /// Parents whose plan writes nothing.
    pub unchanged: usize,
    /// Parents whose answer the fence refuses.
    pub refused: usize,
    /// Parents where the candidate's call fails (error, trap, deadline,
    /// memory).
    pub failed: usize,
    pub creates: Vec<KindCount>,
    pub updates: Vec<FieldCount>,
    pub prunes: Vec<KindCount>,
    /// Status fields the candidate would write.
    pub status: Vec<FieldCount>,
    /// Parents whose labels or annotations the candidate would patch.
    pub parent_patches: usize,
}

impl Summary {
    /// The share of parents that would change, in percent (0 with none).
    pub fn changed_percent(&self) -> f64 {
        if self.parents == 0 {
            0.0
        } else {
            self.changed as f64 * 100.0 / self.parents as f64
        }
    }
}

/// What the counts leave out because it is cluster data: which parents, and
/// what the plugin wrote about them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Details {
    /// The parents that would change (`namespace/name`), sorted, at most
    /// [`NAMES`].
    pub changed: Vec<String>,
    /// More parents would change than [`Details::changed`] names.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Updated kinds and fields with a few of their parents.
    pub updates: Vec<FieldCount>,
    /// A few parents and their rows: `{parent, creates, updates, prunes,
    /// status}`.
    pub examples: Vec<Value>,
    /// A few refusals: `{parent, reason}`.
    pub refusals: Vec<Value>,
    /// A few failures: `{parent, error}`.
    pub failures: Vec<Value>,
    /// Status fields the candidate would write, with their whole paths.
    #[serde(default)]
    pub status: Vec<FieldCount>,
}

/// Top-level fields every reader may see named: those of the object kinds
/// a plugin writes, which the API server's schemas fix.
const SCHEMA_TOP: [&str; 13] = [
    "apiVersion",
    "kind",
    "metadata",
    "spec",
    "status",
    "data",
    "stringData",
    "binaryData",
    "type",
    "immutable",
    "rules",
    "roleRef",
    "subjects",
];
/// Fields of `metadata` every reader may see named.
const SCHEMA_METADATA: [&str; 7] = [
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "name",
    "namespace",
    "generateName",
];

/// The part of a field path that no value can have built: its first name
/// if the schema fixes it (else `*`), and under `metadata` the second
/// (`metadata.labels["team-of-hunter2"]` reads `metadata.labels`). What is
/// below `spec`, `status` or `data` is the plugin's to name, so it is cut.
pub fn schema_part(field: &str) -> String {
    if field == REMOVED_FIELDS {
        return field.to_string();
    }
    let segment = |text: &str| -> String {
        text.split(['.', '['])
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let first = segment(field);
    if !SCHEMA_TOP.contains(&first.as_str()) {
        return "*".into();
    }
    if first != "metadata" {
        return first;
    }
    let second = field
        .strip_prefix("metadata.")
        .map(segment)
        .filter(|s| SCHEMA_METADATA.contains(&s.as_str()));
    match second {
        Some(second) => format!("metadata.{second}"),
        None => first,
    }
}

/// The running tally of a what-if.
#[derive(Debug, Default)]
pub struct Tally {
    parents: usize,
    unchanged: usize,
    changed: BTreeSet<String>,
    creates: BTreeMap<String, usize>,
    prunes: BTreeMap<String, usize>,
    updates: BTreeMap<(String, String), (usize, Vec<String>)>,
    status: BTreeMap<String, usize>,
    /// The same per schema part ([`schema_part`]), for the summary.
    schema_updates: BTreeMap<(String, String), usize>,
    schema_status: BTreeMap<String, usize>,
    parent_patches: usize,
    refused: usize,
    failed: usize,
    examples: Vec<Value>,
    refusals: Vec<Value>,
    failures: Vec<Value>,
}

impl Tally {
    /// Count the plan `plan` decided for `parent` (`namespace/name`), whose
    /// object is `parent_object` (its status is compared with the plan's)
    /// and whose kind is `parent_kind`.
    pub fn plan(
        &mut self,
        parent: &str,
        parent_kind: &KindRef,
        parent_object: &Value,
        plan: &Plan,
    ) {
        self.parents += 1;
        let mut creates = BTreeSet::new();
        let mut updates = BTreeSet::new();
        for step in &plan.children {
            let kind = kind_of(&step.child);
            match &step.action {
                Action::Create | Action::CreateOnce => {
                    creates.insert(kind);
                }
                Action::Update { live, .. } => {
                    let mut fields = changed_fields(live, &step.child);
                    fields.retain(|f| !host_owned(f));
                    if fields.is_empty() {
                        fields.insert(REMOVED_FIELDS.to_string());
                    }
                    for field in fields {
                        updates.insert((kind.clone(), field));
                    }
                }
                Action::Unchanged => {}
            }
        }
        let prunes: BTreeSet<String> = plan.prune.iter().map(kind_of).collect();
        let status: BTreeSet<String> = match &plan.status {
            None => BTreeSet::new(),
            Some(desired) => {
                let fields = changed_fields(&parent_object["status"], desired);
                if fields.is_empty() {
                    [REMOVED_FIELDS.to_string()].into()
                } else {
                    fields.into_iter().map(|f| format!("status.{f}")).collect()
                }
            }
        };
        let patched = plan.parent_patch.is_some();
        if creates.is_empty()
            && updates.is_empty()
            && prunes.is_empty()
            && status.is_empty()
            && !patched
        {
            self.unchanged += 1;
            return;
        }
        self.changed.insert(parent.to_string());
        for kind in &creates {
            *self.creates.entry(kind.clone()).or_default() += 1;
        }
        for kind in &prunes {
            *self.prunes.entry(kind.clone()).or_default() += 1;
        }
        for key in &updates {
            let (count, parents) = self.updates.entry(key.clone()).or_default();
            *count += 1;
            if parents.len() < PARENTS_PER_ROW {
                parents.push(parent.to_string());
            }
        }
        for field in &status {
            *self.status.entry(field.clone()).or_default() += 1;
        }
        // A parent counts once per schema part, however many of its paths
        // it covers.
        let schema_updates: BTreeSet<(String, String)> = updates
            .iter()
            .map(|(kind, field)| (kind.clone(), schema_part(field)))
            .collect();
        for key in schema_updates {
            *self.schema_updates.entry(key).or_default() += 1;
        }
        let schema_status: BTreeSet<String> = status.iter().map(|f| schema_part(f)).collect();
        for field in schema_status {
            *self.schema_status.entry(field).or_default() += 1;
        }
        if patched {
            self.parent_patches += 1;
        }
        if self.examples.len() < EXAMPLES {
            self.examples.push(json!({
                "parent": parent,
                "kind": parent_kind.to_string(),
                "creates": creates,
                "updates": updates.iter().map(|(k, f)| json!({"kind": k, "field": f})).collect::<Vec<_>>(),
                "prunes": prunes,
                "status": status,
                "parentPatch": plan.parent_patch,
            }));
        }
    }

    /// The fence refused the answer for `parent`.
    pub fn refused(&mut self, parent: &str, reason: &str) {
        self.parents += 1;
        self.refused += 1;
        if self.refusals.len() < EXAMPLES {
            self.refusals
                .push(json!({"parent": parent, "reason": reason}));
        }
    }

    /// The candidate's call failed for `parent`.
    pub fn failed(&mut self, parent: &str, error: &str) {
        self.parents += 1;
        self.failed += 1;
        if self.failures.len() < EXAMPLES {
            self.failures
                .push(json!({"parent": parent, "error": error}));
        }
    }

    pub fn summary(&self) -> Summary {
        let kinds = |map: &BTreeMap<String, usize>| {
            map.iter()
                .map(|(kind, &parents)| KindCount {
                    kind: kind.clone(),
                    parents,
                })
                .collect()
        };
        Summary {
            parents: self.parents,
            changed: self.changed.len(),
            unchanged: self.unchanged,
            refused: self.refused,
            failed: self.failed,
            creates: kinds(&self.creates),
            updates: self
                .schema_updates
                .iter()
                .map(|((kind, field), &parents)| FieldCount {
                    kind: kind.clone(),
                    field: field.clone(),
                    parents,
                    examples: Vec::new(),
                })
                .collect(),
            prunes: kinds(&self.prunes),
            status: status_rows(&self.schema_status),
            parent_patches: self.parent_patches,
        }
    }

    pub fn details(&self) -> Details {
        Details {
            changed: self.changed.iter().take(NAMES).cloned().collect(),
            truncated: self.changed.len() > NAMES,
            updates: self
                .updates
                .iter()
                .map(|((kind, field), (parents, examples))| FieldCount {
                    kind: kind.clone(),
                    field: field.clone(),
                    parents: *parents,
                    examples: examples.clone(),
                })
                .collect(),
            examples: self.examples.clone(),
            refusals: self.refusals.clone(),
            failures: self.failures.clone(),
            status: status_rows(&self.status),
        }
    }
}

fn status_rows(fields: &BTreeMap<String, usize>) -> Vec<FieldCount> {
    fields
        .iter()
        .map(|(field, &parents)| FieldCount {
            kind: String::new(),
            field: field.clone(),
            parents,
            examples: Vec::new(),
        })
        .collect()
}

/// `Kind.group` (`Kind` for the core group) of an object.
fn kind_of(object: &Value) -> String {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    KindRef {
        group: group.into(),
        kind: object["kind"].as_str().unwrap_or_default().into(),
    }
    .to_string()
}

/// Fields the host writes on every child, not the plugin.
fn host_owned(field: &str) -> bool {
    field == format!("metadata.annotations[\"{APPLIED_HASH}\"]")
        || field == "metadata.resourceVersion"
}

/// The fields `desired` sets that `live` does not hold with the same value,
/// as paths (see the module doc). Fields only `live` has (the API server's
/// defaults, other managers' fields) are not changes.
pub fn changed_fields(live: &Value, desired: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk(live, desired, &mut String::new(), &mut out);
    out
}

fn walk(live: &Value, desired: &Value, path: &mut String, out: &mut BTreeSet<String>) {
    match (live, desired) {
        (Value::Object(have), Value::Object(want)) => {
            for (key, value) in want {
                let len = path.len();
                push_key(path, key);
                match have.get(key) {
                    Some(live) => walk(live, value, path, out),
                    None if value.is_null() => {}
                    None => {
                        out.insert(path.clone());
                    }
                }
                path.truncate(len);
            }
        }
        (Value::Array(have), Value::Array(want)) if have.len() == want.len() => {
            for (i, (live, value)) in have.iter().zip(want).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                walk(live, value, path, out);
                path.truncate(len);
            }
        }
        (live, desired) if live != desired => {
            out.insert(if path.is_empty() {
                ".".into()
            } else {
                path.clone()
            });
        }
        _ => {}
    }
}

/// Append `key` to a field path: `.key`, or `["key"]` unless it is a plain
/// name (letters, digits, `_` and `-`).
fn push_key(path: &mut String, key: &str) {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
    } else {
        path.push_str(&format!("[{}]", Value::String(key.into())));
    }
}

// Judging a what-if against a gate is the what-if's; the gate's settings
// are the grant's (`crate::policy::Gate`).
impl Gate {
    /// Why `summary` breaks the gate: one sentence per rule broken, none if
    /// the candidate may serve.
    pub fn breaches(&self, summary: &Summary) -> Vec<String> {
        let mut out = Vec::new();
        let percent = summary.changed_percent();
        if let Some(max) = self.max_changed_percent
            && percent > max
        {
            out.push(format!(
                "{} of {} parents ({percent:.1} %) would change, more than the gate's {max} %",
                summary.changed, summary.parents
            ));
        }
        for prune in &summary.prunes {
            let barred =
                self.no_prunes_any || self.no_prunes.iter().any(|k| k.to_string() == prune.kind);
            if barred {
                out.push(format!(
                    "{} parents would lose a {} (the gate allows no prunes of it)",
                    prune.parents, prune.kind
                ));
            }
        }
        if summary.refused > self.max_refused {
            out.push(format!(
                "the fence would refuse {} answers (the gate allows {})",
                summary.refused, self.max_refused
            ));
        }
        if summary.failed > self.max_failed {
            out.push(format!(
                "{} calls would fail (the gate allows {})",
                summary.failed, self.max_failed
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests;
