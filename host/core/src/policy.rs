//! The platform's grants: what each plugin may read and write.
//!
//! A plugin's manifest is a *request*. The people who run the host write a
//! policy file (`--policy`, mounted from a ConfigMap the platform team owns,
//! outside the plugin volume) that grants each plugin, by name, what it may
//! do. The host checks the manifest against the grant when it loads a plugin
//! (refusing it with every missing grant named) and every answer against the
//! grant's quotas and key rules. `kubeplug run` and `kubeplug render` read the
//! same file through this module.
//!
//! ```yaml
//! apiVersion: kubeplug.io/v1alpha1
//! kind: PluginPolicy
//! strict: true                 # plugins without an entry are refused
//! identityNamespace: kubeplug-system
//! quotas: { eventsPerAnswer: 10 }   # defaults for every plugin
//! plugins:
//!   database:
//!     path: database/database.wasm   # where its file sits (default: database.wasm or database/database.wasm)
//!     parent: [Database.example.com]
//!     children: [StatefulSet.apps, Service, Secret]
//!     related: [Pod]
//!     references: [ConfigMap]  # kinds its parents may name (read in its namespaces)
//!     namespaces: ["*"]
//!     shards: 3          # parents split into 3 shards, each owned by one replica (default 1)
//!     shardPods: true    # its related Pods are its StatefulSets' Pods: cache only its shards' (default false)
//! ```
//!
//! Kinds are written `Kind.group` (`Kind` for the core group), whatever the
//! version. `"*"` in a kind list means any namespaced kind that is not
//! [sensitive](is_sensitive); sensitive and cluster-scoped kinds must be named
//! (cluster-scoped ones also under `clusterScoped`).
//!
//! A grant is bound to where the platform puts the plugin's file
//! ([`Location`]): a file elsewhere, or one there that declares another name,
//! gets no grant. `strict` requires a grant for every plugin, not an explicit
//! `path:` (the default locations are the platform's ConfigMap keys and
//! volume mounts).
//!
//! Guarantees: nothing a plugin ships (its manifest, its `<name>.yaml`
//! settings, where a team drops its file) can widen its grant or borrow
//! another's; settings may only lower limits.

mod grant;
mod kind;
mod location;
mod promotion;
mod quotas;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use serde::Deserialize;

pub use crate::webhook::{FailurePolicy, Webhooks};
pub use grant::{
    Grant, GrantError, KindSet, MAX_SHARDS, NamespaceScope, Refusal, derived_finalizer_domain,
    reserved_key,
};
pub use kind::{KindRef, KindRefError};
pub use location::{Location, LocationError};
pub use promotion::{Gate, GateError, GateFile};
pub use quotas::{Quotas, QuotasError};

/// Namespaces `"*"` never covers: a grant must name them.
pub const SYSTEM_NAMESPACES: &[&str] = &["kube-system", "kube-public", "kube-node-lease"];

/// Where plugin ServiceAccounts live when the policy does not say.
pub const DEFAULT_IDENTITY_NAMESPACE: &str = "kubeplug-system";

/// Why a policy file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read policy {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid policy {path}")]
    Parse {
        path: String,
        #[source]
        source: crate::yaml::Error,
    },
    #[error("invalid policy {path}: {reason}")]
    Invalid { path: String, reason: Invalid },
}

