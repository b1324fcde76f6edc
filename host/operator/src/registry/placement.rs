//! Where a file may serve from, and reading it without trusting it.
//!
//! The platform puts each plugin's file at a location its policy binds to
//! the plugin's name ([`kubeplug_core::policy::Location`]): the grant of `N` holds
//! only for a file at `N`'s location whose manifest declares `N`. This
//! module decides, from the path alone and before anything is read, which
//! plugin a file may be ([`place`]); it finds that plugin's settings
//! ([`settings_file`]); it refuses files that resolve outside the directory
//! they were found in ([`Root::contains`]) or are larger than the host reads
//! ([`read_limited`]); and it words refusals without quoting the file.
//!
//! Guarantees: a file at no plugin's location is never read, compiled or
//! shadowed; a file only ever gets the settings of the plugin bound to its
//! location, from that plugin's own settings file (a link to another file,
//! another plugin's settings among them, is refused: [`Root::own_file`]); a candidate (`N.next.wasm`) is only ever `N`'s, and only in the
//! folder of `N`'s live file; no error text holds bytes of a plugin or
//! settings file.
//!
//! Assumptions: ConfigMap volumes link each key through `..data` into a
//! timestamped folder *inside* the volume, which resolves inside and loads.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use super::{Candidate, PluginSettings, SETTLE};
use kubeplug_core::policy::{Location, Policy};

/// The largest plugin file the host reads, by default: well above the
/// biggest guest shipped (the Python `pod-labeler`, ~18 MB), well below what
/// the pod can hold next to its compiles. `kubeplug run --max-plugin-bytes`.
pub const MAX_PLUGIN_BYTES: u64 = 64 << 20;

/// The largest settings file read: a ConfigMap holds at most 1 MiB.
pub const MAX_SETTINGS_BYTES: u64 = 1 << 20;

/// A directory files are found in, with its real path for containment.
#[derive(Debug, Clone)]
pub(super) struct Root {
    /// As given (paths shown and bound are relative to this).
    pub dir: PathBuf,
    /// With every symlink resolved.
    real: PathBuf,
}

impl Root {
    pub fn new(dir: &Path) -> Root {
        Root {
            dir: dir.to_path_buf(),
            real: std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()),
        }
    }

    /// `path` relative to the directory (as the policy names locations).
    pub fn rel<'a>(&self, path: &'a Path) -> &'a Path {
        path.strip_prefix(&self.dir).unwrap_or(path)
    }

    /// Refuse `path` if, once its symlinks are resolved, it lies outside
    /// the directory (a link to a token, to another team's volume). Links
    /// that stay inside (a ConfigMap's `..data`) are fine.
    pub fn contains(&self, path: &Path) -> Result<(), String> {
        let shown = self.rel(path).display();
        let real = std::fs::canonicalize(path)
            .map_err(|e| format!("cannot resolve {shown}: {}", e.kind()))?;
        if real.starts_with(&self.real) {
            Ok(())
        } else {
            Err(format!(
                "{shown} is a symlink that resolves outside {}: refused, not read",
                self.dir.display()
            ))
        }
    }
}

impl Root {
    /// Refuse a settings file that, once its symlinks are resolved, is not
    /// a file of that same name in the folder it was looked for in (the
    /// plugin's own folder, or the settings directory): a team's folder may
    /// hold links, and one to another plugin's settings (`team-a/x.yaml ->
    /// ../database.yaml`, or to a sibling file) would hand the team's plugin
    /// settings the platform wrote for another. A ConfigMap's links
    /// (`x.yaml -> ..data/x.yaml`) keep the name and the folder, and load.
    pub fn own_file(&self, path: &Path) -> Result<(), String> {
        let shown = self.rel(path).display();
        let (Some(folder), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(format!("cannot resolve {shown}"));
        };
        let resolve = |p: &Path| {
            std::fs::canonicalize(p).map_err(|e| format!("cannot resolve {shown}: {}", e.kind()))
        };
        let (real, real_folder) = (resolve(path)?, resolve(folder)?);
        if real.starts_with(&real_folder) && real.file_name() == Some(name) {
            return Ok(());
        }
        let target = real
            .strip_prefix(&self.real)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| real.display().to_string());
        Err(format!(
            "{shown} is a symlink to {target}: a plugin's settings are read only from its own file in its own folder (another plugin's settings are not handed to it): refused, not read"
        ))
    }
}

/// The plugin directory and the settings directory, and how much of a file
/// the host reads.
pub(super) struct Layout {
    pub root: Root,
    /// `--settings`, if settings are not beside each file.
    pub settings: Option<Root>,
    pub max_plugin_bytes: u64,
}

impl Layout {
    fn settings_dir(&self) -> Option<&Path> {
        self.settings.as_ref().map(|r| r.dir.as_path())
    }

