//! What the host's artifact puller (`kubeplug run --plugin-artifacts`)
//! tells the registry: which file it wrote for each plugin and the key whose
//! signature it verified on it, so that a grant asking for a signature
//! (`signedBy`) admits that file and no other; and why a pull failed, so
//! the plugin's row says so while the version already on disk serves on.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use parking_lot::{Mutex, MutexGuard};

use super::Registry;

/// Each plugin's pulled files (hex SHA-256 of the `.wasm`) and the key
/// whose signature was verified on each, if one was asked: the version on
/// disk and, while it is written, the next.
#[derive(Debug, Default)]
pub struct Provenance {
    verified: Mutex<HashMap<String, HashMap<String, Option<String>>>>,
}

impl Provenance {
    /// `plugin`'s file of `digest` was pulled and (with `key`) its
    /// signature verified.
    pub fn record(&self, plugin: &str, digest: &str, key: Option<String>) {
        self.lock()
            .entry(plugin.to_string())
            .or_default()
            .insert(digest.to_string(), key);
    }

    /// `plugin`'s file of `digest` is written: the versions before it are
    /// no longer on disk.
    pub fn keep_only(&self, plugin: &str, digest: &str) {
        if let Some(files) = self.lock().get_mut(plugin) {
            files.retain(|d, _| d == digest);
        }
    }

    /// `plugin` is no longer pulled.
    pub fn forget(&self, plugin: &str) {
        self.lock().remove(plugin);
    }

    /// The key that signed `plugin`'s file of `digest`, if the host pulled
    /// exactly that file and verified a signature on it.
    pub fn signer(&self, plugin: &str, digest: &str) -> Option<String> {
        self.lock().get(plugin)?.get(digest)?.clone()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, HashMap<String, Option<String>>>> {
        self.verified.lock()
    }
}

impl Registry {
    /// The plugin directory a puller writes into.
    pub fn plugin_dir(&self) -> &Path {
        &self.layout.root.dir
    }

    /// The file `plugin` serves from under the current policy, relative
    /// to the plugin directory: where a pulled file goes.
    pub fn location_of(&self, plugin: &str) -> PathBuf {
        self.wiring.policy.current().location(plugin).file(plugin)
    }

    /// The outcome of the latest pull of `plugin`'s artifact, whose file
    /// is `path`: an error is shown on its row (`degraded` while a version
    /// serves, `failed` when none does) until a pull succeeds.
    pub fn pulled(&self, plugin: &str, path: &Path, outcome: Result<(), String>) {
        let mut files = self.files();
        match outcome {
            Ok(()) => {
                if let Some(entry) = files.get_mut(path) {
                    entry.source_error = None;
                }
            }
            Err(error) => {
                let entry = files.entry(path.to_path_buf()).or_default();
                if entry.source_error.as_ref().map(|(_, e)| e) != Some(&error) {
                    tracing::error!(%plugin, file = %path.display(), %error, "cannot pull the plugin's artifact; the version on disk, if any, serves on");
                }
                entry.source_error = Some((plugin.to_string(), error));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signer_is_known_only_for_the_digest_pulled() {
        let provenance = Provenance::default();
        provenance.record("db", "aa", Some("KEY".into()));
        assert_eq!(provenance.signer("db", "aa").as_deref(), Some("KEY"));
        assert_eq!(provenance.signer("db", "bb"), None, "another file");
        assert_eq!(provenance.signer("web", "aa"), None, "another plugin");
        provenance.record("db", "bb", None);
        assert_eq!(provenance.signer("db", "bb"), None, "pulled, not signed");
        assert_eq!(
            provenance.signer("db", "aa").as_deref(),
            Some("KEY"),
            "the version on disk stays verified while the next is written"
        );
        provenance.keep_only("db", "bb");
        assert_eq!(provenance.signer("db", "aa"), None);
        provenance.forget("db");
        assert_eq!(provenance.signer("db", "bb"), None);
    }
}
