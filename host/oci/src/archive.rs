//! A plugin's OCI content written out: an image layout (a directory) or an
//! OCI archive (the layout as a tar), both reproducible given
//! `SOURCE_DATE_EPOCH` ([`created`]).

use std::path::Path;

use crate::error::{Context as _, Result};
use crate::layout::{self, Package};

/// `org.opencontainers.image.created`: `SOURCE_DATE_EPOCH` (seconds) when
/// set, so that a rebuild gives the same digests, else now.
pub fn created(source_date_epoch: Option<&str>) -> Result<String> {
    let at = match source_date_epoch.map(str::trim).filter(|s| !s.is_empty()) {
        Some(s) => {
            let seconds: i64 = s
                .parse()
                .with_context(|| format!("SOURCE_DATE_EPOCH={s}: not a number of seconds"))?;
            jiff::Timestamp::from_second(seconds)
                .with_context(|| format!("SOURCE_DATE_EPOCH={s}: out of range"))?
        }
        None => jiff::Timestamp::now(),
    };
    // Whole seconds: the same epoch always formats the same way.
    Ok(jiff::Timestamp::from_second(at.as_second())?.to_string())
}

/// The layout's files, relative paths and bytes, in a fixed order.
fn files(package: &Package) -> Vec<(String, Vec<u8>)> {
    let mut files = vec![
        (
            "oci-layout".to_string(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        ("index.json".to_string(), package.index_json()),
    ];
    for (digest, bytes) in &package.blobs {
        let hex = digest.trim_start_matches("sha256:");
        files.push((format!("blobs/sha256/{hex}"), bytes.clone()));
    }
    files
}

/// Write the layout into `dir` (created; files already there are replaced).
pub fn write_layout(package: &Package, dir: &Path) -> Result<()> {
    for (path, bytes) in files(package) {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("failed to create {}", parent.display()))?;
        }
        std::fs::write(&path, bytes)
            .with_context(|| format!("failed to write {}", path.display()))?;
    }
    Ok(())
}

/// The layout as a tar (an OCI archive): files only, in a fixed order and
/// with fixed headers, so the archive is as reproducible as its blobs.
pub fn archive(package: &Package) -> Vec<u8> {
    let mut out = Vec::new();
    for (path, bytes) in files(package) {
        let mut one = layout::tar_one_file(&path, &bytes);
        one.truncate(one.len() - 1024); // the end marker, once at the end
        out.extend(one);
    }
    out.resize(out.len() + 1024, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_is_source_date_epoch_when_set() {
        assert_eq!(created(Some("0")).unwrap(), "1970-01-01T00:00:00Z");
        assert_eq!(created(Some("1700000000")).unwrap(), "2023-11-14T22:13:20Z");
        assert!(created(Some("yesterday")).is_err());
        assert!(created(None).unwrap().ends_with('Z'));
    }

    fn package() -> Package {
        layout::build(&layout::Plugin {
            name: "database",
            version: "0.1.0",
            wasm: b"\0asm",
            created: "1970-01-01T00:00:00Z",
            imports: vec![],
            exports: vec![],
            target: "kubeplug:plugin@0.1.0",
        })
    }

    #[test]
    fn a_layout_directory_holds_every_blob_by_digest() {
        let dir = tempfile::tempdir().unwrap();
        let package = package();
        write_layout(&package, dir.path()).unwrap();
        for (digest, bytes) in &package.blobs {
            let path = dir.path().join("blobs/sha256").join(&digest[7..]);
            assert_eq!(&std::fs::read(path).unwrap(), bytes);
        }
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("index.json")).unwrap()).unwrap();
        assert_eq!(
            index["manifests"][0]["digest"],
            package.wasm.digest.as_str()
        );
        assert!(dir.path().join("oci-layout").exists());
    }

    #[test]
    fn an_archive_is_the_layout_and_the_same_twice() {
        let a = archive(&package());
        assert_eq!(a, archive(&package()));
        assert_eq!(a.len() % 512, 0);
        assert_eq!(&a[..10], b"oci-layout");
        // `tar` reads it when there is one (it is on every CI machine here).
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.tar");
        std::fs::write(&file, &a).unwrap();
        if let Ok(out) = std::process::Command::new("tar")
            .arg("-tf")
            .arg(&file)
            .output()
        {
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let listing = String::from_utf8(out.stdout).unwrap();
            assert_eq!(
                listing.lines().count(),
                2 + package().blobs.len(),
                "{listing}"
            );
            assert!(listing.lines().any(|l| l == "index.json"));
        }
    }
}
