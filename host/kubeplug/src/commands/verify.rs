//! `kubeplug verify`: whether a manifest in a registry is signed by a key,
//! in cosign's key-based format ([`kubeplug_oci::verify`]).

use std::path::Path;

use anyhow::{Context as _, bail};

use crate::args::VerifyArgs;
use kubeplug_oci::Reference;
use kubeplug_oci::client::Client;
use kubeplug_oci::signature::PublicKey;
use kubeplug_oci::verify::check;

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
    let mut client = Client::new(&reference, &args.registry.access())?;
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
