//! The promotion gate: a new version of a plugin whose grant sets
//! `promotion:` serves only once a what-if over every parent (see
//! [`crate::whatif`]) passes the gate. Until then the previous version
//! serves, the plugin is `blocked` with each rule broken, and the parents
//! that would change get a `PromotionBlocked` Event.
//!
//! The report judged is the candidate's own when the same content
//! (plugin and settings) ran as `<name>.next.wasm` before it was promoted,
//! else one run now, on the serving version's caches. A first load has
//! nothing serving to compare with and is not gated; nor is a version whose
//! manifest changes shape (its what-if cannot run on the serving caches):
//! that one is blocked, with the reason, until the gate is lifted.

use std::path::Path;

use serde::Serialize;

use super::Registry;
use crate::controller::Identity;
use crate::whatif::{self, Phase, Report};
use kubeplug_core::contract::Event;
use kubeplug_core::rollout::{ROLLBACK_EVENTS, State};
use kubeplug_runtime::Plugin;

/// A new version the gate keeps out of service.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Promotion {
    /// Each rule the what-if breaks, joined.
    pub blocked: String,
    pub version: String,
    pub digest: String,
    /// The report it was judged on.
    #[serde(rename = "whatIf")]
    pub whatif: Report,
}

impl Promotion {
    /// Without the report's details (they hold cluster data).
    pub fn summary(self) -> Promotion {
        Promotion {
            whatif: self.whatif.summary(),
            ..self
        }
    }
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
    ) -> Result<(), Promotion> {
        let Some(gate) = identity.grant.grant.promotion.clone() else {
            return Ok(());
        };
        let (handle, shadow) = {
            let files = self.files();
            let Some(serving) = files.get(path).and_then(|e| e.serving.as_ref()) else {
                return Ok(());
            };
            if serving.key == key {
                return Ok(());
            }
            (
                serving.controller.preview_handle(),
                serving.controller.shadow().filter(|s| s.key() == key),
            )
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
        Err(Promotion {
            blocked: breaches.join("; "),
            version: plugin.manifest().version.clone(),
            digest: plugin.digest().to_string(),
            whatif: report,
        })
    }

    /// Keep the version judged in `promotion` (content key `key`) out of
    /// service: the previous one serves; the file is judged again when it
    /// or the policy changes.
    pub(super) fn blocked(&self, path: &Path, key: String, promotion: Promotion) {
        let mut files = self.files();
        let Some(entry) = files.get_mut(path) else {
            return;
        };
        entry.attempted = key;
        entry.revalidate = false;
        entry.last_error = None;
        let Some(serving) = &entry.serving else {
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
            .details
            .as_ref()
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
