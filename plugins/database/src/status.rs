//! `Database.status`, derived from the observed StatefulSet and pods.

use kubeplug_sdk::k8s_openapi::api::apps::v1::StatefulSet;
use kubeplug_sdk::k8s_openapi::api::core::v1::Pod;
use kubeplug_sdk::{Condition, Context, Meta, set_condition, time};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use crate::Database;

/// `Database.status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseStatus {
    /// Pending, Creating, Running or Failed.
    pub phase: String,
    /// Names of the database's pods, sorted.
    pub pods: Vec<String>,
    /// The same names under the seeds' field name (their Go and Python
    /// operators and samples read `status.nodes`).
    pub nodes: Vec<String>,
    /// Pods that exist (for the scale subresource).
    pub replicas: i32,
    pub ready_replicas: i32,
    /// Label selector of the pods (for the scale subresource and HPA).
    pub selector: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// The fields of a related Pod the status reads (the whole `Pod` type would
/// link its deserializer into the plugin).
#[derive(Debug, Deserialize)]
struct PodView {
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    status: Option<PodStatusView>,
}

#[derive(Debug, Deserialize)]
struct PodStatusView {
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    conditions: Option<Vec<PodConditionView>>,
}

/// `null` or missing strings read as empty, as in `k8s-openapi`.
#[derive(Debug, Deserialize)]
struct PodConditionView {
    #[serde(default, rename = "type")]
    type_: Option<String>,
    #[serde(default)]
    status: Option<String>,
}

fn is_ready(pod: &PodView) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_.as_deref() == Some("Ready") && c.status.as_deref() == Some("True"))
        })
}

fn phase_of(pod: &PodView) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

pub fn status(ctx: &Context<crate::Config>, db: &Database) -> DatabaseStatus {
    let name = ctx.name();
    let mut pods: Vec<PodView> = ctx
        .related_as::<Pod, PodView>()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let ready = pods.iter().filter(|p| is_ready(p)).count() as i32;
    let failed = pods.iter().any(|p| phase_of(p) == "Failed");
    // Only whether it exists matters: read none of it (a `Value` would copy it).
    let sts = ctx.observed_named_as::<StatefulSet, IgnoredAny>(name);
    let want = db.spec.replicas;

    let (phase, reason, message) = if failed {
        (
            "Failed",
            "PodFailed",
            "a database pod has failed".to_string(),
        )
    } else if sts.is_none() {
        (
            "Pending",
            "Provisioning",
            "waiting for the StatefulSet".to_string(),
        )
    } else if ready == want && pods.len() as i32 == want {
        (
            "Running",
            "AllReplicasReady",
            format!("{ready}/{want} replicas ready"),
        )
    } else {
        (
            "Creating",
            "ReplicasNotReady",
            format!("{ready}/{want} replicas ready"),
        )
    };

    let previous = DatabaseStatus::deserialize(ctx.status()).unwrap_or_default();
    let mut conditions = previous.conditions;
    if let Some(now) = time(&ctx.now) {
        set_condition(
            &mut conditions,
            Condition {
                type_: "Ready".into(),
                status: if phase == "Running" { "True" } else { "False" }.into(),
                reason: reason.into(),
                message,
                last_transition_time: now,
                observed_generation: ctx.generation(),
            },
        );
    }

    let names: Vec<String> = pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    DatabaseStatus {
        phase: phase.into(),
        nodes: names.clone(),
        pods: names,
        replicas: pods.len() as i32,
        ready_replicas: ready,
        selector: format!(
            "{}=database,{}={name}",
            crate::NAME_LABEL,
            crate::INSTANCE_LABEL
        ),
        observed_generation: ctx.generation(),
        conditions,
    }
}