    /// Read a placed file and its settings, refusing what resolves outside
    /// its directory, is too large, or does not look like WebAssembly; the
    /// error never quotes the file.
    pub(super) fn read(&self, path: &Path, place: &Place) -> Result<Candidate, String> {
        let shown = self.root.rel(path);
        self.root.contains(path)?;
        let bytes = read_limited(path, shown, self.max_plugin_bytes)?;
        check_header(&bytes, shown)?;
        let mut hasher = Sha256::new();
        hasher.update(&bytes);
        let candidate = matches!(place, Place::Candidate(_));
        let found = settings_file(path, place.name(), candidate, self.settings_dir());
        let settings = match found {
            None => PluginSettings::default(),
            Some(sp) => {
                let root = self.settings.as_ref().unwrap_or(&self.root);
                root.contains(&sp)?;
                root.own_file(&sp)?;
                let bytes = read_limited(&sp, &sp, MAX_SETTINGS_BYTES)?;
                hasher.update(&bytes);
                let text = String::from_utf8(bytes).map_err(|_| {
                    format!(
                        "invalid settings {}: not UTF-8 text (its content is not shown)",
                        sp.display()
                    )
                })?;
                let settings: PluginSettings =
                    kubeplug_core::yaml::from_str(&text).map_err(|e| settings_error(&sp, &e))?;
                settings
                    .rollback
                    .validate()
                    .map_err(|e| format!("invalid settings {}: {e}", sp.display()))?;
                settings
            }
        };
        Ok(Candidate {
            bound: place.name().to_string(),
            bytes,
            settings,
            key: hex::encode(hasher.finalize()),
        })
    }

    /// Every `.wasm` of the directory, placed; files (and their settings)
    /// changed less than [`SETTLE`] ago left out, with `true` if any was.
    pub(super) fn scan(&self, policy: &Policy) -> std::io::Result<(Vec<Placed>, bool)> {
        let files = wasm_files(&self.root.dir)?;
        let mut again = false;
        let placed = place(&self.root, policy, &files)
            .into_iter()
            .filter(|(path, place)| {
                let Ok(place) = place else {
                    // Never read: no need to wait for it.
                    return true;
                };
                let settings = settings_file(
                    path,
                    place.name(),
                    matches!(place, Place::Candidate(_)),
                    self.settings_dir(),
                );
                let young = fresh(std::iter::once(path.as_path()).chain(settings.as_deref()));
                again |= young;
                !young
            })
            .collect();
        Ok((placed, again))
    }
}

/// A file found, with what it may be or why it may be nothing.
pub(super) type Placed = (PathBuf, Result<Place, Misplaced>);

/// Why a `.wasm` file found is no plugin's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum Misplaced {
    /// At no plugin's location, as the policy places them.
    #[error(transparent)]
    Policy(#[from] kubeplug_core::policy::PlacementError),
    /// At plugin `0`'s nested default location while the top one holds a
    /// file too.
    #[error(
        "plugin {0} is served from {0}.wasm: both of its default locations hold a file, and the top one wins (remove one, or bind the plugin with path: in its grant)"
    )]
    Shadowed(String),
}

/// What a `.wasm` path may be, from its location alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Place {
    /// The live file of this plugin.
    Live(String),
    /// A candidate version of this plugin.
    Candidate(String),
}

impl Place {
    pub fn name(&self) -> &str {
        match self {
            Place::Live(n) | Place::Candidate(n) => n,
        }
    }
}

/// `N.next.wasm`.
pub(super) fn is_candidate(path: &Path) -> bool {
    path.file_stem()
        .and_then(|s| s.to_str())
        .is_some_and(|s| s.ends_with(".next"))
}

/// Place every file found (paths under `root`): the plugin each may be, or
/// why it may be none. Of the two default locations of one plugin, the top
/// one wins when both hold a file, so the two never race.
pub(super) fn place(root: &Root, policy: &Policy, files: &[PathBuf]) -> Vec<Placed> {
    let placed: Vec<Placed> = files
        .iter()
        .map(|path| {
            let rel = root.rel(path);
            let place = if is_candidate(path) {
                policy.candidate_at(rel).map(Place::Candidate)
            } else {
                policy.bound_at(rel).map(Place::Live)
            }
            .map_err(Misplaced::from);
            (path.clone(), place)
        })
        .collect();
    placed
        .iter()
        .map(|(path, place)| {
            let Ok(Place::Live(name)) = place else {
                return (path.clone(), place.clone());
            };
            let top = root.dir.join(format!("{name}.wasm"));
            let shadowed = policy.location(name) == Location::Default
                && *path != top
                && placed
                    .iter()
                    .any(|(p, q)| *p == top && q.as_ref() == Ok(&Place::Live(name.clone())));
            if shadowed {
                (path.clone(), Err(Misplaced::Shadowed(name.clone())))
            } else {
                (path.clone(), place.clone())
            }
        })
        .collect()
}

