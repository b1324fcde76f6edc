//! The host's view of a plugin manifest, validated: the plugin's "fence".
//!
//! A plugin describes itself through `manifest()`; the host never trusts that
//! description blindly. [`Manifest::validate`] enforces the host's rules, and
//! [`Manifest::allows_child`] is the check every desired child must pass.

mod webhooks;

use serde::Serialize;

pub use webhooks::{Webhook, Webhooks};

/// A Kubernetes resource type.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ApiResource {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
}

impl ApiResource {
    pub fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        ApiResource {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced,
        }
    }

    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// True if an object with this `apiVersion` and `kind` is of this type.
    pub fn matches(&self, api_version: &str, kind: &str) -> bool {
        self.kind == kind && self.api_version() == api_version
    }

    /// Same group and kind, whatever the version, plural or claimed scope:
    /// the identity of a kind for every host rule.
    pub fn same_kind(&self, other: &ApiResource) -> bool {
        self.group == other.group && self.kind == other.kind
    }
}

impl std::fmt::Display for ApiResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.kind, self.api_version())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Composite,
    Decorator,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum LabelValue {
    Literal(String),
    ParentName,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Related {
    pub resource: ApiResource,
    pub match_labels: Vec<(String, LabelValue)>,
}

impl Related {
    /// The label selector for the parent named `parent_name`.
    pub fn selector(&self, parent_name: &str) -> Vec<(String, String)> {
        self.match_labels
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    LabelValue::Literal(s) => s.clone(),
                    LabelValue::ParentName => parent_name.to_string(),
                };
                (k.clone(), v)
            })
            .collect()
    }

    /// Do `labels` (an object's) match the selector for the parent named
    /// `parent_name`?
    pub fn selects(
        &self,
        labels: Option<&std::collections::BTreeMap<String, String>>,
        parent_name: &str,
    ) -> bool {
        self.selector(parent_name)
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)).is_some_and(|have| have == v))
    }

    /// The label key whose value names the parent, if the selector has one.
    pub fn parent_name_key(&self) -> Option<&str> {
        self.match_labels
            .iter()
            .find(|(_, v)| matches!(v, LabelValue::ParentName))
            .map(|(k, _)| k.as_str())
    }
}

/// What a plugin is, as the host accepted it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub parent: ApiResource,
    pub mode: Mode,
    pub children: Vec<ApiResource>,
    pub related: Vec<Related>,
    pub namespaces: Vec<String>,
    pub finalizer: Option<String>,
    pub resync_seconds: Option<u32>,
    /// Namespaces the host keeps the plugin out of although `namespaces` is
    /// empty (all): the system namespaces and the host's own, unless the
    /// grant names them. Set by the policy, never by the plugin.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub excluded_namespaces: Vec<String>,
    /// Kinds the plugin reads only the metadata of (its optional `reads`
    /// export): watched, cached and handed over metadata-only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub metadata_only: Vec<ApiResource>,
    /// Kinds the plugin's parents may name (its optional `references`
    /// export's `kinds`): each must be granted; the host watches them in
    /// the plugin's namespaces (see [`crate::reference`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<ApiResource>,
    /// The webhooks it offers (its optional `admission` export's
    /// `offered`): each must be granted, like every other request.
    #[serde(skip_serializing_if = "Webhooks::is_none")]
    pub webhooks: Webhooks,
}

/// A DNS label (RFC 1123): what a plugin's name, and a namespace's, is.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Bytes a manifest's `version` may have: it becomes a metric label
/// (`kubeplug_plugin_info`), a log field and an image tag, so it must stay
/// short. Semantic versions with pre-release and build parts fit
/// (`1.2.3-rc.1+build.20260101`).
pub const VERSION_BYTES: usize = 64;

/// A version as the host accepts it: 1 to [`VERSION_BYTES`] ASCII letters,
/// digits and `.`, `-`, `+`, `_`, starting with a letter or digit (semver,
/// PEP 440 and image tags all fit).
fn check_version(version: &str) -> Result<(), ManifestError> {
    if version.is_empty() {
        return Err(ManifestError::VersionEmpty);
    }
    if version.len() > VERSION_BYTES {
        return Err(ManifestError::VersionTooLong(version.len()));
    }
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+' | b'_');
    if !version.bytes().all(allowed) || !version.as_bytes()[0].is_ascii_alphanumeric() {
        return Err(ManifestError::VersionChars(version.into()));
    }
    Ok(())
}

