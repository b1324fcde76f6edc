//! Verified CRD evolution: before a new version of a plugin's parent kind
//! is served or made the storage version, every stored object is converted
//! through the plugin's `convert` to it and back, and any object that does
//! not come back unchanged is reported field by field
//! ([`kubeplug_core::webhook::round_trip_losses`]). Only when none loses
//! anything does [`migrate`] move the storage: the target becomes the CRD's
//! storage version, every object is rewritten (read and written back, so the
//! API server stores it at the new version), and `status.storedVersions`
//! ends with the target alone. Each step is safe to repeat, so an
//! interrupted migration is finished by running it again; one already done
//! is a no-op.
//!
//! The conversion is the plugin's, run here on the `.wasm` the caller names
//! (the one the platform serves as the CRD's conversion webhook): the same
//! code the API server will call, checked by the same fence
//! ([`kubeplug_core::webhook::check_converted`]).

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource as KubeResource, GroupVersionKind};
use serde_json::{Value, json};

use kubeplug_core::plan::diff::Change;
use kubeplug_core::webhook::{self, ConversionCall};
use kubeplug_runtime::Plugin;

/// Objects converted per call: a page of the list, as the API server
/// sends a list to a conversion webhook.
const PAGE: u32 = 500;
/// Deadline of one conversion call of a page.
const CALL_DEADLINE: Duration = Duration::from_secs(30);
/// Field manager of the CRD's storage switch.
const MANAGER: &str = "kubeplug-migrate";

/// Why a migration cannot start or went wrong.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("{0}")]
    Refused(String),
    #[error("the API server: {0}")]
    Api(#[from] kube::Error),
}

/// One object that does not survive the round trip.
#[derive(Debug, Clone)]
pub struct Lossy {
    /// `namespace/name` (or `name`).
    pub object: String,
    /// Each field that changed, JSON Pointer first.
    pub losses: Vec<Change>,
}

/// What the round trip found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The storage version the objects were read at.
    pub from: String,
    pub to: String,
    pub objects: usize,
    pub lossy: Vec<Lossy>,
    /// Pages the plugin failed to convert (or whose answer its fence
    /// refused), with the reason.
    pub failed: Vec<String>,
}

impl Report {
    /// Nothing lost and nothing failed: the target may be served and made
    /// the storage version.
    pub fn clean(&self) -> bool {
        self.lossy.is_empty() && self.failed.is_empty()
    }
}

/// What [`migrate`] did.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Storage was already at the target and every stored object with it.
    AlreadyDone,
    /// The round trip lost something or failed: nothing was changed.
    Refused(Report),
    /// Every object rewritten at the target; `storedVersions` is the target.
    Migrated { report: Report, rewritten: usize },
}

/// The CRD, checked against the plugin: one kind, the target among its
/// versions.
struct Crd {
    crd: CustomResourceDefinition,
    group: String,
    kind: String,
    plural: String,
    namespaced: bool,
}

impl Crd {
    async fn get(client: &kube::Client, name: &str) -> Result<Self, MigrateError> {
        let crd = Api::<CustomResourceDefinition>::all(client.clone())
            .get(name)
            .await?;
        Ok(Crd {
            group: crd.spec.group.clone(),
            kind: crd.spec.names.kind.clone(),
            plural: crd.spec.names.plural.clone(),
            namespaced: crd.spec.scope == "Namespaced",
            crd,
        })
    }

    fn storage(&self) -> Option<String> {
        self.crd
            .spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.clone())
    }

    fn stored_versions(&self) -> Vec<String> {
        self.crd
            .status
            .as_ref()
            .and_then(|s| s.stored_versions.clone())
            .unwrap_or_default()
    }

    fn resource(&self, version: &str) -> KubeResource {
        KubeResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&self.group, version, &self.kind),
            &self.plural,
        )
    }

    /// Objects of every namespace at `version`.
    fn api(&self, client: &kube::Client, version: &str) -> Api<DynamicObject> {
        Api::all_with(client.clone(), &self.resource(version))
    }

    fn api_version(&self, version: &str) -> String {
        format!("{}/{version}", self.group)
    }
}

fn object_key(object: &Value) -> String {
    let meta = &object["metadata"];
    match meta["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", meta["name"].as_str().unwrap_or("")),
        _ => meta["name"].as_str().unwrap_or("").to_string(),
    }
}

