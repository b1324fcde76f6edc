//! Writing the children a parent does not control yet: create, never
//! overwrite, never adopt. A same-named object this parent does not control
//! is a clash: reported (a Warning Event, `kubeplug_child_clashes_total`),
//! never written.

use super::*;
use kubeplug_core::plan::Step;
use kubeplug_kube::owner::controller_of;

/// What became of a child the parent does not control yet.
pub(super) enum Created {
    Applied(Box<DynamicObject>),
    /// An object of that name exists and is not controlled by this parent:
    /// its controller (or `None`), for the event.
    Clash(Option<String>),
}

/// Create a child the parent does not control yet, never overwriting,
/// adopting or pruning an object it does not control. The create (`sent`)
/// is an apply that can only create ([`plan::if_absent`]): if an object of
/// that name exists, made by anyone at any time before the request lands,
/// the API server refuses it and nothing is written. That object is then
/// read: one this parent controls (not in the cache yet) is updated, guarded
/// by its uid ([`Step::update_of`]); any other is a clash.
pub(super) async fn create_child(
    writer: &Writer,
    step: &Step,
    sent: &Value,
    parent_uid: &str,
) -> Result<Created, ReconcileError> {
    let ty = &step.resource;
    match writer.apply_child(ty, sent, false).await {
        Ok(applied) => return Ok(Created::Applied(Box::new(applied))),
        Err(error) if error.conflict() => {}
        Err(error) => return Err(error.into()),
    }
    let live = existing(writer, ty, &step.child).await?;
    match controller_of(&live.metadata) {
        Some(owner) if owner.uid == parent_uid => {
            let update = step.update_of(live.metadata.uid.as_deref());
            let applied = writer.apply_child(ty, &update, true).await?;
            Ok(Created::Applied(Box::new(applied)))
        }
        owner => Ok(Created::Clash(
            owner.map(|o| format!("{} {}", o.kind, o.name)),
        )),
    }
}

/// Create a create-only child (`sent`) with a plain create. "Already
/// exists" is success when this parent controls the object (created
/// earlier, by this replica or another, perhaps before a restart): it is
/// never re-applied, so a generated password never rotates, whatever any
/// cache said.
pub(super) async fn create_once(
    writer: &Writer,
    step: &Step,
    sent: &Value,
    parent_uid: &str,
) -> Result<Created, ReconcileError> {
    let ty = &step.resource;
    if let Some(created) = writer.create_child(ty, sent).await? {
        return Ok(Created::Applied(Box::new(created)));
    }
    let live = existing(writer, ty, &step.child).await?;
    match controller_of(&live.metadata) {
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

/// Report a child that clashes with an object this parent does not control:
/// a Warning event on the parent and a metric; the object stays untouched.
pub(super) fn clash(
    fence: &Fence,
    writer: &Writer,
    parent: &Object,
    parent_key: &ObjectKey,
    step: &Step,
    owner: &Option<String>,
) {
    let (ty, key) = (&step.resource, TypedKey::of(&step.child));
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
    fence.record(writer, parent, parent_key, &[event], "Reconcile");
}
