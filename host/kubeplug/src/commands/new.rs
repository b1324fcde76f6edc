//! `kubeplug new`: a plugin project created from a template.

use crate::args::NewArgs;

/// `kubeplug new`: scaffold a plugin project.
pub fn run(args: NewArgs) -> anyhow::Result<()> {
    let dir = kubeplug_kit::kit::scaffold::scaffold(
        args.lang,
        &args.name,
        &args.dir,
        args.sdk.as_deref(),
    )?;
    println!(
        "created {} ({} plugin {}); see its README.md to build and test it",
        dir.display(),
        args.lang.dir(),
        args.name
    );
    Ok(())
}
