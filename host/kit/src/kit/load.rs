//! A plugin file loaded offline as the live host would load it: compiled
//! within its quotas, then put through the one admission
//! ([`kubeplug_core::admission`]) with the kinds known offline. `render`,
//! `render --request`, `inspect` and `kubeplug test` all load through here.

use std::path::Path;

use serde_json::Value;

use kubeplug_core::admission::{Admission, AdmitError, Offline};
use kubeplug_core::policy::{Effective, Grant, Policy};
use kubeplug_runtime::{LimitSettings, Plugin, Runtime};

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
    /// What the live host would refuse, when the plugin was admitted under
    /// the grant it asks for instead (see [`admit_as_asked`]).
    pub warnings: Vec<String>,
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
        .load_within(&bytes, &quotas, config, limits, shown.clone())
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
        warnings: Vec::new(),
    })
}

/// [`admit`], except that a plugin the default grant refuses (the policy
/// does not name it) is admitted under [`Grant::asked_by`] its manifest,
/// the default grant's refusal kept as a warning: what a plugin does can
/// be seen before a platform grants it. Rules no grant lifts still refuse.
pub fn admit_as_asked(
    plugin: &Plugin,
    policy: &Policy,
    crds: &[Value],
    limits: LimitSettings,
) -> Result<Loaded, LoadError> {
    match admit(plugin, policy, crds, limits) {
        Err(LoadError::Refused(AdmitError::Refused(refusal))) if !refusal.explicit => {
            let asked = policy
                .clone()
                .with_grant(plugin.name(), Grant::asked_by(plugin.manifest()));
            let mut loaded = admit(plugin, &asked, crds, limits)?;
            loaded.warnings.push(format!(
                "{refusal}; rendered under a grant of everything it asks for (give --policy to render under the platform's grants)"
            ));
            Ok(loaded)
        }
        other => other,
    }
}
