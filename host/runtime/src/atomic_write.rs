//! Writing a file so that no reader ever sees part of it: the precompiled
//! artefacts the cache keeps, written by the cache itself or by the compile
//! child (`kubeplug __compile`), while other processes may read the same
//! directory.

use std::path::Path;

/// Write `bytes` to a temporary file beside `path` (named for this process,
/// so two writers never share one), then rename it over `path`.
pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("artefact"),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
