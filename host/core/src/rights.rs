//! What the host asks in a plugin's name, and what it needs for itself to
//! serve the plugin: one decision, from the manifest (and the shard count
//! its grant gives). `kubeplug platform` writes it as RBAC rules
//! (`kubeplug_kit::platform`); `kubeplug doctor` asks it as
//! SubjectAccessReviews (its `permissions` and `host_rights` checks).
//!
//! Least privilege: each verb is one the host sends or checks in the
//! plugin's name (see `kubeplug_kube::apply` and `kubeplug_kube::identity`),
//! as the plugin's ServiceAccount ([`identity`]):
//!
//! - its parent kind: read (`get`, `list`, `watch`); `patch` only when the
//!   host merge-patches parents for it (a decorator's labels and
//!   annotations, its finalizer, a sharded plugin's shard label); a
//!   composite's status by server-side apply (`patch` on `status`);
//!   `update` on `finalizers` when it has children (their controller
//!   ownerReference sets `blockOwnerDeletion`, which the API server's
//!   OwnerReferencesPermissionEnforcement admission allows only to those
//!   who may update the owner's finalizers);
//! - its child kinds (a decorator's attachments too): read, `create`,
//!   `patch` (server-side apply) and `delete` (prune); never `update`: the
//!   host sends no PUT;
//! - its related and referenced kinds: read (the host checks `list`);
//! - events.k8s.io Events: `create`, for the events it records, and
//!   `patch`, for a repeated event's series.
//!
//! And as itself, for the plugin ([`host`]):
//!
//! - `impersonate` the plugin's ServiceAccount, and no other: every write
//!   the plugin causes goes out as it, so RBAC decides and the audit log
//!   names the plugin;
//! - `get`, `list`, `watch` every kind the plugin is handed (parent,
//!   children, related, referenced) for the shared caches; no write verb:
//!   writes go out as the plugin.
//!
//! Pure data (kinds, subresources, verbs): where to ask (the namespaces a
//! plugin serves, everywhere for a cluster-scoped kind) and how to group
//! rights into rules is each caller's.

use crate::manifest::{ApiResource, Manifest, Mode};

/// Reading a kind: one object, a list, a watch.
pub const READ: &[&str] = &["get", "list", "watch"];
/// Writing a child: create, server-side apply, prune.
pub const WRITE: &[&str] = &["create", "patch", "delete"];

/// Verbs on a kind (or one of its subresources, or one object of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Right {
    pub kind: ApiResource,
    /// `status`, `finalizers`, or empty: the kind itself.
    pub subresource: &'static str,
    /// The one object (`resourceNames`), or empty: any.
    pub name: String,
    pub verbs: &'static [&'static str],
}

impl Right {
    fn on(kind: &ApiResource, subresource: &'static str, verbs: &'static [&'static str]) -> Right {
        Right {
            kind: kind.clone(),
            subresource,
            name: String::new(),
            verbs,
        }
    }

    /// The resource as an RBAC rule names it: `databases`,
    /// `databases/status`.
    pub fn resource(&self) -> String {
        if self.subresource.is_empty() {
            self.kind.plural.clone()
        } else {
            format!("{}/{}", self.kind.plural, self.subresource)
        }
    }
}

/// Every kind the plugin `manifest` describes is handed (parent, children,
/// related, references), each once (by group, kind and version), in that
/// order.
pub fn handed(manifest: &Manifest) -> Vec<&ApiResource> {
    let mut kinds: Vec<&ApiResource> = Vec::new();
    let all = std::iter::once(&manifest.parent)
        .chain(&manifest.children)
        .chain(manifest.related.iter().map(|r| &r.resource))
        .chain(&manifest.references);
    for kind in all {
        if !kinds
            .iter()
            .any(|k| k.same_kind(kind) && k.version == kind.version)
        {
            kinds.push(kind);
        }
    }
    kinds
}

/// What the host sends or checks in the name of the plugin `manifest`
/// describes, its parents split into `shards` (1: none): the module's first
/// list, in that order. A kind named twice (a child also referenced) may
/// appear twice.
pub fn identity(manifest: &Manifest, shards: u16) -> Vec<Right> {
    let parent = &manifest.parent;
    let mut out = vec![Right::on(parent, "", READ)];
    if manifest.mode == Mode::Composite {
        out.push(Right::on(parent, "status", &["patch"]));
    }
    if manifest.mode == Mode::Decorator || manifest.finalizer.is_some() || shards > 1 {
        out.push(Right::on(parent, "", &["patch"]));
    }
    if !manifest.children.is_empty() {
        out.push(Right::on(parent, "finalizers", &["update"]));
    }
    for child in &manifest.children {
        out.push(Right::on(child, "", READ));
        out.push(Right::on(child, "", WRITE));
    }
    for kind in manifest
        .related
        .iter()
        .map(|r| &r.resource)
        .chain(&manifest.references)
    {
        out.push(Right::on(kind, "", READ));
    }
    let events = ApiResource::new("events.k8s.io", "v1", "Event", "events", true);
    out.push(Right::on(&events, "", &["create", "patch"]));
    out
}

/// What the host needs for itself to serve a plugin: the module's second
/// list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRights {
    /// `impersonate` on the plugin's ServiceAccount, by name.
    pub impersonate: Right,
    /// Read each kind the plugin is handed ([`handed`]).
    pub reads: Vec<Right>,
}

