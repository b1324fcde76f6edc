//! One plugin's grant, and the check of a manifest against it (its answers
//! are checked by the fence, `crate::fence`).

use serde::Deserialize;

use super::{
    Effective, GateError, KindRef, KindRefError, Location, LocationError, SYSTEM_NAMESPACES,
};
use crate::manifest::{ApiResource, Manifest};
use crate::webhook::{FailurePolicy, Webhook, Webhooks};

/// Kinds that no wildcard covers: reading or writing them hands out
/// credentials, identities or cluster-wide control. A grant must name them.
pub fn is_sensitive(kind: &KindRef) -> bool {
    const GROUPS: &[&str] = &[
        "rbac.authorization.k8s.io",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "certificates.k8s.io",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "coordination.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "kubeplug.io",
    ];
    const CORE: &[&str] = &[
        "Secret",
        "ServiceAccount",
        "Namespace",
        "Node",
        "PersistentVolume",
    ];
    GROUPS.contains(&kind.group.as_str())
        || (kind.group.is_empty() && CORE.contains(&kind.kind.as_str()))
}

/// A set of kinds: named ones, plus (with `"*"`) any namespaced kind that is
/// not sensitive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KindSet {
    pub any: bool,
    pub named: Vec<KindRef>,
}

impl KindSet {
    fn parse(list: &[String]) -> Result<Self, KindRefError> {
        let mut set = KindSet::default();
        for entry in list {
            if entry == "*" {
                set.any = true;
            } else {
                set.named.push(KindRef::parse(entry)?);
            }
        }
        Ok(set)
    }

    /// Does the set cover `r` (with its scope as the API server reports it)?
    pub fn covers(&self, r: &ApiResource) -> bool {
        let kind = KindRef::of(r);
        self.named.contains(&kind) || (self.any && r.namespaced && !is_sensitive(&kind))
    }
}

/// Namespaces a plugin may act in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceScope {
    /// Every namespace but the system ones and the host's own.
    pub all: bool,
    /// Named namespaces (system ones must be named to be granted).
    pub named: Vec<String>,
}

impl NamespaceScope {
    /// Is `namespace` granted, the host's own being `identity_namespace`?
    pub fn grants(&self, namespace: &str, identity_namespace: &str) -> bool {
        self.named.iter().any(|n| n == namespace)
            || (self.all
                && !SYSTEM_NAMESPACES.contains(&namespace)
                && namespace != identity_namespace)
    }
}

/// What a platform team writes for one plugin.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct GrantFile {
    /// Where the plugin's file sits: see [`Location`].
    path: Option<String>,
    service_account: Option<String>,
    #[serde(default)]
    sha256: Vec<String>,
    #[serde(default)]
    signed_by: Vec<String>,
    #[serde(default)]
    parent: Vec<String>,
    #[serde(default)]
    children: Vec<String>,
    #[serde(default)]
    related: Vec<String>,
    #[serde(default)]
    references: Vec<String>,
    #[serde(default)]
    cluster_scoped: Vec<String>,
    namespaces: Option<Vec<String>>,
    #[serde(default)]
    finalizers: Vec<String>,
    #[serde(default)]
    decorator_keys: Vec<String>,
    /// Fields (JSON pointers under `/spec`) a mutating webhook may change.
    mutable_fields: Option<Vec<String>>,
    #[serde(default)]
    quotas: serde_json::Map<String, serde_json::Value>,
    /// Read wide so that an out-of-range count is refused with its reason,
    /// not as a number that does not fit.
    shards: Option<i64>,
    #[serde(default)]
    shard_pods: bool,
    /// `validate` and/or `mutate`: the admission webhooks the host serves
    /// for this plugin's parent kind.
    #[serde(default)]
    admission: Vec<String>,
    /// The host serves the parent kind's conversion webhook.
    #[serde(default)]
    conversion: bool,
    /// What the host answers when the plugin fails an admission review.
    #[serde(default)]
    failure_policy: FailurePolicy,
    /// The promotion gate: a new version serves only if its what-if over
    /// every parent passes it.
    promotion: Option<super::GateFile>,
}

/// The most shards a grant may give one plugin. Each shard is a Lease and,
/// on the replica that owns it, a filtered watch per kind; 256 is far more
/// than the replicas one plugin needs, and bounds what a typo in a policy
/// (`shards: 25600`) can make a host create.
pub const MAX_SHARDS: u16 = 256;

