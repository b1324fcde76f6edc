//! The promotion record: for each plugin whose grant has a promotion gate,
//! the version that last served under it, kept in the cluster (one
//! ConfigMap in the host's namespace, a key per plugin) rather than in the
//! process. The gate judges a new version against what serves; a process
//! that starts with nothing serving (a restart, a failover, a new replica)
//! has nothing to judge against, and without the record a version the gate
//! had blocked would simply serve. With it, such a process serves a gated
//! plugin's file only if it is the version last promoted (or the record has
//! none yet: a first install); any other waits, blocked, until the platform
//! puts the promoted version back or lifts the gate.
//!
//! The record is written by the host's own identity (its Role in its own
//! namespace), never by a plugin's: a team cannot promote its own version.
//! Each plugin's key is applied under a field manager of its own, so
//! replicas and plugins never take each other's keys.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::{Deserialize, Serialize};

use super::{FileEntry, Registry};

/// The record's ConfigMap, in the host's namespace (`--lease-namespace`).
pub const RECORD_NAME: &str = "kubeplug-promotions";

/// The version of one plugin last promoted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Promoted {
    /// Content key (plugin and settings): what the gate judged.
    pub key: String,
    pub version: String,
    /// The component's sha256, for readers.
    pub digest: String,
    /// RFC 3339: when it started serving.
    pub promoted_at: String,
    /// RFC 3339: when it was rolled back (it does not serve again from a
    /// restart: the version it replaced is gone with the process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back_at: Option<String>,
}

/// Why the record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot read or write the promotion record {namespace}/{RECORD_NAME}: {source}")]
    Api {
        namespace: String,
        source: kube::Error,
    },
    #[error(
        "the promotion record {namespace}/{RECORD_NAME} holds an unreadable entry for plugin {plugin}: {source}"
    )]
    Malformed {
        namespace: String,
        plugin: String,
        source: serde_json::Error,
    },
}

/// Where the record lives, and the client that reads and writes it.
#[derive(Clone)]
pub struct Record {
    api: Api<ConfigMap>,
    namespace: String,
}

impl Record {
    /// The record in `namespace`, through the host's own `client`.
    pub fn new(client: kube::Client, namespace: &str) -> Record {
        Record {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The version last promoted for `plugin`; `None` when none ever was.
    pub async fn get(&self, plugin: &str) -> Result<Option<Promoted>, RecordError> {
        let found = self
            .api
            .get_opt(RECORD_NAME)
            .await
            .map_err(|source| self.api_error(source))?;
        let Some(text) = found.and_then(|cm| cm.data?.remove(plugin)) else {
            return Ok(None);
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| RecordError::Malformed {
                namespace: self.namespace.clone(),
                plugin: plugin.to_string(),
                source,
            })
    }

    /// Record `promoted` as `plugin`'s promoted version (creating the
    /// ConfigMap if needed).
    pub async fn set(&self, plugin: &str, promoted: &Promoted) -> Result<(), RecordError> {
        let value = serde_json::to_string(promoted).expect("a promotion serializes");
        let patch = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": RECORD_NAME,
                "labels": { "app.kubernetes.io/managed-by": "kubeplug" },
            },
            "data": { plugin: value },
        });
        let manager = format!("kubeplug-promotion-{plugin}");
        self.api
            .patch(
                RECORD_NAME,
                &PatchParams::apply(&manager).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map(drop)
            .map_err(|source| self.api_error(source))
    }

    fn api_error(&self, source: kube::Error) -> RecordError {
        RecordError::Api {
            namespace: self.namespace.clone(),
            source,
        }
    }
}

/// What the record should say for the plugin serving from `entry`, if its
/// grant has a gate: the version serving (or, once rolled back, the version
/// rolled back, marked so).
fn due(entry: &FileEntry) -> Option<(String, Promoted)> {
    let serving = entry.serving.as_ref()?;
    serving.controller.grant().grant.promotion.as_ref()?;
    let plugin = serving.controller.plugin();
    let promoted = match serving.controller.rolled_back() {
        Some(back) if back.key == serving.key => Promoted {
            key: back.key,
            version: back.version,
            digest: back.digest,
            promoted_at: serving.loaded_at.clone(),
            rolled_back_at: Some(back.at),
        },
        _ => Promoted {
            key: serving.key.clone(),
            version: plugin.manifest().version.clone(),
            digest: plugin.digest().to_string(),
            promoted_at: serving.loaded_at.clone(),
            rolled_back_at: None,
        },
    };
    Some((serving.name.clone(), promoted))
}

impl Registry {
    /// Bring the record in line with what serves under a gate (after each
    /// load, and at every rescan, so a write that failed is tried again),
    /// and let a file held back by the record load again once the record
    /// names it (another replica promoted it meanwhile). One pass at a time.
    pub(super) async fn settle_records(&self) {
        let _one = self.recording.lock().await;
        // What to write, and which held-back files to ask about.
        type Due = Vec<(PathBuf, String, Promoted)>;
        type Held = Vec<(PathBuf, String, String)>;
        let (due, held): (Due, Held) = {
            let files = self.files();
            let due = files
                .iter()
                .filter_map(|(path, entry)| {
                    let (plugin, promoted) = due(entry)?;
                    (entry.recorded.as_ref() != Some(&promoted))
                        .then(|| (path.clone(), plugin, promoted))
                })
                .collect();
            let held = files
                .iter()
                .filter_map(|(path, entry)| {
                    let promotion = entry.promotion.as_ref()?;
                    (entry.serving.is_none() && promotion.whatif.is_none()).then(|| {
                        (
                            path.clone(),
                            promotion.plugin.clone(),
                            entry.attempted.clone(),
                        )
                    })
                })
                .collect();
            (due, held)
        };
        let record = &self.wiring.promotions;
        for (path, plugin, promoted) in due {
            let written = record.set(&plugin, &promoted).await;
            let mut files = self.files();
            let Some(entry) = files.get_mut(&path) else {
                continue;
            };
            match written {
                Ok(()) => {
                    tracing::info!(%plugin, version = %promoted.version, digest = %promoted.digest, rolled_back = promoted.rolled_back_at.is_some(), "recorded as the promoted version");
                    entry.recorded = Some(promoted);
                    entry.unrecorded = None;
                }
                Err(error) => {
                    tracing::error!(%plugin, %error, "the promoted version is not recorded; trying again at the next rescan");
                    entry.unrecorded = Some(format!(
                        "the version serving is not recorded as promoted ({error}): until it is, a restart judges this plugin's file against the version recorded before, or serves whatever file is there if none was; tried again at every rescan"
                    ));
                }
            }
        }
        for (path, plugin, key) in held {
            let Ok(Some(promoted)) = record.get(&plugin).await else {
                continue;
            };
            if promoted.key == key && promoted.rolled_back_at.is_none() {
                tracing::info!(%plugin, "the version held back is now the one recorded as promoted; loading it");
                let mut files = self.files();
                if let Some(entry) = files.get_mut(&path).filter(|e| e.attempted == key) {
                    entry.attempted.clear();
                }
            }
        }
    }
}
