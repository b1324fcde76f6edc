//! What the group serves, built for Kubernetes clients: the `Plugin` of a
//! registry row ([`crate::plugin`] has the types), the discovery documents
//! (k8s-openapi's), and errors as a `Status`.

use std::collections::BTreeMap;

use http::StatusCode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, GroupVersionForDiscovery, ListMeta,
    ObjectMeta, Status as ApiStatus, StatusDetails, Time,
};

use crate::group::{API_VERSION, DETAILS, GROUP, VERSION};
use crate::plugin::{
    KIND, MODE_LABEL, Plugin, PluginManifest, PluginSpec, PluginStatus, RESOURCE, STATE_LABEL,
    ShardOwner,
};
use kubeplug_core::manifest::Mode;
use kubeplug_operator::registry::Status;

/// The object name of a `/plugins` row: the plugin's name, or for a file
/// that never loaded, the file's stem.
pub fn name_of(row: &Status) -> String {
    row.name.clone().unwrap_or_else(|| {
        std::path::Path::new(&row.file)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    })
}

/// Who writes for a plugin: the holder of its Lease, or for a sharded
/// plugin the holder of each shard's.
#[derive(Debug, Default, PartialEq)]
pub struct Owners {
    /// The replica leading a plugin that is not sharded.
    pub leader: Option<String>,
    /// A sharded plugin's shards in order, each with its owner (`None`:
    /// free now, being handed over).
    pub shards: Vec<Option<String>>,
}

impl Owners {
    /// From the Leases' holders (unit → holder, see
    /// [`kubeplug_kube::leader::balance::unit`]).
    pub fn from_leases(
        name: &str,
        row: &Status,
        holders: &std::collections::BTreeMap<String, String>,
    ) -> Owners {
        use kubeplug_kube::leader::balance::unit;
        match &row.shards {
            None => Owners {
                leader: holders.get(name).cloned(),
                shards: Vec::new(),
            },
            Some(shards) => Owners {
                leader: None,
                shards: (0..shards.count)
                    .map(|s| holders.get(&unit(name, Some(s))).cloned())
                    .collect(),
            },
        }
    }

    /// Without leader election: this replica, `identity`, owns everything.
    pub fn this_replica(row: &Status, identity: &str) -> Owners {
        if row.detail.is_none() {
            return Owners::default();
        }
        match &row.shards {
            None => Owners {
                leader: Some(identity.to_string()),
                shards: Vec::new(),
            },
            Some(shards) => Owners {
                leader: None,
                shards: vec![Some(identity.to_string()); shards.count as usize],
            },
        }
    }

    /// The leader column: the leader, or each owner with how many shards it
    /// owns (`host-a (4), host-b (4)`).
    fn summary(&self) -> Option<String> {
        if self.shards.is_empty() {
            return self.leader.clone();
        }
        let mut counts = std::collections::BTreeMap::<&str, usize>::new();
        for owner in self.shards.iter().flatten() {
            *counts.entry(owner).or_default() += 1;
        }
        let free = self.shards.iter().filter(|o| o.is_none()).count();
        let mut parts: Vec<String> = counts.iter().map(|(o, n)| format!("{o} ({n})")).collect();
        if free > 0 {
            parts.push(format!("free ({free})"));
        }
        Some(parts.join(", "))
    }
}

