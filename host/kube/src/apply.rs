//! Writes to the API server on behalf of one plugin: server-side apply of
//! children, prune, `/status`, parent metadata, finalizers, events.
//!
//! Every write is counted (per plugin and verb) so that "nothing changed, so
//! nothing was written" can be checked. Decisions about *whether* to write
//! live in [`kubeplug_core::plan`]; this module only performs them.

mod events;
pub mod metrics;

use std::future::Future;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
    PropagationPolicy,
};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use serde_json::{Value, json};
use tracing::Instrument as _;

use self::events::Events;
use self::metrics::ApplyMetrics;
use crate::informers::{Object, kube_resource};
use crate::leader::Leadership;
use kubeplug_core::contract::Event;
use kubeplug_core::manifest::ApiResource;

/// Why a write failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("failed to apply {what}")]
    Apply {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to delete {what}")]
    Delete {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to write status of {what}")]
    Status {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to patch {what}")]
    Patch {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to read {what}")]
    Get {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to create {what}")]
    Create {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// This replica does not lead the plugin (any more): nothing was sent.
    #[error("not written: {what}: this replica no longer leads the plugin")]
    NotLeader { what: String },
}

impl WriteError {
    fn source_error(&self) -> Option<&kube::Error> {
        match self {
            WriteError::Apply { source, .. }
            | WriteError::Delete { source, .. }
            | WriteError::Status { source, .. }
            | WriteError::Patch { source, .. }
            | WriteError::Get { source, .. }
            | WriteError::Create { source, .. } => Some(source),
            WriteError::NotLeader { .. } => None,
        }
    }

    fn status_code(&self) -> Option<u16> {
        match self.source_error() {
            Some(kube::Error::Api(status)) => Some(status.code),
            _ => None,
        }
    }

    /// True if the write was not sent because this replica lost the
    /// plugin's leadership.
    pub fn not_leader(&self) -> bool {
        matches!(self, WriteError::NotLeader { .. })
    }

    /// True if the API server refused to create an object because its
    /// namespace is being deleted (cause `NamespaceTerminating`) or is gone
    /// (404 for the namespace itself). Nothing to retry: the parent goes with
    /// the namespace; the cache just has not seen it go yet. Kubernetes' own
    /// controllers skip the first error the same way (ReplicaSet, Job).
    pub fn namespace_gone(&self) -> bool {
        let Some(kube::Error::Api(status)) = self.source_error() else {
            return false;
        };
        status.details.as_ref().is_some_and(|d| {
            d.causes.iter().any(|c| c.reason == "NamespaceTerminating")
                || (status.code == 404 && d.kind == "namespaces")
        })
    }

    /// True if the object written to is gone (404): a parent deleted after
    /// the cache last saw it.
    pub fn not_found(&self) -> bool {
        self.status_code() == Some(404)
    }

    /// True if a write guarded by `metadata.resourceVersion` was refused
    /// because the object changed since it was read (409 Conflict).
    pub fn conflict(&self) -> bool {
        self.status_code() == Some(409)
    }

    /// How long the API server asked to be left alone when it throttled
    /// the write (429, or 503 while it sheds load, with `retryAfterSeconds`
    /// in its Status): the reconcile's retry must not come sooner, as the
    /// client's own retries do not.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        let Some(kube::Error::Api(status)) = self.source_error() else {
            return None;
        };
        let seconds = status.details.as_ref()?.retry_after_seconds;
        (matches!(status.code, 429 | 503) && seconds > 0)
            .then(|| std::time::Duration::from_secs(seconds.into()))
    }
}

/// Writes for one plugin, with its field manager and event reporter.
///
/// Every write is gated on the plugin's [`Leadership`], checked just before
/// the request is sent: a replica that lost the Lease (or whose renew
/// deadline passed) sends nothing more.
#[derive(Clone)]
pub struct Writer {
    client: Client,
    field_manager: String,
    gate: Gate,
    events: Events,
}

/// The fence every request of a plugin's writer passes: sent only while
/// this replica leads the plugin, counted per plugin and verb.
#[derive(Clone)]
struct Gate {
    plugin: String,
    metrics: ApplyMetrics,
    leadership: Leadership,
}

impl Gate {
    /// Send one write, fenced: refused unless this replica leads, counted
    /// (per plugin and verb), and dropped unsent the moment leadership ends.
    /// The check runs before every poll (`biased`), so a request still
    /// waiting (rate limit, a retry after a 429) is never sent after the
    /// term is over, even when the whole process was frozen past it.
    async fn send<T>(
        &self,
        verb: &str,
        what: &str,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<Result<T, kube::Error>, WriteError> {
        let not_leader = || WriteError::NotLeader { what: what.into() };
        if !self.leadership.is_leader() {
            return Err(not_leader());
        }
        self.metrics.write(&self.plugin, verb);
        tokio::select! {
            biased;
            () = self.leadership.lost() => Err(not_leader()),
            result = request => Ok(result),
        }
    }

    /// [`Gate::send`] one of the writer's own writes, in a `write` span
    /// (the verb and the object): a step of the reconcile's trace. At debug
    /// level, so that log lines at the default level keep the reconcile's
    /// fields. Events, posted off the reconcile's path, go without one.
    async fn write<T>(
        &self,
        verb: &str,
        what: &str,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<Result<T, kube::Error>, WriteError> {
        let span = tracing::debug_span!("write", verb, object = what);
        self.send(verb, what, request).instrument(span).await
    }
}

fn api(client: &Client, ty: &ApiResource, namespace: &str) -> Api<DynamicObject> {
    let ar = kube_resource(ty);
    if ty.namespaced {
        Api::namespaced_with(client.clone(), namespace, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    }
}

fn name_of(object: &Value) -> (&str, &str) {
    (
        object["metadata"]["namespace"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default(),
    )
}

fn describe(ty: &ApiResource, namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("{} {name}", ty.kind)
    } else {
        format!("{} {namespace}/{name}", ty.kind)
    }
}

impl Writer {
    /// A writer for `plugin`. Starts the task that posts its events, so it
    /// must be called inside the Tokio runtime.
    pub fn new(
        client: Client,
        plugin: &str,
        field_manager: String,
        metrics: ApplyMetrics,
        leadership: Leadership,
    ) -> Self {
        let reporter = Reporter {
            controller: field_manager.clone(),
            instance: std::env::var("POD_NAME")
                .ok()
                .or_else(|| std::env::var("HOSTNAME").ok()),
        };
        let gate = Gate {
            plugin: plugin.to_string(),
            metrics,
            leadership,
        };
        Writer {
            events: Events::start(Recorder::new(client.clone(), reporter), gate.clone()),
            client,
            field_manager,
            gate,
        }
    }

    pub fn plugin(&self) -> &str {
        &self.gate.plugin
    }

    /// The plugin's field manager (`kubeplug/<name>`).
    pub fn field_manager(&self) -> &str {
        &self.field_manager
    }

    /// Server-side apply a prepared child (from `plan::children`). `force`
    /// takes over fields other managers set; it is only used on children
    /// this parent controls (and guarded by their uid, see
    /// `plan::guarded`). Returns the object as the API server stored it.
    pub async fn apply_child(
        &self,
        ty: &ApiResource,
        child: &Value,
        force: bool,
    ) -> Result<DynamicObject, WriteError> {
        let (ns, name) = name_of(child);
        let what = describe(ty, ns, name);
        let mut params = PatchParams::apply(&self.field_manager);
        params.force = force;
        let api = api(&self.client, ty, ns);
        self.gate
            .write(
                "apply",
                &what,
                api.patch(name, &params, &Patch::Apply(child)),
            )
            .await?
            .map_err(|source| WriteError::Apply { what, source })
    }

    /// Create a child with a plain create, for create-only children (see
    /// `plan::CREATE_ONLY`): `None` if an object of that name exists, which
    /// the caller then inspects. Never overwrites anything.
    pub async fn create_child(
        &self,
        ty: &ApiResource,
        child: &Value,
    ) -> Result<Option<DynamicObject>, WriteError> {
        let (ns, name) = name_of(child);
        let what = describe(ty, ns, name);
        let object: DynamicObject = match serde_json::from_value(child.clone()) {
            Ok(object) => object,
            Err(e) => {
                let source = kube::Error::SerdeError(e);
                return Err(WriteError::Create { what, source });
            }
        };
        let api = api(&self.client, ty, ns);
        match self
            .gate
            .write("create", &what, api.create(&PostParams::default(), &object))
            .await?
        {
            Ok(created) => Ok(Some(created)),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
            Err(source) => Err(WriteError::Create { what, source }),
        }
    }

    /// Read the live object a prepared child would be written to, if any.
    pub async fn get_child(
        &self,
        ty: &ApiResource,
        child: &Value,
    ) -> Result<Option<DynamicObject>, WriteError> {
        let (ns, name) = name_of(child);
        self.gate.metrics.read(&self.gate.plugin, "get");
        api(&self.client, ty, ns)
            .get_opt(name)
            .await
            .map_err(|source| WriteError::Get {
                what: describe(ty, ns, name),
                source,
            })
    }

    /// Delete a child the plugin no longer wants. The uid precondition makes
    /// sure a same-named object created since is never deleted by mistake.
    pub async fn delete_child(&self, ty: &ApiResource, child: &Value) -> Result<(), WriteError> {
        let (ns, name) = name_of(child);
        let what = describe(ty, ns, name);
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            preconditions: child["metadata"]["uid"].as_str().map(|uid| Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let api = api(&self.client, ty, ns);
        match self
            .gate
            .write("delete", &what, api.delete(name, &params))
            .await?
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(source) => Err(WriteError::Delete { what, source }),
        }
    }

    /// Server-side apply the parent's `.status` through the subresource.
    /// Returns the resourceVersion the API server stored it at, by which
    /// the controller knows the watch event of this very write.
    pub async fn apply_status(
        &self,
        ty: &ApiResource,
        parent: &Value,
        status: &Value,
    ) -> Result<Option<String>, WriteError> {
        let (ns, name) = name_of(parent);
        let what = describe(ty, ns, name);
        let body = json!({
            "apiVersion": parent["apiVersion"],
            "kind": parent["kind"],
            "metadata": { "name": name, "namespace": parent["metadata"]["namespace"] },
            "status": status,
        });
        let params = PatchParams::apply(&self.field_manager).force();
        let api = api(&self.client, ty, ns);
        self.gate
            .write(
                "status",
                &what,
                api.patch_status(name, &params, &Patch::Apply(&body)),
            )
            .await?
            .map(|stored| stored.metadata.resource_version)
            .map_err(|source| WriteError::Status { what, source })
    }

    /// Merge-patch the parent (metadata of decorators, finalizers). A patch
    /// carrying `metadata.resourceVersion` fails on conflict instead of
    /// overwriting a concurrent change.
    pub async fn patch_parent(
        &self,
        ty: &ApiResource,
        parent: &Value,
        patch: &Value,
    ) -> Result<(), WriteError> {
        let (ns, name) = name_of(parent);
        let what = describe(ty, ns, name);
        let api = api(&self.client, ty, ns);
        self.gate
            .write(
                "patch",
                &what,
                api.patch(name, &PatchParams::default(), &Patch::Merge(patch)),
            )
            .await?
            .map(|_| ())
            .map_err(|source| WriteError::Patch { what, source })
    }

    /// Queue an event on the parent, to be posted off the reconcile's path
    /// (see [`events`]). False if it was dropped because too many are
    /// waiting: an event is worth less than the reconcile that produced it.
    pub fn event(&self, parent: &Object, event: &Event, action: &str) -> bool {
        let meta = &parent.metadata;
        let reference = ObjectReference {
            api_version: Some(parent.types.api_version.clone()),
            kind: Some(parent.types.kind.clone()),
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            field_path: None,
        };
        let mut note = event.message.clone();
        // events.k8s.io/v1 limits the note to 1 kB.
        note.truncate(note.floor_char_boundary(1000));
        let mut reason = event.reason.clone();
        reason.truncate(reason.floor_char_boundary(128));
        let event = KubeEvent {
            type_: if event.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason,
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        self.events
            .queue(event, reference, self.gate.leadership.clone())
    }

    /// This writer, fenced by `leadership` instead: a sharded plugin's
    /// writes for one shard go out only while this replica owns that shard.
    /// Shares the client and the plugin's event queue.
    pub fn fenced_by(&self, leadership: Leadership) -> Writer {
        Writer {
            gate: Gate {
                leadership,
                ..self.gate.clone()
            },
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;
    use kube::core::response::{StatusCause, StatusDetails};

    fn refused(code: u16, kind: &str, causes: Vec<StatusCause>) -> WriteError {
        let status = Status::failure("refused", "Refused")
            .with_code(code)
            .with_details(StatusDetails {
                name: "x".into(),
                group: String::new(),
                kind: kind.into(),
                uid: String::new(),
                causes,
                retry_after_seconds: 0,
            });
        WriteError::Apply {
            what: "Deployment ns/x".into(),
            source: kube::Error::Api(status.boxed()),
        }
    }

    #[test]
    fn a_create_refused_in_a_terminating_namespace_means_the_namespace_is_gone() {
        let cause = StatusCause {
            reason: "NamespaceTerminating".into(),
            message: "namespace ns is being terminated".into(),
            field: "metadata.namespace".into(),
        };
        assert!(refused(403, "deployments", vec![cause]).namespace_gone());
    }

    #[test]
    fn a_create_in_a_missing_namespace_means_the_namespace_is_gone() {
        assert!(refused(404, "namespaces", Vec::new()).namespace_gone());
    }

    #[test]
    fn a_throttled_write_says_how_long_the_server_asked_to_wait() {
        let throttled = |code: u16, seconds: u32| {
            let mut error = refused(code, "databases", Vec::new());
            if let WriteError::Apply {
                source: kube::Error::Api(status),
                ..
            } = &mut error
            {
                status.details.as_mut().unwrap().retry_after_seconds = seconds;
            }
            error
        };
        let second = Some(std::time::Duration::from_secs(1));
        assert_eq!(throttled(429, 1).retry_after(), second);
        assert_eq!(throttled(503, 1).retry_after(), second);
        assert_eq!(throttled(429, 0).retry_after(), None);
        assert_eq!(throttled(409, 1).retry_after(), None);
    }

    #[test]
    fn other_refusals_are_not_mistaken_for_a_gone_namespace() {
        assert!(!refused(403, "deployments", Vec::new()).namespace_gone());
        assert!(!refused(404, "deployments", Vec::new()).namespace_gone());
    }
}