/// What one plugin may do.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    /// Where the platform puts its file (see [`Location`]).
    pub location: Location,
    /// Its ServiceAccount; default `kubeplug-plugin-<name>`.
    pub service_account: Option<String>,
    /// If not empty, only these `.wasm` digests load.
    pub sha256: Vec<String>,
    /// If not empty, the plugin loads only from an OCI artifact signed by
    /// one of these keys (PEM `PUBLIC KEY`, cosign's key-based format),
    /// which the host verified when it pulled it: a file put in the
    /// directory any other way is refused.
    pub signed_by: Vec<String>,
    pub parent: KindSet,
    pub children: KindSet,
    pub related: KindSet,
    /// Kinds its parents may name (its `references` export), read in the
    /// plugin's namespaces.
    pub references: KindSet,
    /// Cluster-scoped kinds among parent, children, related and
    /// referenced.
    pub cluster_scoped: Vec<KindRef>,
    pub namespaces: NamespaceScope,
    /// Finalizer names beyond the plugin's own domain (exact, or `prefix*`).
    pub finalizers: Vec<String>,
    /// Label and annotation keys a decorator (or a mutating webhook) may
    /// set (exact, or `prefix*`); empty: any key outside the reserved
    /// prefixes.
    pub decorator_keys: Vec<String>,
    /// Fields a mutating webhook may change, as JSON pointers under
    /// `/spec` (`/spec/replicas`); `None`: all of `spec` for a composite
    /// plugin (its parent kind is its own), none for a decorator (see
    /// [`crate::fence`]).
    pub mutable_fields: Option<Vec<String>>,
    pub quota_overrides: serde_json::Map<String, serde_json::Value>,
    /// Shards its parents are split into, each owned by one replica (see
    /// [`crate::shard`]): 1 (the default) is not sharded, at most
    /// [`MAX_SHARDS`].
    pub shards: u16,
    /// The related Pods this plugin reads are those its own children's pod
    /// templates make: the host writes the shard label into those templates
    /// and watches only its own shards' Pods (see
    /// [`crate::shard::narrows`]). Needs `shards` > 1.
    pub shard_pods: bool,
    /// The webhooks served for its parent kind (none by default: the
    /// platform writes the webhook configurations and names them here).
    pub webhooks: Webhooks,
    /// What an admission review gets when the plugin fails it (traps, runs
    /// out of time or memory, answers outside its fence): `Fail` (the
    /// default) denies the write, `Ignore` allows it with a warning.
    pub failure_policy: FailurePolicy,
    /// The promotion gate (see [`super::Gate`]): without one, a new
    /// version serves as soon as it loads.
    pub promotion: Option<super::Gate>,
}

