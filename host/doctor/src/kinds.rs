//! A plugin's kinds: every kind its manifest names (parent, children,
//! related, references) is served (API discovery, as the live host asks),
//! and a parent kind backed by a CustomResourceDefinition has it
//! `Established`. A kind not served keeps the plugin from loading (the host
//! retries until it is).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;

use crate::report::Check;
use kubeplug_core::admission::{Scope, Served};
use kubeplug_core::manifest::{ApiResource, Manifest};

/// Every kind `manifest` names, each once (by group, version and kind).
pub use kubeplug_core::rights::handed as named;

/// Built into Kubernetes rather than added by a CRD: the core group,
/// single-word groups (`apps`, `batch`, `policy`) and `*.k8s.io`.
fn builtin_group(group: &str) -> bool {
    group.is_empty() || !group.contains('.') || group.ends_with(".k8s.io")
}

/// Why `kind` is not served, and the fix; `crd` is its
/// CustomResourceDefinition (`<plural>.<group>`) if there is one.
pub fn not_served(kind: &ApiResource, crd: Option<&CustomResourceDefinition>) -> String {
    if builtin_group(&kind.group) {
        return format!(
            "kind {kind} is not served by this API server: is its group/version right for this Kubernetes version?"
        );
    }
    match crd {
        None => format!("kind {kind} is not served: apply its CustomResourceDefinition (crds/)"),
        Some(crd) => {
            let name = crd.metadata.name.as_deref().unwrap_or_default();
            let served = crd
                .spec
                .versions
                .iter()
                .any(|v| v.name == kind.version && v.served);
            if served {
                match established(crd) {
                    Err(why) => format!(
                        "kind {kind} is not served yet: its CustomResourceDefinition {name} is {why}"
                    ),
                    Ok(()) => format!(
                        "kind {kind} is not served yet: its CustomResourceDefinition {name} is Established but not in discovery yet (try again in a moment)"
                    ),
                }
            } else {
                format!(
                    "kind {kind} is not served: CustomResourceDefinition {name} does not serve version {} (apply the one in crds/)",
                    kind.version
                )
            }
        }
    }
}

/// A CustomResourceDefinition the API server has not established, as its
/// condition says; reads after "CustomResourceDefinition <name> is".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotEstablished {
    /// The condition is there and not true.
    #[error("not Established: {reason}: {message}")]
    Refused { reason: String, message: String },
    #[error("not Established yet")]
    Yet,
}

/// Ok if `crd` is `Established`, else what its condition says.
pub fn established(crd: &CustomResourceDefinition) -> Result<(), NotEstablished> {
    let condition = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Established"));
    match condition {
        Some(c) if c.status == "True" => Ok(()),
        Some(c) => Err(NotEstablished::Refused {
            reason: c.reason.as_deref().unwrap_or("no reason").into(),
            message: c.message.as_deref().unwrap_or("no message").into(),
        }),
        None => Err(NotEstablished::Yet),
    }
}

/// The CustomResourceDefinition of `kind`, if it has one.
async fn crd_of(
    client: &kube::Client,
    kind: &ApiResource,
) -> Result<Option<CustomResourceDefinition>, kube::Error> {
    if builtin_group(&kind.group) {
        return Ok(None);
    }
    Api::<CustomResourceDefinition>::all(client.clone())
        .get_opt(&format!("{}.{}", kind.plural, kind.group))
        .await
}

