//! Admission and conversion of a plugin's parent kind: what
//! [`Plugin::validate`](crate::Plugin::validate),
//! [`Plugin::mutate`](crate::Plugin::mutate) and
//! [`Plugin::convert`](crate::Plugin::convert) are handed and answer.
//!
//! The host serves them as the API server's webhooks only for what the
//! platform's grant allows (`admission:` and `conversion:`); a plugin that
//! overrides none of them answers like a plugin without them.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::Error;
use crate::bindings::exports::kubeplug::plugin::admission as wit;

/// A webhook a plugin offers (see [`crate::Manifest::validates`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Webhook {
    Validate,
    Mutate,
    Convert,
}

impl Webhook {
    pub(crate) fn into_wit(self) -> wit::Webhook {
        match self {
            Webhook::Validate => wit::Webhook::Validate,
            Webhook::Mutate => wit::Webhook::Mutate,
            Webhook::Convert => wit::Webhook::Convert,
        }
    }
}

/// What a write does to the parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

/// One write of a parent, as the API server asks about it.
#[derive(Debug, Clone)]
pub struct AdmissionRequest<C> {
    pub operation: Operation,
    /// The object as the write would store it; `None` on delete.
    pub object: Option<Value>,
    /// The stored object before the write; `None` on create.
    pub old_object: Option<Value>,
    /// Who writes, as the API server authenticated them.
    pub username: String,
    pub groups: Vec<String>,
    /// Nothing will be stored (`kubectl --dry-run=server`).
    pub dry_run: bool,
    pub config: C,
    /// Current time, RFC 3339 UTC.
    pub now: String,
}

impl<C> AdmissionRequest<C> {
    pub(crate) fn from_wit(request: wit::AdmissionRequest, config: C) -> Result<Self, Error> {
        let parse = |what: &str, text: Option<String>| {
            text.map(|t| {
                serde_json::from_str::<Value>(&t)
                    .map_err(|e| Error::InvalidInput(format!("{what} is not JSON: {e}")))
            })
            .transpose()
        };
        Ok(AdmissionRequest {
            operation: match request.operation {
                wit::Operation::Create => Operation::Create,
                wit::Operation::Update => Operation::Update,
                wit::Operation::Delete => Operation::Delete,
            },
            object: parse("object", request.object)?,
            old_object: parse("old object", request.old_object)?,
            username: request.user.username,
            groups: request.user.groups,
            dry_run: request.dry_run,
            config,
            now: request.now,
        })
    }

    /// A request built by hand, for unit tests of plugin logic.
    pub fn new(
        operation: Operation,
        object: Option<Value>,
        old_object: Option<Value>,
        config: C,
    ) -> Self {
        AdmissionRequest {
            operation,
            object,
            old_object,
            username: "test".into(),
            groups: Vec::new(),
            dry_run: false,
            config,
            now: "2026-01-01T00:00:00Z".into(),
        }
    }

    /// The object as `T`; `None` on delete.
    pub fn object_as<T: DeserializeOwned>(&self) -> Result<Option<T>, Error> {
        read(self.object.as_ref(), "object")
    }

    /// The old object as `T`; `None` on create.
    pub fn old_object_as<T: DeserializeOwned>(&self) -> Result<Option<T>, Error> {
        read(self.old_object.as_ref(), "old object")
    }
}

fn read<T: DeserializeOwned>(value: Option<&Value>, what: &str) -> Result<Option<T>, Error> {
    value
        .map(|v| T::deserialize(v).map_err(|e| Error::InvalidInput(format!("{what}: {e}"))))
        .transpose()
}

/// Why one field is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// The field as `kubectl` prints it, e.g. `spec.engine`.
    pub field: String,
    pub message: String,
}

/// A validation's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed; the warnings are shown to the client.
    Allowed { warnings: Vec<String> },
    /// Denied: the write fails with `message` and the causes.
    Denied { message: String, causes: Vec<Cause> },
}

impl Verdict {
    /// Allowed, no warnings.
    pub fn allow() -> Self {
        Verdict::Allowed {
            warnings: Vec::new(),
        }
    }

    /// Denied for `message`, naming no field.
    pub fn deny(message: impl Into<String>) -> Self {
        Verdict::Denied {
            message: message.into(),
            causes: Vec::new(),
        }
    }

    /// Denied because of `field` (e.g. `spec.engine`).
    pub fn deny_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        let message = message.into();
        let field = field.into();
        Verdict::Denied {
            message: format!("{field}: {message}"),
            causes: vec![Cause { field, message }],
        }
    }

    /// Add a warning (ignored on a denial).
    pub fn warn(mut self, warning: impl Into<String>) -> Self {
        if let Verdict::Allowed { warnings } = &mut self {
            warnings.push(warning.into());
        }
        self
    }

    pub(crate) fn into_wit(self) -> wit::Verdict {
        match self {
            Verdict::Allowed { warnings } => wit::Verdict::Allowed(warnings),
            Verdict::Denied { message, causes } => wit::Verdict::Denied(wit::Denial {
                message,
                causes: causes
                    .into_iter()
                    .map(|c| wit::FieldCause {
                        field: c.field,
                        message: c.message,
                    })
                    .collect(),
            }),
        }
    }
}

/// What [`Plugin::convert`](crate::Plugin::convert) does when plugin `name`
/// does not override it: objects already at `api_version` pass, any other
/// is an error (the plugin's CRD serves one version). The Python and
/// TypeScript SDKs answer the same.
pub fn convert_none(
    name: &str,
    objects: Vec<Value>,
    api_version: &str,
) -> Result<Vec<Value>, Error> {
    if let Some(other) = objects
        .iter()
        .find(|o| o["apiVersion"].as_str() != Some(api_version))
    {
        return Err(Error::Failed(format!(
            "{name} converts no versions: cannot convert {} to {api_version}",
            other["apiVersion"]
                .as_str()
                .unwrap_or("an object without apiVersion")
        )));
    }
    Ok(objects)
}
