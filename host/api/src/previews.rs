//! `previews` (namespaced, `create` only): what a plugin would do to a
//! parent right now, against the live cluster, with nothing written. The
//! objects as served and described ([`crate::openapi`]); creating one is
//! [`crate::server`]'s (`server/preview.rs`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::group::{GROUP, VERSION};
use crate::schema::free_form;

pub const KIND: &str = "Preview";
pub const RESOURCE: &str = "previews";

/// A dry run: what a plugin would do to a parent right now against the live
/// cluster (children to create, update with a field-level diff, or prune;
/// the status, parent patch and events), with nothing written. Create only.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    rename = "io.kubeplug.v1alpha1.Preview",
    extend("x-kubernetes-group-version-kind" = [{"group": GROUP, "version": VERSION, "kind": KIND}])
)]
pub struct Preview {
    /// APIVersion: kubeplug.io/v1alpha1.
    pub api_version: &'static str,
    /// Kind: Preview.
    pub kind: &'static str,
    /// The preview's namespace (the parent's), its name if one was given,
    /// and when it ran (creationTimestamp).
    pub metadata: ObjectMeta,
    /// What to preview.
    pub spec: PreviewSpec,
    /// children (action create/update/unchanged/prune, kind, name, diff of
    /// path/live/desired), status (changes, desired, diff), parentPatch,
    /// events; or error, the plugin's or the fence's refusal.
    #[schemars(schema_with = "free_form")]
    pub status: Value,
}

/// PreviewSpec names the plugin to run and the parent to run it on:
/// parentName or parent.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "io.kubeplug.v1alpha1.PreviewSpec")]
pub struct PreviewSpec {
    /// The plugin to run.
    pub plugin: String,
    /// A live parent in this namespace, as the plugin's cache holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_name: Option<String>,
    /// Run the candidate version <plugin>.next.wasm beside the serving file
    /// instead of the serving version: what the upgrade would change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate: Option<bool>,
    /// Or a parent object (e.g. a live one with a changed spec); its
    /// namespace is the preview's.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub parent: Option<Value>,
}