fn check_resource(what: &'static str, r: &ApiResource) -> Result<(), ManifestError> {
    if r.version.is_empty() || r.kind.is_empty() || r.plural.is_empty() {
        return Err(ManifestError::Incomplete {
            what,
            resource: Box::new(r.clone()),
        });
    }
    if r.plural != r.plural.to_lowercase() {
        return Err(ManifestError::PluralCase {
            what,
            plural: r.plural.clone(),
        });
    }
    Ok(())
}

/// A manifest that breaks a host rule ([`Manifest::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// A name over 63 bytes (its length; the name is not quoted: a refusal
    /// must not carry whatever a guest sends).
    #[error("name is {0} bytes long; it must be a lowercase DNS label (at most 63)")]
    NameTooLong(usize),
    #[error("name {0:?} must be a lowercase DNS label")]
    Name(String),
    #[error("version must not be empty")]
    VersionEmpty,
    #[error(
        "version is {0} bytes long; at most {VERSION_BYTES} are allowed (it becomes a metric label)"
    )]
    VersionTooLong(usize),
    #[error(
        "version {0:?} may hold only ASCII letters, digits and . - + _, and must start with a letter or digit (e.g. 1.2.3-rc.1)"
    )]
    VersionChars(String),
    /// A resource (`what`: parent, child...) without version, kind or plural.
    #[error("{what} must name version, kind and plural (got {resource:?})")]
    Incomplete {
        what: &'static str,
        resource: Box<ApiResource>,
    },
    #[error("{what} plural {plural:?} must be lowercase")]
    PluralCase { what: &'static str, plural: String },
    #[error("a plugin may not create its own parent kind {0}")]
    OwnParent(Box<ApiResource>),
    #[error("related {0} needs at least one label to match")]
    RelatedUnlabelled(Box<ApiResource>),
    #[error("a composite plugin must declare at least one child kind")]
    NoChildKind,
    #[error("referenced kind {0} is named twice")]
    ReferencedTwice(Box<ApiResource>),
    #[error(
        "{0} may be read metadata-only only as a related or referenced kind or a decorator's parent: the host compares children and a composite's parent whole"
    )]
    MetadataOnly(Box<ApiResource>),
    #[error("namespace {0:?} is not a valid namespace name")]
    Namespace(String),
    #[error("finalizer {0:?} must be domain-qualified, e.g. example.com/cleanup")]
    Finalizer(String),
}

/// Why a manifest cannot be served by a host bound to namespaces
/// ([`Manifest::bound_to`]); `listed` is the host's `--namespaces`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoundError {
    #[error(
        "its parent kind {parent} is cluster-scoped, and this host serves only namespaces {listed} (--namespaces)"
    )]
    ClusterScoped { parent: String, listed: String },
    /// None of the namespaces it may act in (`wanted`) is served.
    #[error("it may act in {wanted}, none of which this host serves (--namespaces {listed})")]
    NoneServed { wanted: String, listed: String },
}

impl Manifest {
    /// A manifest that asks for its parent and nothing else: no children,
    /// related kinds or references, every namespace, no finalizer, resync
    /// or webhooks. The rest is filled in with struct update syntax.
    pub fn new(
        name: impl Into<String>,
        version: impl Into<String>,
        parent: ApiResource,
        mode: Mode,
    ) -> Self {
        Manifest {
            name: name.into(),
            version: version.into(),
            parent,
            mode,
            children: Vec::new(),
            related: Vec::new(),
            namespaces: Vec::new(),
            finalizer: None,
            resync_seconds: None,
            excluded_namespaces: Vec::new(),
            metadata_only: Vec::new(),
            references: Vec::new(),
            webhooks: Default::default(),
        }
    }

