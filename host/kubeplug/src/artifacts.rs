//! Plugins named by OCI artifact (`kubeplug run --plugin-artifacts FILE`):
//! the platform names each plugin's artifact by digest in a file it owns
//! (the chart's ConfigMap `kubeplug-plugin-artifacts`, from
//! `plugins.artifacts`), and the host pulls it, checks it, and writes it at
//! the plugin's location in the plugin directory, where the registry loads
//! it as any other file. A GitOps change of one digest is an upgrade;
//! nothing has a size cap but `--max-plugin-bytes`.
//!
//! ```yaml
//! database: registry.example.com/team-a/database@sha256:4f1c…
//! ```
//!
//! Guarantees: only a digest is accepted (a tag could change under the
//! platform's feet); the manifest and the `.wasm` are checked against their
//! digests and the `.wasm`'s size against the limit before it is read;
//! when the plugin's grant asks for a signature (`signedBy`), one of its
//! keys must verify a cosign signature of that manifest, and the registry
//! admits the file only if the host verified it ([`Provenance`]); a file is
//! written whole (a rename) or not at all, so a failed pull never replaces
//! a working version: the version on disk serves on and the plugin's row
//! says why (`degraded`, or `failed` when nothing serves). A plugin taken
//! out of the file has its file removed, which stops it (its children
//! stay).
//!
//! Credentials are `kubeplug push`'s: `$DOCKER_CONFIG/config.json` (the
//! chart mounts a `kubernetes.io/dockerconfigjson` Secret there), else
//! anonymous. Plain HTTP only on loopback; HTTPS with the system's roots
//! (`SSL_CERT_FILE` names others).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use sha2::{Digest as _, Sha256};

use kubeplug_core::policy::PolicyFiles;
use kubeplug_oci::pull::{Artifact, Fetch};
use kubeplug_operator::registry::{Provenance, Registry};

/// How often the file is read again (a ConfigMap volume is refreshed
/// within about a minute of a change).
pub const PERIOD: Duration = Duration::from_secs(10);
/// The longest wait before a failed pull is tried again.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// The record of the files this host wrote, in the plugin directory (not
/// a `.wasm`, so never a plugin): after a restart in the same pod, a
/// plugin taken out of the file meanwhile still has its file removed.
const WRITTEN: &str = ".kubeplug-artifacts.json";

/// The artifacts file: plugin name to artifact, each parsed on its own
/// (one bad line does not stop the others).
pub fn read(path: &Path) -> anyhow::Result<BTreeMap<String, anyhow::Result<Artifact>>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse(&text).with_context(|| path.display().to_string())
}

/// The artifacts file's text, as [`read`] reads it.
pub fn parse(text: &str) -> anyhow::Result<BTreeMap<String, anyhow::Result<Artifact>>> {
    let named: BTreeMap<String, String> = if text.trim().is_empty() {
        BTreeMap::new()
    } else {
        kubeplug_core::yaml::from_str(text)
            .context("expected a map of plugin name to REPOSITORY@sha256:<hex>")?
    };
    Ok(named
        .into_iter()
        .map(|(name, text)| {
            (
                name,
                Artifact::parse(text.trim()).map_err(anyhow::Error::from),
            )
        })
        .collect())
}

/// What was pulled for one plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pulled {
    artifact: Artifact,
    /// Where the file was written, relative to the plugin directory.
    rel: PathBuf,
    /// The keys asked for when it was checked.
    signers: Vec<String>,
    /// Hex SHA-256 of the `.wasm` written.
    wasm: String,
    /// The file's metadata when it was last found to hold `wasm`: each
    /// round compares it instead of hashing the file again (a Python
    /// plugin is 18 MB).
    stamp: Option<Stamp>,
}

/// What a file's metadata says of it: a file written since has another
/// (a rename, as [`write_whole`] makes, gives it a new inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt as _;
    let metadata = std::fs::metadata(path).ok()?;
    Some(Stamp {
        len: metadata.len(),
        modified: metadata.modified().ok(),
        inode: metadata.ino(),
    })
}

/// A failed pull, tried again after a growing wait.
struct Backoff {
    artifact: Artifact,
    next: Instant,
    wait: Duration,
}

