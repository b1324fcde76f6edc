//! The registry's side of admission: compile a file within its quotas off
//! the workers, ask the API server about its kinds, and put it through the
//! one admission ([`kubeplug_core::admission`]); then give it its own client.

use std::path::Path;

use sha2::{Digest, Sha256};

use super::{Candidate, Registry};
use crate::controller::Identity;
use kubeplug_core::admission::{Admission, AdmitError, Placed};
use kubeplug_kube::discovery::Discovered;
use kubeplug_kube::identity;
use kubeplug_runtime::Plugin;

/// Why a load failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum Failure {
    #[error(transparent)]
    Admit(#[from] AdmitError),
    #[error("{}", kubeplug_kube::report::format_chain(.0))]
    Load(kubeplug_runtime::LoadError),
    #[error("loader panicked: {0}")]
    Panicked(tokio::task::JoinError),
    #[error("cannot ask the API server about the plugin's kinds: {0}")]
    Discovery(kube::Error),
    #[error("cannot make a client for plugin {plugin}: {source}")]
    Client { plugin: String, source: kube::Error },
}

impl Failure {
    /// Worth retrying without a change (e.g. a CRD not installed yet, the
    /// API server unreachable).
    pub(super) fn retryable(&self) -> bool {
        match self {
            Failure::Admit(error) => error.retryable(),
            Failure::Discovery(_) => true,
            Failure::Load(_) | Failure::Panicked(_) | Failure::Client { .. } => false,
        }
    }
}

impl Registry {
    /// Compile within the policy's quotas, call `manifest()`, and put it
    /// through the one admission ([`kubeplug_core::admission`]) with the kinds the
    /// API server serves.
    pub(super) async fn admit(
        &self,
        path: &Path,
        candidate: Candidate,
    ) -> Result<(Plugin, Identity), Failure> {
        let w = &self.wiring;
        let policy = w.policy.current();
        // The plugin the file's location is bound to: its grant, pins and
        // quotas, whatever the file will say its name is.
        let bound = candidate.bound.clone();
        let digest = hex::encode(Sha256::digest(&candidate.bytes));
        let signer = w.provenance.signer(&bound, &digest);
        let admission = Admission::new(&policy)
            .placed(Placed {
                name: &bound,
                rel: self.layout.root.rel(path),
            })
            .within(w.namespaces.as_deref())
            .signed_by(signer.as_deref());
        // Strict mode, pins, signatures: checked before compiling, so a
        // file that may not serve costs nothing.
        let quotas = admission.before_compile(&bound, &digest)?;
        let runtime = w.runtime.clone();
        let label = path.display().to_string();
        let settings = candidate.settings;
        // Compiling may take long for big guests: keep it off the workers.
        let loaded = tokio::task::spawn_blocking(move || {
            runtime.load_within(
                &candidate.bytes,
                &quotas,
                settings.config,
                settings.limits,
                label,
            )
        })
        .await;
        let plugin = match loaded {
            Ok(Ok(plugin)) => plugin,
            Ok(Err(error)) => return Err(Failure::Load(error)),
            Err(error) => return Err(Failure::Panicked(error)),
        };
        // Name and grant first: a file that may not serve costs the API
        // server nothing.
        admission.grant(plugin.manifest())?;
        let served = Discovered::discover(&w.client, plugin.manifest())
            .await
            .map_err(Failure::Discovery)?;
        let admitted =
            admission.admit(plugin.manifest(), plugin.digest(), settings.limits, &served)?;
        let client = identity::client_for(
            &w.config,
            &admitted.grant,
            &w.client_settings.named(plugin.name()),
        )
        .map_err(|source| Failure::Client {
            plugin: plugin.name().to_string(),
            source,
        })?;
        let identity = Identity {
            grant: admitted.grant,
            client,
            access: w.access.clone(),
        };
        Ok((
            plugin.admitted(admitted.manifest, admitted.limits),
            identity,
        ))
    }
}
