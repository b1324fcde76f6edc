//! `kubeplug doctor`: check an installation, one line per check (`ok`,
//! `warn`, `FAIL` or `skipped`, its name, and a detail that names the
//! problem and the fix), or a JSON array with `-o json`; exit non-zero if
//! any check fails.
//!
//! Two modes, each check's detail saying which it read:
//!
//! - **installation** (the default: neither `--plugins` nor `--policy`):
//!   [`install`] reads the host's Deployment (`--deployment`, in `-n`), its
//!   container's flags and the volumes behind them: the policy and the
//!   settings from the ConfigMaps mounted at their paths, the plugin files
//!   from the ConfigMaps projected into the plugins path (laid out in a
//!   temporary directory as the pod sees them; an image volume is one
//!   `warn`), and the pod's compile cache volume (`cache volume`); then,
//!   besides the plugin checks below, [`host_rights`]: the host's own
//!   ServiceAccount may impersonate each plugin, read its kinds, create
//!   SubjectAccessReviews and hold Leases.
//! - **local files** (`--plugins DIR`, `--policy FILE`, as `kubeplug run`
//!   takes them): those files, and the local compile cache directory
//!   ([`cache`]).
//!
//! Each check stands alone: one failing hides no other, and a check that
//! cannot run without an earlier one (the plugins' kinds without an API
//! server) says `skipped` and why. One file per concern:
//! [`cluster`] (kubeconfig, API server, namespace, front-proxy CA),
//! [`apiservice`] (the aggregated API's registration and CA bundle),
//! [`install`] (the Deployment and what it mounts), [`cache`] (the local
//! compile cache directory), [`plugins`] (the plugin directory, loaded and
//! admitted as the live host would), [`kinds`] (the kinds each plugin names
//! are served), [`permissions`] (each plugin's ServiceAccount may do what
//! the host asks in its name), [`host_rights`] (the host's ServiceAccount
//! may do what it does for each plugin), [`report`] (how checks print).
//! The checks that take plain inputs are [`kubeplug_doctor`]'s; reading
//! the installation ([`install`], [`cache`]) and connecting ([`cluster`])
//! stay here, beside the arguments they read as `kubeplug run` reads them.
//!
//! Read-only: doctor writes nothing to the cluster (SubjectAccessReviews
//! are questions) and, besides the local compile cache plugins are compiled
//! through and a temporary directory of the installation's files (removed
//! at the end), nothing to disk.

mod cache;
mod cluster;
mod install;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, ValueEnum};

use crate::args::{ClusterArgs, PolicyArgs, RuntimeArgs};
pub use kubeplug_doctor::report::{Check, Status};
use kubeplug_doctor::{apiservice, host_rights, kinds, permissions, plugins, report};
use kubeplug_runtime::Runtime;

/// `kubeplug doctor`.
#[derive(Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The host's namespace (its Deployment's, in installation mode)
    /// [default: in a pod without a kubeconfig, the pod's own (its
    /// ServiceAccount's namespace file); else kubeplug-system].
    #[arg(short, long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// Installation mode: the host's Deployment (in `--namespace`), whose
    /// container flags and volumes say what it reads.
    #[arg(long, value_name = "NAME", default_value = "kubeplug")]
    deployment: String,
    /// Local-files mode: the plugin directory to check, as `run --plugins`
    /// reads it: each file loaded and admitted, its kinds and its identity
    /// checked. With neither this nor `--policy`, doctor reads the
    /// installation's (installation mode).
    #[arg(long, env = "KUBEPLUG_PLUGINS", value_name = "DIR")]
    plugins: Option<PathBuf>,
    /// Local-files mode: the plugins' settings directory, as `run
    /// --settings` [default: beside each `.wasm`].
    #[arg(long, env = "KUBEPLUG_SETTINGS", value_name = "DIR")]
    settings: Option<PathBuf>,
    /// The local compile cache directory plugins are compiled through
    /// (checked in local-files mode only) [default: as `run`'s].
    #[arg(long, env = "KUBEPLUG_CACHE_DIR", value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    #[command(flatten)]
    policy: PolicyArgs,
    /// The aggregated API's APIService.
    #[arg(long, value_name = "NAME", default_value = "v1alpha1.kubeplug.io")]
    apiservice: String,
    /// `text`: one line per check; `json`: an array of `{name, status,
    /// detail}`.
    #[arg(short, long, value_enum, default_value = "text")]
    output: Output,
}