/// What is wrong with a policy file that parsed (shown in
/// [`PolicyError::Invalid`]'s message, so not its source).
#[derive(Debug, thiserror::Error)]
pub enum Invalid {
    #[error("kind must be PluginPolicy, not {0}")]
    Kind(String),
    #[error("apiVersion must be kubeplug.io/v1alpha1, not {0}")]
    ApiVersion(String),
    #[error("defaultGrant has no path: a location belongs to one plugin's grant")]
    DefaultGrantPath,
    #[error("plugin {0} is granted twice")]
    GrantedTwice(String),
    /// Two grants name one file.
    #[error("{} is also the location of plugin {other}", file.display())]
    SharedFile { file: PathBuf, other: String },
    #[error(transparent)]
    Grant(#[from] GrantError),
    #[error(transparent)]
    Quotas(#[from] QuotasError),
}

/// Why no plugin may be served from a file in the plugin directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// A live file at no plugin's location (`stem`'s is `location`).
    #[error(
        "no plugin is placed at {}: plugin {stem}'s file is {}{}; a file elsewhere is never served",
        rel.display(),
        location.describe(stem),
        if *location == Location::Default {
            " (or where its grant's path: says)"
        } else {
            " (its grant's path:)"
        }
    )]
    NotPlaced {
        rel: PathBuf,
        stem: String,
        location: Location,
    },
    /// A candidate not in a folder where plugin `name`'s live file may sit.
    #[error(
        "{} is not beside plugin {name}'s file ({}): a candidate stands in the same folder as the live file it would replace; it is never shadowed or previewed",
        rel.display(),
        location.describe(name)
    )]
    NotBeside {
        rel: PathBuf,
        name: String,
        location: Location,
    },
}

/// The policy file, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    strict: Option<bool>,
    #[serde(default)]
    identity_namespace: Option<String>,
    /// Quota defaults for every plugin (each key optional).
    #[serde(default)]
    quotas: serde_json::Map<String, serde_json::Value>,
    /// The grant of plugins without an entry (non-strict mode).
    #[serde(default)]
    default_grant: Option<grant::GrantFile>,
    #[serde(default)]
    plugins: BTreeMap<String, grant::GrantFile>,
}

/// The platform's policy: one grant per plugin name.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Plugins without an entry are refused.
    pub strict: bool,
    /// Namespace of the plugins' ServiceAccounts.
    pub identity_namespace: String,
    quotas: Quotas,
    default_grant: Grant,
    plugins: BTreeMap<String, Grant>,
}

impl Default for Policy {
    /// No policy file: every plugin runs under the safe default grant.
    fn default() -> Self {
        Policy {
            strict: false,
            identity_namespace: DEFAULT_IDENTITY_NAMESPACE.into(),
            quotas: Quotas::default(),
            default_grant: Grant::safe_default(),
            plugins: BTreeMap::new(),
        }
    }
}

