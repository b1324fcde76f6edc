//! Leader election: one Lease per plugin, gating that plugin's workers.
//!
//! Every replica of the host keeps its caches warm; only the holder of a
//! plugin's Lease (`kubeplug-<plugin>`) reconciles that plugin's parents, so
//! different plugins may be led by different replicas. Leadership gates
//! writes, not reads (linkerd's `lease.rs` habit).
//!
//! Caveats: clocks of replicas are assumed to agree within a few seconds (the
//! Lease's renew time is compared with the local clock, as client-go does). A
//! reconcile that started before leadership was lost is allowed to finish.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Lease timing, as client-go's leader election names it.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    pub namespace: String,
    /// Who this replica is (pod name, or host name and pid).
    pub identity: String,
    /// How long a lease lasts without renewal (15 s: client-go's default).
    pub duration: Duration,
    /// How often the holder renews and others retry (a third of `duration`).
    pub retry: Duration,
}

impl LeaseSettings {
    pub fn new(namespace: String, identity: String) -> Self {
        LeaseSettings {
            namespace,
            identity,
            duration: Duration::from_secs(15),
            retry: Duration::from_secs(5),
        }
    }
}

/// Whether this replica may reconcile a plugin. `always()` when leader
/// election is off.
#[derive(Clone)]
pub struct Leadership {
    rx: watch::Receiver<bool>,
}

impl Leadership {
    /// Always leader (single replica, leader election off).
    pub fn always() -> Self {
        let (tx, rx) = watch::channel(true);
        // Keep the sender alive forever: the value never changes.
        std::mem::forget(tx);
        Leadership { rx }
    }

    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// Wait until this replica leads.
    pub async fn wait(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|l| *l).await;
    }
}

/// Runs the election for one Lease; drop (abort) it to stop campaigning.
pub struct Campaign {
    pub leadership: Leadership,
    task: JoinHandle<()>,
    release: Option<(Api<Lease>, String, String)>,
}

impl Campaign {
    /// Stop campaigning and, if this replica holds the Lease, give it up so
    /// that another replica takes over at once instead of after the lease
    /// duration (client-go's `ReleaseOnCancel`).
    pub async fn release(mut self) {
        self.task.abort();
        let Some((api, name, identity)) = self.release.take() else {
            return;
        };
        let Ok(Some(mut lease)) = api.get_opt(&name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(micro_now());
        match api.replace(&name, &PostParams::default(), &lease).await {
            Ok(_) => tracing::info!(lease = %name, "lease released"),
            Err(error) => tracing::warn!(lease = %name, %error, "failed to release lease"),
        }
    }
}

impl Drop for Campaign {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn micro_now() -> MicroTime {
    MicroTime(Timestamp::now())
}

/// Start campaigning for Lease `name`.
pub fn campaign(client: Client, name: String, settings: LeaseSettings) -> Campaign {
    let (tx, rx) = watch::channel(false);
    let api: Api<Lease> = Api::namespaced(client, &settings.namespace);
    let release = Some((api.clone(), name.clone(), settings.identity.clone()));
    let task = tokio::spawn(async move {
        loop {
            let leading = match try_acquire_or_renew(&api, &name, &settings).await {
                Ok(leading) => leading,
                Err(error) => {
                    tracing::warn!(lease = %name, %error, "lease update failed");
                    // Without a successful renewal we cannot know we still
                    // lead: stop writing rather than risk two writers.
                    false
                }
            };
            if *tx.borrow() != leading {
                tracing::info!(lease = %name, leading, identity = %settings.identity, "leadership changed");
                tx.send_replace(leading);
            }
            tokio::time::sleep(settings.retry).await;
        }
    });
    Campaign {
        leadership: Leadership { rx },
        task,
        release,
    }
}

/// One round of client-go's algorithm: create the Lease if missing, renew
/// it if ours, take it over if it expired. Conflicts mean someone else won.
async fn try_acquire_or_renew(
    api: &Api<Lease>,
    name: &str,
    settings: &LeaseSettings,
) -> Result<bool, kube::Error> {
    let duration_secs = settings.duration.as_secs() as i32;
    let Some(mut lease) = api.get_opt(name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(settings.identity.clone()),
                lease_duration_seconds: Some(duration_secs),
                acquire_time: Some(micro_now()),
                renew_time: Some(micro_now()),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    let ours = spec.holder_identity.as_deref() == Some(settings.identity.as_str());
    let expired = spec.renew_time.as_ref().is_none_or(|t| {
        let held =
            Duration::from_secs(spec.lease_duration_seconds.unwrap_or(duration_secs).max(0) as u64);
        let age = Timestamp::now().duration_since(t.0);
        age.is_positive() && age.unsigned_abs() > held
    }) || spec.holder_identity.as_deref().is_none_or(str::is_empty);
    if !ours && !expired {
        return Ok(false);
    }
    if !ours {
        spec.holder_identity = Some(settings.identity.clone());
        spec.acquire_time = Some(micro_now());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.renew_time = Some(micro_now());
    spec.lease_duration_seconds = Some(duration_secs);
    // `replace` carries the resourceVersion we read: a concurrent winner
    // makes it fail with 409 instead of being overwritten.
    match api.replace(name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}