    /// Enforce the host's rules on a manifest a plugin returned.
    pub fn validate(&self) -> Result<(), ManifestError> {
        if self.name.len() > 63 {
            // Not quoted: a refusal must not carry whatever a guest sends.
            return Err(ManifestError::NameTooLong(self.name.len()));
        }
        if !is_dns_label(&self.name) {
            return Err(ManifestError::Name(self.name.clone()));
        }
        check_version(&self.version)?;
        check_resource("parent", &self.parent)?;
        for child in &self.children {
            check_resource("child", child)?;
            if child.same_kind(&self.parent) {
                return Err(ManifestError::OwnParent(Box::new(child.clone())));
            }
        }
        for related in &self.related {
            check_resource("related", &related.resource)?;
            if related.match_labels.is_empty() {
                return Err(ManifestError::RelatedUnlabelled(Box::new(
                    related.resource.clone(),
                )));
            }
        }
        // A decorator's children are its attachments: optional.
        if self.mode == Mode::Composite && self.children.is_empty() {
            return Err(ManifestError::NoChildKind);
        }
        for (i, kind) in self.references.iter().enumerate() {
            check_resource("referenced kind", kind)?;
            if self.references[..i].iter().any(|k| k.same_kind(kind)) {
                return Err(ManifestError::ReferencedTwice(Box::new(kind.clone())));
            }
        }
        for kind in &self.metadata_only {
            let related = self.related.iter().any(|r| r.resource.same_kind(kind))
                || self.references.iter().any(|r| r.same_kind(kind));
            let decorated = self.mode == Mode::Decorator && self.parent.same_kind(kind);
            if !related && !decorated {
                return Err(ManifestError::MetadataOnly(Box::new(kind.clone())));
            }
        }
        if let Some(ns) = self.namespaces.iter().find(|n| !is_dns_label(n)) {
            return Err(ManifestError::Namespace(ns.clone()));
        }
        if let Some(f) = &self.finalizer
            && !f.contains('/')
        {
            return Err(ManifestError::Finalizer(f.clone()));
        }
        Ok(())
    }

    /// The fence: may this plugin write an object of this type?
    pub fn allows_child(&self, api_version: &str, kind: &str) -> bool {
        self.children.iter().any(|c| c.matches(api_version, kind))
    }

    /// The declared referenced kind of `kind` (group and kind compared).
    pub fn referenced_kind(&self, kind: &ApiResource) -> Option<&ApiResource> {
        self.references.iter().find(|r| r.same_kind(kind))
    }

    /// The child type for an object's `apiVersion` and `kind`, if declared.
    pub fn child_type(&self, api_version: &str, kind: &str) -> Option<&ApiResource> {
        self.children.iter().find(|c| c.matches(api_version, kind))
    }

    /// This manifest served only in `bound` (the host's `--namespaces`):
    /// its namespaces narrowed to those, or an error when none is left or
    /// its parents are cluster-scoped (a host bound to namespaces watches
    /// nothing cluster-wide).
    pub fn bound_to(&self, bound: &[String]) -> Result<Manifest, BoundError> {
        let listed = bound.join(",");
        if !self.parent.namespaced {
            return Err(BoundError::ClusterScoped {
                parent: self.parent.to_string(),
                listed,
            });
        }
        let mut narrowed = self.clone();
        narrowed.namespaces = bound
            .iter()
            .filter(|ns| self.watches_namespace(ns))
            .cloned()
            .collect();
        narrowed.namespaces.sort();
        narrowed.namespaces.dedup();
        narrowed.excluded_namespaces.clear();
        if narrowed.namespaces.is_empty() {
            let wanted = if self.namespaces.is_empty() {
                format!("every namespace but {}", self.excluded_namespaces.join(","))
            } else {
                self.namespaces.join(",")
            };
            return Err(BoundError::NoneServed { wanted, listed });
        }
        Ok(narrowed)
    }

    /// Does the plugin read only the metadata of `resource`'s kind?
    pub fn reads_metadata_only(&self, resource: &ApiResource) -> bool {
        self.metadata_only.iter().any(|m| m.same_kind(resource))
    }

    /// The namespaced kinds it reads or writes beside its parent: children,
    /// related kinds and referenced kinds.
    pub fn namespaced_kinds(&self) -> impl Iterator<Item = &ApiResource> {
        self.children
            .iter()
            .chain(self.related.iter().map(|r| &r.resource))
            .chain(&self.references)
            .filter(|r| r.namespaced)
    }

    /// Does this plugin reconcile parents in `namespace`?
    pub fn watches_namespace(&self, namespace: &str) -> bool {
        if self.namespaces.is_empty() {
            !self.excluded_namespaces.iter().any(|n| n == namespace)
        } else {
            self.namespaces.iter().any(|n| n == namespace)
        }
    }

