//! `kubeplug doctor`: check an installation, one line per check (`ok`,
//! `warn`, `FAIL` or `skipped`, its name, and a detail that names the
//! problem and the fix), or a JSON array with `-o json`; exit non-zero if
//! any check fails.
//!
//! Each check stands alone: one failing hides no other, and a check that
//! cannot run without an earlier one (the plugins' kinds without an API
//! server) says `skipped` and why. One file per concern:
//! [`cluster`] (kubeconfig, API server, namespace, front-proxy CA),
//! [`apiservice`] (the aggregated API's registration and CA bundle),
//! [`cache`] (the compile cache directory), [`plugins`] (the plugin
//! directory, loaded and admitted as the live host would), [`kinds`] (the
//! kinds each plugin names are served), [`permissions`] (each plugin's
//! ServiceAccount may do what the host asks in its name), [`report`] (how
//! checks print).
//!
//! Read-only: doctor writes nothing to the cluster (SubjectAccessReviews
//! are questions) and, besides the compile cache, nothing to disk.

mod apiservice;
mod cache;
mod cluster;
mod kinds;
mod permissions;
mod plugins;
mod report;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, ValueEnum};

use crate::args::{ClusterArgs, PolicyArgs, RuntimeArgs};
use kubeplug_runtime::Runtime;
pub use report::{Check, Status};

/// `kubeplug doctor`.
#[derive(Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The host's namespace.
    #[arg(short, long, default_value = "kubeplug-system")]
    namespace: String,
    /// The plugin directory to check, as `run --plugins` reads it: each
    /// file loaded and admitted, its kinds and its identity checked.
    /// Without it those checks are skipped.
    #[arg(long, env = "KUBEPLUG_PLUGINS", value_name = "DIR")]
    plugins: Option<PathBuf>,
    /// The plugins' settings directory, as `run --settings` [default:
    /// beside each `.wasm`].
    #[arg(long, env = "KUBEPLUG_SETTINGS", value_name = "DIR")]
    settings: Option<PathBuf>,
    /// The compile cache directory [default: as `run`'s].
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
        Output::Text => print!("{}", report::text(&checks)),
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
    let client = cluster::connect(&args.cluster, &mut checks).await;
    match &client {
        Ok(client) => {
            checks.push(cluster::namespace(client, &args.namespace).await);
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

    let cache_dir = args
        .cache_dir
        .clone()
        .unwrap_or_else(crate::args::default_cache_dir);
    let cache = cache::check(&cache_dir);
    let cache_usable = cache.status == Status::Ok;
    checks.push(cache);

    let policy = match args.policy.load() {
        Ok(policy) => {
            checks.push(Check::ok("policy", describe_policy(&args.policy, &policy)));
            Some(policy)
        }
        Err(error) => {
            checks.push(Check::fail(
                "policy",
                format!("{error:#}: fix the file the host reads (--policy, KUBEPLUG_POLICY)"),
            ));
            None
        }
    };

    let (Some(dir), Some(policy)) = (&args.plugins, &policy) else {
        let why = if args.plugins.is_none() {
            "no --plugins DIR given"
        } else {
            "the policy did not load"
        };
        for name in ["plugin directory", "kinds", "permissions"] {
            checks.push(Check::skipped(name, why));
        }
        return checks;
    };
    let runtime = runtime(cache_usable.then_some(cache_dir));
    let client = client.as_ref().map_err(String::as_str);
    let (directory, outcomes) =
        plugins::check(dir, args.settings.as_deref(), policy, &runtime, client.ok()).await;
    checks.push(directory);
    for outcome in outcomes {
        checks.extend(plugin_checks(outcome, client).await);
    }
    checks
}

/// A plugin's own check, then its kinds, ServiceAccount and permissions
/// (`client`: or why there is no API server to ask).
async fn plugin_checks(
    outcome: plugins::Outcome,
    client: Result<&kube::Client, &str>,
) -> Vec<Check> {
    let name = &outcome.name;
    let mut checks = vec![outcome.check];
    let later = [
        format!("kinds {name}"),
        format!("service account {name}"),
        format!("permissions {name}"),
    ];
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
        "{}: {} grant(s){}, identities in {}",
        files.join(", "),
        policy.service_accounts().len(),
        if policy.strict { ", strict" } else { "" },
        policy.identity_namespace
    )
}