async fn checked_crd(
    client: &kube::Client,
    plugin: &Plugin,
    crd_name: &str,
    to: &str,
) -> Result<Crd, MigrateError> {
    let crd = Crd::get(client, crd_name).await?;
    let parent = &plugin.manifest().parent;
    if parent.group != crd.group || parent.kind != crd.kind {
        return Err(MigrateError::Refused(format!(
            "plugin {} converts {} of {}, not {} of {} (CRD {crd_name})",
            plugin.name(),
            parent.kind,
            parent.group,
            crd.kind,
            crd.group
        )));
    }
    let Some(target) = crd.crd.spec.versions.iter().find(|v| v.name == to) else {
        return Err(MigrateError::Refused(format!(
            "CRD {crd_name} has no version {to} (it has {})",
            crd.crd
                .spec
                .versions
                .iter()
                .map(|v| v.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    if !target.served {
        return Err(MigrateError::Refused(format!(
            "version {to} of CRD {crd_name} is not served: serve it (with the plugin's conversion) before storage moves to it"
        )));
    }
    if !plugin.exports().convert {
        return Err(MigrateError::Refused(format!(
            "plugin {} does not export convert",
            plugin.name()
        )));
    }
    Ok(crd)
}

/// Convert `objects` to `version` through the plugin, checked by the
/// conversion fence.
fn convert(plugin: &Plugin, objects: Vec<Value>, api_version: &str) -> Result<Vec<Value>, String> {
    let call = ConversionCall {
        uid: String::new(),
        desired_api_version: api_version.into(),
        objects,
    };
    let converted = plugin
        .convert(&call.objects, api_version, CALL_DEADLINE)
        .map_err(|e| e.to_string())?;
    webhook::check_converted(&call, &converted)
        .map_err(|e| format!("its conversion is refused by its fence: {e}"))?;
    Ok(converted)
}

/// Round-trip every stored object of CRD `crd_name` through `plugin`'s
/// conversion to version `to` and back; nothing is written.
pub async fn check(
    client: &kube::Client,
    plugin: &Plugin,
    crd_name: &str,
    to: &str,
) -> Result<Report, MigrateError> {
    let crd = checked_crd(client, plugin, crd_name, to).await?;
    round_trip(client, plugin, &crd, to).await
}

async fn round_trip(
    client: &kube::Client,
    plugin: &Plugin,
    crd: &Crd,
    to: &str,
) -> Result<Report, MigrateError> {
    let from = crd
        .storage()
        .ok_or_else(|| MigrateError::Refused("the CRD has no storage version".into()))?;
    let mut report = Report {
        from: from.clone(),
        to: to.into(),
        ..Report::default()
    };
    let (from_version, to_version) = (crd.api_version(&from), crd.api_version(to));
    let api = crd.api(client, &from);
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        let originals: Vec<Value> = page
            .items
            .iter()
            .map(|o| {
                let mut v = serde_json::to_value(o).expect("an object serializes");
                // A list's items come without apiVersion and kind.
                v["apiVersion"] = json!(from_version);
                v["kind"] = json!(crd.kind);
                v
            })
            .collect();
        report.objects += originals.len();
        let plugin = plugin.clone();
        let (there, back) = (to_version.clone(), from_version.clone());
        let input = originals.clone();
        let converted = tokio::task::spawn_blocking(move || {
            let forward = convert(&plugin, input, &there)?;
            convert(&plugin, forward, &back)
        })
        .await
        .map_err(|e| MigrateError::Refused(format!("a conversion's thread failed: {e}")))?;
        match converted {
            Ok(back) => {
                for (original, back) in originals.iter().zip(&back) {
                    let losses = webhook::round_trip_losses(original, back);
                    if !losses.is_empty() {
                        report.lossy.push(Lossy {
                            object: object_key(original),
                            losses,
                        });
                    }
                }
            }
            Err(reason) => report.failed.push(format!(
                "{} objects from {}: {reason}",
                originals.len(),
                originals.first().map(object_key).unwrap_or_default()
            )),
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    Ok(report)
}

/// Move CRD `crd_name`'s storage to version `to`, after a clean round trip
/// of every stored object (see the module docs).
pub async fn migrate(
    client: &kube::Client,
    plugin: &Plugin,
    crd_name: &str,
    to: &str,
) -> Result<Outcome, MigrateError> {
    let crd = checked_crd(client, plugin, crd_name, to).await?;
    if crd.storage().as_deref() == Some(to) && crd.stored_versions() == [to] {
        return Ok(Outcome::AlreadyDone);
    }
    let report = round_trip(client, plugin, &crd, to).await?;
    if !report.clean() {
        return Ok(Outcome::Refused(report));
    }
    // 1. The target becomes the storage version: new writes store at it.
    if crd.storage().as_deref() != Some(to) {
        let versions: Vec<Value> = crd
            .crd
            .spec
            .versions
            .iter()
            .map(|v| {
                let mut v = serde_json::to_value(v).expect("a CRD version serializes");
                v["storage"] = json!(v["name"] == to);
                v
            })
            .collect();
        Api::<CustomResourceDefinition>::all(client.clone())
            .patch(
                crd_name,
                &PatchParams {
                    field_manager: Some(MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(json!({"spec": {"versions": versions}})),
            )
            .await?;
    }
    // 2. Every object read and written back: stored at the target.
    let api = crd.api(client, to);
    let mut rewritten = 0;
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        for object in &page.items {
            rewrite(client, &crd, to, object).await?;
            rewritten += 1;
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    // 3. Nothing is stored at another version any more.
    Api::<CustomResourceDefinition>::all(client.clone())
        .patch_status(
            crd_name,
            &PatchParams {
                field_manager: Some(MANAGER.into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"status": {"storedVersions": [to]}})),
        )
        .await?;
    Ok(Outcome::Migrated { report, rewritten })
}

/// Write `object` back unchanged (so the API server stores it at the
/// storage version); on a conflict read it again and retry, and one
/// deleted meanwhile needs nothing.
async fn rewrite(
    client: &kube::Client,
    crd: &Crd,
    version: &str,
    object: &DynamicObject,
) -> Result<(), MigrateError> {
    let name = object.metadata.name.clone().unwrap_or_default();
    let api = match (&object.metadata.namespace, crd.namespaced) {
        (Some(ns), true) => {
            Api::<DynamicObject>::namespaced_with(client.clone(), ns, &crd.resource(version))
        }
        _ => crd.api(client, version),
    };
    let mut current = object.clone();
    let types = kube::core::TypeMeta {
        api_version: crd.api_version(version),
        kind: crd.kind.clone(),
    };
    for _ in 0..5 {
        current.types = Some(types.clone());
        match api.replace(&name, &PostParams::default(), &current).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => match api.get_opt(&name).await? {
                Some(fresh) => current = fresh,
                None => return Ok(()),
            },
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    Err(MigrateError::Refused(format!(
        "{}/{name} kept changing; run the migration again",
        object.metadata.namespace.as_deref().unwrap_or("")
    )))
}
