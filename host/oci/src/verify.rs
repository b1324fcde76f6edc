//! Whether a manifest in a registry is signed by a key, in cosign's
//! key-based format ([`crate::signature`]): the manifest's digest, its
//! `sha256-<hex>.sig` manifest, and among its signatures one the key
//! verifies over a payload naming that digest.
//!
//! The checks `cosign verify --key KEY --insecure-ignore-tlog=true` makes,
//! no more: no transparency log, certificates or annotations.

use serde_json::Value;

use crate::client::Client;
use crate::error::{Context as _, Result, bail};
use crate::layout;
use crate::signature::{self, Fetched, PublicKey, Unverified};

/// The digest of the manifest under `target`, and whether `key` signed it.
pub async fn check(
    client: &mut Client,
    key: &PublicKey,
    target: &str,
) -> Result<(String, Result<(), Unverified>)> {
    let manifest = client
        .get_manifest(target)
        .await?
        .with_context(|| format!("no manifest {target}"))?;
    let digest = layout::digest(&manifest);
    if target.contains(':') && target != digest {
        bail!("the registry's manifest is {digest}, not {target}");
    }
    let signatures = signatures(client, &digest).await?;
    let verdict = signature::check(&digest, key, &signatures);
    Ok((digest, verdict))
}

/// The signatures stored beside manifest `digest` (its `sha256-<hex>.sig`
/// manifest's layers), none when there is no such manifest.
pub async fn signatures(client: &mut Client, digest: &str) -> Result<Vec<Fetched>> {
    let tag = signature::tag(digest);
    let mut signatures = Vec::new();
    if let Some(bytes) = client.get_manifest(&tag).await? {
        let manifest: Value =
            serde_json::from_slice(&bytes).with_context(|| format!("{tag}: not a manifest"))?;
        let layers = manifest["layers"].as_array().into_iter().flatten();
        for layer in layers.filter(|l| l["mediaType"] == signature::SIMPLE_SIGNING) {
            let blob = layer["digest"]
                .as_str()
                .with_context(|| format!("{tag}: a layer without a digest"))?;
            signatures.push(Fetched {
                payload: client.get_blob(blob).await?.to_vec(),
                signature: layer["annotations"][signature::SIGNATURE_ANNOTATION]
                    .as_str()
                    .map(str::to_string),
            });
        }
    }
    Ok(signatures)
}