impl Policy {
    /// Read and merge policy files (a plugin granted in two files is an
    /// error, so that split files cannot silently override each other).
    pub fn load(paths: &[impl AsRef<Path>]) -> Result<Policy, PolicyError> {
        let mut policy = Policy::default();
        let mut quotas = serde_json::Map::new();
        for path in paths {
            let path = path.as_ref();
            let shown = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
                path: shown.clone(),
                source,
            })?;
            let file: PolicyFile =
                crate::yaml::from_str(&text).map_err(|source| PolicyError::Parse {
                    path: shown.clone(),
                    source,
                })?;
            let invalid = |reason: Invalid| PolicyError::Invalid {
                path: shown.clone(),
                reason,
            };
            if let Some(kind) = &file.kind
                && kind != "PluginPolicy"
            {
                return Err(invalid(Invalid::Kind(kind.clone())));
            }
            if let Some(v) = &file.api_version
                && v != "kubeplug.io/v1alpha1"
            {
                return Err(invalid(Invalid::ApiVersion(v.clone())));
            }
            if let Some(strict) = file.strict {
                policy.strict |= strict;
            }
            if let Some(ns) = file.identity_namespace {
                policy.identity_namespace = ns;
            }
            quotas.extend(file.quotas);
            if let Some(g) = file.default_grant {
                let g = g.into_grant().map_err(|e| invalid(e.into()))?;
                if g.location != Location::Default {
                    return Err(invalid(Invalid::DefaultGrantPath));
                }
                policy.default_grant = g;
            }
            for (name, g) in file.plugins {
                if policy.plugins.contains_key(&name) {
                    return Err(invalid(Invalid::GrantedTwice(name)));
                }
                policy
                    .plugins
                    .insert(name, g.into_grant().map_err(|e| invalid(e.into()))?);
            }
        }
        policy.check_locations()?;
        policy.quotas = Quotas::default()
            .merged(&quotas)
            .map_err(|e| PolicyError::Invalid {
                path: "quotas".into(),
                reason: e.into(),
            })?;
        for (name, grant) in &policy.plugins {
            policy
                .quotas
                .merged(&grant.quota_overrides)
                .map_err(|e| PolicyError::Invalid {
                    path: format!("plugins.{name}.quotas"),
                    reason: e.into(),
                })?;
        }
        Ok(policy)
    }

    /// This policy with plugin `name` granted `grant` (offline tools that
    /// render under [`Grant::asked_by`]).
    pub fn with_grant(mut self, name: &str, grant: Grant) -> Self {
        self.plugins.insert(name.to_string(), grant);
        self
    }

    /// The grant for plugin `name`, with quotas resolved. `None`: refused
    /// (strict mode and no entry).
    pub fn grant(&self, name: &str) -> Option<Effective> {
        let (grant, explicit) = match self.plugins.get(name) {
            Some(g) => (g.clone(), true),
            None if self.strict => return None,
            None => (self.default_grant.clone(), false),
        };
        let quotas = self
            .quotas
            .merged(&grant.quota_overrides)
            .expect("quota overrides were checked at load");
        let service_account = grant
            .service_account
            .clone()
            .unwrap_or_else(|| format!("kubeplug-plugin-{name}"));
        Some(Effective {
            plugin: name.to_string(),
            explicit,
            service_account,
            identity_namespace: self.identity_namespace.clone(),
            quotas,
            grant,
        })
    }

    /// Where plugin `name`'s file sits: its grant's `path:`, else the
    /// default layouts (see [`Location`]).
    pub fn location(&self, name: &str) -> Location {
        self.plugins
            .get(name)
            .map(|g| g.location.clone())
            .unwrap_or_default()
    }

    /// The plugin whose location is `rel` (a `.wasm` path relative to the
    /// plugin directory, not a candidate): a grant whose `path:` is that
    /// file, else the plugin the file is named after if its location holds
    /// it. Otherwise why no plugin may be served from there.
    pub fn bound_at(&self, rel: &Path) -> Result<String, PlacementError> {
        if let Some((name, _)) = self
            .plugins
            .iter()
            .find(|(_, g)| matches!(&g.location, Location::File(f) if f == rel))
        {
            return Ok(name.clone());
        }
        let stem = rel.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let location = self.location(stem);
        if !matches!(location, Location::File(_)) && location.holds(stem, rel) {
            return Ok(stem.to_string());
        }
        Err(PlacementError::NotPlaced {
            rel: rel.into(),
            stem: stem.into(),
            location,
        })
    }

    /// The plugin a candidate `rel` (`<dir>/<name>.next.wasm`) is a version
    /// of, if it stands in a folder where that plugin's live file may sit.
    pub fn candidate_at(&self, rel: &Path) -> Result<String, PlacementError> {
        let name = rel
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.strip_suffix(".next"))
            .unwrap_or_default();
        let folder = rel.parent().unwrap_or(Path::new(""));
        let location = self.location(name);
        if location.folders(name).iter().any(|f| f == folder) {
            return Ok(name.to_string());
        }
        Err(PlacementError::NotBeside {
            rel: rel.into(),
            name: name.into(),
            location,
        })
    }

    /// Two grants may not name one file.
    fn check_locations(&self) -> Result<(), PolicyError> {
        for (name, grant) in &self.plugins {
            let Location::File(file) = &grant.location else {
                continue;
            };
            if let Some((other, _)) = self
                .plugins
                .iter()
                .filter(|(n, _)| *n != name)
                .find(|(n, g)| g.location != Location::Default && g.location.holds(n, file))
            {
                return Err(PolicyError::Invalid {
                    path: format!("plugins.{name}.path"),
                    reason: Invalid::SharedFile {
                        file: file.clone(),
                        other: other.clone(),
                    },
                });
            }
        }
        Ok(())
    }

    /// Quotas for a file not yet known by name (compile limits apply before
    /// the manifest names the plugin): the grant named by the file stem if
    /// there is one, else the defaults.
    pub fn quotas_for_file(&self, stem: &str) -> Quotas {
        self.grant(stem)
            .map(|g| g.quotas)
            .unwrap_or_else(|| self.quotas.clone())
    }

    /// The sha256 pins of the plugin named like the file stem, if any.
    pub fn pins_for_file(&self, stem: &str) -> &[String] {
        self.plugins
            .get(stem)
            .map(|g| g.sha256.as_slice())
            .unwrap_or_default()
    }

    /// The keys the plugin named like the file stem must be signed by, if
    /// any (see [`Grant::signed_by`]).
    pub fn signers_for_file(&self, stem: &str) -> &[String] {
        self.plugins
            .get(stem)
            .map(|g| g.signed_by.as_slice())
            .unwrap_or_default()
    }

    /// Every plugin the policy names and its ServiceAccount.
    pub fn service_accounts(&self) -> Vec<(String, String)> {
        self.plugins
            .keys()
            .filter_map(|n| self.grant(n).map(|g| (n.clone(), g.service_account)))
            .collect()
    }
}

