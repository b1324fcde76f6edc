//! What the offline commands share: reading a configuration, loading and
//! admitting a plugin as the live host would, printing the answer.

use std::path::Path;

use anyhow::{Context as _, bail};
use serde::Serialize;

use crate::args::{Format, OfflineArgs};
use crate::policy::{Effective, Policy};
use crate::render;
use crate::runtime::{LimitSettings, Plugin, PluginOptions};

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

/// Load one plugin file for an offline command with `config` and `limits`,
/// within `policy`'s quotas (compiled in a bounded child process, as the
/// host does).
pub fn load(
    path: &Path,
    config: Option<serde_json::Value>,
    limits: LimitSettings,
    args: &OfflineArgs,
    policy: &Policy,
) -> anyhow::Result<Plugin> {
    let runtime = &args.runtime;
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let quotas = policy.quotas_for_file(stem);
    runtime
        .bounded_runtime()?
        .load(
            &bytes,
            PluginOptions {
                config,
                limits: limits.within(quotas.limits()),
                compile: quotas.compile(),
                label: Some(path.display().to_string()),
            },
        )
        .with_context(|| format!("cannot load plugin {}", path.display()))
}

/// The grant the live host would give `plugin` under `policy`, and the
/// plugin as the host would admit it (scopes resolved offline: built-in
/// kinds and `crds`).
pub fn admit(
    plugin: Plugin,
    policy: &Policy,
    crds: &[serde_json::Value],
    limits: LimitSettings,
) -> anyhow::Result<(Plugin, Effective, Vec<String>)> {
    let name = plugin.name().to_string();
    let grant = policy.grant(&name).with_context(|| {
        format!(
            "the live host would refuse plugin {name}: the policy is strict and has no grant for it"
        )
    })?;
    let scopes = crate::discovery::Scopes::offline(crds);
    let notes = std::cell::RefCell::new(Vec::new());
    let resolved = plugin
        .manifest()
        .resolve(|r| {
            scopes.lookup(r).or_else(|| {
                notes.borrow_mut().push(format!(
                    "the scope of {r} is the plugin's own claim (the live host asks the API server; pass --crd to check it here)"
                ));
                Some((r.plural.clone(), r.namespaced))
            })
        })
        .map_err(|problems| anyhow::anyhow!("the live host would refuse plugin {name}: {}", problems.join("; ")))?;
    let admitted = grant
        .admit(&resolved, plugin.digest())
        .map_err(|refusal| anyhow::anyhow!("the live host would refuse this plugin: {refusal}"))?;
    let limits = limits.within(grant.quotas.limits());
    Ok((plugin.admitted(admitted, limits), grant, notes.into_inner()))
}

/// Print `value` as YAML or JSON on stdout.
pub fn print<T: Serialize>(value: &T, format: Format) -> anyhow::Result<()> {
    let text = match format {
        Format::Yaml => serde_yaml::to_string(value)?,
        Format::Json => serde_json::to_string_pretty(value)? + "\n",
    };
    print!("{text}");
    Ok(())
}
