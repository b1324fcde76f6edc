//! `kubeplug inspect`: what a plugin file declares.

use serde::Serialize;

use super::offline::{print, read_config};
use crate::args::InspectArgs;
use kubeplug_core::policy::Policy;
use kubeplug_runtime::CONTRACT;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Inspection<'a> {
    contract: &'a str,
    digest: &'a str,
    size_bytes: usize,
    manifest: &'a kubeplug_core::manifest::Manifest,
}

/// `kubeplug inspect`: print a plugin's manifest, contract, digest and size.
pub fn run(args: InspectArgs) -> anyhow::Result<()> {
    let config = args.common.config.as_deref().map(read_config).transpose()?;
    let limits = args.common.runtime.limits();
    // The manifest as the plugin declares it: compiled as the host would,
    // admitted by no policy.
    let runtime = args.common.runtime.bounded_runtime()?;
    let plugin = kubeplug_kit::kit::load::compile(
        &runtime,
        &args.plugin,
        config,
        limits,
        &Policy::default(),
    )?;
    print(
        &Inspection {
            contract: CONTRACT,
            digest: plugin.digest(),
            size_bytes: plugin.size(),
            manifest: plugin.manifest(),
        },
        args.common.output,
    )
}