/// The policy files of a running host and the policy last read from them.
/// The platform changes its ConfigMap; the host notices on its next rescan
/// ([`PolicyFiles::refresh`]) and re-admits every plugin under the new
/// grants. A file that does not parse leaves the previous policy in force.
pub struct PolicyFiles {
    paths: Vec<PathBuf>,
    state: Mutex<(String, Arc<Policy>)>,
}

impl PolicyFiles {
    pub fn load(paths: Vec<PathBuf>) -> Result<Self, PolicyError> {
        let digest = Self::digest(&paths);
        let policy = Policy::load(&paths)?;
        Ok(PolicyFiles {
            paths,
            state: Mutex::new((digest, Arc::new(policy))),
        })
    }

    /// The policy in force.
    pub fn current(&self) -> Arc<Policy> {
        self.state.lock().1.clone()
    }

    /// Read the files again if their content changed. `Ok(true)`: a new
    /// policy is in force.
    pub fn refresh(&self) -> Result<bool, PolicyError> {
        let digest = Self::digest(&self.paths);
        if self.state.lock().0 == digest {
            return Ok(false);
        }
        let policy = Policy::load(&self.paths)?;
        *self.state.lock() = (digest, Arc::new(policy));
        Ok(true)
    }

    /// What the files hold now (an unreadable file hashes as its error, so
    /// it reads as a change and is reported by the load).
    fn digest(paths: &[PathBuf]) -> String {
        let mut hasher = Sha256::new();
        for path in paths {
            match std::fs::read(path) {
                Ok(bytes) => hasher.update(&bytes),
                Err(error) => hasher.update(error.to_string().as_bytes()),
            }
            hasher.update([0]);
        }
        hex::encode(hasher.finalize())
    }
}

/// One plugin's grant with its quotas and identity resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    pub plugin: String,
    /// The policy names this plugin (not the default grant).
    pub explicit: bool,
    /// ServiceAccount the plugin acts as (in `identity_namespace`).
    pub service_account: String,
    pub identity_namespace: String,
    pub quotas: Quotas,
    pub grant: Grant,
}

impl Effective {
    /// The Kubernetes user name of the plugin's ServiceAccount.
    pub fn user(&self) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            self.identity_namespace, self.service_account
        )
    }

    /// The groups the API server gives that ServiceAccount.
    pub fn groups(&self) -> Vec<String> {
        vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{}", self.identity_namespace),
            "system:authenticated".into(),
        ]
    }
}

#[cfg(test)]
mod tests;
