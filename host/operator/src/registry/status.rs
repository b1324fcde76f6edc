//! The rows of `/plugins` (and the aggregated API's `plugins`): what each
//! file serves, in which [`State`], and why; the same state in metrics.

use std::path::Path;

use serde::Serialize;

use super::Registry;
use crate::shadow::ShadowStatus;
use kubeplug_core::rollout::State;

/// One row of `/plugins`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub file: String,
    pub name: Option<String>,
    pub version: Option<String>,
    pub digest: Option<String>,
    pub state: State,
    /// RFC 3339 time the serving version was loaded.
    pub loaded_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Why the plugin is degraded or cannot see all it needs now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Every cache the plugin reads has listed once.
    pub synced: bool,
    /// This replica may write for the plugin now (a sharded plugin: for
    /// one of its shards at least).
    pub leading: bool,
    /// A sharded plugin's shards: how many, and which this replica owns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<Shards>,
    /// The candidate (`<stem>.next.wasm`) in shadow, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowStatus>,
    /// Why the candidate file cannot run in shadow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate_error: Option<String>,
    /// The latest file, kept out of service by the promotion gate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion: Option<super::Promotion>,
    /// What the aggregated API adds (not on `/plugins`).
    #[serde(skip)]
    pub detail: Option<PluginDetail>,
}

/// A sharded plugin's shards as this replica sees them.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Shards {
    pub count: u16,
    /// Shards this replica owns, their caches listed.
    pub owned: Vec<u16>,
}

/// A serving plugin's manifest and counters.
#[derive(Debug, Clone)]
pub struct PluginDetail {
    pub manifest: kubeplug_core::manifest::Manifest,
    pub reconciles: u64,
    pub errors: u64,
    pub queue_depth: usize,
}

impl Status {
    /// The row without what only the host's operators should see: the
    /// file's path (only its name stays) and error text, which a plugin
    /// can fill with anything, including what it was handed.
    pub fn summary(self) -> Status {
        let file = Path::new(&self.file)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Status {
            file,
            last_error: None,
            reason: None,
            shadow: self.shadow.map(ShadowStatus::summary),
            candidate_error: None,
            promotion: self.promotion.map(super::Promotion::summary),
            ..self
        }
    }
}

impl Registry {
    /// Every file and what it serves.
    pub fn status(&self) -> Vec<Status> {
        let files = self.files();
        files
            .iter()
            .map(|(path, entry)| {
                let plugin = entry.serving.as_ref().map(|s| s.controller.plugin());
                let problem = entry.serving.as_ref().and_then(|s| s.controller.problem());
                let stuck = problem.as_ref().is_some_and(|p| p.persistent);
                let rolled_back = entry
                    .serving
                    .as_ref()
                    .and_then(|s| s.controller.rolled_back());
                let state = match State::of(
                    entry.serving.is_some(),
                    entry.last_error.is_some()
                        || entry.unrecorded.is_some()
                        || entry.source_error.is_some(),
                    rolled_back.is_some(),
                    stuck,
                ) {
                    State::Running | State::Failed if entry.promotion.is_some() => State::Blocked,
                    state => state,
                };
                let rolled_back = rolled_back.map(|back| {
                    format!(
                        "version {} (sha256:{}) was rolled back at {}: {}; the previous version serves, and the file is not loaded again until it changes",
                        back.version, back.digest, back.at, back.reason
                    )
                });
                let blocked = entry.promotion.as_ref().map(|p| {
                    format!(
                        "version {} (sha256:{}) is kept out of service by the promotion gate: {}; {}",
                        p.version,
                        p.digest,
                        p.blocked,
                        match entry.serving {
                            Some(_) => "the previous version serves",
                            None => "nothing serves this plugin here",
                        }
                    )
                });
                let unrecorded = entry.unrecorded.as_ref().filter(|_| entry.serving.is_some()).cloned();
                let unpulled = entry
                    .source_error
                    .as_ref()
                    .filter(|_| entry.serving.is_some())
                    .map(|(_, e)| format!("the version on disk serves; the one named in --plugin-artifacts cannot be pulled: {e}"));
                let reason = problem.map(|p| p.message).or(unpulled).or(rolled_back).or(blocked).or(unrecorded).or_else(|| {
                    entry
                        .last_error
                        .as_ref()
                        .filter(|_| entry.serving.is_some())
                        .map(|e| format!("serving the previous version: {e}"))
                });
                Status {
                    file: path.display().to_string(),
                    name: plugin.as_ref().map(|p| p.name().to_string()).or_else(|| {
                        entry
                            .promotion
                            .as_ref()
                            .map(|p| p.plugin.clone())
                            .or_else(|| entry.source_error.as_ref().map(|(p, _)| p.clone()))
                    }),
                    version: plugin.as_ref().map(|p| p.manifest().version.clone()),
                    digest: plugin.as_ref().map(|p| p.digest().to_string()),
                    state,
                    loaded_at: entry.serving.as_ref().map(|s| s.loaded_at.clone()),
                    last_error: entry
                        .last_error
                        .clone()
                        .or_else(|| entry.source_error.as_ref().map(|(_, e)| e.clone())),
                    reason,
                    synced: entry
                        .serving
                        .as_ref()
                        .is_some_and(|s| s.controller.synced()),
                    leading: entry
                        .serving
                        .as_ref()
                        .is_some_and(|s| s.controller.leading()),
                    shards: entry
                        .serving
                        .as_ref()
                        .and_then(|s| s.controller.shards())
                        .map(|(count, owned)| Shards { count, owned }),
                    shadow: entry
                        .serving
                        .as_ref()
                        .and_then(|s| s.controller.shadow())
                        .map(|shadow| shadow.status()),
                    candidate_error: entry.candidate_error.as_ref().map(|(_, e)| e.clone()),
                    promotion: entry.promotion.clone(),
                    detail: entry.serving.as_ref().map(|s| {
                        let (reconciles, errors) = s.controller.counts();
                        PluginDetail {
                            manifest: s.controller.plugin().manifest().clone(),
                            reconciles,
                            errors,
                            queue_depth: s.controller.queue_len(),
                        }
                    }),
                }
            })
            .collect()
    }

