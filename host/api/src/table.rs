//! `kubectl get plugins` columns: the `meta.k8s.io/v1` `Table` a client
//! asks for with `Accept: ...;as=Table`. k8s-openapi has no type for it
//! (it is not in any group's OpenAPI document), so it is a small struct
//! here; each row's object is kube's `PartialObjectMetadata`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::core::{PartialObjectMeta, PartialObjectMetaExt as _};
use serde::Serialize;
use serde_json::Value;

use crate::plugin::{Plugin, PluginStatus};
use kubeplug_operator::shadow::ShadowStatus;
use kubeplug_operator::whatif::Phase;

/// A `Table` of plugins.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Table {
    api_version: &'static str,
    kind: &'static str,
    metadata: ListMeta,
    column_definitions: &'static [Column],
    rows: Vec<Row>,
}

/// A column (kube's `TableColumnDefinition`).
#[derive(Debug, Serialize)]
pub struct Column {
    name: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
    format: &'static str,
    description: &'static str,
    /// 0: always shown; 1: with `-o wide`.
    priority: u8,
}

/// A row: the cells in column order, and the object's metadata (for
/// `--show-labels`, `-L` and names).
#[derive(Debug, Serialize)]
struct Row {
    cells: Vec<Value>,
    object: PartialObjectMeta<Plugin>,
}

const fn column(
    name: &'static str,
    kind: &'static str,
    format: &'static str,
    description: &'static str,
    priority: u8,
) -> Column {
    Column {
        name,
        kind,
        format,
        description,
        priority,
    }
}

const COLUMNS: &[Column] = &[
    column("Name", "string", "name", "The plugin's name.", 0),
    column("Version", "string", "", "The version serving.", 0),
    column(
        "State",
        "string",
        "",
        "running, degraded, rolled-back, blocked (by the promotion gate) or failed.",
        0,
    ),
    column("Leader", "string", "", "The replica that writes for it.", 0),
    column(
        "Reconciles",
        "integer",
        "",
        "Reconciles finished by this replica.",
        0,
    ),
    column("Errors", "integer", "", "Of those, how many failed.", 0),
    column("Queue", "integer", "", "Parents waiting.", 0),
    column("Parent", "string", "", "The parent kind.", 1),
    column(
        "Shadow",
        "string",
        "",
        "The candidate in shadow: its version, how many parents it decides differently, and how many its what-if would change.",
        1,
    ),
    column(
        "Reason",
        "string",
        "",
        "Why it is degraded, failed or blocked.",
        1,
    ),
];

/// `kubectl get plugins` columns of `objects`, at `resource_version`.
pub fn table(objects: &[Plugin], resource_version: u64) -> Table {
    let rows = objects
        .iter()
        .map(|o| {
            let s = &o.status;
            let text = |v: &Option<String>| Value::from(v.clone().unwrap_or_default());
            Row {
                cells: vec![
                    o.metadata.name.clone().unwrap_or_default().into(),
                    text(&s.version),
                    s.state.as_str().into(),
                    text(&s.leader),
                    s.reconciles.unwrap_or(0).into(),
                    s.errors.unwrap_or(0).into(),
                    s.queue_depth.unwrap_or(0).into(),
                    o.spec
                        .manifest
                        .as_ref()
                        .map(|m| m.parent.clone())
                        .unwrap_or_default()
                        .into(),
                    s.shadow
                        .as_ref()
                        .map(shadow_cell)
                        .unwrap_or_default()
                        .into(),
                    reason_cell(s).into(),
                ],
                object: o.metadata.clone().into_response_partial(),
            }
        })
        .collect();
    Table {
        api_version: "meta.k8s.io/v1",
        kind: "Table",
        metadata: ListMeta {
            resource_version: Some(resource_version.to_string()),
            ..ListMeta::default()
        },
        column_definitions: COLUMNS,
        rows,
    }
}

/// `0.2.0: 3/10 differ, what-if 67/200 change`.
fn shadow_cell(shadow: &ShadowStatus) -> String {
    let mut cell = format!(
        "{}: {}/{} differ",
        shadow.version, shadow.parents_differing, shadow.parents_compared
    );
    if let Some(whatif) = shadow
        .whatif
        .as_ref()
        .filter(|w| w.phase == Phase::Complete)
    {
        cell.push_str(&format!(
            ", what-if {}/{} change",
            whatif.summary.changed, whatif.summary.parents
        ));
    }
    cell
}

/// The Reason column: why the plugin is degraded or failed, shown to
/// callers who may get `plugins/details`; to everyone, why the promotion
/// gate keeps its latest version out (counts and kinds, no cluster data).
fn reason_cell(status: &PluginStatus) -> String {
    match (&status.reason, &status.promotion) {
        (Some(reason), _) => reason.clone(),
        (None, Some(promotion)) => format!("promotion gate: {}", promotion.blocked),
        (None, None) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::resources::{Owners, plugin};

    #[test]
    fn the_table_shows_the_whatif_and_the_gate_to_everyone() {
        let full = plugin(&fixtures::full_row(), &Owners::default());
        let shadow = full.status.shadow.as_ref().expect("a shadow");
        assert_eq!(shadow_cell(shadow), "0.2.0: 1/2 differ, what-if 1/1 change");
        let redacted = full.clone().redacted();
        assert_eq!(
            reason_cell(&redacted.status),
            "promotion gate: 1 of 1 parents (100.0 %) would change"
        );
        assert_eq!(reason_cell(&full.status), "secret: hunter2");
        let table = serde_json::to_value(table(&[redacted], 7)).expect("JSON");
        assert_eq!(table["metadata"]["resourceVersion"], "7");
        assert_eq!(table["columnDefinitions"][0]["type"], "string");
        assert_eq!(
            table["rows"][0]["cells"],
            serde_json::json!([
                "database",
                "0.1.0",
                "degraded",
                "",
                10,
                1,
                2,
                "Database.example.com",
                "0.2.0: 1/2 differ, what-if 1/1 change",
                "promotion gate: 1 of 1 parents (100.0 %) would change",
            ])
        );
        assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    }
}
