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
//! Caveat: a cached answer outlives an RBAC change by up to [`ALLOWED_TTL`]
//! (a grant) or [`DENIED_TTL`] (a refusal).

pub mod metrics;

use dashmap::DashMap;
use std::time::{Duration, Instant};

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
        #[source]
        source: kube::Error,
    },
}

/// Cached SubjectAccessReviews, shared by every plugin of a host.
pub struct Access {
    client: Client,
    metrics: self::metrics::AccessMetrics,
    /// Shared by every reconcile task: a concurrent map, no lock to hold.
    cache: DashMap<Read, (bool, Instant)>,
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
        let cached = self.cache.get(&read).map(|entry| *entry);
        let allowed = match cached {
            Some((allowed, at))
                if at.elapsed() < if allowed { ALLOWED_TTL } else { DENIED_TTL } =>
            {
                allowed
            }
            _ => {
                let allowed = self.review(grant, &read).await?;
                // Bounded: one entry per plugin, kind, verb and namespace.
                if self.cache.len() > 100_000 {
                    self.cache.clear();
                }
                self.cache.insert(read.clone(), (allowed, Instant::now()));
                allowed
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

    async fn review(&self, grant: &Effective, read: &Read) -> Result<bool, AccessError> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(read.user.clone()),
                groups: Some(grant.groups()),
                resource_attributes: Some(ResourceAttributes {
                    namespace: (!read.namespace.is_empty()).then(|| read.namespace.clone()),
                    verb: Some(read.verb.into()),
                    group: Some(read.group.clone()),
                    resource: Some(read.resource.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        self.metrics.access_review();
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| AccessError::Review {
                user: read.user.clone(),
                source,
            })?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}