/// Plugin `name`'s settings: `<name>.yaml` (or `.yml`, `.json`; a
/// candidate's `<name>.next.yaml`) in `settings` when the host has a
/// settings directory, else beside its file `wasm`. Only the plugin bound to
/// that file ever asks for them.
pub(super) fn settings_file(
    wasm: &Path,
    name: &str,
    candidate: bool,
    settings: Option<&Path>,
) -> Option<PathBuf> {
    let stem = if candidate {
        format!("{name}.next")
    } else {
        name.to_string()
    };
    let dir = match settings {
        Some(dir) => dir.to_path_buf(),
        None => wasm.parent()?.to_path_buf(),
    };
    ["yaml", "yml", "json"]
        .iter()
        .map(|ext| dir.join(format!("{stem}.{ext}")))
        .find(|p| p.exists() || p.symlink_metadata().is_ok())
}

/// Read at most `limit` bytes of `path`, refusing a larger file before
/// reading it (and one that grows past the limit while read).
pub(super) fn read_limited(path: &Path, shown: &Path, limit: u64) -> Result<Vec<u8>, String> {
    let too_big = |size: u64| {
        format!(
            "{} is {size} bytes, over the limit of {limit} bytes the host reads (kubeplug run --max-plugin-bytes): refused, not read",
            shown.display()
        )
    };
    let file = std::fs::File::open(path)
        .map_err(|e| format!("cannot read {}: {}", shown.display(), e.kind()))?;
    let size = file
        .metadata()
        .map_err(|e| format!("cannot read {}: {}", shown.display(), e.kind()))?
        .len();
    if size > limit {
        return Err(too_big(size));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {}", shown.display(), e.kind()))?;
    if bytes.len() as u64 > limit {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(bytes)
}

/// A plugin file must at least look like WebAssembly before it goes to the
/// runtime, whose parser would quote the bytes it found instead.
pub(super) fn check_header(bytes: &[u8], shown: &Path) -> Result<(), String> {
    if bytes.starts_with(b"\0asm") {
        Ok(())
    } else {
        Err(format!(
            "{} is not a valid WebAssembly component: it does not begin with \\0asm (its content is not shown)",
            shown.display()
        ))
    }
}

/// Why a settings file does not parse, without a word of its content
/// (serde's messages quote the values and keys they trip on: a settings
/// file that is really a token must not end up in `lastError`).
pub(super) fn settings_error(shown: &Path, error: &kubeplug_core::yaml::Error) -> String {
    use kubeplug_core::yaml::Mistake;
    let what = match error.mistake() {
        Mistake::UnknownKey => {
            "a key that is not a setting (settings are config, limits and rollback)"
        }
        Mistake::WrongType => {
            "a value of the wrong type (the document must be a mapping of config, limits and rollback)"
        }
        Mistake::DuplicateKey => "a key given twice",
        Mistake::Other => "text that is not a YAML settings document",
    };
    let at = error
        .location()
        .map(|(line, column)| format!(" at line {line}, column {column}"))
        .unwrap_or_default();
    format!(
        "invalid settings {}: {what}{at} (its content is not shown)",
        shown.display()
    )
}

/// `.wasm` files in `dir`, and in its subdirectories one level down (one
/// image volume per plugin), following symlinks (a ConfigMap's files are
/// links into `..data`; where they lead is checked before reading).
pub(super) fn wasm_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut wasm = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if hidden(&path) {
            continue;
        }
        if path.is_dir() {
            match std::fs::read_dir(&path) {
                Ok(inner) => wasm.extend(inner.flatten().map(|e| e.path()).filter(|p| !hidden(p))),
                Err(error) => {
                    tracing::warn!(dir = %path.display(), %error, "cannot scan plugin subdirectory")
                }
            }
        } else {
            wasm.push(path);
        }
    }
    let mut files: Vec<PathBuf> = wasm
        .into_iter()
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("wasm"))
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
        .collect();
    files.sort();
    Ok(files)
}

/// Changed less than [`SETTLE`] ago (any of `paths`): wait for the next scan.
pub(super) fn fresh<'a>(paths: impl IntoIterator<Item = &'a Path>) -> bool {
    let newest = paths
        .into_iter()
        .filter_map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .max()
        .unwrap_or(SystemTime::UNIX_EPOCH);
    SystemTime::now().duration_since(newest).unwrap_or_default() < SETTLE
}

/// The live file among `live` (each with the plugin bound to it) that
/// `candidate`, a version of plugin `name`, stands beside: the one of that
/// plugin in the same folder. A candidate elsewhere is no version of it.
pub(super) fn pair_of(candidate: &Path, name: &str, live: &[(PathBuf, String)]) -> Option<PathBuf> {
    live.iter()
        .find(|(path, bound)| bound == name && path.parent() == candidate.parent())
        .map(|(path, _)| path.clone())
}

/// `..data` and friends are a ConfigMap's internals; dotfiles are editors'
/// and copiers' temporaries.
pub(super) fn hidden(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_none_or(|n| n.starts_with('.'))
}

#[cfg(test)]
mod tests;
