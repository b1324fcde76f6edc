//! `kubeplug new`: a plugin project created from a template.

use anyhow::bail;

use crate::args::NewArgs;

/// `kubeplug new`: scaffold a plugin project.
pub fn run(args: NewArgs) -> anyhow::Result<()> {
    if let Some(sdk) = &args.sdk {
        bail!(
            "--sdk {} is no longer used: kubeplug carries the SDK (version {}) and `kubeplug build` unpacks it into the project's .kubeplug/",
            sdk.display(),
            kubeplug_kit::kit::scaffold::SDK_VERSION
        );
    }
    let dir = kubeplug_kit::kit::scaffold::scaffold(args.lang, &args.name, &args.dir)?;
    println!(
        "created {} ({} plugin {}, SDK {}); build it with `kubeplug build {}`, then `kubeplug test {}` (see its README.md)",
        dir.display(),
        args.lang.dir(),
        args.name,
        kubeplug_kit::kit::scaffold::SDK_VERSION,
        dir.display(),
        dir.display(),
    );
    Ok(())
}
