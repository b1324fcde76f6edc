//! Where a plugin's file may be, as its grant says (`path:`).

/// Where the platform puts a plugin's file, relative to the plugin directory
/// (`kubeplug run --plugins`). The grant of plugin `N` holds only for a file
/// at `N`'s location whose manifest also declares the name `N`; a file
/// anywhere else is refused before it is read. Written in a grant as `path:`:
///
/// - absent: the layouts the project ships, `N.wasm` at the top of the
///   directory (a ConfigMap key) or `N/N.wasm` (an image volume mounted at
///   `/plugins/N`); if both hold a file, the top-level one is `N`'s;
/// - `path: team-a/db.wasm`: exactly that file (its candidate is
///   `team-a/N.next.wasm`, its settings `team-a/N.yaml`);
/// - `path: team-a/` (a trailing `/`): the folder, in which `N`'s file is
///   `team-a/N.wasm` (a team's image volume holding several plugins).
///
/// The host scans the directory and one level down, so a location is at
/// most one folder deep; it names no hidden (`.`) component, no `..`, and
/// is not absolute. Two grants may share a folder, never a file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Location {
    /// `N.wasm` or `N/N.wasm`.
    #[default]
    Default,
    /// One file, e.g. `team-a/db.wasm`.
    File(std::path::PathBuf),
    /// A folder one level down, e.g. `team-a`: the file is `team-a/N.wasm`.
    Folder(std::path::PathBuf),
}

/// A grant's `path:` that names no place the host would look.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "path {path:?} {why} (a file like team-a/db.wasm or a folder like team-a/, relative to the plugin directory)"
)]
pub struct LocationError {
    /// The path as written.
    pub path: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl Location {
    pub(super) fn parse(text: &str) -> Result<Self, LocationError> {
        let invalid = |why: &'static str| {
            Err(LocationError {
                path: text.into(),
                why,
            })
        };
        let (body, folder) = match text.strip_suffix('/') {
            Some(body) => (body, true),
            None => (text, false),
        };
        if body.is_empty() {
            return invalid("is empty");
        }
        if text.starts_with('/') {
            return invalid("is absolute");
        }
        let parts: Vec<&str> = body.split('/').collect();
        if parts.iter().any(|p| p.is_empty() || p.starts_with('.')) {
            return invalid("has an empty, hidden or `..` component");
        }
        let depth = if folder { 1 } else { 2 };
        if parts.len() > depth {
            return invalid(
                "is deeper than the host scans (the plugin directory and one level down)",
            );
        }
        if folder {
            return Ok(Location::Folder(body.into()));
        }
        if !body.ends_with(".wasm") {
            return invalid("names no .wasm file (end a folder with /)");
        }
        if body.ends_with(".next.wasm") {
            return invalid("names a candidate (.next.wasm), which stands beside the live file");
        }
        Ok(Location::File(body.into()))
    }

    /// The folder (relative, empty for the top) in which plugin `name`'s
    /// file, its candidate and its settings sit, if that is one folder.
    pub fn folders(&self, name: &str) -> Vec<std::path::PathBuf> {
        match self {
            Location::Default => vec!["".into(), name.into()],
            Location::File(file) => vec![file.parent().map(Into::into).unwrap_or_default()],
            Location::Folder(dir) => vec![dir.clone()],
        }
    }

    /// Does the file at `rel` (relative to the plugin directory) sit at
    /// plugin `name`'s location?
    pub fn holds(&self, name: &str, rel: &std::path::Path) -> bool {
        let file = format!("{name}.wasm");
        match self {
            Location::Default => {
                rel == std::path::Path::new(&file) || rel == std::path::Path::new(name).join(&file)
            }
            Location::File(path) => rel == path,
            Location::Folder(dir) => rel == dir.join(&file),
        }
    }

    /// The one file a writer that makes plugin `name`'s file (the host's
    /// artifact puller) puts it at: the default layout's top form.
    pub fn file(&self, name: &str) -> std::path::PathBuf {
        match self {
            Location::Default => format!("{name}.wasm").into(),
            Location::File(path) => path.clone(),
            Location::Folder(dir) => dir.join(format!("{name}.wasm")),
        }
    }

    /// How a refusal names this location of plugin `name`.
    pub fn describe(&self, name: &str) -> String {
        match self {
            Location::Default => format!("{name}.wasm or {name}/{name}.wasm"),
            Location::File(path) => path.display().to_string(),
            Location::Folder(dir) => format!("{}/{name}.wasm", dir.display()),
        }
    }
}
