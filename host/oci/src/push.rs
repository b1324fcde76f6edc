//! A plugin's OCI content ([`crate::layout`]) to a registry through the
//! OCI distribution API ([`crate::client`]): each blob (`HEAD`, then a
//! monolithic `POST` + `PUT` upload when missing), then the manifests, the
//! Wasm artifact under the tag and the image-volume index under
//! `<tag>-volume`; and a cosign signature of a manifest
//! ([`crate::signature`]), since either may be what a node pulls.
//!
//! Caveats: signatures are cosign's key-based ones, without a
//! transparency-log entry or a certificate (`cosign verify` needs
//! `--insecure-ignore-tlog=true`); keyless signing and Notation are not
//! done. [`crate::verify`] checks them.

use serde_json::Value;

use crate::client::Client;
use crate::error::{Context as _, Result};
use crate::layout::{self, Package};
use crate::signature::{self, SigningKey};

/// Upload `package` with `tag`.
pub async fn push(client: &mut Client, package: &Package, tag: &str) -> Result<()> {
    for (digest, bytes) in package.layers_and_configs() {
        client.blob(digest, bytes).await?;
    }
    let manifest = |d: &layout::Descriptor| package.blobs[&d.digest].clone();
    for d in &package.volume_manifests {
        client
            .manifest(&d.digest, d.media_type, manifest(d))
            .await?;
    }
    client
        .manifest(tag, package.wasm.media_type, manifest(&package.wasm))
        .await?;
    let volume_tag = format!("{tag}{}", layout::VOLUME_SUFFIX);
    client
        .manifest(
            &volume_tag,
            package.volume.media_type,
            manifest(&package.volume),
        )
        .await
}

/// Sign `digest` (in repository `name`) with `key`: the signature joins
/// those of its `.sig` manifest, kept as they are, unless the key has
/// signed it there already.
pub async fn sign(client: &mut Client, key: &SigningKey, name: &str, digest: &str) -> Result<()> {
    let payload = signature::payload(name, digest);
    let tag = signature::tag(digest);
    let mut layers = match client.get_manifest(&tag).await? {
        Some(bytes) => {
            let manifest: Value = serde_json::from_slice(&bytes)
                .with_context(|| format!("{name}:{tag}: not a manifest"))?;
            manifest["layers"].as_array().cloned().unwrap_or_default()
        }
        None => Vec::new(),
    };
    if signature::already_signed(&layers, &payload, &key.public_key()) {
        return Ok(());
    }
    layers.push(signature::layer(&payload, &key.sign(&payload)));
    let (config, manifest) = signature::image(layers);
    client.blob(&layout::digest(&payload), &payload).await?;
    client.blob(&layout::digest(&config), &config).await?;
    client.manifest(&tag, layout::MANIFEST, manifest).await
}