/// A grant as written that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GrantError {
    /// A `sha256:` pin that is not a digest.
    #[error("sha256 pin {0:?} is not a hex SHA-256 digest")]
    Sha256Pin(String),
    /// A `signedBy` entry (its index) that is not one PEM public key.
    #[error(
        "signedBy[{0}] is not one PEM public key (-----BEGIN PUBLIC KEY----- ... -----END PUBLIC KEY-----, as `openssl pkey -pubout` writes it)"
    )]
    SignedBy(usize),
    #[error(transparent)]
    Location(#[from] LocationError),
    /// A shard count outside `1..=MAX_SHARDS`.
    #[error(
        "shards: {0} is outside 1..={MAX_SHARDS} (the number of shards a plugin's parents are split into; 1 is not sharded)"
    )]
    Shards(i64),
    /// An `admission:` entry that names no webhook.
    #[error(
        "admission: {0:?} is neither validate nor mutate (the admission webhooks the host serves for the plugin's parent kind)"
    )]
    Admission(String),
    /// A `mutableFields:` entry outside `/spec`.
    #[error(
        "mutableFields: {0:?} is not a field under /spec (written as a JSON pointer, e.g. /spec/replicas): a mutation may change a parent's spec and the label and annotation keys decoratorKeys allows, nothing else"
    )]
    MutableField(String),
    /// `shardPods: true` on an unsharded plugin.
    #[error(
        "shardPods: true needs shards: 2 or more (it narrows a sharded plugin's watch of its related Pods to its shards)"
    )]
    ShardPodsUnsharded,
    #[error(transparent)]
    Kind(#[from] KindRefError),
    #[error(transparent)]
    Promotion(#[from] GateError),
}

impl GrantFile {
    pub(super) fn into_grant(self) -> Result<Grant, GrantError> {
        let namespaces = match self.namespaces {
            None => NamespaceScope {
                all: true,
                named: Vec::new(),
            },
            Some(list) => NamespaceScope {
                all: list.iter().any(|n| n == "*"),
                named: list.into_iter().filter(|n| n != "*").collect(),
            },
        };
        let sha256 = self
            .sha256
            .into_iter()
            .map(|d| d.trim_start_matches("sha256:").to_ascii_lowercase())
            .collect::<Vec<_>>();
        if let Some(bad) = sha256
            .iter()
            .find(|d| d.len() != 64 || !d.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(GrantError::Sha256Pin(bad.clone()));
        }
        let signed_by = self
            .signed_by
            .iter()
            .map(|pem| pem.trim().to_string())
            .collect::<Vec<_>>();
        if let Some(bad) = signed_by.iter().position(|pem| {
            !(pem.starts_with("-----BEGIN PUBLIC KEY-----")
                && pem.ends_with("-----END PUBLIC KEY-----"))
        }) {
            return Err(GrantError::SignedBy(bad));
        }
        let location = match &self.path {
            None => Location::Default,
            Some(path) => Location::parse(path)?,
        };
        let shards = match self.shards {
            None => 1,
            Some(n) => u16::try_from(n)
                .ok()
                .filter(|n| (1..=MAX_SHARDS).contains(n))
                .ok_or(GrantError::Shards(n))?,
        };
        let mut webhooks = Webhooks {
            convert: self.conversion,
            ..Webhooks::default()
        };
        for entry in &self.admission {
            match entry.as_str() {
                "validate" => webhooks.validate = true,
                "mutate" => webhooks.mutate = true,
                other => {
                    return Err(GrantError::Admission(other.into()));
                }
            }
        }
        if let Some(bad) = self
            .mutable_fields
            .iter()
            .flatten()
            .find(|f| *f != "/spec" && !f.starts_with("/spec/"))
        {
            return Err(GrantError::MutableField(bad.clone()));
        }
        if self.shard_pods && shards == 1 {
            return Err(GrantError::ShardPodsUnsharded);
        }
        Ok(Grant {
            location,
            service_account: self.service_account,
            sha256,
            signed_by,
            parent: KindSet::parse(&self.parent)?,
            children: KindSet::parse(&self.children)?,
            related: KindSet::parse(&self.related)?,
            references: KindSet::parse(&self.references)?,
            cluster_scoped: self
                .cluster_scoped
                .iter()
                .map(|k| KindRef::parse(k))
                .collect::<Result<_, _>>()?,
            namespaces,
            finalizers: self.finalizers,
            decorator_keys: self.decorator_keys,
            mutable_fields: self.mutable_fields,
            quota_overrides: self.quotas,
            shards,
            shard_pods: self.shard_pods,
            webhooks,
            failure_policy: self.failure_policy,
            promotion: self.promotion.map(|g| g.into_gate()).transpose()?,
        })
    }
}

impl Grant {
    /// The grant of a plugin the policy does not name: namespaced,
    /// non-sensitive kinds in non-system namespaces, its own finalizer
    /// domain, unreserved keys, default quotas, one shard. The API server
    /// still decides through the plugin's ServiceAccount.
    pub fn safe_default() -> Self {
        let any = KindSet {
            any: true,
            named: Vec::new(),
        };
        Grant {
            location: Location::Default,
            service_account: None,
            sha256: Vec::new(),
            signed_by: Vec::new(),
            parent: any.clone(),
            children: any.clone(),
            related: any.clone(),
            references: any,
            cluster_scoped: Vec::new(),
            namespaces: NamespaceScope {
                all: true,
                named: Vec::new(),
            },
            finalizers: Vec::new(),
            decorator_keys: Vec::new(),
            mutable_fields: None,
            quota_overrides: serde_json::Map::new(),
            shards: 1,
            shard_pods: false,
            webhooks: Webhooks::default(),
            failure_policy: FailurePolicy::default(),
            promotion: None,
        }
    }
}

impl Grant {
    /// A grant of exactly what `manifest` asks for: its kinds named (so
    /// sensitive and cluster-scoped ones too), its namespaces, its
    /// finalizer and webhooks. Offline tools render under it to show what a
    /// plugin does before any platform grants it (`kubeplug render` without
    /// `--policy`); the rules no grant lifts (`Manifest::scope_rules`)
    /// still hold.
    pub fn asked_by(manifest: &Manifest) -> Self {
        let kinds = |resources: &mut dyn Iterator<Item = &ApiResource>| KindSet {
            any: false,
            named: resources.map(KindRef::of).collect(),
        };
        let mut cluster_scoped: Vec<KindRef> = std::iter::once(&manifest.parent)
            .chain(&manifest.children)
            .chain(manifest.related.iter().map(|r| &r.resource))
            .chain(&manifest.references)
            .map(KindRef::of)
            .collect();
        cluster_scoped.sort();
        cluster_scoped.dedup();
        Grant {
            parent: kinds(&mut std::iter::once(&manifest.parent)),
            children: kinds(&mut manifest.children.iter()),
            related: kinds(&mut manifest.related.iter().map(|r| &r.resource)),
            references: kinds(&mut manifest.references.iter()),
            cluster_scoped,
            namespaces: NamespaceScope {
                all: true,
                named: manifest.namespaces.clone(),
            },
            finalizers: manifest.finalizer.iter().cloned().collect(),
            webhooks: manifest.webhooks,
            ..Grant::safe_default()
        }
    }
}

/// The finalizer domain every plugin may use: `<name>.kubeplug.io/`.
pub fn derived_finalizer_domain(plugin: &str) -> String {
    format!("{plugin}.kubeplug.io/")
}

/// `pattern` is an exact key or a `prefix*`.
fn pattern_matches(pattern: &str, key: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => key.starts_with(prefix),
        None => pattern == key,
    }
}