/// The puller: reads the file, pulls what changed, removes what went.
pub struct Puller {
    file: PathBuf,
    registry: Arc<Registry>,
    policy: Arc<PolicyFiles>,
    provenance: Arc<Provenance>,
    max_bytes: u64,
    pulled: BTreeMap<String, Pulled>,
    failing: BTreeMap<String, Backoff>,
    /// Files written before this process started (from [`WRITTEN`]).
    inherited: BTreeMap<String, PathBuf>,
    /// What [`WRITTEN`] was last written with: it is written again only
    /// when that changes, since every write into the plugin directory
    /// wakes the registry's rescan.
    saved: Option<Vec<u8>>,
}

impl Puller {
    pub fn new(
        file: PathBuf,
        registry: Arc<Registry>,
        policy: Arc<PolicyFiles>,
        provenance: Arc<Provenance>,
        max_bytes: u64,
    ) -> Self {
        let inherited = std::fs::read(registry.plugin_dir().join(WRITTEN))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        Puller {
            file,
            registry,
            policy,
            provenance,
            max_bytes,
            pulled: BTreeMap::new(),
            failing: BTreeMap::new(),
            inherited,
            saved: None,
        }
    }

    /// Pull every artifact named, then again every [`PERIOD`].
    pub async fn run(mut self) {
        let mut tick = tokio::time::interval(PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.sync().await;
        }
    }

    /// One round: read the file, pull each artifact that changed (or whose
    /// grant's keys did), remove the files of plugins no longer named.
    pub async fn sync(&mut self) {
        let named = match read(&self.file) {
            Ok(named) => named,
            Err(error) => {
                // Keep what serves: an unreadable file is not "no plugins".
                tracing::warn!(file = %self.file.display(), error = %format!("{error:#}"), "cannot read the plugin artifacts; what was pulled serves on");
                return;
            }
        };
        let policy = self.policy.current();
        for (name, artifact) in &named {
            if !kubeplug_core::manifest::is_dns_label(name) {
                // Never a path: a name like `../x` must not place a file.
                tracing::warn!(file = %self.file.display(), plugin = %name.escape_debug(), "not a plugin name (a DNS label): ignored");
                continue;
            }
            let rel = policy.location(name).file(name);
            let path = self.registry.plugin_dir().join(&rel);
            let artifact = match artifact {
                Ok(artifact) => artifact,
                Err(error) => {
                    self.registry.pulled(name, &path, Err(format!("{error:#}")));
                    continue;
                }
            };
            let signers = policy.signers_for_file(name).to_vec();
            let current = match self.pulled.get_mut(name) {
                Some(p) if &p.artifact == artifact && p.rel == rel && p.signers == signers => {
                    let now = stamp(&path);
                    if now.is_some() && now == p.stamp {
                        true
                    } else if same_file(&path, &p.wasm) {
                        p.stamp = now;
                        true
                    } else {
                        false
                    }
                }
                _ => false,
            };
            if current {
                // Named again after a failed pull of another: what is on
                // disk is what is named, so the row is clean again.
                if self.failing.remove(name).is_some() {
                    self.registry.pulled(name, &path, Ok(()));
                }
                continue;
            }
            if let Some(backoff) = self.failing.get(name)
                && &backoff.artifact == artifact
                && Instant::now() < backoff.next
            {
                continue;
            }
            let span = tracing::info_span!("pull", plugin = %name, artifact = %artifact);
            let _guard = span.enter();
            match self.pull(name, artifact, &rel, &signers).await {
                Ok(pulled) => {
                    self.failing.remove(name);
                    self.registry.pulled(name, &path, Ok(()));
                    if let Some(before) = self.pulled.insert(name.clone(), pulled)
                        && before.rel != rel
                    {
                        self.remove(&before.rel);
                    }
                }
                Err(error) => {
                    let wait = match self.failing.get(name) {
                        Some(b) if &b.artifact == artifact => (b.wait * 2).min(MAX_BACKOFF),
                        _ => PERIOD,
                    };
                    self.failing.insert(
                        name.clone(),
                        Backoff {
                            artifact: artifact.clone(),
                            next: Instant::now() + wait,
                            wait,
                        },
                    );
                    self.registry
                        .pulled(name, &path, Err(format!("{artifact}: {error:#}")));
                }
            }
        }
        // Plugins no longer named: their files go, which stops them.
        let gone: Vec<String> = self
            .pulled
            .keys()
            .chain(self.inherited.keys())
            .filter(|name| !named.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            let rel = self
                .pulled
                .remove(&name)
                .map(|p| p.rel)
                .or_else(|| self.inherited.get(&name).cloned());
            self.inherited.remove(&name);
            self.failing.remove(&name);
            self.provenance.forget(&name);
            if let Some(rel) = rel {
                tracing::info!(plugin = %name, file = %rel.display(), "the plugin is no longer named in the artifacts file: its file is removed");
                self.remove(&rel);
            }
        }
        self.inherited
            .retain(|name, _| !self.pulled.contains_key(name));
        self.save_written();
    }

