//! The promotion gate: a new version of a plugin whose grant sets
//! `promotion:` serves only once a what-if over every parent (see
//! [`crate::whatif`]) passes the gate. Until then the previous version
//! serves, the plugin is `blocked` with each rule broken, and the parents
//! that would change get a `PromotionBlocked` Event.
//!
//! The report judged is the candidate's own when the same content
//! (plugin and settings) ran as `<name>.next.wasm` before it was promoted,
//! else one run now, on the serving version's caches. A first load has
//! nothing serving to compare with: it serves only if it is the version
//! last promoted, as the cluster remembers it (see [`super::promoted`]), or
//! if none ever was. A version whose manifest changes shape (its what-if
//! cannot run on the serving caches) is blocked, with the reason, until the
//! gate is lifted.

use std::path::Path;

use serde::Serialize;

use super::Registry;
use super::promoted::RecordError;
use crate::controller::Identity;
use crate::whatif::{self, Phase, Report};
use kubeplug_core::contract::Event;
use kubeplug_core::rollout::{ROLLBACK_EVENTS, State};
use kubeplug_runtime::Plugin;

/// A new version the gate keeps out of service.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Promotion {
    /// The plugin's name (its row's, when nothing serves it).
    #[serde(skip)]
    pub plugin: String,
    /// Each rule the what-if breaks, joined.
    pub blocked: String,
    pub version: String,
    pub digest: String,
    /// The report it was judged on; none when nothing served to judge it
    /// against (a process that started with it: see [`super::promoted`]).
    #[serde(rename = "whatIf", skip_serializing_if = "Option::is_none")]
    pub whatif: Option<Report>,
}

impl Promotion {
    /// Without the report's details (they hold cluster data).
    pub fn summary(self) -> Promotion {
        Promotion {
            whatif: self.whatif.map(Report::summary),
            ..self
        }
    }
}

/// Why a version does not serve now.
pub(super) enum Held {
    /// The gate keeps it out.
    Blocked(Box<Promotion>),
    /// The record of promoted versions cannot be read: asked again at the
    /// next rescan.
    Unknown(RecordError),
}

impl Registry {
    /// Judge `plugin` (content key `key`), admitted for the file at `path`,
    /// by its grant's promotion gate: `Err` with what keeps it out.
    pub(super) async fn gate(
        &self,
        path: &Path,
        key: &str,
        plugin: &Plugin,
        identity: &Identity,
    ) -> Result<(), Held> {
        let Some(gate) = identity.grant.grant.promotion.clone() else {
            return Ok(());
        };
        let serving = {
            let files = self.files();
            files.get(path).and_then(|e| e.serving.as_ref()).map(|s| {
                (
                    s.key == key,
                    s.controller.serving(),
                    s.controller.shadow().filter(|s| s.key() == key),
                )
            })
        };
        let (handle, shadow) = match serving {
            None => return self.unserved(key, plugin).await,
            Some((true, ..)) => return Ok(()),
            Some((false, handle, shadow)) => (handle, shadow),
        };
        let shadowed = match shadow {
            Some(shadow) => shadow.whatif_finished().await,
            None => None,
        };
        let report = match shadowed {
            Some(report) if report.complete() => report,
            _ => whatif::run_to_end(handle, plugin.clone()).await,
        };
        let breaches = match (&report.phase, &report.error) {
            (Phase::Complete, _) => gate.breaches(&report.summary),
            (_, error) => vec![format!(
                "its what-if cannot run ({}); lift the gate to promote it",
                error.as_deref().unwrap_or("stopped")
            )],
        };
        if breaches.is_empty() {
            tracing::info!(plugin = %plugin.name(), version = %plugin.manifest().version, parents = report.summary.parents, changed = report.summary.changed, "the new version passes its promotion gate");
            return Ok(());
        }
        Err(Held::Blocked(Box::new(Promotion {
            plugin: plugin.name().to_string(),
            blocked: breaches.join("; "),
            version: plugin.manifest().version.clone(),
            digest: plugin.digest().to_string(),
            whatif: Some(report),
        })))
    }

    /// Nothing serves `plugin` in this process: it serves only if it is the
    /// version last promoted (content key `key`), or if none ever was.
    async fn unserved(&self, key: &str, plugin: &Plugin) -> Result<(), Held> {
        let record = &self.wiring.promotions;
        let blocked = |reason: String| {
            Err(Held::Blocked(Box::new(Promotion {
                plugin: plugin.name().to_string(),
                blocked: reason,
                version: plugin.manifest().version.clone(),
                digest: plugin.digest().to_string(),
                whatif: None,
            })))
        };
        match record.get(plugin.name()).await.map_err(Held::Unknown)? {
            None => Ok(()),
            Some(promoted) if promoted.key == key => match &promoted.rolled_back_at {
                None => Ok(()),
                Some(at) => blocked(format!(
                    "it was rolled back at {at} (recorded in {}/{}) and the version it replaced is not here to serve; put that version back, or lift the gate",
                    record.namespace(),
                    super::promoted::RECORD_NAME,
                )),
            },
            Some(promoted) => Err(Held::Blocked(Box::new(Promotion {
                plugin: plugin.name().to_string(),
                blocked: format!(
                    "it is not the version last promoted ({} sha256:{}, at {}, recorded in {}/{}) and nothing serves in this process to judge it against; put that version back, or lift the gate to promote this one",
                    promoted.version,
                    promoted.digest,
                    promoted.promoted_at,
                    record.namespace(),
                    super::promoted::RECORD_NAME,
                ),
                version: plugin.manifest().version.clone(),
                digest: plugin.digest().to_string(),
                whatif: None,
            }))),
        }
    }

    /// Keep the version judged in `promotion` (content key `key`) out of
    /// service: the previous one serves; the file is judged again when it
    /// or the policy changes.
    pub(super) fn blocked(&self, path: &Path, key: String, promotion: Promotion) {
        let mut files = self.files();
        // A process that starts with this file has no entry for it yet.
        let entry = files.entry(path.to_path_buf()).or_default();
        entry.attempted = key;
        entry.revalidate = false;
        entry.last_error = None;
        let Some(serving) = &entry.serving else {
            tracing::warn!(plugin = %promotion.plugin, version = %promotion.version, digest = %promotion.digest, reason = %promotion.blocked, "version kept out of service by its promotion gate; nothing serves this plugin here");
            self.wiring.metrics.plugin_info(
                &promotion.plugin,
                &promotion.version,
                &promotion.digest,
                State::Blocked,
            );
            entry.promotion = Some(promotion);
            return;
        };
        let live = serving.controller.plugin();
        tracing::warn!(plugin = %serving.name, version = %promotion.version, serving_version = %live.manifest().version, reason = %promotion.blocked, "new version kept out of service by its promotion gate; the previous version serves");
        self.wiring.metrics.plugin_info(
            &serving.name,
            &live.manifest().version,
            live.digest(),
            State::Blocked,
        );
        let event = Event {
            warning: true,
            reason: "PromotionBlocked".into(),
            message: format!(
                "plugin {} {} is kept out of service by its promotion gate: {}; {} serves",
                serving.name,
                promotion.version,
                promotion.blocked,
                live.manifest().version
            ),
        };
        let changed = promotion
            .whatif
            .as_ref()
            .and_then(|w| w.details.as_ref())
            .map(|d| {
                d.changed
                    .iter()
                    .take(ROLLBACK_EVENTS)
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        serving.controller.announce(&changed, &event, "Promotion");
        entry.promotion = Some(promotion);
    }
}
