//! [`Reference`]: an object a parent names, for
//! [`Plugin::references`](crate::Plugin::references).

use crate::Resource;
use crate::bindings::exports::kubeplug::plugin::references as wit;

/// Which objects of a kind a parent names. The host looks them up in the
/// parent's namespace (a cluster-scoped parent names one with
/// [`Reference::in_namespace`]), hands those it finds after the related
/// objects, and reconciles the parent when one of them changes. One that
/// does not exist is simply absent from the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub resource: Resource,
    /// `None`: the parent's namespace, the only one a namespaced parent may
    /// name.
    pub namespace: Option<String>,
    pub target: Target,
}

/// What a [`Reference`] selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The object with this name.
    Name(String),
    /// Every object whose labels hold all these pairs (at least one).
    Labels(Vec<(String, String)>),
}

impl Reference {
    /// The object of `resource` named `name`.
    pub fn named(resource: Resource, name: &str) -> Self {
        Reference {
            resource,
            namespace: None,
            target: Target::Name(name.into()),
        }
    }

    /// The objects of `resource` whose labels hold every pair of `labels`.
    pub fn labelled(resource: Resource, labels: &[(&str, &str)]) -> Self {
        Reference {
            resource,
            namespace: None,
            target: Target::Labels(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
        }
    }

    /// Look in `namespace`: for a cluster-scoped parent's references to
    /// namespaced kinds (a namespaced parent may name only its own).
    pub fn in_namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    pub(crate) fn into_wit(self) -> wit::Reference {
        wit::Reference {
            resource: self.resource.into_wit(),
            namespace: self.namespace,
            target: match self.target {
                Target::Name(name) => wit::Target::Name(name),
                Target::Labels(labels) => wit::Target::Labels(labels),
            },
        }
    }
}