/// The kinds of the plugin `manifest` describes, against what the API
/// server serves (`served`, from discovery).
pub async fn check(
    client: &kube::Client,
    plugin: &str,
    manifest: &Manifest,
    served: &impl Served,
) -> Check {
    let name = format!("kinds {plugin}");
    let kinds = named(manifest);
    // Broken, and what doctor could not read (its own rights).
    let (mut problems, mut unread) = (Vec::new(), Vec::new());
    for &kind in &kinds {
        if matches!(served.scope(kind), Scope::Served { .. }) {
            continue;
        }
        match crd_of(client, kind).await {
            Ok(crd) => problems.push(not_served(kind, crd.as_ref())),
            Err(error) => problems.push(format!(
                "kind {kind} is not served (and its CustomResourceDefinition cannot be read: {error})"
            )),
        }
    }
    let parent = &manifest.parent;
    let mut parent_crd = None;
    if matches!(served.scope(parent), Scope::Served { .. }) {
        match crd_of(client, parent).await {
            Ok(Some(crd)) => {
                let crd_name = crd.metadata.name.clone().unwrap_or_default();
                match established(&crd) {
                    Ok(()) => parent_crd = Some(crd_name),
                    Err(why) => problems.push(format!(
                        "CustomResourceDefinition {crd_name} of parent kind {parent} is {why}"
                    )),
                }
            }
            Ok(None) => {}
            Err(error) => unread.push(format!(
                "cannot read the CustomResourceDefinition of parent kind {parent}: {error}"
            )),
        }
    }
    if !problems.is_empty() {
        problems.extend(unread);
        return Check::fail(name, problems.join("; "));
    }
    let served = match kinds.len() {
        1 => "its one kind served".to_string(),
        n => format!("all {n} kinds served"),
    };
    if !unread.is_empty() {
        return Check::warn(name, format!("{served}; {}", unread.join("; ")));
    }
    let crd = parent_crd
        .map(|c| format!("; CustomResourceDefinition {c} Established"))
        .unwrap_or_default();
    Check::ok(name, format!("{served}{crd}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(versions: &[(&str, bool)], established: Option<bool>) -> CustomResourceDefinition {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "databases.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "databases", "kind": "Database"},
                "versions": versions.iter().map(|(name, served)| serde_json::json!({
                    "name": name, "served": served, "storage": true
                })).collect::<Vec<_>>(),
            },
            "status": {
                "conditions": established.map(|e| vec![serde_json::json!({
                    "type": "Established",
                    "status": if e { "True" } else { "False" },
                    "reason": "Installing",
                    "message": "the initial names have not been accepted"
                })]).unwrap_or_default()
            }
        }))
        .unwrap()
    }

    fn database() -> ApiResource {
        ApiResource::new("example.com", "v1", "Database", "databases", true)
    }

    #[test]
    fn a_missing_crd_is_named_with_the_fix() {
        assert_eq!(
            not_served(&database(), None),
            "kind Database.example.com/v1 is not served: apply its CustomResourceDefinition (crds/)"
        );
    }

    #[test]
    fn a_crd_without_the_version_or_not_established_says_which() {
        assert_eq!(
            not_served(&database(), Some(&crd(&[("v2", true)], Some(true)))),
            "kind Database.example.com/v1 is not served: CustomResourceDefinition databases.example.com does not serve version v1 (apply the one in crds/)"
        );
        assert_eq!(
            not_served(&database(), Some(&crd(&[("v1", true)], Some(false)))),
            "kind Database.example.com/v1 is not served yet: its CustomResourceDefinition databases.example.com is not Established: Installing: the initial names have not been accepted"
        );
        assert!(established(&crd(&[("v1", true)], Some(true))).is_ok());
        assert!(established(&crd(&[("v1", true)], None)).is_err());
    }

    #[test]
    fn a_builtin_kind_gets_no_crd_advice() {
        let kind = ApiResource::new("apps", "v9", "Deployment", "deployments", true);
        assert!(not_served(&kind, None).contains("group/version"));
    }

    #[test]
    fn every_kind_is_named_once() {
        use kubeplug_core::manifest::{Mode, Related};
        let pod = ApiResource::new("", "v1", "Pod", "pods", true);
        let manifest = Manifest {
            children: vec![pod.clone()],
            related: vec![Related {
                resource: pod.clone(),
                match_labels: Vec::new(),
            }],
            references: vec![ApiResource::new("", "v1", "ConfigMap", "configmaps", true)],
            ..Manifest::new("x", "1", database(), Mode::Composite)
        };
        let kinds: Vec<String> = named(&manifest).iter().map(|k| k.to_string()).collect();
        assert_eq!(kinds, ["Database.example.com/v1", "Pod.v1", "ConfigMap.v1"]);
    }
}