/// The host's namespace when `-n` is not given and doctor does not run in a
/// pod: where `deploy/` and the install guide's `helm install` put it.
const DEFAULT_NAMESPACE: &str = "kubeplug-system";

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

/// Run every check, print them, and exit 1 if any failed.
pub fn doctor_cmd(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let checks = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("failed to start the async runtime")?
        .block_on(checks(&args));
    match args.output {
        // The failures again at the end: what a pod's termination message
        // (the log's tail) and a `helm test` failure show.
        Output::Text => print!("{}{}", report::text(&checks), report::failures(&checks)),
        Output::Json => print!("{}", report::json(&checks)),
    }
    Ok(if report::failed(&checks) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Every check, in order.
async fn checks(args: &DoctorArgs) -> Vec<Check> {
    let mut checks = Vec::new();
    let pod_namespace = match &args.namespace {
        Some(_) => None,
        None => cluster::pod_namespace(&args.cluster),
    };
    let namespace = args
        .namespace
        .clone()
        .or_else(|| pod_namespace.clone())
        .unwrap_or_else(|| DEFAULT_NAMESPACE.into());
    let client = cluster::connect(&args.cluster, &mut checks).await;
    match &client {
        Ok(client) => {
            let mut check = cluster::namespace(client, &namespace).await;
            if pod_namespace.is_some() {
                check.detail += " (the pod's own namespace: no -n given)";
            }
            checks.push(check);
            checks.push(cluster::front_proxy_ca(client).await);
            checks
                .extend(apiservice::check(client, &args.apiservice, jiff::Timestamp::now()).await);
        }
        Err(why) => {
            for name in [
                "namespace",
                "front-proxy CA",
                "APIService",
                "APIService CA bundle",
            ] {
                checks.push(Check::skipped(name, why.clone()));
            }
        }
    }
    let client = client.as_ref().map_err(String::as_str);
    if args.plugins.is_some() || !args.policy.files.is_empty() {
        local(args, client, &mut checks).await;
    } else {
        installation(args, &namespace, client, &mut checks).await;
    }
    checks
}

/// The local compile cache directory, if it can be used (`report`: push its
/// check).
fn local_cache(args: &DoctorArgs, report: Option<&mut Vec<Check>>) -> Option<PathBuf> {
    let cache_dir = args
        .cache_dir
        .clone()
        .unwrap_or_else(crate::args::default_cache_dir);
    let cache = cache::check(&cache_dir);
    let usable = cache.status == Status::Ok;
    if let Some(checks) = report {
        checks.push(cache);
    }
    usable.then_some(cache_dir)
}

/// Local-files mode (`--plugins`, `--policy`): the files on this machine,
/// as `kubeplug run` would read them.
async fn local(args: &DoctorArgs, client: Result<&kube::Client, &str>, checks: &mut Vec<Check>) {
    let cache_dir = local_cache(args, Some(checks));
    let policy = match args.policy.load() {
        Ok(policy) => {
            checks.push(Check::ok("policy", describe_policy(&args.policy, &policy)));
            Some(policy)
        }
        Err(error) => {
            checks.push(Check::fail(
                "policy",
                format!(
                    "{error:#}: fix the local file given (--policy, KUBEPLUG_POLICY), or give neither --plugins nor --policy to check the installation's"
                ),
            ));
            None
        }
    };

    let (Some(dir), Some(policy)) = (&args.plugins, &policy) else {
        let why = if args.plugins.is_none() {
            "no --plugins DIR given (local-files mode, as --policy was)"
        } else {
            "the policy did not load"
        };
        for name in ["plugin directory", "kinds", "permissions"] {
            checks.push(Check::skipped(name, why));
        }
        return;
    };
    let runtime = runtime(cache_dir);
    let source = plugins::Source {
        dir,
        shown: format!("local directory {}", dir.display()),
        settings: args.settings.as_deref(),
        namespaces: None,
        signed: None,
    };
    let (directory, outcomes) = plugins::check(&source, policy, &runtime, client.ok()).await;
    checks.push(directory);
    for outcome in outcomes {
        checks.extend(plugin_checks(outcome, client, None).await);
    }
}

/// Installation mode (neither `--plugins` nor `--policy`): the host's
/// Deployment, and what it mounts, read from the cluster.
async fn installation(
    args: &DoctorArgs,
    namespace: &str,
    client: Result<&kube::Client, &str>,
    checks: &mut Vec<Check>,
) {
    let later = ["deployment", "cache volume", "policy", "plugin directory"];
    let client = match client {
        Ok(client) => client,
        Err(why) => {
            for name in later {
                checks.push(Check::skipped(
                    name,
                    format!("{why} (installation mode reads the host's Deployment)"),
                ));
            }
            return;
        }
    };
    let Some(installed) = install::read(client, namespace, &args.deployment, checks).await else {
        for name in &later[1..] {
            checks.push(Check::skipped(*name, "no Deployment to read"));
        }
        return;
    };
    let host = &installed.host;
    let (Some((dir, shown)), Some(policy)) = (&installed.plugins, &installed.policy) else {
        if installed.plugins.is_some() {
            checks.push(Check::skipped(
                "plugin directory",
                "the installation's policy could not be read",
            ));
        }
        return;
    };
    let runtime = runtime(local_cache(args, None));
    let source = plugins::Source {
        dir,
        shown: shown.clone(),
        settings: installed.settings.as_deref(),
        namespaces: (!host.args.namespaces.is_empty()).then_some(host.args.namespaces.as_slice()),
        signed: Some(&installed.signed),
    };
    let (directory, outcomes) = plugins::check(&source, policy, &runtime, Some(client)).await;
    checks.push(directory);
    let identity = host_rights::HostIdentity {
        namespace: host.namespace.clone(),
        service_account: host.service_account.clone(),
        leases: host
            .args
            .leader_elect
            .then(|| host.args.lease_namespace.clone()),
    };
    for outcome in outcomes {
        checks.extend(plugin_checks(outcome, Ok(client), Some(&identity)).await);
    }
}

/// A plugin's own check, then its kinds, ServiceAccount and permissions
/// (`client`: or why there is no API server to ask), and in installation
/// mode the host's rights for it.
async fn plugin_checks(
    outcome: plugins::Outcome,
    client: Result<&kube::Client, &str>,
    host: Option<&host_rights::HostIdentity>,
) -> Vec<Check> {
    let name = &outcome.name;
    let mut checks = vec![outcome.check];
    let mut later = vec![
        format!("kinds {name}"),
        format!("service account {name}"),
        format!("permissions {name}"),
    ];
    if host.is_some() {
        later.push(format!("host rights {name}"));
    }
    let (loaded, client) = match (outcome.loaded, client) {
        (None, _) => return checks,
        (Some(Ok(loaded)), Ok(client)) => (loaded, client),
        (Some(Err(why)), _) => {
            checks.extend(later.into_iter().map(|n| Check::skipped(n, why.clone())));
            return checks;
        }
        (Some(Ok(_)), Err(why)) => {
            checks.extend(later.into_iter().map(|n| Check::skipped(n, why)));
            return checks;
        }
    };
    checks.push(match &loaded.served {
        Some(served) => kinds::check(client, &loaded.name, &loaded.manifest, served).await,
        None => Check::skipped(&later[0], "API discovery failed"),
    });
    checks.push(permissions::service_account(client, &loaded.name, &loaded.grant).await);
    checks.push(permissions::check(client, &loaded.name, &loaded.manifest, &loaded.grant).await);
    if let Some(host) = host {
        checks.push(
            host_rights::check(client, &loaded.name, &loaded.manifest, &loaded.grant, host).await,
        );
    }
    checks
}

/// The runtime plugins load with: `run`'s defaults, compiling in a bounded
/// child process, through the cache in `cache_dir` (none: in memory).
fn runtime(cache_dir: Option<PathBuf>) -> Result<Arc<Runtime>, String> {
    let args = RuntimeArgs {
        no_cache: cache_dir.is_none(),
        cache_dir,
        compile_cache_bytes: kubeplug_runtime::DEFAULT_CACHE_BYTES,
        timeout: None,
        timeout_ms: None,
        memory_mib: None,
        compiles: kubeplug_runtime::DEFAULT_COMPILES,
        instance_slots: None,
    };
    args.bounded_runtime()
        .map(Arc::new)
        .map_err(|error| format!("{error:#}"))
}

/// `deploy/base/policy.yaml: 4 grants, strict, identities in kubeplug-system`.
fn describe_policy(args: &PolicyArgs, policy: &kubeplug_core::policy::Policy) -> String {
    if args.files.is_empty() {
        return "no --policy (KUBEPLUG_POLICY): every plugin is judged under the default grant"
            .into();
    }
    let files: Vec<String> = args.files.iter().map(|f| f.display().to_string()).collect();
    format!(
        "local file(s) {}: {} grant(s){}, identities in {}",
        files.join(", "),
        policy.service_accounts().len(),
        if policy.strict { ", strict" } else { "" },
        policy.identity_namespace
    )
}
