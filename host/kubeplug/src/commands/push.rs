//! `kubeplug push`: a plugin's OCI content ([`super::package::layout`]) to
//! a registry through the OCI distribution API ([`client`]): each blob
//! (`HEAD`, then a monolithic `POST` + `PUT` upload when missing), then the
//! manifests, the Wasm artifact under the tag and the image-volume index
//! under `<tag>-volume`; with `--sign-key`, a cosign signature of each of
//! the two ([`signature`]), since either may be what a node pulls.
//!
//! Credentials come from the flags, else from the auth files docker and
//! podman write and their credential helpers ([`credentials`]).
//!
//! Caveats: signatures are cosign's key-based ones, without a
//! transparency-log entry or a certificate (`cosign verify` needs
//! `--insecure-ignore-tlog=true`); keyless signing and Notation are not
//! done. `kubeplug verify` checks them ([`crate::commands::verify`]).

pub mod client;
pub mod credentials;
pub mod signature;

use std::path::Path;

use anyhow::{Context as _, bail};
use serde_json::Value;

use self::client::Client;
use self::signature::SigningKey;
use super::package::layout::{self, Package};
use crate::args::PushArgs;

/// `HOST[:PORT]/REPOSITORY[:TAG]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
}

impl Reference {
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let bad = || anyhow::anyhow!("{text}: expected HOST[:PORT]/REPOSITORY[:TAG]");
        let (registry, rest) = text.split_once('/').ok_or_else(bad)?;
        if registry.is_empty() || !(registry.contains(['.', ':']) || registry == "localhost") {
            bail!(
                "{text}: name the registry (HOST[:PORT]/REPOSITORY[:TAG]); there is no default registry"
            );
        }
        if rest.contains('@') {
            bail!("{text}: push to a tag, not a digest");
        }
        let (repository, tag) = match rest.rsplit_once(':') {
            Some((repo, tag)) => (repo, Some(tag.to_string())),
            None => (rest, None),
        };
        let valid = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/".contains(&b))
        };
        if !valid(repository)
            || tag
                .as_deref()
                .is_some_and(|t| t.is_empty() || t.len() > 128)
        {
            return Err(bad());
        }
        Ok(Reference {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag,
        })
    }

    /// `HOST[:PORT]/REPOSITORY`: cosign's `docker-reference`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// Plain HTTP for loopback registries (as docker and containerd do).
    pub fn is_loopback(&self) -> bool {
        let host = match self.registry.split_once(']') {
            Some((v6, _)) => &self.registry[..=v6.len()],
            None => self.registry.split(':').next().unwrap_or_default(),
        };
        matches!(host, "localhost" | "[::1]") || host.starts_with("127.")
    }
}

/// `kubeplug push`.
pub fn run(args: PushArgs) -> anyhow::Result<()> {
    let reference = Reference::parse(&args.reference)?;
    // Read first: a key that cannot sign must not leave an unsigned push.
    let key = args.sign_key.as_deref().map(signing_key).transpose()?;
    let package = super::package::load(&args.source)?;
    let tag = reference
        .tag
        .clone()
        .unwrap_or_else(|| package.version.clone());
    let mut client = Client::new(&reference, &args.registry)?;
    let name = reference.name();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            push(&mut client, &package, &tag).await?;
            println!("{name}:{tag}@{}", package.wasm.digest);
            println!(
                "{name}:{tag}{}@{}",
                layout::VOLUME_SUFFIX,
                package.volume.digest
            );
            if let Some(key) = &key {
                for digest in [&package.wasm.digest, &package.volume.digest] {
                    sign(&mut client, key, &name, digest).await?;
                    println!("{name}:{}", signature::tag(digest));
                }
            }
            anyhow::Ok(())
        })
}

fn signing_key(path: &Path) -> anyhow::Result<SigningKey> {
    let pem = std::fs::read(path).with_context(|| format!("failed to read {}", path.display()))?;
    SigningKey::from_pem(&pem).with_context(|| format!("{}: cannot sign with it", path.display()))
}

/// Upload `package` with `tag`.
pub async fn push(client: &mut Client, package: &Package, tag: &str) -> anyhow::Result<()> {
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
async fn sign(
    client: &mut Client,
    key: &SigningKey,
    name: &str,
    digest: &str,
) -> anyhow::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_name_a_registry_a_repository_and_maybe_a_tag() {
        let r = Reference::parse("localhost:5000/plugins/database:0.1.0").unwrap();
        assert_eq!(r.registry, "localhost:5000");
        assert_eq!(r.repository, "plugins/database");
        assert_eq!(r.tag.as_deref(), Some("0.1.0"));
        assert!(r.is_loopback());
        let r = Reference::parse("ghcr.io/acme/database").unwrap();
        assert_eq!(r.tag, None);
        assert!(!r.is_loopback());
        assert!(
            Reference::parse("127.0.0.1:5000/p/d:1")
                .unwrap()
                .is_loopback()
        );
        assert!(
            Reference::parse("database:0.1.0").is_err(),
            "no default registry"
        );
        assert!(Reference::parse("plugins/database").is_err());
        assert!(Reference::parse("ghcr.io/acme/Database").is_err());
        assert!(Reference::parse("ghcr.io/acme/db@sha256:00").is_err());
    }
}
