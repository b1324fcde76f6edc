//! Run a plugin on objects read from files, with no cluster:
//! `kubeplug render`. Goes through the same [`kubeplug_core::plan`] as the operator,
//! so the output is exactly what the operator would apply. Its webhooks
//! (`--admission`, `--convert-to`) are [`review`]'s.

pub mod review;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use kubeplug_core::inputs::{self, Parent, Seen};
use kubeplug_core::manifest::{Manifest, Related};
use kubeplug_core::plan;
use kubeplug_core::policy::Effective;
use kubeplug_runtime::{CallError, Event, Finalized, Plugin, Request};

use crate::stored;

// The placeholder's old path, which the webhook runs and the CLI's tests use.
pub use crate::stored::PLACEHOLDER_UID;

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("cannot read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: document {index} is not valid YAML or JSON")]
    Parse {
        path: String,
        index: usize,
        #[source]
        source: kubeplug_core::yaml::Error,
    },
    #[error("{path}: expected exactly one parent object, found {count}")]
    ParentCount { path: String, count: usize },
    #[error("parent is {found} but plugin {plugin} reconciles {expected}")]
    WrongParent {
        found: String,
        expected: String,
        plugin: String,
    },
    #[error("the request's {what} is not a JSON object")]
    Request {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(transparent)]
    Call(#[from] CallError),
    #[error(transparent)]
    Fence(#[from] kubeplug_core::fence::Fenced),
    /// The objects read do not make a review.
    #[error(transparent)]
    Review(crate::webhook::admit::ReviewInputError),
    /// The live host would not ask the plugin this at all.
    #[error("the live host would not ask: {0}")]
    NotAsked(String),
    /// The live host refuses the plugin's answer to a webhook.
    #[error("{0}")]
    Refused(String),
}

/// Read every object in a YAML or JSON file (multi-document YAML and `List`
/// kinds are flattened; empty documents are skipped).
pub fn read_objects(path: &Path) -> Result<Vec<Value>, RenderError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| RenderError::Read {
        path: shown.clone(),
        source,
    })?;
    let mut objects = Vec::new();
    let documents =
        kubeplug_core::yaml::from_documents::<Value>(&text).map_err(|(index, source)| {
            RenderError::Parse {
                path: shown.clone(),
                index,
                source,
            }
        })?;
    for value in documents {
        match value {
            Value::Null => {}
            Value::Object(ref o) if o.get("kind").and_then(Value::as_str) == Some("List") => {
                objects.extend(
                    o.get("items")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default(),
                )
            }
            other => objects.push(other),
        }
    }
    Ok(objects)
}

/// What the operator would do for one parent.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rendered {
    /// `name@version` of the plugin.
    pub plugin: String,
    /// Children to server-side apply, exactly as they would be sent.
    pub children: Vec<Value>,
    /// Observed children that would be deleted (pruned).
    pub prune: Vec<String>,
    /// Status to write to the `/status` subresource (`None`: unchanged).
    pub status: Option<Value>,
    /// Merge patch for the parent's metadata (decorators).
    pub parent_patch: Option<Value>,
    /// When the operator would reconcile again (the plugin's ask, raised to
    /// the policy's floor).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue_after_seconds: Option<u64>,
    pub events: Vec<Event>,
    /// What render could not check as the live host would.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

fn type_of(o: &Value) -> String {
    format!(
        "{} {}",
        o["apiVersion"].as_str().unwrap_or("?"),
        o["kind"].as_str().unwrap_or("?")
    )
}

/// Would the operator pass `o` to the plugin as a related object? Its
/// kind is a declared related kind, and the live host's rule selects it
/// (see [`kubeplug_core::inputs::related`]); an object without a namespace
/// is in `default`, as `kubectl apply` would put it.
fn is_related(manifest: &Manifest, parent: &Value, o: &Value) -> bool {
    let labels = labels(o);
    let seen = Seen {
        namespace: Some(namespace_of(o)),
        labels: Some(&labels),
    };
    let parent = selection_parent(parent);
    manifest.related.iter().any(|r: &Related| {
        r.resource.matches(
            o["apiVersion"].as_str().unwrap_or_default(),
            o["kind"].as_str().unwrap_or_default(),
        ) && inputs::related(r, &parent, &seen)
    })
}

/// An object's namespace, `default` if its file names none.
fn namespace_of(o: &Value) -> &str {
    o["metadata"]["namespace"].as_str().unwrap_or("default")
}

