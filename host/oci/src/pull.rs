//! An artifact pulled by digest, as the host's puller and `kubeplug doctor`
//! take it: its manifest checked against the digest, its one `.wasm`
//! layer within the size limit, and, when keys are asked for, a cosign
//! signature by one of them ([`crate::verify`]); then the `.wasm`, checked
//! against its digest.

use serde_json::Value;

use crate::client::{Access, Client};
use crate::error::{Context as _, Result, bail};
use crate::layout;
use crate::reference::Reference;
use crate::signature::{self, PublicKey};
use crate::verify::signatures;

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
    pub fn parse(text: &str) -> Result<Self> {
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
    pub async fn start(artifact: &Artifact, signers: &[String], max_bytes: u64) -> Result<Fetch> {
        let mut client = Client::new(&artifact.reference, &Access::default())?;
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
    pub async fn bytes(&mut self) -> Result<Vec<u8>> {
        let blob = self
            .client
            .get_blob(&format!("sha256:{}", self.wasm))
            .await?;
        Ok(blob.to_vec())
    }
}

/// The digest of the one `application/wasm` layer of an artifact manifest,
/// refused when it is larger than `max_bytes`.
fn wasm_layer(manifest: &[u8], max_bytes: u64) -> Result<String> {
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
async fn verified_by(client: &mut Client, digest: &str, keys: &[String]) -> Result<String> {
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
}
