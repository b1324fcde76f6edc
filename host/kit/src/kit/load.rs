//! A plugin file loaded offline as the live host would load it: compiled
//! within its quotas, then put through the one admission
//! ([`kubeplug_core::admission`]) with the kinds known offline. `render`,
//! `render --request`, `inspect` and `kubeplug test` all load through here.

use std::path::Path;

use serde_json::Value;

use kubeplug_core::admission::{Admission, AdmitError, Offline};
use kubeplug_core::policy::{Effective, Policy};
use kubeplug_runtime::{LimitSettings, Plugin, PluginOptions, Runtime};

/// Why a plugin file cannot be used offline.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot load plugin {path}")]
    Load {
        path: String,
        #[source]
        source: kubeplug_runtime::LoadError,
    },
    /// The admission refuses it: the live host would not serve it.
    #[error("the live host would refuse this plugin: {0}")]
    Refused(AdmitError),
}

/// A plugin as the live host would serve it, and what was taken on trust.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The plugin with its admitted manifest and limits.
    pub plugin: Plugin,
    pub grant: Effective,
    /// Scopes the admission could not check offline.
    pub notes: Vec<String>,
}

/// Compile the file at `path` with `config` and `limits`, within the quotas
/// of the plugin it is named after (the manifest names the plugin only once
/// it is compiled). Not yet admitted.
pub fn compile(
    runtime: &Runtime,
    path: &Path,
    config: Option<Value>,
    limits: LimitSettings,
    policy: &Policy,
) -> Result<Plugin, LoadError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
        path: shown.clone(),
        source,
    })?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    // Offline a file has no place in a plugin directory, so nothing binds
    // it before compiling (no pins, no placed grant): only the quotas of the
    // plugin it is named after apply.
    let quotas = policy.quotas_for_file(stem);
    runtime
        .load(
            &bytes,
            PluginOptions {
                config,
                limits: limits.within(quotas.limits()),
                compile: quotas.compile(),
                label: Some(shown.clone()),
            },
        )
        .map_err(|source| LoadError::Load {
            path: shown,
            source,
        })
}

/// Admit `plugin` under `policy` with the kinds known offline (built-in and
/// `crds`), asking for `limits`.
pub fn admit(
    plugin: &Plugin,
    policy: &Policy,
    crds: &[Value],
    limits: LimitSettings,
) -> Result<Loaded, LoadError> {
    let admitted = Admission::new(policy)
        .admit(
            plugin.manifest(),
            plugin.digest(),
            limits,
            &Offline::from_crds(crds),
        )
        .map_err(LoadError::Refused)?;
    Ok(Loaded {
        plugin: plugin.admitted(admitted.manifest, admitted.limits),
        grant: admitted.grant,
        notes: admitted.notes,
    })
}
