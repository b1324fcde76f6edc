//! What the offline commands share: reading a configuration and CRD files,
//! printing the answer. Loading and admitting a plugin as the live host
//! would is [`kubeplug_kit::kit::load`]'s.

use std::path::{Path, PathBuf};

use anyhow::bail;
use serde::Serialize;

use crate::args::Format;
use kubeplug_kit::render;

/// Read a configuration document (YAML or JSON) into JSON.
pub fn read_config(path: &Path) -> anyhow::Result<serde_json::Value> {
    let mut docs = render::read_objects(path)?;
    match docs.len() {
        0 => Ok(serde_json::json!({})),
        1 => Ok(docs.remove(0)),
        n => bail!(
            "{}: expected one configuration document, found {n}",
            path.display()
        ),
    }
}

/// Every object of the `--crd` files.
pub fn read_crds(paths: &[PathBuf]) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut crds = Vec::new();
    for path in paths {
        crds.extend(render::read_objects(path)?);
    }
    Ok(crds)
}

/// Print `value` as YAML or JSON on stdout.
pub fn print<T: Serialize>(value: &T, format: Format) -> anyhow::Result<()> {
    let text = match format {
        Format::Yaml => kubeplug_core::yaml::to_string(value),
        Format::Json => serde_json::to_string_pretty(value)? + "\n",
    };
    print!("{text}");
    Ok(())
}
