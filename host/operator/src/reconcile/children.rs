//! Writing a plan's children. Those the parent does not control yet are
//! created, never overwritten, never adopted: a same-named object this parent
//! does not control is a clash, reported (a Warning Event,
//! `kubeplug_child_clashes_total`), never written. Those it controls are
//! applied, guarded by their uid.
//!
//! The children of one plan are distinct objects that passed the fence
//! together, so they are written concurrently: a new parent's children cost
//! one round trip to the API server, not one per child (a worker waiting on
//! the API server is what bounds a controller's throughput once it has a
//! backlog). Outcomes come back in the plan's order, for the caller to report.

use super::*;
use kubeplug_core::plan::Step;

/// What became of one step of a plan.
pub(super) enum Written {
    /// Nothing to write.
    Unchanged,
    /// Written (or refused by the API server: the caller decides).
    Done(Result<Box<DynamicObject>, WriteError>),
    /// Not written: a same-named object this parent does not control.
    Clash(Option<String>),
    /// Could not be decided (the read after a refused create failed).
    Failed(ReconcileError),
}

/// Write every step of `steps` at once; their outcomes in `steps`' order.
pub(super) async fn write_all(
    writer: &Writer,
    manifest: &Manifest,
    steps: &[Step],
    parent_uid: &str,
) -> Vec<Written> {
    futures::future::join_all(
        steps
            .iter()
            .map(|step| write(writer, manifest, step, parent_uid)),
    )
    .await
}

async fn write(writer: &Writer, manifest: &Manifest, step: &Step, parent_uid: &str) -> Written {
    let child = &step.child;
    let ty = child_type(manifest, child);
    match &step.action {
        Action::Unchanged => Written::Unchanged,
        // Ours (controlled by this parent): update, guarded by its uid.
        Action::Update { uid, .. } => Written::Done(
            writer
                .apply_child(ty, &plan::guarded(child, uid.as_deref()), true)
                .await
                .map(Box::new),
        ),
        create @ (Action::Create | Action::CreateOnce) => {
            let created = if *create == Action::CreateOnce {
                create_once(writer, ty, child, parent_uid).await
            } else {
                create_child(writer, ty, child, parent_uid).await
            };
            match created {
                Ok(Created::Applied(applied)) => Written::Done(Ok(applied)),
                Ok(Created::Clash(owner)) => Written::Clash(owner),
                Err(ReconcileError::Write(error)) => Written::Done(Err(error)),
                Err(error) => Written::Failed(error),
            }
        }
    }
}

/// What became of a child the parent does not control yet.
enum Created {
    Applied(Box<DynamicObject>),
    /// An object of that name exists and is not controlled by this parent:
    /// its controller (or `None`), for the event.
    Clash(Option<String>),
}

/// Create a child the parent does not control yet, never overwriting,
/// adopting or pruning an object it does not control. The create is an
/// apply that can only create ([`plan::if_absent`]): if an object of that
/// name exists, made by anyone at any time before the request lands, the API
/// server refuses it and nothing is written. That object is then read: one
/// this parent controls (not in the cache yet) is updated, guarded by its
/// uid; any other is a clash.
async fn create_child(
    writer: &Writer,
    ty: &kubeplug_core::manifest::ApiResource,
    child: &Value,
    parent_uid: &str,
) -> Result<Created, ReconcileError> {
    match writer.apply_child(ty, &plan::if_absent(child), false).await {
        Ok(applied) => return Ok(Created::Applied(Box::new(applied))),
        Err(error) if error.conflict() => {}
        Err(error) => return Err(error.into()),
    }
    let live = existing(writer, ty, child).await?;
    match controller_of(&live) {
        Some(owner) if owner.uid == parent_uid => {
            let guarded = plan::guarded(child, live.metadata.uid.as_deref());
            let applied = writer.apply_child(ty, &guarded, true).await?;
            Ok(Created::Applied(Box::new(applied)))
        }
        owner => Ok(Created::Clash(
            owner.map(|o| format!("{} {}", o.kind, o.name)),
        )),
    }
}

/// Create a create-only child with a plain create. "Already exists" is
/// success when this parent controls the object (created earlier, by this
/// replica or another, perhaps before a restart): it is never re-applied, so
/// a generated password never rotates, whatever any cache said.
async fn create_once(
    writer: &Writer,
    ty: &kubeplug_core::manifest::ApiResource,
    child: &Value,
    parent_uid: &str,
) -> Result<Created, ReconcileError> {
    if let Some(created) = writer.create_child(ty, child).await? {
        return Ok(Created::Applied(Box::new(created)));
    }
    let live = existing(writer, ty, child).await?;
    match controller_of(&live) {
        Some(owner) if owner.uid == parent_uid => Ok(Created::Applied(Box::new(live))),
        owner => Ok(Created::Clash(
            owner.map(|o| format!("{} {}", o.kind, o.name)),
        )),
    }
}

/// The object a create was refused for, since it exists. Deleted in
/// between: a conflict, and the next reconcile creates it.
async fn existing(
    writer: &Writer,
    ty: &kubeplug_core::manifest::ApiResource,
    child: &Value,
) -> Result<DynamicObject, ReconcileError> {
    match writer.get_child(ty, child).await? {
        Some(live) => Ok(live),
        None => Err(WriteError::Create {
            what: TypedKey::of(child).to_string(),
            source: kube::Error::Api(
                kube::core::Status::failure("created and deleted concurrently", "Conflict")
                    .with_code(409)
                    .boxed(),
            ),
        }
        .into()),
    }
}

/// The controller ownerReference of `object`, if any.
fn controller_of(object: &DynamicObject) -> Option<&OwnerReference> {
    object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

/// Report a child that clashes with an object this parent does not control:
/// a Warning event on the parent and a metric; the object stays untouched.
pub(super) async fn clash(
    fence: &Fence,
    writer: &Writer,
    parent: &Object,
    parent_key: &ObjectKey,
    ty: &kubeplug_core::manifest::ApiResource,
    child: &Value,
    owner: &Option<String>,
) {
    let key = TypedKey::of(child);
    let by = owner
        .as_deref()
        .map_or("no controller".to_string(), |o| format!("controller {o}"));
    tracing::warn!(child = %key, %by, "child exists and is not controlled by this parent; left untouched");
    fence.metrics.child_clash(writer.plugin());
    let event = kubeplug_runtime::Event {
        warning: true,
        reason: "ChildClash".into(),
        message: format!(
            "{} {} exists and is not controlled by this {} ({by}); kubeplug leaves it untouched",
            ty.kind, key.name, parent.types.kind
        ),
    };
    // Budgeted like the plugin's own events: a plugin naming many objects it
    // does not control must not flood the parent with warnings either.
    fence
        .record(writer, parent, parent_key, &[event], "Reconcile")
        .await;
}
