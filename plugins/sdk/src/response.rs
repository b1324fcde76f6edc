//! [`Response`] and [`FinalizeResponse`]: what the plugin wants, as builders.

use serde::Serialize;

use crate::Error;
use crate::bindings::kubeplug::plugin::types as wit;

/// A Kubernetes Event to record on the parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

impl Event {
    /// A `Normal` event.
    pub fn normal(reason: &str, message: impl Into<String>) -> Self {
        Event {
            warning: false,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A `Warning` event.
    pub fn warning(reason: &str, message: impl Into<String>) -> Self {
        Event {
            warning: true,
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn into_wit(self) -> wit::Event {
        wit::Event {
            warning: self.warning,
            reason: self.reason,
            message: self.message,
        }
    }
}

/// The annotation that marks a child create-only (see
/// [`Response::create_only_child`]).
pub const CREATE_ONLY: &str = "kubeplug.io/create-only";

/// The desired state for one parent.
#[derive(Debug, Clone, Default)]
pub struct Response {
    children: Vec<String>,
    status: Option<String>,
    labels: Vec<(String, String)>,
    annotations: Vec<(String, String)>,
    requeue_after_seconds: Option<u32>,
    events: Vec<Event>,
}

fn to_json<T: Serialize>(what: &str, value: &T) -> Result<String, Error> {
    serde_json::to_string(value).map_err(|e| Error::Failed(format!("cannot serialize {what}: {e}")))
}

impl Response {
    /// Add a desired child: a `serde_json::json!` value with `apiVersion`
    /// and `kind`, your own struct, or a `k8s-openapi` type (which serializes
    /// with its `apiVersion` and `kind`, but costs size: see the crate docs).
    /// The namespace defaults to the parent's.
    pub fn child<T: Serialize>(mut self, child: &T) -> Result<Self, Error> {
        self.children.push(to_json("child", child)?);
        Ok(self)
    }

    /// Add a desired child the host creates once and never updates or
    /// re-applies: generated credentials, anything that must not change
    /// after creation. It carries the `kubeplug.io/create-only: "true"`
    /// annotation (the contract's mark, see `wit/plugin.wit`); it is still
    /// pruned when no longer returned.
    pub fn create_only_child<T: Serialize>(mut self, child: &T) -> Result<Self, Error> {
        let mut value = serde_json::to_value(child)
            .map_err(|e| Error::Failed(format!("cannot serialize child: {e}")))?;
        let Some(meta) = value
            .get_mut("metadata")
            .and_then(serde_json::Value::as_object_mut)
        else {
            return Err(Error::Failed("a child needs metadata".into()));
        };
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(CREATE_ONLY.into(), "true".into());
        }
        self.children.push(value.to_string());
        Ok(self)
    }

    /// Add a desired child that is already JSON text (e.g. from a template).
    /// The host parses and checks it like any other child.
    pub fn child_json(mut self, json: impl Into<String>) -> Self {
        self.children.push(json.into());
        self
    }

    /// Set the desired `.status`.
    pub fn status<T: Serialize>(mut self, status: &T) -> Result<Self, Error> {
        self.status = Some(to_json("status", status)?);
        Ok(self)
    }

    /// Set a label on the parent (decorator mode).
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.push((key.into(), value.into()));
        self
    }

    /// Set an annotation on the parent (decorator mode).
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.push((key.into(), value.into()));
        self
    }

    /// Reconcile again after `seconds` even without events.
    pub fn requeue_after(mut self, seconds: u32) -> Self {
        self.requeue_after_seconds = Some(seconds);
        self
    }

    /// Record an event on the parent.
    pub fn event(mut self, event: Event) -> Self {
        self.events.push(event);
        self
    }

    /// The desired children as JSON text, for native unit tests of plugins.
    pub fn children(&self) -> &[String] {
        &self.children
    }

    /// The desired status as JSON text, if any.
    pub fn status_json(&self) -> Option<&str> {
        self.status.as_deref()
    }

    /// The labels to merge into the parent.
    pub fn parent_labels(&self) -> &[(String, String)] {
        &self.labels
    }

    /// The annotations to merge into the parent.
    pub fn parent_annotations(&self) -> &[(String, String)] {
        &self.annotations
    }

    /// The events to record.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    pub(crate) fn into_wit(self) -> wit::Response {
        let parent_patch = if self.labels.is_empty() && self.annotations.is_empty() {
            None
        } else {
            Some(wit::MetadataPatch {
                labels: self.labels,
                annotations: self.annotations,
            })
        };
        wit::Response {
            children: self.children,
            status: self.status,
            parent_patch,
            requeue_after_seconds: self.requeue_after_seconds,
            events: self.events.into_iter().map(Event::into_wit).collect(),
        }
    }
}

/// The answer to `finalize`.
#[derive(Debug, Clone, Default)]
pub struct FinalizeResponse {
    done: bool,
    requeue_after_seconds: Option<u32>,
    events: Vec<Event>,
}

impl FinalizeResponse {
    /// Cleanup is complete: the host may remove the finalizer.
    pub fn done() -> Self {
        FinalizeResponse {
            done: true,
            ..Default::default()
        }
    }

    /// Cleanup is still running: ask again after `seconds`.
    pub fn pending(seconds: u32) -> Self {
        FinalizeResponse {
            done: false,
            requeue_after_seconds: Some(seconds),
            events: Vec::new(),
        }
    }

    /// Record an event on the parent.
    pub fn event(mut self, event: Event) -> Self {
        self.events.push(event);
        self
    }

    pub(crate) fn into_wit(self) -> wit::FinalizeResponse {
        wit::FinalizeResponse {
            done: self.done,
            requeue_after_seconds: self.requeue_after_seconds,
            events: self.events.into_iter().map(Event::into_wit).collect(),
        }
    }
}