    /// Host rules that need true scopes (after [`Manifest::resolve`]) and
    /// that no grant lifts.
    pub fn scope_rules(&self) -> Vec<String> {
        if !self.parent.namespaced {
            return Vec::new();
        }
        self.children
            .iter()
            .filter(|c| !c.namespaced)
            .map(|child| {
                format!(
                    "cluster-scoped child kind {child} cannot belong to a namespaced parent (garbage collection would never remove it; no grant allows this)"
                )
            })
            .collect()
    }

    /// Every resource the manifest names: parent, children, related,
    /// referenced.
    pub fn resources_mut(&mut self) -> impl Iterator<Item = &mut ApiResource> {
        std::iter::once(&mut self.parent)
            .chain(self.children.iter_mut())
            .chain(self.related.iter_mut().map(|r| &mut r.resource))
            .chain(self.references.iter_mut())
    }

    /// Replace each resource's plural and scope with what the API server
    /// says (`lookup`: group, version, kind → plural and namespaced), never
    /// what the plugin claimed. Returns every kind the server does not serve.
    pub fn resolve(
        &self,
        lookup: impl Fn(&ApiResource) -> Option<(String, bool)>,
    ) -> Result<Manifest, Vec<String>> {
        let mut resolved = self.clone();
        let mut problems = Vec::new();
        for r in resolved.resources_mut() {
            match lookup(r) {
                Some((plural, namespaced)) => {
                    r.plural = plural;
                    r.namespaced = namespaced;
                }
                None => problems.push(format!(
                    "kind {r} is not served by the API server (is its CustomResourceDefinition installed?)"
                )),
            }
        }
        if problems.is_empty() {
            Ok(resolved)
        } else {
            Err(problems)
        }
    }

    /// The field manager for server-side apply.
    pub fn field_manager(&self) -> String {
        format!("kubeplug/{}", self.name)
    }
}