/// What the host needs for the plugin `manifest` describes, whose identity
/// is the ServiceAccount `service_account`.
pub fn host(manifest: &Manifest, service_account: &str) -> HostRights {
    let accounts = ApiResource::new("", "v1", "ServiceAccount", "serviceaccounts", true);
    HostRights {
        impersonate: Right {
            name: service_account.into(),
            ..Right::on(&accounts, "", &["impersonate"])
        },
        reads: handed(manifest)
            .into_iter()
            .map(|kind| Right::on(kind, "", READ))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Related;

    fn res(group: &str, kind: &str, plural: &str) -> ApiResource {
        ApiResource::new(group, "v1", kind, plural, true)
    }

    fn lines(rights: &[Right]) -> Vec<String> {
        rights
            .iter()
            .map(|r| format!("{} {}", r.verbs.join(","), r.resource()))
            .collect()
    }

    fn composite() -> Manifest {
        Manifest {
            children: vec![res("apps", "StatefulSet", "statefulsets")],
            related: vec![Related {
                resource: res("", "Pod", "pods"),
                match_labels: Vec::new(),
            }],
            references: vec![res("", "ConfigMap", "configmaps")],
            ..Manifest::new(
                "database",
                "0.1.0",
                res("example.com", "Database", "databases"),
                Mode::Composite,
            )
        }
    }

    #[test]
    fn a_composite_writes_its_status_and_children_and_reads_the_rest() {
        assert_eq!(
            lines(&identity(&composite(), 1)),
            [
                "get,list,watch databases",
                "patch databases/status",
                "update databases/finalizers",
                "get,list,watch statefulsets",
                "create,patch,delete statefulsets",
                "get,list,watch pods",
                "get,list,watch configmaps",
                "create,patch events",
            ]
        );
    }

    #[test]
    fn a_finalizer_shards_or_a_decorator_patch_the_parent() {
        let patches = |m: &Manifest, shards| {
            identity(m, shards)
                .iter()
                .any(|r| r.resource() == "databases" && r.verbs == ["patch"])
        };
        assert!(!patches(&composite(), 1));
        assert!(patches(&composite(), 2));
        let finalizer = Manifest {
            finalizer: Some("database.kubeplug.io/cleanup".into()),
            ..composite()
        };
        assert!(patches(&finalizer, 1));
        let decorator = Manifest {
            mode: Mode::Decorator,
            children: Vec::new(),
            ..composite()
        };
        assert!(patches(&decorator, 1));
        let lines = lines(&identity(&decorator, 1));
        assert!(!lines.iter().any(|l| l.contains('/')), "{lines:?}");
    }

    #[test]
    fn the_host_impersonates_the_plugin_by_name_and_reads_each_kind_once() {
        let manifest = Manifest {
            children: vec![res("", "ConfigMap", "configmaps")],
            ..composite()
        };
        let rights = host(&manifest, "kubeplug-plugin-database");
        assert_eq!(rights.impersonate.name, "kubeplug-plugin-database");
        assert_eq!(rights.impersonate.resource(), "serviceaccounts");
        assert_eq!(rights.impersonate.verbs, ["impersonate"]);
        assert_eq!(
            lines(&rights.reads),
            [
                "get,list,watch databases",
                "get,list,watch configmaps",
                "get,list,watch pods",
            ]
        );
    }
}
