//! `kubeplug verify`: whether a manifest in a registry is signed by a key,
//! in cosign's key-based format ([`super::push::signature`]): the
//! manifest's digest, its `sha256-<hex>.sig` manifest, and among its
//! signatures one the key verifies over a payload naming that digest.
//!
//! The checks `cosign verify --key KEY --insecure-ignore-tlog=true` makes,
//! no more: no transparency log, certificates or annotations.

use std::path::Path;

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::package::layout;
use super::push::Reference;
use super::push::client::Client;
use super::push::signature::{self, Fetched, PublicKey, Unverified};
use crate::args::VerifyArgs;

/// `kubeplug verify`.
pub fn run(args: VerifyArgs) -> anyhow::Result<()> {
    let (name, pinned) = match args.reference.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (args.reference.as_str(), None),
    };
    let reference = Reference::parse(name)?;
    let target = match (pinned, &reference.tag) {
        (Some(digest), _) => digest.to_string(),
        (None, Some(tag)) => tag.clone(),
        (None, None) => bail!("{}: name a tag or a digest", args.reference),
    };
    let key = public_key(&args.key)?;
    let mut client = Client::new(&reference, &args.registry)?;
    let (digest, verdict) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(check(&mut client, &key, &target))
        .with_context(|| format!("failed to verify {}", args.reference))?;
    let shown = match pinned {
        Some(_) => reference.name(),
        None => format!("{}:{target}", reference.name()),
    };
    match verdict {
        Ok(()) => {
            println!(
                "{shown}@{digest}: signed by {} (cosign key-based signature)",
                args.key.display()
            );
            Ok(())
        }
        Err(unverified) => bail!(
            "{shown}@{digest} is not verified by {}: {unverified}",
            args.key.display()
        ),
    }
}

fn public_key(path: &Path) -> anyhow::Result<PublicKey> {
    let pem = std::fs::read(path).with_context(|| format!("failed to read {}", path.display()))?;
    PublicKey::from_pem(&pem).with_context(|| format!("{}: not a public key", path.display()))
}

/// The digest of the manifest under `target`, and whether `key` signed it.
async fn check(
    client: &mut Client,
    key: &PublicKey,
    target: &str,
) -> anyhow::Result<(String, Result<(), Unverified>)> {
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
pub async fn signatures(client: &mut Client, digest: &str) -> anyhow::Result<Vec<Fetched>> {
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