/// An object's labels with string values (no other is a label).
fn labels(o: &Value) -> BTreeMap<String, String> {
    o["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
        .collect()
}

/// Run `plugin` on `parent` with the observed children, related objects
/// and referenced objects the files provide, filtered as the operator
/// would filter them.
pub fn render(
    plugin: &Plugin,
    grant: &Effective,
    parent: Value,
    observed: Vec<Value>,
    related: Vec<Value>,
) -> Result<Rendered, RenderError> {
    let manifest = plugin.manifest();
    let parent = stored::as_stored(parent);
    check_parent(manifest, &parent)?;
    let (observed, passed_over): (Vec<Value>, Vec<Value>) = observed
        .into_iter()
        .filter(|o| {
            manifest.allows_child(
                o["apiVersion"].as_str().unwrap_or_default(),
                o["kind"].as_str().unwrap_or_default(),
            )
        })
        .partition(|o| is_observed(&parent, o));
    // Any object read may be one the parent's references find.
    let referenced = match crate::references::referenced(plugin, &parent, &related) {
        Ok(found) => found,
        Err(crate::references::Unresolved::Call(e)) => return Err(e.into()),
        Err(crate::references::Unresolved::Fence(e)) => return Err(e.into()),
    };
    let related: Vec<Value> = related
        .into_iter()
        .filter(|o| is_related(manifest, &parent, o))
        .collect();
    let referenced = referenced.into_iter().filter(|o| !related.contains(o));
    let request = Request::new(
        parent.to_string().into(),
        observed.iter().map(|o| o.to_string().into()).collect(),
        related
            .iter()
            .cloned()
            .chain(referenced)
            .map(|o| o.to_string().into())
            .collect(),
    );
    let mut rendered = render_request(plugin, grant, &request)?;
    rendered.notes.extend(passed_over.iter().map(|o| {
        format!(
            "{} is not one of the parent's children, so it is neither handed to the plugin nor pruned: \
             the live host sees only children in the parent's namespace whose ownerReferences name the parent \
             (uid {}) with controller: true",
            plan::TypedKey::of(o),
            parent["metadata"]["uid"].as_str().unwrap_or_default(),
        )
    }));
    Ok(rendered)
}

/// Would the operator hand `o` (of a child kind) to the plugin as one of
/// `parent`'s observed children? The live host's rule
/// ([`kubeplug_core::inputs::observed`]), as the operator applies it to
/// its caches; an object without a namespace is in `default`, as `kubectl
/// apply` would put it.
pub fn is_observed(parent: &Value, o: &Value) -> bool {
    let owners = o["metadata"]["ownerReferences"].as_array();
    let owners = owners.into_iter().flatten().map(|r| {
        (
            r["uid"].as_str().unwrap_or_default(),
            r["controller"].as_bool(),
        )
    });
    inputs::observed(
        &selection_parent(parent),
        &Seen {
            namespace: Some(namespace_of(o)),
            labels: None,
        },
        owners,
    )
}

/// `parent` as input selection sees it.
fn selection_parent(parent: &Value) -> Parent<'_> {
    Parent {
        name: parent["metadata"]["name"].as_str().unwrap_or_default(),
        namespace: Some(namespace_of(parent)),
        uid: parent["metadata"]["uid"].as_str().unwrap_or_default(),
    }
}

fn check_parent(manifest: &Manifest, parent: &Value) -> Result<(), RenderError> {
    if manifest.parent.matches(
        parent["apiVersion"].as_str().unwrap_or_default(),
        parent["kind"].as_str().unwrap_or_default(),
    ) {
        return Ok(());
    }
    Err(RenderError::WrongParent {
        found: type_of(parent),
        expected: format!("{} {}", manifest.parent.api_version(), manifest.parent.kind),
        plugin: manifest.name.clone(),
    })
}

fn parse(what: String, text: &str) -> Result<Value, RenderError> {
    serde_json::from_str(text).map_err(|source| RenderError::Request { what, source })
}

/// Run `plugin` on `request` exactly as given (no filtering, no stamping:
/// e.g. a failure captured by the live host, see [`kubeplug_operator::replay`]) and
/// decide what the operator would write.
pub fn render_request(
    plugin: &Plugin,
    grant: &Effective,
    request: &Request,
) -> Result<Rendered, RenderError> {
    let manifest = plugin.manifest();
    let parent = parse("parent".into(), &request.parent)?;
    check_parent(manifest, &parent)?;
    let observed = request
        .observed
        .iter()
        .enumerate()
        .map(|(i, text)| parse(format!("observed[{i}]"), text))
        .collect::<Result<Vec<_>, _>>()?;
    let desired = plugin.reconcile(request)?;
    let plan = plan::decide(manifest, grant, &parent, &observed, desired)?;
    Ok(Rendered {
        plugin: format!("{}@{}", manifest.name, manifest.version),
        children: plan.children.into_iter().map(|step| step.child).collect(),
        prune: plan
            .prune
            .iter()
            .map(|o| plan::TypedKey::of(o).to_string())
            .collect(),
        status: plan.status,
        parent_patch: plan.parent_patch,
        requeue_after_seconds: plan.requeue_after.map(|d| d.as_secs()),
        events: plan.answer.events,
        notes: Vec::new(),
    })
}

/// What a plugin answered to `finalize`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedFinalize {
    /// `name@version` of the plugin.
    pub plugin: String,
    /// Whether the host would remove the finalizer.
    pub done: bool,
    /// When the host would call `finalize` again (the plugin's ask, or 5 s,
    /// raised to the policy's floor).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue_after_seconds: Option<u64>,
    pub events: Vec<Event>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Run `plugin`'s `finalize` on `request` exactly as given, and check the
/// answer against the fence as the live host does.
pub fn finalize_request(
    plugin: &Plugin,
    grant: &Effective,
    request: &Request,
) -> Result<RenderedFinalize, RenderError> {
    let manifest = plugin.manifest();
    check_parent(manifest, &parse("parent".into(), &request.parent)?)?;
    let finalized = plugin.finalize(request)?;
    plan::fence_finalize(manifest, grant, &finalized)?;
    let requeue = plan::finalize_requeue_after(&finalized, grant.quotas.requeue_floor());
    let Finalized { done, events, .. } = finalized;
    Ok(RenderedFinalize {
        plugin: format!("{}@{}", manifest.name, manifest.version),
        done,
        requeue_after_seconds: requeue.map(|d| d.as_secs()),
        events,
        notes: Vec::new(),
    })
}