/// Does one of `patterns` (exact names or `prefix*`) grant `name`? A
/// `reserved` name is granted only by its exact name: no pattern unlocks
/// it, however narrow (`app*` reaches `app.kubernetes.io/name`, `*` reaches
/// everything).
fn granted_by(patterns: &[String], name: &str, reserved: bool) -> bool {
    patterns.iter().any(|p| {
        if reserved {
            p == name
        } else {
            pattern_matches(p, name)
        }
    })
}

/// Prefixes of label, annotation and finalizer names that Kubernetes,
/// kubectl and kubeplug own: each domain and its subdomains.
fn reserved_domain(name: &str) -> bool {
    const DOMAINS: &[&str] = &["kubeplug.io", "kubernetes.io", "k8s.io"];
    name.split_once('/').is_some_and(|(prefix, _)| {
        DOMAINS
            .iter()
            .any(|d| prefix == *d || prefix.ends_with(&format!(".{d}")))
    })
}

/// Keys the host, Kubernetes or kubectl own: a decorator may not set them
/// unless a grant names them exactly (no pattern does).
pub fn reserved_key(key: &str) -> bool {
    const BARE: &[&str] = &["pod-template-hash", "controller-revision-hash"];
    reserved_domain(key) || BARE.contains(&key)
}

/// Finalizers Kubernetes or kubeplug own (the garbage collector's
/// `foregroundDeletion` and `orphan`, the reserved domains): a plugin may
/// use them only if its grant names them exactly. Its own domain
/// ([`derived_finalizer_domain`]) is always its own.
pub fn reserved_finalizer(finalizer: &str) -> bool {
    const BARE: &[&str] = &["foregroundDeletion", "orphan"];
    reserved_domain(finalizer) || BARE.contains(&finalizer)
}

/// A manifest the grant does not cover: every missing grant, named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugin {plugin} asks for more than it may{}: {}", if *.explicit { "" } else { " (it has no entry in the policy; the default grant applies)" }, .missing.join("; "))]
pub struct Refusal {
    pub plugin: String,
    pub explicit: bool,
    pub missing: Vec<String>,
}

