//! [`Manifest`]: what a plugin reconciles, as a builder.

use crate::bindings::kubeplug::plugin::types as wit;

/// A Kubernetes resource type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
}

impl Resource {
    /// A namespaced resource type.
    pub fn namespaced(group: &str, version: &str, kind: &str, plural: &str) -> Self {
        Resource {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced: true,
        }
    }

    /// The resource type of a `k8s-openapi` type, e.g. `Resource::of::<Pod>()`.
    pub fn of<K: k8s_openapi::Resource>() -> Self
    where
        K::Scope: 'static,
    {
        Resource {
            group: K::GROUP.into(),
            version: K::VERSION.into(),
            kind: K::KIND.into(),
            plural: K::URL_PATH_SEGMENT.into(),
            namespaced: std::any::TypeId::of::<K::Scope>()
                == std::any::TypeId::of::<k8s_openapi::NamespaceResourceScope>(),
        }
    }

    pub(crate) fn into_wit(self) -> wit::ApiResource {
        wit::ApiResource {
            group: self.group,
            version: self.version,
            kind: self.kind,
            plural: self.plural,
            namespaced: self.namespaced,
        }
    }
}

/// How the plugin acts on its parents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Owns children and writes status.
    Composite,
    /// Only patches the parent's labels and annotations.
    Decorator,
}

/// Where a selector value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelValue {
    Literal(String),
    ParentName,
}

/// Objects to observe (not own), selected by labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Related {
    pub resource: Resource,
    pub match_labels: Vec<(String, LabelValue)>,
}

/// What a plugin is; see `wit/plugin.wit` for every field's meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub parent: Resource,
    pub mode: Mode,
    pub children: Vec<Resource>,
    pub related: Vec<Related>,
    pub namespaces: Vec<String>,
    pub finalizer: Option<String>,
    pub resync_seconds: Option<u32>,
    /// Kinds read only as metadata (see [`Manifest::metadata_only`]).
    pub metadata_only: Vec<Resource>,
    /// The webhooks the plugin offers (see [`Manifest::validates`]).
    pub webhooks: Vec<crate::admission::Webhook>,
    /// Kinds its parents may name (see [`Manifest::references`]).
    pub references: Vec<Resource>,
}

impl Manifest {
    /// A composite plugin (owns children) for `parent`.
    pub fn composite(name: &str, version: &str, parent: Resource) -> Self {
        Manifest {
            name: name.into(),
            version: version.into(),
            parent,
            mode: Mode::Composite,
            children: Vec::new(),
            related: Vec::new(),
            namespaces: Vec::new(),
            finalizer: None,
            resync_seconds: None,
            metadata_only: Vec::new(),
            webhooks: Vec::new(),
            references: Vec::new(),
        }
    }

    /// A decorator plugin for `parent`: patches its labels and annotations,
    /// and may attach children to it (declared with [`Manifest::child`]).
    pub fn decorator(name: &str, version: &str, parent: Resource) -> Self {
        Manifest {
            mode: Mode::Decorator,
            ..Manifest::composite(name, version, parent)
        }
    }

    /// Declare a child kind the plugin may return (a decorator's are its
    /// attachments: owned by the decorated object, pruned when no longer
    /// returned).
    pub fn child(mut self, resource: Resource) -> Self {
        self.children.push(resource);
        self
    }

    /// Observe objects of `resource` whose labels match `match_labels`.
    pub fn related(mut self, resource: Resource, match_labels: &[(&str, LabelValue)]) -> Self {
        self.related.push(Related {
            resource,
            match_labels: match_labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        });
        self
    }

    /// Restrict the plugin to these namespaces.
    pub fn namespaces(mut self, namespaces: impl IntoIterator<Item = String>) -> Self {
        self.namespaces.extend(namespaces);
        self
    }

    /// Keep `finalizer` on every parent and call `finalize` on deletion.
    pub fn finalizer(mut self, finalizer: &str) -> Self {
        self.finalizer = Some(finalizer.into());
        self
    }

    /// Read only `apiVersion`, `kind` and `metadata` of `resource` (a related
    /// kind, or a decorator's parent): the host then watches and caches it
    /// metadata-only, a fraction of the memory for big objects like Pods,
    /// and hands it over as such (`spec` and `status` absent).
    pub fn metadata_only(mut self, resource: Resource) -> Self {
        self.metadata_only.push(resource);
        self
    }

    /// Offer [`Plugin::validate`](crate::Plugin::validate) as the parent
    /// kind's validating webhook. The platform's grant must allow it
    /// (`admission: [validate]`), or the host refuses the plugin at load.
    pub fn validates(mut self) -> Self {
        self.webhooks.push(crate::admission::Webhook::Validate);
        self
    }

    /// Offer [`Plugin::mutate`](crate::Plugin::mutate) as the parent kind's
    /// mutating webhook (granted by `admission: [mutate]`).
    pub fn mutates(mut self) -> Self {
        self.webhooks.push(crate::admission::Webhook::Mutate);
        self
    }

    /// Offer [`Plugin::convert`](crate::Plugin::convert) as the parent
    /// kind's conversion webhook (granted by `conversion: true`).
    pub fn converts(mut self) -> Self {
        self.webhooks.push(crate::admission::Webhook::Convert);
        self
    }

    /// Let parents name objects of `resource` (a ConfigMap by
    /// `spec.configRef.name`): the plugin says which in
    /// [`Plugin::references`](crate::Plugin::references), and the host hands
    /// them in the request's related objects and reconciles the parent when
    /// one changes. The platform's grant must allow the kind
    /// (`references:`), or the host refuses the plugin at load.
    pub fn references(mut self, resource: Resource) -> Self {
        self.references.push(resource);
        self
    }

    /// Reconcile every parent at least this often.
    pub fn resync_seconds(mut self, seconds: u32) -> Self {
        self.resync_seconds = Some(seconds);
        self
    }

    pub(crate) fn into_wit(self) -> wit::PluginManifest {
        wit::PluginManifest {
            name: self.name,
            version: self.version,
            parent: self.parent.into_wit(),
            mode: match self.mode {
                Mode::Composite => wit::Mode::Composite,
                Mode::Decorator => wit::Mode::Decorator,
            },
            children: self.children.into_iter().map(Resource::into_wit).collect(),
            related: self
                .related
                .into_iter()
                .map(|r| wit::RelatedResource {
                    resource: r.resource.into_wit(),
                    match_labels: r
                        .match_labels
                        .into_iter()
                        .map(|(key, value)| wit::LabelMatch {
                            key,
                            value: match value {
                                LabelValue::Literal(s) => wit::LabelValue::Literal(s),
                                LabelValue::ParentName => wit::LabelValue::ParentName,
                            },
                        })
                        .collect(),
                })
                .collect(),
            namespaces: self.namespaces,
            finalizer: self.finalizer,
            resync_seconds: self.resync_seconds,
        }
    }
}
