//! The `Plugin` object the group serves, as typed structs: built from a
//! registry row ([`crate::resources::plugin`]), versioned and streamed by
//! the [`crate::tracker`], and the source of the OpenAPI schemas
//! ([`crate::openapi`]), so that what `kubectl explain plugins` describes is
//! what `kubectl get plugins -o yaml` shows.
//!
//! The doc comments of these types are what `kubectl explain` prints: plain
//! sentences for users, without Rust markup.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use schemars::JsonSchema;
use serde::Serialize;

use kubeplug_core::manifest::Mode;
use kubeplug_core::rollout::State;
use kubeplug_operator::registry::Promotion;
use kubeplug_operator::shadow::ShadowStatus;

use crate::group::{API_VERSION, GROUP, VERSION};
use crate::schema::free_form;

pub const KIND: &str = "Plugin";
pub const LIST_KIND: &str = "PluginList";
pub const RESOURCE: &str = "plugins";

/// The label every `Plugin` carries with its state (`running`, `degraded`,
/// `failed`, `rolled-back` or `blocked`, as `status.state`), so that
/// `kubectl get plugins -l kubeplug.io/state=failed` finds the broken ones.
pub const STATE_LABEL: &str = "kubeplug.io/state";

/// The label of a serving plugin's manifest mode (`composite` or
/// `decorator`, as `spec.manifest.mode`); absent while nothing serves.
pub const MODE_LABEL: &str = "kubeplug.io/mode";

/// What `status.withheld` says on a redacted object.
pub const WITHHELD: &str = "reason, lastError, candidateError, shadow examples, what-if details and the file's directory are shown to callers who may get plugins/details";

/// A Wasm reconcile plugin loaded by the kubeplug host: what it asks for,
/// which version serves, and how it is doing. Read-only: plugins are
/// shipped as files.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    rename = "io.kubeplug.v1alpha1.Plugin",
    extend("x-kubernetes-group-version-kind" = [{"group": GROUP, "version": VERSION, "kind": KIND}])
)]
pub struct Plugin {
    /// APIVersion: kubeplug.io/v1alpha1.
    pub api_version: &'static str,
    /// Kind: Plugin.
    pub kind: &'static str,
    /// The plugin's name, when the serving version was loaded
    /// (creationTimestamp), and the labels kubeplug.io/state (status.state)
    /// and kubeplug.io/mode (spec.manifest.mode, while a version serves),
    /// which label selectors match.
    pub metadata: ObjectMeta,
    /// Where the plugin comes from and what its manifest asks for.
    pub spec: PluginSpec,
    /// How the plugin is doing on the replica that answered.
    pub status: PluginStatus,
}

/// PluginSpec is what the host was given: a file, and the manifest of the
/// version serving from it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "io.kubeplug.v1alpha1.PluginSpec")]
pub struct PluginSpec {
    /// The .wasm file in the host's plugin directory (its name only, for
    /// callers who may not get plugins/details).
    pub file: String,
    /// The manifest of the serving version (absent while nothing serves).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest: Option<PluginManifest>,
}

/// PluginManifest is the serving version's manifest, with kinds named as
/// grants name them (Kind.group).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "io.kubeplug.v1alpha1.PluginManifest")]
pub struct PluginManifest {
    /// The parent kind (Kind.group).
    pub parent: String,
    /// composite (owns children) or decorator (patches its parents).
    #[schemars(with = "String")]
    pub mode: Mode,
    /// Child kinds it may create.
    pub children: Vec<String>,
    /// Kinds it reads besides its children.
    pub related: Vec<String>,
    /// Namespaces it watches (empty: all its grant allows).
    pub namespaces: Vec<String>,
    /// Finalizer it keeps on its parents, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finalizer: Option<String>,
    /// Resync period.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resync_seconds: Option<u32>,
}

