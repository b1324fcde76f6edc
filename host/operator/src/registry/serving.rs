//! Serving an admitted plugin: start its controller, upgrade it in place,
//! or keep the old version serving when the new one is refused; a policy
//! change re-admits every file and stops what the new policy refuses.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::promotion::Held;
use super::{Candidate, FileEntry, Registry, Serving, now_rfc3339};
use crate::controller::{Controller, Identity};
use kubeplug_core::manifest::Mode;
use kubeplug_core::rollback::RollbackSettings;
use kubeplug_core::rollout::State;
use kubeplug_runtime::Plugin;

impl Registry {
    /// Load, admit and serve one file; on any failure keep what serves.
    pub(super) async fn load(&self, path: &Path, candidate: Candidate) {
        let key = candidate.key.clone();
        let rollback = candidate.settings.rollback;
        match self.admit(path, candidate).await {
            Ok((plugin, identity)) => match self.gate(path, &key, &plugin, &identity).await {
                Ok(()) => {
                    let gated = identity.grant.grant.promotion.is_some();
                    if self.serve(path, key, plugin, identity, rollback) && gated {
                        self.settle_records().await;
                    }
                }
                Err(Held::Blocked(promotion)) => self.blocked(path, key, *promotion),
                Err(Held::Unknown(error)) => self.failed(path, None, error.to_string()),
            },
            Err(failure) => {
                let error = failure.to_string();
                self.revoke_if_revalidating(path, &error);
                self.failed(path, (!failure.retryable()).then_some(key), error)
            }
        }
    }

    /// After a policy change, a plugin the new policy refuses stops serving
    /// (its children stay): a grant the platform withdrew is withdrawn now,
    /// not at the next upgrade.
    fn revoke_if_revalidating(&self, path: &Path, error: &str) {
        let mut files = self.files();
        let Some(entry) = files.get_mut(path) else {
            return;
        };
        if !std::mem::take(&mut entry.revalidate) {
            return;
        }
        if let Some(serving) = entry.serving.take() {
            tracing::warn!(plugin = %serving.name, %error, "the new policy refuses this plugin; stopping its controller (children are kept)");
            self.wiring.metrics.plugin_removed(&serving.name);
            serving.controller.stop();
        }
    }

    /// The policy changed: admit every file again under it.
    pub(super) fn revalidate_all(&self) {
        let mut files = self.files();
        for entry in files.values_mut() {
            entry.attempted.clear();
            entry.revalidate = true;
        }
    }

    /// Refuse a plugin whose name another file already serves, or whose
    /// parent kind (group and kind, whatever the version) another file
    /// already reconciles, unless both are decorators: decorators only merge
    /// the labels and annotations their grants allow, each under its own
    /// field manager, so several may stamp the same Pods (`pod-annotator`
    /// and `pod-labeler`), whereas two composites would fight over one
    /// parent's children and status.
    fn conflict(
        files: &BTreeMap<PathBuf, FileEntry>,
        path: &Path,
        plugin: &Plugin,
    ) -> Option<String> {
        for (other_path, entry) in files.iter().filter(|(p, _)| p.as_path() != path) {
            let Some(serving) = &entry.serving else {
                continue;
            };
            let other = serving.controller.plugin();
            if other.name() == plugin.name() {
                return Some(format!(
                    "plugin name {} is already served from {}",
                    plugin.name(),
                    other_path.display()
                ));
            }
            let decorators = [other.manifest(), plugin.manifest()]
                .iter()
                .all(|m| m.mode == Mode::Decorator);
            if other.manifest().parent.same_kind(&plugin.manifest().parent) && !decorators {
                return Some(format!(
                    "parent kind {} is already reconciled by plugin {} ({})",
                    plugin.manifest().parent,
                    other.name(),
                    other_path.display()
                ));
            }
        }
        None
    }

