//! `kubeplug push`: a plugin's OCI content to a registry, signed with
//! `--sign-key` ([`kubeplug_oci::push`]). Credentials come from the flags,
//! else from the auth files docker and podman write and their credential
//! helpers ([`kubeplug_oci::credentials`]). `kubeplug verify` checks the
//! signatures ([`crate::commands::verify`]).

use std::path::Path;

use anyhow::Context as _;

use crate::args::PushArgs;
use kubeplug_oci::Reference;
use kubeplug_oci::client::Client;
use kubeplug_oci::layout;
use kubeplug_oci::push::{push, sign};
use kubeplug_oci::signature::{self, SigningKey};

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
    let mut client = Client::new(&reference, &args.registry.access())?;
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
