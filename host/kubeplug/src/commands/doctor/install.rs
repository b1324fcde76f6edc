//! Installation mode (no `--plugins`, no `--policy`): the host as its
//! Deployment runs it. The container's flags (`--plugins`, `--policy`,
//! `--settings`, `--namespaces`, `--lease-namespace`, `--leader-elect`,
//! `--cache-dir`, `--compile-cache-bytes`, or their `KUBEPLUG_*`
//! environment variables) say which paths it reads; the pod's volumes say
//! what backs them. The policy and the settings are read from the ConfigMaps
//! mounted there (`configMap` volumes and `projected` sources, the key
//! being the file name, or as `items` map it), the plugin files from the
//! ConfigMaps projected into the plugins path, written into a temporary
//! directory laid out as the pod sees it so that the plugin checks run on
//! it. Image volumes cannot be read from here: one `warn` each.
//!
//! One file per concern: [`host`] (pure: the Deployment object read as the
//! host's flags, mounts and what backs a path), [`config_maps`] (the
//! ConfigMaps' files and the policy, settings and plugin volume checks
//! built from them), and here [`read`], which asks the API server for the
//! Deployment and runs them in order. The pod's compile cache volume is
//! checked beside the local cache directory ([`cache`](super::cache)).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;

use cache_volume::cache_volume;
use config_maps::{Maps, directory, policy};
use kubeplug_core::policy::Policy;
use kubeplug_doctor::report::Check;

mod cache_volume;
mod config_maps;
mod host;

pub use host::{Backing, Host};

/// A private directory (random name, mode 0700, made exclusively: another
/// user of the machine can neither read what the cluster's ConfigMaps hold
/// nor swap it), removed when dropped.
pub struct Scratch(tempfile::TempDir);

