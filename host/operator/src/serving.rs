//! The serving face of a running controller: what a dry run (a preview, a
//! what-if, a shadow's what-if) and the webhooks reach the plugin version
//! serving through, with its caches and fence but never its writer; and
//! the one guard that a candidate run on those caches watches what the
//! serving version watches.

use std::sync::Arc;

use crate::inputs::{Serves, Sources};
use kubeplug_core::manifest::{ApiResource, same_shape};
use kubeplug_core::policy::Effective;
use kubeplug_kube::informers::Object;
use kubeplug_runtime::Plugin;

/// A running controller's serving version, as dry runs and webhooks see it
/// (see [`Serves`]).
#[derive(Clone)]
pub struct Serving(Arc<dyn Serves>);

impl Serving {
    pub fn new(serving: Arc<dyn Serves>) -> Self {
        Serving(serving)
    }

    /// The plugin version serving now.
    pub fn plugin(&self) -> Plugin {
        self.0.plugin()
    }

    /// Its grant.
    pub fn grant(&self) -> Arc<Effective> {
        self.0.fence().grant.clone()
    }

    /// The parent kind.
    pub fn parent_kind(&self) -> ApiResource {
        self.0.plugin().manifest().parent.clone()
    }

    /// The kinds a reconcile hands the plugin besides its parent: child
    /// kinds (whose values a preview shows), and related and referenced
    /// kinds.
    pub fn handed_kinds(&self) -> (Vec<ApiResource>, Vec<ApiResource>) {
        let plugin = self.0.plugin();
        let manifest = plugin.manifest();
        (
            manifest.children.clone(),
            manifest
                .related
                .iter()
                .map(|r| r.resource.clone())
                .chain(manifest.references.iter().cloned())
                .collect(),
        )
    }

    /// What gathers and decides reads: the serving version's caches and
    /// fence (see [`crate::inputs::plan`]).
    pub(crate) fn serves(&self) -> &dyn Serves {
        &*self.0
    }

    /// The serving version's caches.
    pub(crate) fn sources(&self) -> &Sources {
        self.0.sources()
    }

    /// Live reconciles are waiting or running.
    pub(crate) fn busy(&self) -> bool {
        self.0.busy()
    }

    /// A parent as the controller's cache holds it.
    pub fn live_parent(&self, namespace: &str, name: &str) -> Option<Arc<Object>> {
        self.0.sources().parent.get(namespace, name)
    }

    /// `candidate`, if it may run on the serving version's caches for `run`
    /// (see [`fits`]).
    pub fn candidate(&self, candidate: Plugin, run: Run) -> Result<Plugin, OtherShape> {
        fits(&candidate, &self.0.plugin(), run)?;
        Ok(candidate)
    }
}

/// What a candidate runs for beside the serving version: each reads the
/// serving version's caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    Preview,
    WhatIf,
    Shadow,
}

/// A candidate that asks for other kinds, namespaces or finalizer than the
/// serving version: the serving version's caches do not hold what it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherShape {
    pub run: Run,
    /// The candidate's version, named in a shadow's refusal.
    pub version: String,
}

impl std::fmt::Display for OtherShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let asks = "asks for other kinds, namespaces or finalizer than the serving version";
        match self.run {
            Run::Preview => write!(
                f,
                "the candidate's manifest {asks}'s; a preview runs on the serving version's caches"
            ),
            Run::WhatIf => write!(
                f,
                "the candidate's manifest {asks}'s; a what-if runs on the serving version's caches"
            ),
            Run::Shadow => write!(
                f,
                "the candidate {} {asks}; a shadow runs on the serving version's caches (preview it, or promote it directly)",
                self.version
            ),
        }
    }
}

impl std::error::Error for OtherShape {}

/// Ok if `candidate` watches what `serving` watches ([`same_shape`]), so it
/// may run for `run` on the serving version's caches: the one guard of
/// previews, what-ifs and shadows.
pub fn fits(candidate: &Plugin, serving: &Plugin, run: Run) -> Result<(), OtherShape> {
    if same_shape(candidate.manifest(), serving.manifest()) {
        Ok(())
    } else {
        Err(OtherShape {
            run,
            version: candidate.manifest().version.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_run_names_itself_in_the_refusal() {
        let of = |run| {
            OtherShape {
                run,
                version: "2.0.0".into(),
            }
            .to_string()
        };
        assert_eq!(
            of(Run::Preview),
            "the candidate's manifest asks for other kinds, namespaces or finalizer than the serving version's; a preview runs on the serving version's caches"
        );
        assert_eq!(
            of(Run::WhatIf),
            "the candidate's manifest asks for other kinds, namespaces or finalizer than the serving version's; a what-if runs on the serving version's caches"
        );
        assert_eq!(
            of(Run::Shadow),
            "the candidate 2.0.0 asks for other kinds, namespaces or finalizer than the serving version; a shadow runs on the serving version's caches (preview it, or promote it directly)"
        );
    }
}
