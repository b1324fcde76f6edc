//! Scanning the plugin directory: every new or changed file at a plugin's
//! location starts a load (each in its own task), a file at no plugin's
//! location is refused unread, and a removed file stops its controller.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::placement::Place;
use super::{FileEntry, Registry};
use kubeplug_runtime::Plugin;

/// A removed plugin that kept a finalizer on its parents leaves them stuck
/// in Terminating when deleted: say so, and how to release them.
fn warn_orphaned_finalizer(plugin: &Plugin) {
    let manifest = plugin.manifest();
    if let Some(finalizer) = &manifest.finalizer {
        let resource = if manifest.parent.group.is_empty() {
            manifest.parent.plural.clone()
        } else {
            format!("{}.{}", manifest.parent.plural, manifest.parent.group)
        };
        tracing::warn!(
            plugin = %manifest.name,
            %finalizer,
            "the removed plugin keeps finalizer {finalizer} on its {resource}: a deleted one stays Terminating until the plugin is back or `kubeplug release-finalizers {} --resource {resource}` releases it",
            manifest.name
        );
    }
}

impl Registry {
    /// Bring the loaded plugins in line with the directory: start a load for
    /// every new or changed file (each in its own task). Returns true if a
    /// file was too fresh to load, or still loading, so a later scan is
    /// needed.
    pub async fn sync(self: &Arc<Self>) -> bool {
        let (placed, mut again) = match self.layout.scan(&self.wiring.policy.current()) {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(dir = %self.dir.display(), %error, "cannot scan plugin directory");
                return true;
            }
        };
        let mut present = Vec::new();
        let mut live = Vec::new();
        let mut candidates = Vec::new();
        for (path, place) in placed {
            present.push(path.clone());
            match place {
                Err(reason) => self.misplaced(&path, reason.to_string()),
                Ok(Place::Live(name)) => live.push((path, name)),
                Ok(Place::Candidate(name)) => candidates.push((path, name)),
            }
        }
        self.remove_missing(&present);
        again |= self.sync_candidates(&candidates, &live);
        for (path, name) in live {
            if self.loading.contains(&path) {
                again = true;
                continue;
            }
            let candidate = match self.layout.read(&path, &Place::Live(name)) {
                Ok(c) => c,
                Err(error) => {
                    self.failed(&path, None, error);
                    continue;
                }
            };
            let attempted = self.files().get(&path).map(|e| e.attempted.clone());
            if attempted.as_deref() == Some(candidate.key.as_str()) {
                continue;
            }
            self.loading.insert(path.clone());
            let registry = self.clone();
            tokio::spawn(async move {
                registry.load(&path, candidate).await;
                registry.loading.remove(&path);
            });
        }
        // A record write that failed is tried again; a file held back by
        // the record is let through once another replica promoted it.
        let registry = self.clone();
        tokio::spawn(async move { registry.settle_records().await });
        again
    }

    /// A file at no plugin's location: refused unread, and whatever it
    /// served stops (the policy moved the plugin elsewhere). Logged once per
    /// reason.
    pub(super) fn misplaced(&self, path: &Path, reason: String) {
        let key = format!("misplaced: {reason}");
        {
            let mut files = self.files();
            let entry = files.entry(path.to_path_buf()).or_default();
            if let Some(serving) = entry.serving.take() {
                tracing::warn!(plugin = %serving.name, file = %path.display(), %reason, "the file is no longer at its plugin's location; stopping its controller (children are kept)");
                self.wiring.metrics.plugin_removed(&serving.name);
                serving.controller.stop();
            }
            entry.revalidate = false;
            if entry.attempted == key {
                return;
            }
        }
        self.failed(path, Some(key), reason);
    }

    fn remove_missing(&self, present: &[PathBuf]) {
        let mut files = self.files();
        let gone: Vec<PathBuf> = files
            .iter()
            .filter(|(p, e)| !present.contains(p) && !p.exists() && e.source_error.is_none())
            .map(|(p, _)| p)
            .cloned()
            .collect();
        for path in gone {
            match files.remove(&path) {
                Some(FileEntry {
                    serving: Some(s), ..
                }) => {
                    tracing::info!(plugin = %s.name, file = %path.display(), "plugin file removed; stopping its controller (children are kept)");
                    self.wiring.metrics.plugin_removed(&s.name);
                    warn_orphaned_finalizer(&s.controller.plugin());
                    s.controller.stop();
                }
                // Held back by its gate with nothing serving: its state
                // goes from the metrics too.
                Some(FileEntry {
                    serving: None,
                    promotion: Some(held),
                    ..
                }) => self.wiring.metrics.plugin_removed(&held.plugin),
                _ => {}
            }
        }
    }
}