impl Scratch {
    fn new() -> std::io::Result<Scratch> {
        tempfile::Builder::new()
            .prefix("kubeplug-doctor-")
            .tempdir()
            .map(Scratch)
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

/// What installation mode read: the checks it made, and what the plugin
/// checks run on.
pub struct Installation {
    pub host: Host,
    /// The policy as the host loads it; `None` when it could not be read.
    pub policy: Option<Policy>,
    /// The plugins path laid out as the pod sees it (the ConfigMaps'
    /// files), and how to name it; `None` when the host has no `--plugins`.
    pub plugins: Option<(PathBuf, String)>,
    /// The settings path likewise (`--settings`).
    pub settings: Option<PathBuf>,
    /// With `--plugin-artifacts`, the plugins pulled into `plugins` from a
    /// signed artifact, and the key that verified each.
    pub signed: BTreeMap<String, String>,
    /// Holds the files above.
    pub _scratch: Scratch,
}

/// The host as the Deployment `namespace/name` describes it, and a scratch
/// directory for its ConfigMaps' files; `Err`: why not, and the fix (the
/// `deployment` check's failure).
async fn read_host(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<(Host, Scratch), String> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let deployment = match api.get_opt(name).await {
        Ok(Some(deployment)) => deployment,
        Ok(None) => {
            return Err(format!(
                "Deployment {namespace}/{name} does not exist: install the host (`kubectl apply --server-side -k deploy/`, or `helm install kubeplug deploy/chart -n {namespace}`), give --deployment/-n the host's, or check local files with --plugins DIR --policy FILE"
            ));
        }
        Err(error) => {
            return Err(format!(
                "cannot read Deployment {namespace}/{name}: {error}: doctor needs `get` on deployments.apps there"
            ));
        }
    };
    let host = Host::from_deployment(&deployment)
        .map_err(|why| format!("{why}: re-apply deploy/base/deployment.yaml (or the chart)"))?;
    let scratch = Scratch::new().map_err(|error| {
        format!("cannot make a temporary directory for the ConfigMaps' files: {error}: set TMPDIR to a writable directory")
    })?;
    Ok((host, scratch))
}

/// Read the Deployment `namespace/name` and what it mounts, pushing the
/// `deployment`, `cache volume`, `policy`, `settings` and `plugin volume
/// <volume>` checks. `None` when there is no Deployment to read.
pub async fn read(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    checks: &mut Vec<Check>,
) -> Option<Installation> {
    let (host, scratch) = match read_host(client, namespace, name).await {
        Ok(found) => found,
        Err(why) => {
            checks.push(Check::fail("deployment", why));
            return None;
        }
    };
    checks.push(deployment_check(&host));
    checks.push(cache_volume(&host));
    let mut maps = Maps::new(client, &host.namespace);
    let policy = policy(&host, &mut maps, scratch.path(), checks).await;
    let settings = match &host.args.settings {
        None => {
            checks.push(Check::ok(
                "settings",
                "the Deployment gives no --settings: each plugin's settings sit beside its .wasm",
            ));
            None
        }
        Some(path) => {
            let local = scratch.path().join("settings");
            let read = directory(&host, path, &mut maps, &local, "settings", checks).await;
            checks.push(match read {
                Ok(read) => Check::ok(
                    "settings",
                    format!(
                        "--settings {path} in the Deployment's pod: {}",
                        read.describe()
                    ),
                ),
                Err(why) => Check::fail("settings", why),
            });
            Some(local)
        }
    };
    let plugins = match &host.args.plugins {
        None => {
            checks.push(Check::fail(
                "plugin directory",
                format!(
                    "the Deployment's container {} runs without --plugins (nor KUBEPLUG_PLUGINS): give it --plugins=/plugins (deploy/base/deployment.yaml)",
                    host.container
                ),
            ));
            None
        }
        Some(path) => {
            let local = scratch.path().join("plugins");
            match directory(&host, path, &mut maps, &local, "plugin", checks).await {
                Ok(read) => Some((
                    local,
                    format!(
                        "--plugins {path} in the Deployment's pod ({})",
                        read.describe()
                    ),
                )),
                Err(why) => {
                    checks.push(Check::fail("plugin directory", why));
                    None
                }
            }
        }
    };
    let mut signed = BTreeMap::new();
    if let (Some(file), Some((local, _)), Some(policy)) =
        (&host.args.plugin_artifacts, &plugins, &policy)
    {
        signed = artifacts(&host, file, &mut maps, policy, local, checks).await;
    }
    Some(Installation {
        host,
        policy,
        plugins,
        settings,
        signed,
        _scratch: scratch,
    })
}

/// `--plugin-artifacts`: pull each artifact the file names and check it
/// as the host does ([`kubeplug_oci::pull::Fetch`]), writing it at its
/// plugin's location under `local` so that the plugin checks load it; the
/// `plugin artifacts` check, one FAIL per artifact that cannot be pulled.
/// Returns the plugins verified as signed, with their keys.
async fn artifacts(
    host: &Host,
    file: &str,
    maps: &mut Maps,
    policy: &Policy,
    local: &Path,
    checks: &mut Vec<Check>,
) -> BTreeMap<String, String> {
    const CHECK: &str = "plugin artifacts";
    let mut signed = BTreeMap::new();
    let text = match config_maps::file(host, maps, file).await {
        config_maps::Read::Found { bytes, .. } => String::from_utf8_lossy(&bytes).into_owned(),
        config_maps::Read::Missing(why) => {
            checks.push(Check::fail(
                CHECK,
                format!("--plugin-artifacts {file}: {why}: the host reads no plugin (the chart's plugins.artifacts makes ConfigMap kubeplug-plugin-artifacts)"),
            ));
            return signed;
        }
        config_maps::Read::Unreadable(why) => {
            checks.push(Check::warn(
                CHECK,
                format!("--plugin-artifacts {file} {why}: its plugins are not checked"),
            ));
            return signed;
        }
    };
    let named = match crate::artifacts::parse(&text) {
        Ok(named) => named,
        Err(error) => {
            checks.push(Check::fail(
                CHECK,
                format!("--plugin-artifacts {file}: {error:#}"),
            ));
            return signed;
        }
    };
    let max_bytes = host
        .args
        .max_plugin_bytes
        .as_deref()
        .and_then(|b| b.parse().ok())
        .unwrap_or(kubeplug_operator::registry::MAX_PLUGIN_BYTES);
    let mut pulled = Vec::new();
    for (name, artifact) in named {
        let fail = |why: String| {
            Check::fail(
                format!("artifact {name}"),
                format!(
                    "{why}: the host cannot pull it either, and serves the version it has, if any (fix the digest in plugins.artifacts, or the grant's signedBy)"
                ),
            )
        };
        if !kubeplug_core::manifest::is_dns_label(&name) {
            checks.push(fail(format!("{name:?} is not a plugin name")));
            continue;
        }
        let artifact = match artifact {
            Ok(artifact) => artifact,
            Err(error) => {
                checks.push(fail(format!("{error:#}")));
                continue;
            }
        };
        let signers = policy.signers_for_file(&name);
        let got = async {
            let mut fetch = kubeplug_oci::pull::Fetch::start(&artifact, signers, max_bytes).await?;
            let bytes = fetch.bytes().await?;
            let path = local.join(policy.location(&name).file(&name));
            std::fs::create_dir_all(path.parent().expect("a parent"))?;
            std::fs::write(&path, bytes)?;
            anyhow::Ok(fetch.signed_by)
        }
        .await;
        match got {
            Ok(key) => {
                pulled.push(format!(
                    "{name}{}",
                    if key.is_some() { " (signed)" } else { "" }
                ));
                if let Some(key) = key {
                    signed.insert(name, key);
                }
            }
            Err(error) => checks.push(fail(format!("{artifact}: {error:#}"))),
        }
    }
    checks.push(Check::ok(
        CHECK,
        format!(
            "--plugin-artifacts {file}: pulled and checked {}",
            if pulled.is_empty() {
                "none".to_string()
            } else {
                pulled.join(", ")
            }
        ),
    ));
    signed
}

fn deployment_check(host: &Host) -> Check {
    let a = &host.args;
    let mut flags = Vec::new();
    if let Some(p) = &a.plugins {
        flags.push(format!("--plugins {p}"));
    }
    if !a.policy.is_empty() {
        flags.push(format!("--policy {}", a.policy.join(",")));
    }
    if let Some(s) = &a.settings {
        flags.push(format!("--settings {s}"));
    }
    if !a.namespaces.is_empty() {
        flags.push(format!("--namespaces {}", a.namespaces.join(",")));
    }
    if a.leader_elect {
        flags.push(format!("--leader-elect (Leases in {})", a.lease_namespace));
    }
    Check::ok(
        "deployment",
        format!(
            "Deployment {} (installation mode: read from the cluster), ServiceAccount {}, container {}: {}",
            host.deployment,
            host.service_account,
            host.container,
            flags.join(" ")
        ),
    )
}

#[cfg(test)]
mod tests;