/// True if `a` and `b` need the same watches and routes, so that swapping
/// the plugin behind a running controller is enough.
pub fn same_shape(a: &Manifest, b: &Manifest) -> bool {
    a.name == b.name
        && a.parent == b.parent
        && a.mode == b.mode
        && a.children == b.children
        && a.related == b.related
        && a.namespaces == b.namespaces
        && a.excluded_namespaces == b.excluded_namespaces
        && a.metadata_only == b.metadata_only
        && a.webhooks == b.webhooks
        && a.finalizer == b.finalizer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> ApiResource {
        ApiResource::new(group, version, kind, plural, namespaced)
    }

    fn hostile() -> Manifest {
        Manifest {
            children: vec![res("", "v1", "ConfigMap", "configmaps", true)],
            ..Manifest::new(
                "hostile",
                "0.1.0",
                res("test.kubeplug.io", "v1", "Hostile", "hostiles", true),
                Mode::Composite,
            )
        }
    }

    #[test]
    fn its_own_parent_kind_at_another_version_and_plural_is_still_refused_as_a_child() {
        let mut m = hostile();
        m.children
            .push(res("test.kubeplug.io", "v2", "Hostile", "hostilez", false));
        let error = m.validate().unwrap_err().to_string();
        assert!(
            error.contains("may not create its own parent kind"),
            "{error}"
        );
    }

    #[test]
    fn scopes_and_plurals_come_from_the_lookup_not_the_claim() {
        let mut m = hostile();
        m.children[0].namespaced = false;
        m.children[0].plural = "lies".into();
        let resolved = m
            .resolve(|r| Some((format!("{}s", r.kind.to_lowercase()), true)))
            .unwrap();
        assert_eq!(resolved.children[0].plural, "configmaps");
        assert!(resolved.children[0].namespaced);
        assert!(resolved.scope_rules().is_empty());
    }

    #[test]
    fn an_unserved_kind_is_named_and_cluster_scoped_children_of_namespaced_parents_break_a_rule() {
        let m = hostile();
        let problems = m
            .resolve(|r| (r.kind != "ConfigMap").then(|| ("x".into(), true)))
            .unwrap_err();
        assert!(
            problems[0].contains("ConfigMap.v1 is not served"),
            "{problems:?}"
        );
        let mut m = hostile();
        m.children
            .push(res("", "v1", "Namespace", "namespaces", false));
        assert_eq!(m.scope_rules().len(), 1);
    }

    #[test]
    fn excluded_namespaces_apply_only_when_the_plugin_watches_all() {
        let mut m = hostile();
        m.excluded_namespaces = vec!["kube-system".into()];
        assert!(!m.watches_namespace("kube-system"));
        assert!(m.watches_namespace("team-a"));
        m.namespaces = vec!["team-a".into()];
        assert!(!m.watches_namespace("kube-system"));
    }

    #[test]
    fn the_hosts_namespaces_bound_every_plugin() {
        let bound = vec![
            "team-b".to_string(),
            "team-a".to_string(),
            "kube-system".into(),
        ];
        let mut all = hostile();
        all.excluded_namespaces = vec!["kube-system".into()];
        let narrowed = all.bound_to(&bound).unwrap();
        assert_eq!(narrowed.namespaces, vec!["team-a", "team-b"]);
        assert!(!narrowed.watches_namespace("team-c"));

        let mut one = hostile();
        one.namespaces = vec!["team-a".into(), "team-c".into()];
        assert_eq!(one.bound_to(&bound).unwrap().namespaces, vec!["team-a"]);

        one.namespaces = vec!["team-c".into()];
        let refused = one.bound_to(&bound).unwrap_err().to_string();
        assert!(
            refused.contains("team-c") && refused.contains("--namespaces"),
            "{refused}"
        );

        let mut cluster = hostile();
        cluster.parent.namespaced = false;
        assert!(
            cluster
                .bound_to(&bound)
                .unwrap_err()
                .to_string()
                .contains("cluster-scoped")
        );
    }

    #[test]
    fn metadata_only_is_for_related_kinds_and_a_decorators_parent() {
        let pods = res("", "v1", "Pod", "pods", true);
        let configmaps = res("", "v1", "ConfigMap", "configmaps", true);
        let mut m = hostile();
        m.related = vec![Related {
            resource: pods.clone(),
            match_labels: vec![("app".into(), LabelValue::ParentName)],
        }];
        m.metadata_only = vec![pods.clone()];
        assert_eq!(m.validate(), Ok(()));
        assert!(m.reads_metadata_only(&pods) && !m.reads_metadata_only(&configmaps));

        m.metadata_only = vec![configmaps];
        let error = m.validate().unwrap_err().to_string();
        assert!(
            error.contains("ConfigMap") && error.contains("compares children"),
            "{error}"
        );
        m.metadata_only = vec![m.parent.clone()];
        assert!(
            m.validate().is_err(),
            "a composite's parent is compared whole"
        );

        let mut decorator = hostile();
        decorator.mode = Mode::Decorator;
        decorator.children.clear();
        decorator.metadata_only = vec![decorator.parent.clone()];
        assert_eq!(decorator.validate(), Ok(()));
    }

    #[test]
    fn a_version_is_short_and_plain_or_refused() {
        for good in [
            "0.1.0",
            "1.2.3-rc.1+build.20260101",
            "1.0rc1",
            "v2",
            "2026_01",
        ] {
            let mut m = hostile();
            m.version = good.into();
            assert_eq!(m.validate(), Ok(()), "{good}");
        }
        let mut m = hostile();
        m.version = "1".repeat(VERSION_BYTES);
        assert_eq!(m.validate(), Ok(()), "exactly the limit");
        m.version.push('0');
        let error = m.validate().unwrap_err().to_string();
        assert!(
            error.contains("65 bytes") && error.contains("at most 64"),
            "{error}"
        );
        for bad in [
            "", "1.0 beta", "-1", ".1", "1.0\n", "1.0\"}", "1.0/2", "1.0é",
        ] {
            m.version = bad.into();
            assert!(m.validate().is_err(), "{bad:?}");
        }
        m.version = "x".repeat(1 << 20);
        let error = m.validate().unwrap_err().to_string();
        assert!(error.len() < 200, "a refusal does not quote a long version");
    }

    #[test]
    fn a_name_longer_than_a_dns_label_is_refused() {
        let mut m = hostile();
        m.name = "a".repeat(63);
        assert_eq!(m.validate(), Ok(()));
        m.name.push('a');
        assert!(m.validate().unwrap_err().to_string().contains("DNS label"));
        m.name = "a".repeat(1 << 20);
        assert!(
            m.validate().unwrap_err().to_string().len() < 200,
            "not quoted"
        );
    }
}