impl Effective {
    fn scope_check(&self, what: &str, r: &ApiResource, set: &KindSet, missing: &mut Vec<String>) {
        let kind = KindRef::of(r);
        if !set.covers(r) {
            let why = if !set.named.contains(&kind) && set.any && is_sensitive(&kind) {
                " (sensitive kinds must be named)"
            } else if !set.named.contains(&kind) && set.any && !r.namespaced {
                " (cluster-scoped kinds must be named)"
            } else {
                ""
            };
            missing.push(format!("{what} kind {kind}{why}"));
        }
        if !r.namespaced && !self.grant.cluster_scoped.contains(&kind) {
            missing.push(format!(
                "cluster-scoped {kind} (grant it under clusterScoped)"
            ));
        }
    }

    /// Check a manifest (with scopes already resolved through discovery)
    /// against the grant. Returns the manifest narrowed to the grant's
    /// namespaces, or every missing grant.
    pub fn admit(&self, manifest: &Manifest, digest: &str) -> Result<Manifest, Refusal> {
        let mut missing = manifest.scope_rules();
        if !self.grant.sha256.is_empty() && !self.grant.sha256.iter().any(|d| d == digest) {
            missing.push(format!("digest sha256:{digest} is not pinned"));
        }
        self.scope_check("parent", &manifest.parent, &self.grant.parent, &mut missing);
        for webhook in Webhook::ALL {
            if manifest.webhooks.has(webhook) && !self.grant.webhooks.has(webhook) {
                missing.push(format!(
                    "the {} webhook of its parent kind (grant it under {})",
                    webhook.as_str(),
                    webhook.grant_key()
                ));
            }
        }
        for child in &manifest.children {
            self.scope_check("child", child, &self.grant.children, &mut missing);
        }
        for related in &manifest.related {
            self.scope_check(
                "related",
                &related.resource,
                &self.grant.related,
                &mut missing,
            );
        }
        for kind in &manifest.references {
            self.scope_check("referenced", kind, &self.grant.references, &mut missing);
        }
        if let Some(finalizer) = &manifest.finalizer
            && !self.finalizer_allowed(finalizer)
        {
            missing.push(format!(
                "finalizer {finalizer} (a plugin may use {}* unless granted more)",
                derived_finalizer_domain(&self.plugin)
            ));
        }
        let mut admitted = manifest.clone();
        let scope = &self.grant.namespaces;
        let inside = |ns: &str| scope.grants(ns, &self.identity_namespace);
        // A cluster-scoped parent's plugin is narrowed to the grant's
        // namespaces too: what it reads there (related objects,
        // references) is watched and handed to it within them only.
        let acts_in_namespaces = manifest.parent.namespaced
            || manifest.namespaced_kinds().next().is_some()
            || !manifest.namespaces.is_empty();
        if acts_in_namespaces {
            for ns in manifest.namespaces.iter().filter(|ns| !inside(ns)) {
                missing.push(format!("namespace {ns}"));
            }
            if manifest.namespaces.is_empty() {
                if scope.all {
                    admitted.excluded_namespaces = SYSTEM_NAMESPACES
                        .iter()
                        .map(|s| s.to_string())
                        .chain(std::iter::once(self.identity_namespace.clone()))
                        .filter(|s| !scope.named.contains(s))
                        .collect();
                } else if scope.named.is_empty() {
                    missing.push("any namespace (the grant names none)".into());
                } else {
                    // "All namespaces" narrowed to what is granted.
                    admitted.namespaces = scope.named.clone();
                }
            }
        }
        if missing.is_empty() {
            Ok(admitted)
        } else {
            Err(Refusal {
                plugin: self.plugin.clone(),
                explicit: self.explicit,
                missing,
            })
        }
    }

    /// May the plugin use `finalizer` (on its parents, or on a child)?
    pub fn finalizer_allowed(&self, finalizer: &str) -> bool {
        finalizer.starts_with(&derived_finalizer_domain(&self.plugin))
            || granted_by(
                &self.grant.finalizers,
                finalizer,
                reserved_finalizer(finalizer),
            )
    }

    /// May the plugin set or change the label or annotation key `key`?
    pub fn key_allowed(&self, key: &str) -> bool {
        let patterns = &self.grant.decorator_keys;
        if reserved_key(key) {
            granted_by(patterns, key, true)
        } else {
            patterns.is_empty() || granted_by(patterns, key, false)
        }
    }
}