/// The `Plugin` object of a row (without `resourceVersion`, which the
/// tracker assigns).
pub fn plugin(row: &Status, owners: &Owners) -> Plugin {
    let detail = row.detail.as_ref();
    let manifest = detail.map(|d| &d.manifest);
    // Both spellings are fixed lowercase words: valid label values as they
    // are (a test holds every one to the selector's rules).
    let mut labels = BTreeMap::from([(STATE_LABEL.to_string(), row.state.as_str().to_string())]);
    if let Some(manifest) = manifest {
        labels.insert(MODE_LABEL.into(), mode_name(manifest.mode).into());
    }
    Plugin {
        api_version: API_VERSION,
        kind: KIND,
        metadata: ObjectMeta {
            name: Some(name_of(row)),
            labels: Some(labels),
            // The registry writes it in RFC 3339: it always parses.
            creation_timestamp: row
                .loaded_at
                .as_deref()
                .and_then(|loaded| loaded.parse().ok())
                .map(Time),
            ..ObjectMeta::default()
        },
        spec: PluginSpec {
            file: row.file.clone(),
            manifest: manifest.map(|manifest| PluginManifest {
                parent: kind_name(&manifest.parent),
                mode: manifest.mode,
                children: manifest.children.iter().map(kind_name).collect(),
                related: manifest
                    .related
                    .iter()
                    .map(|r| kind_name(&r.resource))
                    .collect(),
                namespaces: manifest.namespaces.clone(),
                finalizer: manifest.finalizer.clone(),
                resync_seconds: manifest.resync_seconds,
            }),
        },
        status: PluginStatus {
            state: row.state,
            synced: row.synced,
            loaded_at: row.loaded_at.clone(),
            version: row.version.clone(),
            digest: row.digest.clone(),
            reason: row.reason.clone(),
            last_error: row.last_error.clone(),
            leader: owners.summary(),
            shards: (0..)
                .zip(&owners.shards)
                .map(|(shard, owner)| ShardOwner {
                    shard,
                    owner: owner.clone(),
                })
                .collect(),
            shadow: row.shadow.clone(),
            candidate_error: row.candidate_error.clone(),
            promotion: row.promotion.clone(),
            reconciles: detail.map(|d| d.reconciles),
            errors: detail.map(|d| d.errors),
            queue_depth: detail.map(|d| d.queue_depth),
            withheld: None,
        },
    }
}

/// The mode's spelling in `spec.manifest.mode`, as its label value.
fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Composite => "composite",
        Mode::Decorator => "decorator",
    }
}

/// `Kind.group` (or `Kind` for the core group), as grants name kinds.
fn kind_name(resource: &kubeplug_core::manifest::ApiResource) -> String {
    if resource.group.is_empty() {
        resource.kind.clone()
    } else {
        format!("{}.{}", resource.kind, resource.group)
    }
}

/// `GET /apis`: this server's one group.
pub fn group_list() -> APIGroupList {
    APIGroupList {
        groups: vec![group()],
    }
}

/// `GET /apis/kubeplug.io`.
pub fn group() -> APIGroup {
    let version = GroupVersionForDiscovery {
        group_version: API_VERSION.into(),
        version: VERSION.into(),
    };
    APIGroup {
        name: GROUP.into(),
        versions: vec![version.clone()],
        preferred_version: Some(version),
        ..APIGroup::default()
    }
}

/// `GET /apis/kubeplug.io/v1alpha1`.
pub fn resource_list() -> APIResourceList {
    let verbs = |verbs: &[&str]| verbs.iter().map(|v| v.to_string()).collect();
    APIResourceList {
        group_version: API_VERSION.into(),
        resources: vec![
            APIResource {
                name: RESOURCE.into(),
                singular_name: "plugin".into(),
                namespaced: false,
                kind: KIND.into(),
                verbs: verbs(&["get", "list", "watch"]),
                categories: Some(vec!["kubeplug".into()]),
                ..APIResource::default()
            },
            // The object with its error texts and shadow examples; `get` on
            // it is what RBAC grants to see them in `plugins` as well.
            APIResource {
                name: format!("{RESOURCE}/{}", DETAILS),
                singular_name: String::new(),
                namespaced: false,
                kind: KIND.into(),
                verbs: verbs(&["get"]),
                ..APIResource::default()
            },
            APIResource {
                name: crate::previews::RESOURCE.into(),
                singular_name: "preview".into(),
                namespaced: true,
                kind: crate::previews::KIND.into(),
                verbs: verbs(&["create"]),
                ..APIResource::default()
            },
        ],
    }
}

/// A `Failure` status, as every Kubernetes API answers errors; `details`
/// name the object it is about, when it is about one.
pub fn failure(
    code: StatusCode,
    reason: &str,
    message: String,
    details: Option<StatusDetails>,
) -> ApiStatus {
    ApiStatus {
        code: Some(code.as_u16().into()),
        details,
        message: Some(message),
        metadata: ListMeta::default(),
        reason: Some(reason.into()),
        status: Some("Failure".into()),
    }
}

