//! The host's clients of the API server: its own, leader election's and
//! (made with [`Clients::own`]) the aggregated API's, each with its own
//! connections and rate limit.

use std::sync::Arc;

use anyhow::Context as _;

use super::metrics::HostMetrics;
use super::positive;
use crate::args::RunArgs;
use kubeplug_kube::client::{ClientSettings, RateLimit};
use kubeplug_kube::health::ApiHealth;

/// The host's connection to the API server, and the clients built from it.
pub(super) struct Clients {
    pub(super) config: kube::Config,
    /// Rate limit, timeout and user agent of the host's clients (each
    /// plugin's is made from them).
    pub(super) settings: ClientSettings,
    /// The host's own: watches, discovery, read checks.
    pub(super) host: kube::Client,
    /// Leader election's own: its own connections and its own rate limit,
    /// so that no load on the host's client (reconciles' reviews, watches,
    /// candidate admissions) and none on the aggregated API's (a flood of
    /// previews) can hold a Lease renewal back past the renew deadline.
    /// Its requests are few (a list and a renewal per round).
    pub(super) leases: kube::Client,
}

impl Clients {
    pub(super) async fn build(
        args: &RunArgs,
        identity: &str,
        metrics: &HostMetrics,
        health: &Arc<ApiHealth>,
    ) -> anyhow::Result<Clients> {
        let config = args.cluster.config().await?;
        let limit = match args.api_qps {
            None => RateLimit::Adaptive,
            Some(qps) if qps <= 0.0 => RateLimit::Unlimited,
            Some(qps) => RateLimit::Fixed {
                qps,
                burst: args.api_burst,
            },
        };
        let settings = ClientSettings {
            name: "host".into(),
            limit,
            timeout: positive("--api-timeout", args.api_timeout)?,
            user_agent: format!("kubeplug/{} ({identity})", env!("CARGO_PKG_VERSION")),
            requests: Some(metrics.requests.clone()),
            health: Some(health.clone()),
        };
        let host = kubeplug_kube::client::build(&config, &settings)
            .context("failed to connect to Kubernetes (kubeconfig or in-cluster)")?;
        let leases = Self::own(&config, &settings, "leader-election")
            .context("failed to build the leader-election client")?;
        Ok(Clients {
            config,
            settings,
            host,
            leases,
        })
    }

    /// A client of its own for `purpose`, with the host's settings.
    pub(super) fn own(
        config: &kube::Config,
        settings: &ClientSettings,
        purpose: &str,
    ) -> anyhow::Result<kube::Client> {
        Ok(kubeplug_kube::client::build(
            config,
            &ClientSettings {
                user_agent: format!("{} {purpose}", settings.user_agent),
                ..settings.named(purpose)
            },
        )?)
    }
}
