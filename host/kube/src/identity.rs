//! Who a plugin is to the API server, and what it may read.
//!
//! Every write a plugin causes (apply, prune, status, parent patches,
//! finalizers, events) is sent impersonating the plugin's own ServiceAccount
//! (`kubeplug-plugin-<name>`): Kubernetes RBAC decides, and the audit log
//! names the plugin. The host's own identity only reads (shared caches),
//! holds Leases and may impersonate exactly those ServiceAccounts.
//!
//! Reads come from the host's shared caches, so before a plugin is handed an
//! object the host asks the API server (a SubjectAccessReview, cached for a
//! short while) whether the plugin's ServiceAccount may read that kind in that
//! namespace. What it may not read, it never sees.
//!
//! Checks of the same read that arrive together share one review: a burst of
//! reconciles costs one request per plugin, kind, verb and namespace, not one
//! per reconcile in flight. Under a dead API server, the checks waiting for a
//! review that failed get its error at once instead of one timeout each.
//!
//! Caveat: a cached answer outlives an RBAC change by up to [`ALLOWED_TTL`]
//! (a grant) or [`DENIED_TTL`] (a refusal).

pub mod metrics;

use dashmap::DashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::{Client, Config};

use crate::client::ClientSettings;
use kubeplug_core::manifest::ApiResource;
use kubeplug_core::policy::Effective;

/// How long an allowed read stays cached.
pub const ALLOWED_TTL: Duration = Duration::from_secs(60);
/// How long a refused read stays cached: short, so that a fixed RBAC rule
/// takes effect within seconds.
pub const DENIED_TTL: Duration = Duration::from_secs(5);

/// A client that acts as the plugin's ServiceAccount, with its own rate
/// limit (see [`crate::client`]).
pub fn client_for(
    config: &Config,
    grant: &Effective,
    settings: &ClientSettings,
) -> Result<Client, kube::Error> {
    let mut config = config.clone();
    config.auth_info.impersonate = Some(grant.user());
    // The API server derives a ServiceAccount's groups itself.
    config.auth_info.impersonate_groups = None;
    crate::client::build(&config, settings)
}

/// A read the host checks on a plugin's behalf.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Read {
    user: String,
    verb: &'static str,
    group: String,
    resource: String,
    namespace: String,
}

/// A plugin's ServiceAccount may not read something it would be handed.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("{user} may not {verb} {resource}{}; the host does not show a plugin what its ServiceAccount may not read", if .namespace.is_empty() { String::new() } else { format!(" in namespace {}", .namespace) })]
    Denied {
        user: String,
        verb: &'static str,
        resource: String,
        namespace: String,
    },
    #[error("cannot check what {user} may read")]
    Review {
        user: String,
        /// Shared by every check that waited for the failed review.
        #[source]
        source: Arc<kube::Error>,
    },
}

/// What the host knows of one read.
#[derive(Default)]
struct Known {
    /// The last answer and when it came.
    answer: Option<(bool, Instant)>,
    /// The last review's failure, if it failed after the last answer.
    failure: Option<(Arc<kube::Error>, Instant)>,
}

impl Known {
    fn fresh(&self) -> Option<bool> {
        let (allowed, at) = self.answer?;
        let ttl = if allowed { ALLOWED_TTL } else { DENIED_TTL };
        (at.elapsed() < ttl).then_some(allowed)
    }
}

/// Cached SubjectAccessReviews, shared by every plugin of a host.
pub struct Access {
    client: Client,
    metrics: self::metrics::AccessMetrics,
    /// Shared by every reconcile task. The map's lock is held only to find a
    /// read's entry; the entry's own lock is held across its review, so that
    /// concurrent checks of one read wait for that review instead of sending
    /// their own.
    cache: DashMap<Read, Arc<tokio::sync::Mutex<Known>>>,
}

impl Access {
    /// Reviews are sent with the host's own `client`.
    pub fn new(client: Client, metrics: self::metrics::AccessMetrics) -> Self {
        Access {
            client,
            metrics,
            cache: DashMap::new(),
        }
    }

    /// Ok if `grant`'s ServiceAccount may `verb` objects of `resource` in
    /// `namespace` (empty: cluster-wide).
    pub async fn check(
        &self,
        grant: &Effective,
        verb: &'static str,
        resource: &ApiResource,
        namespace: &str,
    ) -> Result<(), AccessError> {
        let read = Read {
            user: grant.user(),
            verb,
            group: resource.group.clone(),
            resource: resource.plural.clone(),
            namespace: if resource.namespaced {
                namespace.to_string()
            } else {
                String::new()
            },
        };
        let asked = Instant::now();
        let entry = self.entry(&read);
        let mut known = entry.lock().await;
        let allowed = match known.fresh() {
            Some(allowed) => allowed,
            None => {
                if let Some((source, at)) = &known.failure
                    && *at > asked
                {
                    // The review this check waited for failed.
                    return Err(AccessError::Review {
                        user: read.user,
                        source: source.clone(),
                    });
                }
                match self.review(grant, &read).await {
                    Ok(allowed) => {
                        *known = Known {
                            answer: Some((allowed, Instant::now())),
                            failure: None,
                        };
                        allowed
                    }
                    Err(source) => {
                        let source = Arc::new(source);
                        known.failure = Some((source.clone(), Instant::now()));
                        return Err(AccessError::Review {
                            user: read.user,
                            source,
                        });
                    }
                }
            }
        };
        if allowed {
            Ok(())
        } else {
            Err(AccessError::Denied {
                user: read.user,
                verb,
                resource: if read.group.is_empty() {
                    read.resource
                } else {
                    format!("{}.{}", read.resource, read.group)
                },
                namespace: read.namespace,
            })
        }
    }

    /// The entry of `read`, made if new. Bounded: one entry per plugin, kind,
    /// verb and namespace; past 100,000 (namespaces come and go) the map
    /// starts again.
    fn entry(&self, read: &Read) -> Arc<tokio::sync::Mutex<Known>> {
        if let Some(entry) = self.cache.get(read) {
            return entry.clone();
        }
        if self.cache.len() > 100_000 {
            self.cache.clear();
        }
        self.cache.entry(read.clone()).or_default().clone()
    }

    async fn review(&self, grant: &Effective, read: &Read) -> Result<bool, kube::Error> {
        let review = review_of(
            grant,
            ResourceAttributes {
                namespace: (!read.namespace.is_empty()).then(|| read.namespace.clone()),
                verb: Some(read.verb.into()),
                group: Some(read.group.clone()),
                resource: Some(read.resource.clone()),
                ..Default::default()
            },
        );
        self.metrics.access_review();
        allowed(&self.client, &review).await
    }
}

/// The SubjectAccessReview asking whether `grant`'s ServiceAccount may do
/// what `attributes` say (as the API server would judge a request the host
/// sends impersonating it).
pub fn review_of(grant: &Effective, attributes: ResourceAttributes) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(grant.user()),
            groups: Some(grant.groups()),
            resource_attributes: Some(attributes),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Send `review` with `client`: whether the API server allows it.
pub async fn allowed(client: &Client, review: &SubjectAccessReview) -> Result<bool, kube::Error> {
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

#[cfg(test)]
mod tests;