/// PluginStatus is what the answering replica knows of a plugin: its state
/// and version, who writes for it, its counters, and any candidate or
/// blocked version.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "io.kubeplug.v1alpha1.PluginStatus")]
pub struct PluginStatus {
    /// running, degraded (an older version serves, or it cannot see all it
    /// needs), rolled-back (the latest version failed its probation; the
    /// previous one serves again), blocked (the promotion gate keeps the
    /// latest version out; the previous one serves) or failed (nothing
    /// serves).
    #[schemars(with = "String")]
    pub state: State,
    /// Every cache it reads has listed once.
    pub synced: bool,
    /// When the serving version was loaded (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loaded_at: Option<String>,
    /// The version serving.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// sha256 of the serving component.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Why it is degraded or failed (shown to callers who may get
    /// plugins/details).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The last load error (shown to callers who may get plugins/details).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The replica that leads it (writes for it); for a sharded plugin,
    /// each owner with how many shards it owns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// A sharded plugin's shards, each with the replica that owns it (none
    /// while it is handed over).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardOwner>,
    /// The candidate <plugin>.next.wasm deciding beside the serving
    /// version, writing nothing: file, version, digest, since, comparisons,
    /// parentsCompared, parentsDiffering, candidateErrors, skipped, examples
    /// (parent, differences: what child/status/parentPatch/events/error
    /// differs, with field paths and both values), and whatIf (the
    /// candidate run once against every parent: phase, parents, changed,
    /// unchanged, refused, failed, creates, updates per kind and field,
    /// prunes, status fields, parentPatches; details names the parents).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub shadow: Option<ShadowStatus>,
    /// Why the candidate file cannot run in shadow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate_error: Option<String>,
    /// A new version the grant's promotion gate keeps out of service while
    /// the previous one serves: blocked (each rule its what-if breaks),
    /// version, digest, and whatIf (the report it was judged on).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub promotion: Option<Promotion>,
    /// Reconciles finished by the answering replica.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconciles: Option<u64>,
    /// Of those, how many failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<u64>,
    /// Parents waiting in its queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_depth: Option<usize>,
    /// Set when reason, lastError, candidateError, shadow examples and
    /// what-if details are left out: they are shown to callers who may get
    /// plugins/details.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub withheld: Option<String>,
}

/// ShardOwner is one shard of a sharded plugin and the replica that owns it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "io.kubeplug.v1alpha1.ShardOwner")]
pub struct ShardOwner {
    /// The shard number (the kubeplug.io/shard label of its parents).
    pub shard: u16,
    /// The replica that owns it (absent while it is handed over).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// A list of plugins.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    rename = "io.kubeplug.v1alpha1.PluginList",
    extend("x-kubernetes-group-version-kind" = [{"group": GROUP, "version": VERSION, "kind": LIST_KIND}])
)]
pub struct PluginList {
    /// APIVersion: kubeplug.io/v1alpha1.
    pub api_version: &'static str,
    /// Kind: PluginList.
    pub kind: &'static str,
    /// The list's resourceVersion, from which a watch resumes.
    pub metadata: ListMeta,
    /// The plugins.
    pub items: Vec<Plugin>,
}

impl PluginList {
    pub fn new(items: Vec<Plugin>, resource_version: u64) -> PluginList {
        PluginList {
            api_version: API_VERSION,
            kind: LIST_KIND,
            metadata: ListMeta {
                resource_version: Some(resource_version.to_string()),
                ..ListMeta::default()
            },
            items,
        }
    }
}

impl Plugin {
    /// The plugin as a caller without `get` on `plugins/details` sees it:
    /// no error texts, no shadow examples or what-if details (they may
    /// quote cluster data a plugin was handed), files without their
    /// directory; as [`kubeplug_operator::registry::Status::summary`] gives
    /// `/plugins` to others than loopback clients.
    pub fn redacted(mut self) -> Plugin {
        let status = &mut self.status;
        status.reason = None;
        status.last_error = None;
        status.candidate_error = None;
        status.shadow = status.shadow.take().map(|shadow| {
            let shadow = shadow.summary();
            ShadowStatus {
                file: file_name(&shadow.file),
                ..shadow
            }
        });
        status.promotion = status.promotion.take().map(Promotion::summary);
        status.withheld = Some(WITHHELD.into());
        self.spec.file = file_name(&self.spec.file);
        self
    }
}

fn file_name(path: &str) -> String {
    std::path::Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::resources::{Owners, plugin};

    #[test]
    fn a_redacted_plugin_has_no_error_texts_shadow_examples_or_directories() {
        let full = plugin(&fixtures::full_row(), &Owners::default());
        let before = serde_json::to_string(&full).expect("JSON");
        assert!(before.contains("hunter2") && before.contains("team-a"));
        let seen = serde_json::to_value(full.redacted()).expect("JSON");
        assert!(!seen.to_string().contains("hunter2"), "{seen}");
        assert!(!seen.to_string().contains("team-a"), "{seen}");
        assert_eq!(seen["spec"]["file"], "database.wasm");
        assert_eq!(seen["status"]["state"], "degraded");
        assert_eq!(seen["status"]["shadow"]["parentsDiffering"], 1);
        assert_eq!(seen["status"]["shadow"]["file"], "database.next.wasm");
        assert!(seen["status"]["shadow"].get("examples").is_none());
        assert_eq!(seen["status"]["shadow"]["whatIf"]["changed"], 1);
        assert_eq!(seen["status"]["promotion"]["whatIf"]["changed"], 1);
        assert!(seen["status"]["promotion"]["blocked"].is_string());
        assert_eq!(seen["status"]["withheld"], WITHHELD);
    }
}
