//! The host's own serving certificate (`--serving-certs-secret`), as
//! Gatekeeper's cert-controller makes its own: a CA and a serving
//! certificate for the host's Services, kept in one Secret of the host's
//! namespace so that every replica serves the same one, renewed before
//! they expire, and the CA bundle kept in the `caBundle` of the objects
//! that call the host ([`inject`]).
//!
//! Every replica runs the same rounds (no leader: the decisions are the
//! same everywhere and the Secret's resourceVersion settles a race), and
//! its listeners serve what the last round read ([`Current`]), reloaded as
//! soon as it changes. The decisions are pure ([`issue`]).

pub mod inject;
pub mod issue;
mod secret;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::watch;

use issue::{Lifetimes, Renewal, Stored};
use secret::{SecretStore, Written};

/// How the host makes and keeps its certificate.
#[derive(Debug, Clone)]
pub struct CertSettings {
    /// The Secret, in the host's namespace.
    pub secret: String,
    /// The host's Services the certificate is for (and the objects whose
    /// bundle is set must point at).
    pub services: inject::Services,
    pub lifetimes: Lifetimes,
    /// How often the Secret is re-read and the bundles re-checked.
    pub check: Duration,
    pub targets: inject::Targets,
}

/// What the listeners serve, as [`kubeplug_api::tls`] takes it.
pub use kubeplug_api::tls::{Current, Served};

/// How long the first round may keep failing before the host gives up
/// (its pod restarts, the reason in its log): its listeners have nothing
/// to serve until it succeeds.
const FIRST_ROUND_TRIES: u32 = 12;
const FIRST_ROUND_RETRY: Duration = Duration::from_secs(5);

/// A round tries this many times when other replicas keep writing first.
const RACES: usize = 4;

/// Make or read the certificate, inject the bundle, and return the
/// certificate with the task that keeps both current (every
/// `settings.check`).
pub async fn start(
    client: kube::Client,
    settings: CertSettings,
) -> anyhow::Result<(Current, impl Future<Output = ()> + Send + 'static)> {
    let keeper = Keeper::new(client, settings);
    let mut tries = 0;
    let first = loop {
        match keeper.round().await {
            Ok(stored) => break stored,
            Err(error) if tries + 1 < FIRST_ROUND_TRIES => {
                tries += 1;
                tracing::warn!(error = %format!("{error:#}"), secret = keeper.store.name(), "cannot make or read the serving certificate; retrying");
                tokio::time::sleep(FIRST_ROUND_RETRY).await;
            }
            Err(error) => return Err(error),
        }
    };
    let first_served =
        served(&first).context("the serving certificate in the Secret is unreadable")?;
    let (sender, current) = watch::channel(Arc::new(first_served));
    keeper.injector.inject(&first.ca_bundle).await;
    tracing::info!(secret = keeper.store.name(), names = ?keeper.names, "serving the host's own certificate");
    let task = async move {
        let mut last = first;
        loop {
            tokio::time::sleep(keeper.settings.check).await;
            match keeper.round().await {
                Ok(stored) => {
                    if stored.cert != last.cert || stored.key != last.key {
                        match served(&stored) {
                            Some(served) => {
                                sender.send_replace(Arc::new(served));
                            }
                            None => tracing::warn!(
                                "the renewed serving certificate is unreadable; keeping the previous one"
                            ),
                        }
                    }
                    keeper.injector.inject(&stored.ca_bundle).await;
                    last = stored;
                }
                Err(error) => {
                    tracing::warn!(error = %format!("{error:#}"), secret = keeper.store.name(), "cannot check the serving certificate; serving the previous one");
                    // The bundle still needs keeping.
                    keeper.injector.inject(&last.ca_bundle).await;
                }
            }
        }
    };
    Ok((current, task))
}

fn served(stored: &Stored) -> Option<Served> {
    issue::serving_pair(stored).map(|(certs, key)| Served { certs, key })
}

/// One replica's rounds.
struct Keeper {
    store: SecretStore,
    injector: inject::Injector,
    names: Vec<String>,
    settings: CertSettings,
}

impl Keeper {
    fn new(client: kube::Client, settings: CertSettings) -> Self {
        let namespace = &settings.services.namespace;
        Keeper {
            store: SecretStore::new(client.clone(), namespace, &settings.secret),
            injector: inject::Injector::new(
                client,
                settings.services.clone(),
                settings.targets.clone(),
            ),
            names: issue::serving_names(&settings.services.names, namespace),
            settings,
        }
    }

    /// Read the Secret and renew what is due: what it holds afterwards.
    async fn round(&self) -> anyhow::Result<Stored> {
        for _ in 0..RACES {
            let found = self
                .store
                .get()
                .await
                .with_context(|| format!("cannot read the Secret {}", self.store.name()))?;
            let stored = found.as_ref().and_then(secret::stored);
            let now = jiff::Timestamp::now();
            let renewal = issue::decide(stored.as_ref(), &self.names, now);
            let next = match issue::renew(
                stored.as_ref(),
                &renewal,
                &self.names,
                self.settings.lifetimes,
                now,
            ) {
                Ok(next) => next,
                // A CA that cannot sign is replaced with the certificate.
                Err(issue::IssueError::Ca(why)) => {
                    tracing::warn!(why, "the stored CA cannot sign; making a new one");
                    issue::renew(
                        stored.as_ref(),
                        &Renewal::Ca(issue::Reason::Unreadable),
                        &self.names,
                        self.settings.lifetimes,
                        now,
                    )?
                }
                Err(error) => return Err(error.into()),
            };
            let (what, reason) = match &renewal {
                Renewal::Keep => return Ok(next),
                Renewal::Prune => ("expired CAs left the bundle", ""),
                Renewal::Serving(reason) => ("serving certificate renewed", reason.as_str()),
                Renewal::Ca(issue::Reason::Missing) => {
                    ("CA and serving certificate made", "missing")
                }
                Renewal::Ca(reason) => ("CA renewed, with a serving certificate", reason.as_str()),
            };
            if matches!(renewal, Renewal::Ca(_)) {
                // The new CA is trusted (beside the old) before any replica
                // serves a certificate it signed.
                self.injector.inject(&next.ca_bundle).await;
            }
            match self
                .store
                .write(found, &next)
                .await
                .with_context(|| format!("cannot write the Secret {}", self.store.name()))?
            {
                Written::Yes => {
                    tracing::info!(secret = self.store.name(), reason, "{what}");
                    return Ok(next);
                }
                Written::Lost => {
                    tracing::debug!(
                        secret = self.store.name(),
                        "another replica wrote the Secret first; reading it again"
                    );
                }
            }
        }
        anyhow::bail!(
            "the Secret {} kept changing while it was renewed",
            self.store.name()
        )
    }
}