/// The details of an error about `name` (or the collection) of `resource`
/// in `group`: kube-apiserver names the resource, not the kind, in `kind`.
pub fn about(group: &str, resource: &str, name: Option<&str>) -> StatusDetails {
    StatusDetails {
        group: Some(group.into()),
        kind: Some(resource.into()),
        name: name.map(String::from),
        ..StatusDetails::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::row;
    use crate::selectors::Selector;
    use crate::table::table;
    use kubeplug_core::rollout::State;

    #[test]
    fn every_plugin_is_labelled_with_its_state_and_mode_and_selectable_by_them() {
        let states = [
            State::Running,
            State::Degraded,
            State::Failed,
            State::RolledBack,
            State::Blocked,
        ];
        for state in states {
            for mode in [Mode::Composite, Mode::Decorator] {
                let object = plugin(&row(state, Some(mode)), &Owners::default());
                let json = serde_json::to_value(&object).expect("JSON");
                let labels = &json["metadata"]["labels"];
                assert_eq!(labels[STATE_LABEL], state.as_str());
                assert_eq!(labels[MODE_LABEL], json["spec"]["manifest"]["mode"]);
                assert_eq!(labels[STATE_LABEL], json["status"]["state"]);
                // Valid keys and values, or the selector would refuse them.
                let selector = format!(
                    "{STATE_LABEL}={},{MODE_LABEL}={}",
                    state.as_str(),
                    labels[MODE_LABEL].as_str().expect("a string")
                );
                let selector = Selector::parse(Some(&selector), None)
                    .unwrap_or_else(|e| panic!("{selector}: {e}"));
                assert!(selector.matches(&object.metadata), "{json}");
            }
        }
        let decorator = plugin(
            &row(State::Running, Some(Mode::Decorator)),
            &Owners::default(),
        );
        let labels = decorator.metadata.labels.clone().expect("labels");
        assert_eq!(labels[MODE_LABEL], "decorator");
        // Nothing serves: a state, no mode.
        let failed = plugin(&row(State::Failed, None), &Owners::default());
        assert_eq!(
            failed.metadata.labels,
            Some(BTreeMap::from([(STATE_LABEL.into(), "failed".into())]))
        );
        // The Table carries the labels for `--show-labels` and `-L`.
        let table = serde_json::to_value(table(std::slice::from_ref(&decorator), 1)).expect("JSON");
        assert_eq!(
            table["rows"][0]["object"]["metadata"]["labels"],
            serde_json::to_value(&labels).expect("JSON")
        );
        assert_eq!(table["rows"][0]["cells"][2], "running");
    }

    #[test]
    fn discovery_and_errors_read_as_kube_apiserver_writes_them() {
        let resources = serde_json::to_value(resource_list()).expect("JSON");
        assert_eq!(resources["kind"], "APIResourceList");
        assert_eq!(resources["apiVersion"], "v1");
        assert_eq!(resources["groupVersion"], "kubeplug.io/v1alpha1");
        assert_eq!(
            resources["resources"][0]["categories"],
            serde_json::json!(["kubeplug"])
        );
        assert_eq!(resources["resources"][1]["name"], "plugins/details");
        assert_eq!(resources["resources"][1]["singularName"], "");
        let groups = serde_json::to_value(group_list()).expect("JSON");
        assert_eq!(groups["kind"], "APIGroupList");
        assert_eq!(
            groups["groups"][0]["preferredVersion"],
            serde_json::json!({"groupVersion": "kubeplug.io/v1alpha1", "version": "v1alpha1"})
        );
        let status = failure(
            StatusCode::NOT_FOUND,
            "NotFound",
            "plugins.kubeplug.io \"x\" not found".into(),
            Some(about(GROUP, RESOURCE, Some("x"))),
        );
        assert_eq!(
            serde_json::to_value(status).expect("JSON"),
            serde_json::json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "plugins.kubeplug.io \"x\" not found",
                "reason": "NotFound",
                "details": {"name": "x", "group": "kubeplug.io", "kind": "plugins"},
                "code": 404,
            })
        );
    }
}
