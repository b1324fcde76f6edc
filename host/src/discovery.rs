//! What the API server says a kind is: its plural and its scope.
//!
//! A plugin's manifest claims a plural and `namespaced` for every kind it
//! names; the host never uses those claims. `kubeplug run` asks the API
//! server ([`Discovered::discover`]) and hands the answer to the one
//! admission ([`crate::admission`]); offline commands use
//! [`crate::admission::Offline`].

use std::collections::HashMap;

use kube::Client;
use kube::core::GroupVersionKind;

use crate::admission::{Scope, Served};
use crate::manifest::{ApiResource, Manifest};

/// What the API server serves of a manifest's kinds: (group, version, kind)
/// → (plural, namespaced). A kind it does not serve is absent.
#[derive(Debug, Clone, Default)]
pub struct Discovered {
    known: HashMap<(String, String, String), (String, bool)>,
}

fn key(r: &ApiResource) -> (String, String, String) {
    (r.group.clone(), r.version.clone(), r.kind.clone())
}

impl Discovered {
    /// Ask the API server about every kind `manifest` names. A kind it does
    /// not serve is simply absent (admission reports it).
    pub async fn discover(client: &Client, manifest: &Manifest) -> Result<Discovered, kube::Error> {
        let mut scopes = Discovered::default();
        let mut manifest = manifest.clone();
        for r in manifest.resources_mut() {
            if scopes.known.contains_key(&key(r)) {
                continue;
            }
            let gvk = GroupVersionKind::gvk(&r.group, &r.version, &r.kind);
            match kube::discovery::pinned_kind(client, &gvk).await {
                Ok((resource, caps)) => {
                    let namespaced = caps.scope == kube::discovery::Scope::Namespaced;
                    scopes.known.insert(key(r), (resource.plural, namespaced));
                }
                // Unknown group/version (404) or kind: not served.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(kube::Error::Discovery(_)) => {}
                Err(other) => return Err(other),
            }
        }
        Ok(scopes)
    }
}

impl Served for Discovered {
    fn scope(&self, r: &ApiResource) -> Scope {
        match self.known.get(&key(r)) {
            Some((plural, namespaced)) => Scope::Served {
                plural: plural.clone(),
                namespaced: *namespaced,
            },
            None => Scope::Absent,
        }
    }
}
