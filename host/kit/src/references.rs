//! The objects a parent's references find among objects given as files (a
//! fixture's `cluster:`, the files `kubeplug render` reads): the
//! operator's rules (`kubeplug_core::reference`) over a list instead of
//! its caches, so that a case sees what the live host would hand.

use serde_json::Value;

use kubeplug_core::fence::{FenceError, Fenced};
use kubeplug_core::reference;
use kubeplug_runtime::{CallError, Plugin};

/// Why a parent's references could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum Unresolved {
    /// The plugin's `references` failed (its own error, or a trap).
    #[error(transparent)]
    Call(#[from] CallError),
    /// It named something outside its fence.
    #[error(transparent)]
    Fence(#[from] Fenced),
}

/// The objects of `cluster` that `parent`'s references find, each once, in
/// the order the references name them; none for a plugin that references
/// nothing.
pub fn referenced(
    plugin: &Plugin,
    parent: &Value,
    cluster: &[Value],
) -> Result<Vec<Value>, Unresolved> {
    if !plugin.references_objects() {
        return Ok(Vec::new());
    }
    let manifest = plugin.manifest();
    let asked = plugin.references(&parent.to_string())?;
    let namespace = parent["metadata"]["namespace"]
        .as_str()
        .filter(|ns| !ns.is_empty() && manifest.parent.namespaced);
    let checked = reference::check(manifest, namespace, asked).map_err(|e| Fenced {
        plugin: manifest.name.clone(),
        source: FenceError::from(e),
    })?;
    let mut found: Vec<Value> = Vec::new();
    for r in &checked {
        for object in cluster {
            let api_version = object["apiVersion"].as_str().unwrap_or_default();
            let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
            if object["kind"] != r.resource.kind.as_str() || group != r.resource.group {
                continue;
            }
            let meta = &object["metadata"];
            let labels = serde_json::from_value(meta["labels"].clone()).ok();
            let hit = r.finds(
                meta["namespace"].as_str().filter(|ns| !ns.is_empty()),
                meta["name"].as_str().unwrap_or_default(),
                labels.as_ref(),
            );
            if hit && !found.contains(object) {
                found.push(object.clone());
            }
        }
    }
    Ok(found)
}
