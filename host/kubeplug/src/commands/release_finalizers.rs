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
//! - never when the Leases' namespace cannot tell: a namespace with no
//!   kubeplug Lease at all (or none at all) is most likely the wrong one
//!   (`--lease-namespace` defaults to `default`, the host's Leases live in
//!   its own namespace), so a missing Lease there proves nothing. `--force`
//!   goes on anyway, for hosts that run without leader election (they keep
//!   no Leases); a fresh Lease still refuses;
//! - each patch is guarded by the resourceVersion read, so a concurrent
//!   change to the finalizer list is never lost (a conflict is re-read and
//!   retried).
//!
//! `--dry-run` prints what would be released.

use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
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
    /// Go on even though the Leases' namespace holds no kubeplug Lease (a
    /// host running without leader election keeps none). A replica holding
    /// the plugin's Lease still refuses.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    cluster: crate::args::ClusterArgs,
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
    let client = args.cluster.client().await?;
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

/// Refuse while a replica still leads the plugin, or while the Leases'
/// namespace cannot tell (see the module docs).
async fn refuse_if_led(client: &kube::Client, args: &ReleaseArgs) -> anyhow::Result<()> {
    let namespace = &args.lease_namespace;
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let listed = leases.list(&ListParams::default()).await.with_context(|| {
        format!(
            "cannot list the Leases of namespace {namespace} to check that no replica leads {}",
            args.plugin
        )
    })?;
    // Only asked to word the refusal; a caller who may not read namespaces
    // still gets one.
    let exists = if listed.items.iter().any(is_kubeplug) {
        Some(true)
    } else {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .get_opt(namespace)
            .await
            .ok()
            .map(|n| n.is_some())
    };
    let scene = LeaseScene {
        plugin: &args.plugin,
        namespace,
        exists,
        leases: &listed.items,
        force: args.force,
    };
    scene.judge(Timestamp::now()).map_err(anyhow::Error::msg)
}

/// A kubeplug Lease: a plugin's (`kubeplug-<plugin>`) or a replica's
/// membership (`kubeplug-replica.<identity>`).
fn is_kubeplug(lease: &Lease) -> bool {
    lease
        .metadata
        .name
        .as_deref()
        .is_some_and(|n| n.starts_with("kubeplug-"))
}

/// What the Leases' namespace shows about who leads a plugin.
struct LeaseScene<'a> {
    plugin: &'a str,
    namespace: &'a str,
    /// Whether the namespace exists (`None`: not known).
    exists: Option<bool>,
    leases: &'a [Lease],
    /// `--force`.
    force: bool,
}

impl LeaseScene<'_> {
    /// Ok if nobody leads the plugin: its Lease is released or expired, or
    /// absent from a namespace that holds the host's other Leases (or
    /// `force`). An error says why not.
    fn judge(&self, now: Timestamp) -> Result<(), String> {
        let (plugin, namespace) = (self.plugin, self.namespace);
        let name = kubeplug_kube::leader::lease_name(plugin);
        let Some(lease) = self
            .leases
            .iter()
            .find(|l| l.metadata.name.as_deref() == Some(name.as_str()))
        else {
            if self.force || self.leases.iter().any(is_kubeplug) {
                return Ok(());
            }
            let what = match self.exists {
                Some(false) => format!("namespace {namespace} does not exist"),
                _ => format!("namespace {namespace} holds no kubeplug Leases"),
            };
            return Err(format!(
                "{what}, so nothing shows whether a replica leads plugin {plugin}: pass the host's namespace as --lease-namespace (where its Leases {name} and kubeplug-replica.* are), or --force if no replica runs with leader election"
            ));
        };
        let Some(spec) = &lease.spec else {
            return Ok(());
        };
        let Some(holder) = spec.holder_identity.as_deref().filter(|h| !h.is_empty()) else {
            return Ok(());
        };
        let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(0) as u64);
        let fresh = spec.renew_time.as_ref().is_some_and(|t| {
            let age = now.duration_since(t.0);
            age.unsigned_abs() < duration + Duration::from_secs(30) || age.is_negative()
        });
        if fresh {
            return Err(format!(
                "replica {holder} still leads plugin {plugin} (Lease {namespace}/{name}): remove the plugin from every replica first, then wait for the Lease to lapse"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::api::ObjectMeta;

    fn lease(name: &str, holder: Option<&str>, renewed_secs_ago: i64, now: Timestamp) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(String::from),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(
                    now - k8s_openapi::jiff::SignedDuration::from_secs(renewed_secs_ago),
                )),
                ..LeaseSpec::default()
            }),
        }
    }

    fn scene<'a>(leases: &'a [Lease], exists: Option<bool>, force: bool) -> LeaseScene<'a> {
        LeaseScene {
            plugin: "database",
            namespace: "default",
            exists,
            leases,
            force,
        }
    }

    #[test]
    fn a_namespace_without_kubeplug_leases_is_not_read_as_nobody_leads() {
        let now = Timestamp::now();
        let others = [lease("someone-elses", Some("x"), 1, now)];
        let error = scene(&others, Some(true), false).judge(now).unwrap_err();
        assert!(
            error.starts_with("namespace default holds no kubeplug Leases, so nothing shows whether a replica leads plugin database: pass the host's namespace as --lease-namespace"),
            "{error}"
        );
        let error = scene(&[], Some(false), false).judge(now).unwrap_err();
        assert!(
            error.starts_with("namespace default does not exist, so nothing shows"),
            "{error}"
        );
        let error = scene(&[], None, false).judge(now).unwrap_err();
        assert!(error.contains("holds no kubeplug Leases"), "{error}");
        assert_eq!(scene(&[], Some(false), true).judge(now), Ok(()));
    }

    #[test]
    fn a_plugin_without_a_lease_beside_the_hosts_other_leases_is_led_by_nobody() {
        let now = Timestamp::now();
        let leases = [
            lease("kubeplug-replica.host-1", Some("host-1"), 1, now),
            lease("kubeplug-myapp", Some("host-1"), 1, now),
        ];
        assert_eq!(scene(&leases, Some(true), false).judge(now), Ok(()));
    }

    #[test]
    fn an_expired_or_released_lease_frees_the_plugin_and_a_fresh_one_refuses_even_when_forced() {
        let now = Timestamp::now();
        let expired = [lease("kubeplug-database", Some("host-1"), 600, now)];
        assert_eq!(scene(&expired, Some(true), false).judge(now), Ok(()));
        let released = [lease("kubeplug-database", None, 1, now)];
        assert_eq!(scene(&released, Some(true), false).judge(now), Ok(()));
        let fresh = [lease("kubeplug-database", Some("host-1"), 1, now)];
        for force in [false, true] {
            let error = scene(&fresh, Some(true), force).judge(now).unwrap_err();
            assert!(
                error.starts_with(
                    "replica host-1 still leads plugin database (Lease default/kubeplug-database)"
                ),
                "{error}"
            );
        }
    }

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
