//! `kubeplug release-finalizers`: free the parents of a removed plugin.
//!
//! A plugin that declares a finalizer keeps it on every parent, so that it
//! can clean up before a parent goes. Remove the plugin and every parent
//! deleted afterwards stays `Terminating`: nobody is left to call `finalize`
//! and drop the finalizer. This command drops it, safely:
//!
//! - only the plugin's own finalizers (`<plugin>.kubeplug.io/…`, or exactly
//!   `--finalizer`), never anybody else's;
//! - only on parents being deleted, unless `--all` (e.g. before deleting
//!   many);
//! - never while a replica still leads the plugin (its Lease is held and
//!   fresh): that replica would finalize them itself, and racing it could
//!   skip its cleanup;
//! - each patch is guarded by the resourceVersion read, so a concurrent
//!   change to the finalizer list is never lost (a conflict is re-read and
//!   retried).
//!
//! `--dry-run` prints what would be released.

use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};
use serde_json::json;

#[derive(Args)]
pub struct ReleaseArgs {
    /// The removed plugin's name.
    plugin: String,
    /// The plugin's parent resource as `plural.group` (e.g.
    /// `databases.example.com`; `pods` for the core group).
    #[arg(long)]
    resource: String,
    /// Only this finalizer (default: every `<plugin>.kubeplug.io/…` one).
    #[arg(long)]
    finalizer: Option<String>,
    /// Only parents in this namespace (default: all).
    #[arg(long, short)]
    namespace: Option<String>,
    /// Also parents that are not being deleted.
    #[arg(long)]
    all: bool,
    /// Namespace of the host's Leases, checked to make sure no replica
    /// still leads the plugin.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// Print what would be released; change nothing.
    #[arg(long)]
    dry_run: bool,
}

/// True if `finalizer` belongs to `plugin` (or is exactly `only`).
fn releasable(finalizer: &str, plugin: &str, only: Option<&str>) -> bool {
    match only {
        Some(only) => finalizer == only,
        None => finalizer
            .strip_prefix(plugin)
            .is_some_and(|rest| rest.starts_with(".kubeplug.io/")),
    }
}

pub fn release_cmd(args: ReleaseArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?
        .block_on(release(args))
}

async fn release(args: ReleaseArgs) -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("failed to connect to Kubernetes (kubeconfig or in-cluster)")?;
    refuse_if_led(&client, &args).await?;
    let (plural, group) = args
        .resource
        .split_once('.')
        .unwrap_or((args.resource.as_str(), ""));
    let discovery = Discovery::new(client.clone())
        .filter(&[group])
        .run()
        .await
        .context("API discovery failed")?;
    let (resource, caps) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(r, _)| r.plural == plural && r.group == group)
        .with_context(|| format!("the API server does not serve {}", args.resource))?;
    let api: Api<DynamicObject> = match (&args.namespace, &caps.scope) {
        (Some(ns), Scope::Namespaced) => Api::namespaced_with(client.clone(), ns, &resource),
        _ => Api::all_with(client.clone(), &resource),
    };

    let mut released = 0;
    for object in api.list(&ListParams::default()).await?.items {
        if object.metadata.deletion_timestamp.is_none() && !args.all {
            continue;
        }
        let target = match &object.metadata.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        if released_from(&target, &args, object).await? {
            released += 1;
        }
    }
    let verb = if args.dry_run {
        "would release"
    } else {
        "released"
    };
    println!("{verb} {released} {}", args.resource);
    Ok(())
}

/// Drop the plugin's finalizers from one object (re-read on conflict).
/// Returns whether the object had any.
async fn released_from(
    target: &Api<DynamicObject>,
    args: &ReleaseArgs,
    mut object: DynamicObject,
) -> anyhow::Result<bool> {
    let only = args.finalizer.as_deref();
    for _ in 0..5 {
        let name = object.metadata.name.clone().unwrap_or_default();
        let namespace = object.metadata.namespace.clone().unwrap_or_default();
        let finalizers = object.metadata.finalizers.clone().unwrap_or_default();
        let (drop, keep): (Vec<String>, Vec<String>) = finalizers
            .into_iter()
            .partition(|f| releasable(f, &args.plugin, only));
        if drop.is_empty() {
            return Ok(false);
        }
        let what = format!("{namespace}/{name}");
        if args.dry_run {
            println!("would release {} from {what}", drop.join(", "));
            return Ok(true);
        }
        let patch = json!({
            "metadata": {
                "finalizers": keep,
                "resourceVersion": object.metadata.resource_version,
            }
        });
        match target
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                println!("released {} from {what}", drop.join(", "));
                return Ok(true);
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
            Err(kube::Error::Api(s)) if s.code == 409 => match target.get_opt(&name).await? {
                Some(fresh) => object = fresh,
                None => return Ok(false),
            },
            Err(error) => return Err(error).with_context(|| format!("failed to patch {what}")),
        }
    }
    bail!("the finalizers of an object kept changing; try again")
}

/// Refuse while a replica still leads the plugin: its Lease has a holder
/// and was renewed within its duration (plus a margin for clock skew).
async fn refuse_if_led(client: &kube::Client, args: &ReleaseArgs) -> anyhow::Result<()> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &args.lease_namespace);
    let name = crate::leader::lease_name(&args.plugin);
    let Some(lease) = leases.get_opt(&name).await.with_context(|| {
        format!(
            "cannot read Lease {}/{name} to check that no replica leads {}",
            args.lease_namespace, args.plugin
        )
    })?
    else {
        return Ok(());
    };
    let Some(spec) = lease.spec else {
        return Ok(());
    };
    let Some(holder) = spec.holder_identity.filter(|h| !h.is_empty()) else {
        return Ok(());
    };
    let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(0) as u64);
    let fresh = spec.renew_time.is_some_and(|t| {
        let age = Timestamp::now().duration_since(t.0);
        age.unsigned_abs() < duration + Duration::from_secs(30) || age.is_negative()
    });
    if fresh {
        bail!(
            "replica {holder} still leads plugin {} (Lease {}/{name}): remove the plugin from every replica first, then wait for the Lease to lapse",
            args.plugin,
            args.lease_namespace
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_plugins_own_finalizers_are_released() {
        assert!(releasable("database.kubeplug.io/cleanup", "database", None));
        assert!(!releasable(
            "databases.kubeplug.io/cleanup",
            "database",
            None
        ));
        assert!(!releasable(
            "kubernetes.io/pvc-protection",
            "database",
            None
        ));
        assert!(!releasable("database.example.com/x", "database", None));
        assert!(releasable("a/b", "database", Some("a/b")));
        assert!(!releasable(
            "database.kubeplug.io/cleanup",
            "database",
            Some("a/b")
        ));
    }
}