    /// Pull `artifact` for plugin `name` and write it at `rel`.
    async fn pull(
        &self,
        name: &str,
        artifact: &Artifact,
        rel: &Path,
        signers: &[String],
    ) -> anyhow::Result<Pulled> {
        let path = self.registry.plugin_dir().join(rel);
        let mut fetch = Fetch::start(artifact, signers, self.max_bytes).await?;
        // Recorded first: the registry must know the file is verified by
        // the time it sees it. The version on disk stays verified until
        // the new one is written.
        self.provenance
            .record(name, &fetch.wasm, fetch.signed_by.clone());
        if !same_file(&path, &fetch.wasm) {
            let bytes = fetch.bytes().await?;
            write_whole(&path, &bytes)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        self.provenance.keep_only(name, &fetch.wasm);
        tracing::info!(file = %path.display(), signed = fetch.signed_by.is_some(), "pulled the plugin's artifact");
        Ok(Pulled {
            artifact: artifact.clone(),
            rel: rel.to_path_buf(),
            signers: signers.to_vec(),
            wasm: fetch.wasm,
            stamp: stamp(&path),
        })
    }

    /// Remove a file this host wrote (the plugin then stops).
    fn remove(&self, rel: &Path) {
        let path = self.registry.plugin_dir().join(rel);
        if let Err(error) = std::fs::remove_file(&path)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(file = %path.display(), %error, "cannot remove a pulled plugin file");
        }
    }

    /// Record which files this host wrote, for the next process.
    fn save_written(&mut self) {
        let written: BTreeMap<&String, &PathBuf> = self
            .pulled
            .iter()
            .map(|(n, p)| (n, &p.rel))
            .chain(self.inherited.iter())
            .collect();
        let path = self.registry.plugin_dir().join(WRITTEN);
        let bytes = serde_json::to_vec(&written).expect("names and paths serialize");
        if self.saved.as_ref() == Some(&bytes) {
            return;
        }
        match write_whole(&path, &bytes) {
            Ok(()) => self.saved = Some(bytes),
            Err(error) => {
                tracing::warn!(file = %path.display(), %error, "cannot record the pulled files")
            }
        }
    }
}

/// Does the file at `path` hold the bytes of hex SHA-256 `wasm`?
fn same_file(path: &Path, wasm: &str) -> bool {
    std::fs::read(path).is_ok_and(|bytes| hex::encode(Sha256::digest(&bytes)) == wasm)
}

/// Write `bytes` at `path` whole: a hidden file beside it (no `.wasm`,
/// never read as a plugin), then a rename.
fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut staged = tempfile::Builder::new()
        .prefix(".pulling-")
        .suffix(".part")
        .tempfile_in(dir)?;
    std::io::Write::write_all(&mut staged, bytes)?;
    staged.as_file().sync_all()?;
    staged.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "4f1c0000000000000000000000000000000000000000000000000000000000aa";

    #[test]
    fn the_file_is_read_line_by_line_and_one_bad_entry_spares_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("artifacts.yaml");
        std::fs::write(
            &path,
            format!("db: localhost:5000/db@sha256:{HEX}\nweb: localhost:5000/web:latest\n"),
        )
        .unwrap();
        let named = read(&path).unwrap();
        assert!(named["db"].is_ok());
        assert!(named["web"].is_err());
        std::fs::write(&path, "").unwrap();
        assert!(read(&path).unwrap().is_empty(), "an empty file names none");
        assert!(
            !kubeplug_core::manifest::is_dns_label("../db"),
            "never a path"
        );
        std::fs::write(&path, "[a, b]\n").unwrap();
        assert!(read(&path).is_err());
    }

    #[test]
    fn a_file_is_written_whole_and_compared_by_digest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("team/db.wasm");
        write_whole(&path, b"\0asm").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"\0asm");
        assert!(same_file(&path, &hex::encode(Sha256::digest(b"\0asm"))));
        assert!(!same_file(&path, HEX));
        // Written again, even with the same bytes: another stamp, so the
        // next round hashes it once more.
        let before = stamp(&path).unwrap();
        write_whole(&path, b"\0asm").unwrap();
        assert_ne!(stamp(&path).unwrap(), before);
        let left: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            left,
            vec![std::ffi::OsString::from("db.wasm")],
            "no staged file is left"
        );
    }
}