    /// Serve `plugin` from `path`: `false` when it does not (its name or
    /// kind is taken, or this very version was rolled back).
    fn serve(
        &self,
        path: &Path,
        key: String,
        plugin: Plugin,
        identity: Identity,
        rollback: RollbackSettings,
    ) -> bool {
        let w = &self.wiring;
        let mut files = self.files();
        if let Some(error) = Self::conflict(&files, path, &plugin) {
            drop(files);
            self.failed(path, Some(key), error);
            return false;
        }
        let entry = files.entry(path.to_path_buf()).or_default();
        // A version rolled back is not tried again until its file changes
        // (a policy change re-admits every file: not a reason).
        if let Some(serving) = &entry.serving
            && serving
                .controller
                .rolled_back()
                .is_some_and(|back| back.key == key)
        {
            entry.attempted = key;
            entry.revalidate = false;
            return false;
        }
        entry.attempted = key.clone();
        entry.last_error = None;
        entry.revalidate = false;
        entry.promotion = None;
        let manifest = plugin.manifest().clone();
        w.metrics.plugin_info(
            &manifest.name,
            &manifest.version,
            plugin.digest(),
            State::Running,
        );
        let loaded_at = now_rfc3339();
        match entry.serving.take() {
            // Admitted again after a policy change, and nothing changed for
            // it: keep serving as it was, without re-queueing every parent.
            Some(old)
                if old.key == key
                    && old.controller.plugin().manifest() == &manifest
                    && old.controller.grant() == &identity.grant =>
            {
                entry.serving = Some(old);
            }
            Some(old)
                if kubeplug_core::manifest::same_shape(
                    old.controller.plugin().manifest(),
                    &manifest,
                ) && old.controller.grant() == &identity.grant =>
            {
                tracing::info!(plugin = %manifest.name, version = %manifest.version, digest = %plugin.digest(), "upgrading plugin in place");
                old.controller.upgrade(plugin, key.clone(), rollback);
                entry.serving = Some(Serving {
                    name: manifest.name,
                    controller: old.controller,
                    loaded_at,
                    key,
                });
            }
            old => {
                if let Some(old) = old {
                    tracing::info!(plugin = %old.name, "plugin changed shape; restarting its controller");
                    if old.name != manifest.name {
                        w.metrics.plugin_removed(&old.name);
                    }
                    old.controller.stop();
                }
                tracing::info!(plugin = %manifest.name, version = %manifest.version, digest = %plugin.digest(), file = %path.display(), service_account = %identity.grant.user(), "plugin loaded");
                let controller = Controller::start(
                    plugin,
                    identity,
                    &w.informers,
                    w.metrics.clone(),
                    w.apply_metrics.clone(),
                    w.settings.clone(),
                );
                entry.serving = Some(Serving {
                    name: manifest.name,
                    controller,
                    loaded_at,
                    key,
                });
            }
        }
        true
    }

    pub(super) fn failed(&self, path: &Path, key: Option<String>, error: String) {
        let mut files = self.files();
        let entry = files.entry(path.to_path_buf()).or_default();
        if let Some(key) = key {
            entry.attempted = key;
        }
        // A newer file replaced the one the gate kept out (whose state, if
        // nothing served, was the plugin's in the metrics).
        if let Some(held) = entry.promotion.take()
            && entry.serving.is_none()
        {
            self.wiring.metrics.plugin_removed(&held.plugin);
        }
        // The file's path without `.wasm` (`database`, `team-a/database`):
        // a file in a team's folder must not count against the plugin it
        // is named after.
        let label = entry
            .serving
            .as_ref()
            .map(|s| s.name.clone())
            .unwrap_or_else(|| {
                self.layout
                    .root
                    .rel(path)
                    .with_extension("")
                    .to_string_lossy()
                    .into_owned()
            });
        match &entry.serving {
            Some(s) => {
                let p = s.controller.plugin();
                self.wiring.metrics.plugin_info(
                    &s.name,
                    &p.manifest().version,
                    p.digest(),
                    State::Degraded,
                );
                tracing::error!(plugin = %s.name, file = %path.display(), %error, "new plugin version refused; the previous version keeps serving");
            }
            None => {
                tracing::error!(file = %path.display(), %error, "plugin refused");
            }
        }
        self.wiring.metrics.load_failed(&label);
        entry.last_error = Some(error);
    }
}
