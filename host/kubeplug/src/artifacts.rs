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

use anyhow::{Context as _, bail};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::args::RegistryArgs;
use crate::commands::package::layout;
use crate::commands::push::Reference;
use crate::commands::push::client::Client;
use crate::commands::push::signature::{self, PublicKey};
use crate::commands::verify::signatures;
use kubeplug_core::policy::PolicyFiles;
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

/// One plugin's artifact as the platform names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    pub reference: Reference,
    /// `sha256:<hex>` of the manifest.
    pub digest: String,
}

impl Artifact {
    /// `HOST[:PORT]/REPOSITORY@sha256:<hex>` (a tag before the `@` is
    /// allowed and ignored, as docker does).
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let Some((name, digest)) = text.split_once('@') else {
            bail!(
                "{text}: name the artifact by digest (REPOSITORY@sha256:<hex>, as `kubeplug push` prints it): a tag can change under the platform's feet"
            );
        };
        let hex = digest.strip_prefix("sha256:").unwrap_or_default();
        if hex.len() != 64
            || !hex
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            bail!("{text}: {digest} is not a sha256:<64 lowercase hex> digest");
        }
        let mut reference = Reference::parse(name)?;
        reference.tag = None;
        Ok(Artifact {
            reference,
            digest: digest.to_string(),
        })
    }
}

impl std::fmt::Display for Artifact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.reference.name(), self.digest)
    }
}

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
        .map(|(name, text)| (name, Artifact::parse(text.trim())))
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

/// An artifact whose manifest is checked (its digest, its one `.wasm`
/// layer within the size limit, and a signature by one of the keys asked
/// for), its `.wasm` not fetched yet: the host's puller and `kubeplug
/// doctor` check artifacts the same way.
pub struct Fetch {
    client: Client,
    /// Hex SHA-256 of the `.wasm`, as its manifest names it.
    pub wasm: String,
    /// The key (PEM) that verified a signature of the manifest, when keys
    /// were asked for.
    pub signed_by: Option<String>,
}

impl Fetch {
    /// Fetch and check `artifact`'s manifest; with `signers` (PEM public
    /// keys), one of them must verify a signature of it.
    pub async fn start(
        artifact: &Artifact,
        signers: &[String],
        max_bytes: u64,
    ) -> anyhow::Result<Fetch> {
        let mut client = Client::new(
            &artifact.reference,
            &RegistryArgs {
                insecure: false,
                username: None,
                password: None,
            },
        )?;
        let manifest = client
            .get_manifest(&artifact.digest)
            .await?
            .context("the registry has no such manifest")?;
        if layout::digest(&manifest) != artifact.digest {
            bail!("the registry's manifest does not match the digest");
        }
        let layer = wasm_layer(&manifest, max_bytes)?;
        let signed_by = match signers {
            [] => None,
            keys => Some(verified_by(&mut client, &artifact.digest, keys).await?),
        };
        Ok(Fetch {
            client,
            wasm: layer.trim_start_matches("sha256:").to_string(),
            signed_by,
        })
    }

    /// The `.wasm`'s bytes, checked against its digest.
    pub async fn bytes(&mut self) -> anyhow::Result<Vec<u8>> {
        let blob = self
            .client
            .get_blob(&format!("sha256:{}", self.wasm))
            .await?;
        Ok(blob.to_vec())
    }
}

