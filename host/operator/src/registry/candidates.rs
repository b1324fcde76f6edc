//! Candidates (`<name>.next.wasm` beside a live file): admitted as a load
//! would be, then run in shadow of the serving version (see
//! [`crate::shadow`]) or loaded for a preview of the upgrade.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::placement::{Place, pair_of};
use super::{Candidate, Registry};
use crate::serving::{Run, fits};
use crate::shadow::Shadow;
use kubeplug_runtime::Plugin;

impl Registry {
    /// Bring shadows in line with the candidate files present: load a new
    /// or changed candidate beside a serving plugin, stop the shadow of one
    /// removed. Returns true if a candidate waits for its live file to load.
    ///
    /// A candidate pairs only with the live file of its plugin in its own
    /// folder; one in another folder than that file is refused (a row of
    /// its own, `failed`), never shadowed.
    pub(super) fn sync_candidates(
        self: &Arc<Self>,
        candidates: &[(PathBuf, String)],
        live: &[(PathBuf, String)],
    ) -> bool {
        let mut again = false;
        let mut pairs: Vec<(PathBuf, PathBuf)> = Vec::new();
        for (next, name) in candidates {
            match pair_of(next, name, live) {
                Some(file) => pairs.push((next.clone(), file)),
                None => {
                    if let Some((file, _)) = live.iter().find(|(_, bound)| bound == name) {
                        let reason = format!(
                            "{} is not beside plugin {name}'s file ({}): a candidate stands in the same folder as the live file it would replace; it is never shadowed or previewed",
                            self.layout.root.rel(next).display(),
                            self.layout.root.rel(file).display()
                        );
                        self.misplaced(next, reason);
                    }
                }
            }
        }
        {
            let mut files = self.files();
            // A candidate now beside its live file is no longer refused.
            for (next, _) in &pairs {
                if files.get(next).is_some_and(|e| e.serving.is_none()) {
                    files.remove(next);
                }
            }
            for (path, entry) in files.iter_mut() {
                if pairs.iter().any(|(_, live)| live == path) {
                    continue;
                }
                entry.candidate_error = None;
                if let Some(serving) = &entry.serving
                    && let Some(shadow) = serving.controller.shadow()
                {
                    tracing::info!(plugin = %serving.name, file = %shadow.status().file, "candidate removed; shadow stopped");
                    serving.controller.set_shadow(None);
                }
            }
        }
        for (next, live) in &pairs {
            let name = candidates
                .iter()
                .find(|(c, _)| c == next)
                .map(|(_, n)| n.clone())
                .unwrap_or_default();
            let candidate = match self.layout.read(next, &Place::Candidate(name)) {
                Ok(c) => c,
                Err(error) => {
                    self.candidate_failed(live, String::new(), error);
                    continue;
                }
            };
            {
                let loading = &self.loading;
                if loading.contains(next) {
                    continue;
                }
                let files = self.files();
                let Some(entry) = files.get(live) else {
                    again |= loading.contains(live);
                    continue;
                };
                let Some(serving) = &entry.serving else {
                    again |= loading.contains(live);
                    continue;
                };
                let shadowing = serving.controller.shadow();
                let tried = shadowing
                    .as_ref()
                    .map(|s| s.key())
                    .or(entry.candidate_error.as_ref().map(|(k, _)| k.as_str()));
                if tried == Some(candidate.key.as_str()) {
                    continue;
                }
            }
            self.loading.insert(next.clone());
            let (registry, next, live) = (self.clone(), next.clone(), live.clone());
            tokio::spawn(async move {
                registry.shadow(&live, &next, candidate).await;
                registry.loading.remove(&next);
            });
        }
        again
    }

    /// Admit the candidate `next` as a load would, and run it in shadow of
    /// the plugin served from `live`.
    async fn shadow(&self, live: &Path, next: &Path, candidate: Candidate) {
        let key = candidate.key.clone();
        let admitted = self.admit(next, candidate).await.map_err(|f| f.to_string());
        let files = self.files();
        let Some(serving) = files.get(live).and_then(|e| e.serving.as_ref()) else {
            return;
        };
        let current = serving.controller.plugin();
        let refused = match admitted {
            Err(error) => Some(error),
            Ok((plugin, _)) if plugin.name() != current.name() => Some(format!(
                "the candidate is plugin {}, not {}",
                plugin.name(),
                current.name()
            )),
            Ok((plugin, _)) if let Err(other) = fits(&plugin, &current, Run::Shadow) => {
                Some(other.to_string())
            }
            Ok((plugin, _)) => {
                tracing::info!(plugin = %plugin.name(), version = %plugin.manifest().version, digest = %plugin.digest(), file = %next.display(), "candidate loaded in shadow: it decides beside the live version and writes nothing");
                serving.controller.set_shadow(Some(Shadow::new(
                    plugin,
                    key.clone(),
                    next.display().to_string(),
                    self.wiring.settings.concurrency,
                )));
                None
            }
        };
        drop(files);
        match refused {
            None => {
                if let Some(entry) = self.files().get_mut(live) {
                    entry.candidate_error = None;
                }
            }
            Some(error) => self.candidate_failed(live, key, error),
        }
    }

    /// A candidate cannot run in shadow: stop any shadow and say why.
    fn candidate_failed(&self, live: &Path, key: String, error: String) {
        let mut files = self.files();
        let Some(entry) = files.get_mut(live) else {
            return;
        };
        if entry
            .candidate_error
            .as_ref()
            .is_some_and(|(k, _)| *k == key)
        {
            return;
        }
        if let Some(serving) = &entry.serving {
            tracing::error!(plugin = %serving.name, file = %live.display(), %error, "candidate refused; no shadow");
            serving.controller.set_shadow(None);
        }
        entry.candidate_error = Some((key, error));
    }

    /// The candidate version of `plugin`: `<stem>.next.wasm` beside the
    /// file it serves from (settings `<stem>.next.yaml`), compiled and
    /// admitted as a load would be, serving nothing. For previews of an
    /// upgrade before it ships.
    pub async fn candidate(&self, plugin: &str) -> Result<Plugin, String> {
        let live = {
            let files = self.files();
            files
                .iter()
                .find(|(_, e)| e.serving.as_ref().is_some_and(|s| s.name == plugin))
                .map(|(path, _)| path.clone())
        }
        .ok_or_else(|| format!("plugin {plugin} is not loaded"))?;
        // Only beside the live file: a candidate elsewhere is no version
        // of this plugin (see `sync_candidates`).
        let next = live.with_file_name(format!("{plugin}.next.wasm"));
        if !next.is_file() {
            return Err(format!(
                "no candidate: {} does not exist",
                self.layout.root.rel(&next).display()
            ));
        }
        let candidate = self
            .layout
            .read(&next, &Place::Candidate(plugin.to_string()))?;
        let (loaded, _) = self
            .admit(&next, candidate)
            .await
            .map_err(|f| f.to_string())?;
        if loaded.name() != plugin {
            return Err(format!(
                "{} is plugin {}, not {plugin}",
                next.display(),
                loaded.name()
            ));
        }
        Ok(loaded)
    }
}
