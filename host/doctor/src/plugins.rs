//! The plugin directory, loaded as the live host loads it: each file at a
//! plugin's location (by default `DIR/N.wasm` or `DIR/N/N.wasm`) with its
//! settings, through the import precheck, the compile (bounded, in a child
//! process, through the compile cache) and the one admission under the
//! policy, with the kinds the API server serves. What is admitted feeds the
//! `kinds` and `permissions` checks.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use crate::report::Check;
use kubeplug_core::admission::{Admission, Offline, Placed, Scope, Served};
use kubeplug_core::manifest::{ApiResource, Manifest, Mode};
use kubeplug_core::policy::{Effective, Policy};
use kubeplug_kube::discovery::Discovered;
use kubeplug_kube::report::format_chain;
use kubeplug_operator::registry::{self, Surveyed};
use kubeplug_runtime::Runtime;

/// A plugin the live host would serve.
pub struct Loaded {
    /// The plugin's name (bound to its file's location).
    pub name: String,
    /// As admitted: the API server's plurals and scopes, the grant's
    /// namespaces.
    pub manifest: Manifest,
    pub grant: Effective,
    /// What the API server serves of its kinds; `None` without a cluster
    /// or when discovery failed.
    pub served: Option<Discovered>,
}

/// A plugin file: its check, and the plugin if it would serve (else why
/// the checks that need it are skipped).
pub struct Outcome {
    /// The plugin, or the file when it is at no plugin's location.
    pub name: String,
    pub check: Check,
    /// `None`: the file is at no plugin's location, so there is no plugin
    /// whose kinds or identity could be checked.
    pub loaded: Option<Result<Loaded, String>>,
}

/// What admission is told of a kind: the API server's answer where it
/// serves the kind. A kind it does not serve is the `kinds` check's to
/// report, so here the plugin's claim stands and the rest of the admission
/// (the grant) is still judged. Without a cluster, Kubernetes' built-in
/// kinds.
struct Claimed<'a> {
    live: Option<&'a Discovered>,
    builtin: Offline,
}

impl Served for Claimed<'_> {
    fn scope(&self, r: &ApiResource) -> Scope {
        if let Some(Scope::Served { plural, namespaced }) = self.live.map(|live| live.scope(r)) {
            return Scope::Served { plural, namespaced };
        }
        match self.builtin.scope(r) {
            served @ Scope::Served { .. } => served,
            _ => Scope::Unknown,
        }
    }
}

/// Where the plugins are read from: the directory, how its check names it
/// (a local directory, or the pod's path and its ConfigMaps), and the
/// host's `--namespaces` (admission binds each plugin to them).
pub struct Source<'a> {
    pub dir: &'a Path,
    pub shown: String,
    pub settings: Option<&'a Path>,
    pub namespaces: Option<&'a [String]>,
    /// The plugins whose files were pulled from a signed artifact, and the
    /// key that verified each (`--plugin-artifacts`).
    pub signed: Option<&'a BTreeMap<String, String>>,
}

/// Check the plugin directory: the `plugin directory` check, then one
/// outcome per file.
pub async fn check(
    source: &Source<'_>,
    policy: &Policy,
    runtime: &Result<Arc<Runtime>, String>,
    client: Option<&kube::Client>,
) -> (Check, Vec<Outcome>) {
    const CHECK: &str = "plugin directory";
    let (dir, settings, shown) = (source.dir, source.settings, &source.shown);
    let found = match registry::survey(dir, settings, policy, registry::MAX_PLUGIN_BYTES) {
        Ok(found) => found,
        Err(error) => {
            return (
                Check::fail(
                    CHECK,
                    format!(
                        "cannot read {shown}: {error}: give --plugins the directory `kubeplug run --plugins` reads (or none, to read the installation's)"
                    ),
                ),
                Vec::new(),
            );
        }
    };
    let directory = if found.is_empty() {
        Check::warn(
            CHECK,
            format!("{shown} holds no plugin file (<name>.wasm or <name>/<name>.wasm)"),
        )
    } else {
        Check::ok(CHECK, format!("{shown}: {} plugin file(s)", found.len()))
    };
    let mut outcomes = Vec::new();
    for (path, read) in found {
        let outcome = match read {
            Ok(surveyed) => {
                let signer = source
                    .signed
                    .and_then(|signed| signed.get(&surveyed.bound))
                    .map(String::as_str);
                load(surveyed, policy, source.namespaces, signer, runtime, client).await
            }
            Err(reason) => {
                let rel = path
                    .strip_prefix(dir)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                Outcome {
                    check: Check::fail(format!("plugin {rel}"), reason),
                    loaded: None,
                    name: rel,
                }
            }
        };
        outcomes.push(outcome);
    }
    (directory, outcomes)
}

