//! The plugin directory as a scan sees it, for `kubeplug doctor`: every
//! live file at a plugin's location, read as a load reads it (its bytes and
//! settings), or why the registry would refuse it. Nothing is compiled and
//! nothing is waited for (no [`super::SETTLE`]): a look at the directory as
//! it is now.

use std::path::{Path, PathBuf};

use super::PluginSettings;
use super::placement::{self, Layout, Place, Root};
use kubeplug_core::policy::Policy;

/// A file at a plugin's location, read as a load reads it.
#[derive(Debug)]
pub struct Surveyed {
    /// The plugin bound to the file's location (its manifest must say so).
    pub bound: String,
    /// The file, relative to the plugin directory.
    pub rel: PathBuf,
    pub bytes: Vec<u8>,
    pub settings: PluginSettings,
}

/// Every live `.wasm` of `dir` (candidates, `<name>.next.wasm`, left out),
/// placed under `policy` and read with its settings (from `settings` when
/// given, else beside it), each with the reason a load would refuse it.
/// An error: `dir` cannot be listed.
pub fn survey(
    dir: &Path,
    settings: Option<&Path>,
    policy: &Policy,
    max_plugin_bytes: u64,
) -> std::io::Result<Vec<(PathBuf, Result<Surveyed, String>)>> {
    let layout = Layout {
        root: Root::new(dir),
        settings: settings.map(Root::new),
        max_plugin_bytes,
    };
    let files = placement::wasm_files(dir)?;
    let found = placement::place(&layout.root, policy, &files)
        .into_iter()
        .filter(|(_, place)| !matches!(place, Ok(Place::Candidate(_))))
        .map(|(path, place)| {
            let read = place.map_err(|e| e.to_string()).and_then(|place| {
                let candidate = layout.read(&path, &place)?;
                Ok(Surveyed {
                    bound: candidate.bound,
                    rel: layout.root.rel(&path).to_path_buf(),
                    bytes: candidate.bytes,
                    settings: candidate.settings,
                })
            });
            (path, read)
        })
        .collect();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_files_are_read_with_their_settings_and_misplaced_ones_refused() {
        let dir = tempfile::tempdir().unwrap();
        let wasm = b"\0asm\x0d\x00\x01\x00";
        std::fs::write(dir.path().join("db.wasm"), wasm).unwrap();
        std::fs::write(dir.path().join("db.yaml"), "config: {a: 1}\n").unwrap();
        std::fs::write(dir.path().join("db.next.wasm"), wasm).unwrap();
        std::fs::create_dir(dir.path().join("team")).unwrap();
        std::fs::write(dir.path().join("team/other.wasm"), wasm).unwrap();
        let found = survey(dir.path(), None, &Policy::default(), 1 << 20).unwrap();
        assert_eq!(found.len(), 2, "the candidate is left out: {found:?}");
        let db = found[0].1.as_ref().expect("db.wasm is read");
        assert_eq!(db.bound, "db");
        assert_eq!(db.rel, Path::new("db.wasm"));
        assert_eq!(db.bytes, wasm);
        assert_eq!(db.settings.config, Some(serde_json::json!({"a": 1})));
        let other = found[1].1.as_ref().unwrap_err();
        assert!(
            other.contains("no plugin is placed at team/other.wasm"),
            "{other}"
        );
    }
}