/// The digest of the one `application/wasm` layer of an artifact manifest,
/// refused when it is larger than `max_bytes`.
fn wasm_layer(manifest: &[u8], max_bytes: u64) -> anyhow::Result<String> {
    let manifest: Value = serde_json::from_slice(manifest).context("the manifest is not JSON")?;
    if manifest["mediaType"] == layout::INDEX {
        bail!(
            "this is an image index (the `-volume` tag of `kubeplug package`, for image volumes): name the Wasm artifact's digest, which `kubeplug push` prints first"
        );
    }
    let layers: Vec<&Value> = manifest["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["mediaType"] == layout::WASM_LAYER)
        .collect();
    let [layer] = layers.as_slice() else {
        bail!(
            "expected one {} layer (a Wasm artifact, as `kubeplug push` makes), found {}",
            layout::WASM_LAYER,
            layers.len()
        );
    };
    let size = layer["size"].as_u64().context("the layer has no size")?;
    if size > max_bytes {
        bail!("the plugin is {size} bytes, over --max-plugin-bytes ({max_bytes})");
    }
    let digest = layer["digest"]
        .as_str()
        .filter(|d| d.strip_prefix("sha256:").is_some_and(|h| h.len() == 64))
        .context("the layer has no sha256 digest")?;
    Ok(digest.to_string())
}

/// The first of `keys` (PEM) that verifies a signature of `digest`.
async fn verified_by(client: &mut Client, digest: &str, keys: &[String]) -> anyhow::Result<String> {
    let found = signatures(client, digest).await?;
    let mut why = Vec::new();
    for (index, pem) in keys.iter().enumerate() {
        let key = match PublicKey::from_pem(pem.as_bytes()) {
            Ok(key) => key,
            Err(error) => {
                why.push(format!("signedBy[{index}]: {error}"));
                continue;
            }
        };
        match signature::check(digest, &key, &found) {
            Ok(()) => return Ok(pem.clone()),
            Err(unverified) => why.push(format!("signedBy[{index}]: {unverified}")),
        }
    }
    bail!(
        "the grant asks for a signature by one of its keys, and none verifies ({})",
        why.join("; ")
    )
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
    fn an_artifact_is_named_by_digest_and_a_tag_is_refused_alone() {
        let artifact =
            Artifact::parse(&format!("localhost:5000/team-a/db:1.2@sha256:{HEX}")).unwrap();
        assert_eq!(artifact.reference.name(), "localhost:5000/team-a/db");
        assert_eq!(artifact.digest, format!("sha256:{HEX}"));
        assert_eq!(
            artifact.to_string(),
            format!("localhost:5000/team-a/db@sha256:{HEX}")
        );
        let tag = Artifact::parse("localhost:5000/team-a/db:1.2").unwrap_err();
        assert!(tag.to_string().contains("by digest"), "{tag}");
        let short = Artifact::parse("localhost:5000/db@sha256:abc").unwrap_err();
        assert!(short.to_string().contains("not a sha256"), "{short}");
        let upper = Artifact::parse(&format!("localhost:5000/db@sha256:{}", HEX.to_uppercase()));
        assert!(upper.is_err());
        let registry = Artifact::parse(&format!("team-a/db@sha256:{HEX}")).unwrap_err();
        assert!(
            registry.to_string().contains("name the registry"),
            "{registry}"
        );
    }

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

    fn manifest(layers: Value) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": layout::MANIFEST,
            "layers": layers,
        }))
        .unwrap()
    }

    #[test]
    fn the_one_wasm_layer_is_taken_within_the_size_limit() {
        let digest = format!("sha256:{HEX}");
        let one = manifest(serde_json::json!([
            {"mediaType": layout::WASM_LAYER, "digest": digest, "size": 100}
        ]));
        assert_eq!(wasm_layer(&one, 100).unwrap(), digest);
        let big = wasm_layer(&one, 99).unwrap_err();
        assert!(big.to_string().contains("over --max-plugin-bytes"), "{big}");
        let none = manifest(serde_json::json!([
            {"mediaType": layout::TAR_LAYER, "digest": digest, "size": 100}
        ]));
        assert!(
            wasm_layer(&none, 100)
                .unwrap_err()
                .to_string()
                .contains("found 0")
        );
        let index = serde_json::to_vec(&serde_json::json!({"mediaType": layout::INDEX})).unwrap();
        assert!(
            wasm_layer(&index, 100)
                .unwrap_err()
                .to_string()
                .contains("image index")
        );
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