/// One file through the precheck, the compile and the admission.
async fn load(
    surveyed: Surveyed,
    policy: &Policy,
    namespaces: Option<&[String]>,
    signer: Option<&str>,
    runtime: &Result<Arc<Runtime>, String>,
    client: Option<&kube::Client>,
) -> Outcome {
    let name = surveyed.bound.clone();
    let rel = surveyed.rel.display().to_string();
    let failed = |detail: String| Outcome {
        name: name.clone(),
        check: Check::fail(
            format!("plugin {name}"),
            format!(
                "{rel}: {detail}: fix the file (`kubeplug inspect` shows what it declares) or its grant in the policy (`kubeplug platform` writes one)"
            ),
        ),
        loaded: Some(Err(format!("plugin {name} did not load"))),
    };
    if let Err(error) = kubeplug_runtime::compile::precheck(&surveyed.bytes) {
        return failed(format_chain(&error));
    }
    let admission = Admission::new(policy)
        .placed(Placed {
            name: &name,
            rel: &surveyed.rel,
        })
        .within(namespaces)
        .signed_by(signer);
    let digest = hex::encode(Sha256::digest(&surveyed.bytes));
    let quotas = match admission.before_compile(&name, &digest) {
        Ok(quotas) => quotas,
        Err(error) => return failed(error.to_string()),
    };
    let runtime = match runtime {
        Ok(runtime) => runtime.clone(),
        Err(error) => return failed(format!("cannot start the Wasm runtime: {error}")),
    };
    let limits = surveyed.settings.limits;
    let (bytes, config, label) = (surveyed.bytes, surveyed.settings.config, rel.clone());
    let plugin = match tokio::task::spawn_blocking(move || {
        runtime.load_within(&bytes, &quotas, config, limits, label)
    })
    .await
    {
        Ok(Ok(plugin)) => plugin,
        Ok(Err(error)) => return failed(format_chain(&error)),
        Err(error) => return failed(format!("the load panicked: {error}")),
    };
    if let Err(error) = admission.grant(plugin.manifest()) {
        return failed(error.to_string());
    }
    let mut notes = Vec::new();
    let served = match client {
        Some(client) => match Discovered::discover(client, plugin.manifest()).await {
            Ok(served) => Some(served),
            Err(error) => {
                notes.push(format!("API discovery failed ({error}): kinds not checked"));
                None
            }
        },
        None => None,
    };
    let claimed = Claimed {
        live: served.as_ref(),
        builtin: Offline::from_crds(&[]),
    };
    let admitted = match admission.admit(plugin.manifest(), plugin.digest(), limits, &claimed) {
        Ok(admitted) => admitted,
        Err(error) => return failed(error.to_string()),
    };
    let manifest = admitted.manifest;
    let mode = match manifest.mode {
        Mode::Composite => "composite",
        Mode::Decorator => "decorator",
    };
    let mut detail = format!(
        "{rel}: {} {}, {mode} of {}, sha256:{}, admitted under its grant",
        manifest.name,
        manifest.version,
        manifest.parent,
        &plugin.digest()[..12]
    );
    for note in notes {
        detail.push_str("; ");
        detail.push_str(&note);
    }
    let check = if served.is_none() && client.is_some() {
        Check::warn(format!("plugin {name}"), detail)
    } else {
        Check::ok(format!("plugin {name}"), detail)
    };
    Outcome {
        name: name.clone(),
        check,
        loaded: Some(Ok(Loaded {
            name,
            manifest,
            grant: admitted.grant,
            served,
        })),
    }
}
