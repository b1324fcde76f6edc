//! `kubeplug package`: a plugin as OCI content, written as an image layout
//! (a directory) or an OCI archive (the layout as a tar). What the content
//! is, and which consumer reads which manifest, is
//! [`kubeplug_oci::layout`]'s; writing it out, [`kubeplug_oci::archive`]'s.

use anyhow::Context as _;

use crate::args::{PackageArgs, PackageSource};
use kubeplug_core::policy::Policy;
use kubeplug_oci::archive::{archive, created, write_layout};
use kubeplug_oci::layout;
use kubeplug_runtime::CONTRACT;

/// The plugin's package: loaded as `kubeplug inspect` loads it (compiled as
/// the host would, admitted by no policy) for its manifest's name and
/// version.
pub fn load(source: &PackageSource) -> anyhow::Result<layout::Package> {
    let config = source
        .config
        .as_deref()
        .map(super::offline::read_config)
        .transpose()?;
    let runtime = source.runtime.bounded_runtime()?;
    let plugin = kubeplug_kit::kit::load::compile(
        &runtime,
        &source.plugin,
        config,
        source.runtime.limits(),
        &Policy::default(),
    )?;
    let wasm = std::fs::read(&source.plugin)
        .with_context(|| format!("failed to read {}", source.plugin.display()))?;
    let (imports, exports) = layout::world(&wasm)
        .with_context(|| format!("failed to read the world of {}", source.plugin.display()))?;
    let created = created(std::env::var("SOURCE_DATE_EPOCH").ok().as_deref())?;
    let manifest = plugin.manifest();
    Ok(layout::build(&layout::Plugin {
        name: &manifest.name,
        version: &manifest.version,
        wasm: &wasm,
        created: &created,
        imports,
        exports,
        target: CONTRACT,
    }))
}

/// `kubeplug package`.
pub fn run(args: PackageArgs) -> anyhow::Result<()> {
    let package = load(&args.source)?;
    let out = &args.output;
    if out.extension().is_some_and(|e| e == "tar") {
        std::fs::write(out, archive(&package))
            .with_context(|| format!("failed to write {}", out.display()))?;
    } else {
        write_layout(&package, out)?;
    }
    println!(
        "{}: {} (Wasm artifact {}), {}{} (image volumes {})",
        out.display(),
        package.version,
        package.wasm.digest,
        package.version,
        layout::VOLUME_SUFFIX,
        package.volume.digest
    );
    Ok(())
}