    /// Serving plugins whose caches have not listed once yet, leaving out
    /// those that cannot list at all (a missing CRD, RBAC): they are
    /// `degraded` and must not hold the host's readiness back.
    pub fn unsynced(&self) -> Vec<String> {
        let files = self.files();
        files
            .values()
            .filter_map(|e| e.serving.as_ref())
            .filter(|s| {
                !s.controller.synced() && !s.controller.problem().is_some_and(|p| p.persistent)
            })
            .map(|s| s.name.clone())
            .collect()
    }

    /// Refresh each serving plugin's state in metrics (`plugin_info`): a
    /// plugin whose kinds cannot be watched turns `degraded` while it lasts.
    pub fn report_states(&self) {
        for status in self.status() {
            let (Some(name), Some(version), Some(digest)) =
                (&status.name, &status.version, &status.digest)
            else {
                continue;
            };
            if status.state == State::Failed {
                continue;
            }
            self.wiring
                .metrics
                .plugin_info(name, version, digest, status.state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_row_keeps_shadow_counts_and_drops_what_holds_cluster_data() {
        let shadow = ShadowStatus {
            file: "/plugins/db.next.wasm".into(),
            version: "0.2.0".into(),
            digest: "ab".into(),
            since: "2026-11-30T00:00:00Z".into(),
            comparisons: 4,
            parents_compared: 2,
            parents_differing: 1,
            candidate_errors: 0,
            skipped: 0,
            examples: vec![serde_json::json!({"parent": "a/b", "differences": ["secret"]})],
            whatif: None,
        };
        let row = Status {
            file: "/plugins/db.wasm".into(),
            name: Some("db".into()),
            version: None,
            digest: None,
            state: State::RolledBack,
            loaded_at: None,
            last_error: Some("boom".into()),
            reason: Some("rolled back".into()),
            synced: true,
            leading: true,
            shards: None,
            shadow: Some(shadow),
            candidate_error: Some("refused".into()),
            promotion: None,
            detail: None,
        };
        let summary = serde_json::to_value(row.summary()).unwrap();
        assert_eq!(summary["state"], "rolled-back");
        assert_eq!(summary["shadow"]["parentsDiffering"], 1);
        assert!(summary["shadow"].get("examples").is_none(), "{summary}");
        assert!(summary.get("candidateError").is_none(), "{summary}");
        assert!(summary.get("lastError").is_none(), "{summary}");
    }
}
