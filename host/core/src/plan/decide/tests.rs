//! Unit tests of [`super::decide`]: every kind of step, prunes, the status
//! and parent writes, the requeue, and each refusal of the fence, decided
//! from plain JSON. No wasm engine, no cluster.

use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::contract::MetadataPatch;
use crate::plan::tests::{
    as_served, composite, decorator, events, grant, observed_child, parent, parent_in_shard, pod,
    prepared, resource, service, sharded,
};
use crate::plan::{CREATE_ONLY, FenceError, PLUGIN_LABEL};
use crate::shard::SHARD_LABEL;

/// The database plugin's grant: its Services, StatefulSets and Secrets.
fn database_grant() -> Effective {
    grant("plugins:\n  database:\n    parent: [Database.example.com]\n")
}

fn answer(children: Vec<Value>) -> Desired {
    Desired {
        children,
        ..Desired::default()
    }
}

/// Decide `answer` for [`parent`] as the database plugin, whose parent
/// controls `observed`.
fn decided(observed: &[Value], answer: Desired) -> Result<Plan, Fenced> {
    decide(&composite(), &database_grant(), &parent(), observed, answer)
}

fn plan(observed: &[Value], answer: Desired) -> Plan {
    decided(observed, answer).expect("the fence lets the answer through")
}

/// The fence's refusal of `answer`.
fn refusal(manifest: &Manifest, grant: &Effective, parent: &Value, answer: Desired) -> FenceError {
    let fenced = decide(manifest, grant, parent, &[], answer).expect_err("refused");
    assert_eq!(fenced.plugin, manifest.name);
    fenced.source
}

fn create_only(mut child: Value) -> Value {
    child["metadata"]["annotations"] = json!({ CREATE_ONLY: "true" });
    child
}

// Each kind of step.

#[test]
fn a_child_not_observed_is_created_as_it_would_be_applied() {
    let plan = plan(&[], answer(vec![service("db")]));
    assert_eq!(
        plan.children,
        [Step::new(
            resource("", "v1", "Service", "services"),
            prepared(service("db")),
            Action::Create,
        )]
    );
    assert_eq!(plan.children[0].action.label(), "create");
}

#[test]
fn a_create_only_child_not_observed_is_created_once() {
    let plan = plan(&[], answer(vec![create_only(service("db"))]));
    assert_eq!(plan.children[0].action, Action::CreateOnce);
    assert_eq!(plan.children[0].action.label(), "create");
}

#[test]
fn a_create_only_child_observed_is_never_applied_again_even_when_it_differs() {
    let mut observed = as_served(&prepared(create_only(service("db"))));
    observed["spec"]["clusterIP"] = "10.0.0.7".into();
    let plan = plan(&[observed], answer(vec![create_only(service("db"))]));
    assert_eq!(plan.children[0].action, Action::Unchanged);
}

#[test]
fn an_observed_child_that_differs_is_updated_guarded_by_its_uid() {
    let mut before = service("db");
    before["spec"]["clusterIP"] = "10.0.0.7".into();
    let observed = as_served(&prepared(before));
    let plan = plan(std::slice::from_ref(&observed), answer(vec![service("db")]));
    assert_eq!(
        plan.children[0].action,
        Action::Update {
            uid: Some("c0ffee00-0000-4000-8000-000000000002".into()),
            live: observed,
        }
    );
    assert_eq!(plan.children[0].action.label(), "update");
}

#[test]
fn each_step_holds_its_declared_resource_and_the_object_exactly_as_sent() {
    let (db, once) = (service("db"), create_only(service("once")));
    let mut before = service("old");
    before["spec"]["clusterIP"] = "10.0.0.7".into();
    let updated = as_served(&prepared(before));
    let same = as_served(&prepared(service("same")));
    let children = vec![db.clone(), once.clone(), service("old"), service("same")];
    let plan = plan(&[updated, same], answer(children));
    let services = resource("", "v1", "Service", "services");
    assert!(plan.children.iter().all(|step| step.resource == services));
    let sent: Vec<_> = plan.children.iter().map(|step| step.sent()).collect();
    let uid = Some("c0ffee00-0000-4000-8000-000000000002");
    assert_eq!(
        sent,
        [
            // An apply that can only create.
            Some(crate::plan::if_absent(&prepared(db))),
            // A plain create of the child as prepared.
            Some(prepared(once)),
            // An apply guarded by the observed uid.
            Some(crate::plan::guarded(&prepared(service("old")), uid)),
            // Nothing.
            None,
        ]
    );
    let update_of = plan.children[0].update_of(Some("ours"));
    assert_eq!(update_of["metadata"]["uid"], "ours");
    assert!(update_of["metadata"].get("resourceVersion").is_none());
}

#[test]
fn an_observed_child_already_as_desired_is_unchanged() {
    let observed = as_served(&prepared(service("db")));
    let plan = plan(&[observed], answer(vec![service("db")]));
    assert_eq!(plan.children[0].action, Action::Unchanged);
    assert_eq!(plan.children[0].action.label(), "unchanged");
}

#[test]
fn a_sharded_plugins_child_is_labelled_once_and_then_left_unchanged() {
    let (grant, parent) = (sharded(4), parent_in_shard("2"));
    let decide_with = |observed: &[Value]| {
        decide(
            &composite(),
            &grant,
            &parent,
            observed,
            answer(vec![service("db")]),
        )
        .expect("the fence lets the answer through")
    };
    // Applied before the plugin was sharded: applied again, with the label.
    let unlabelled = as_served(&prepared(service("db")));
    let first = decide_with(std::slice::from_ref(&unlabelled));
    assert!(matches!(first.children[0].action, Action::Update { .. }));
    assert_eq!(
        first.children[0].child["metadata"]["labels"][SHARD_LABEL],
        "2"
    );
    // As the API server returns that apply: nothing to write.
    let labelled = as_served(&first.children[0].child);
    assert!(decide_with(&[labelled]).writes_nothing());
}

#[test]
fn each_child_is_matched_with_the_observed_child_of_its_own_key() {
    let observed = as_served(&prepared(service("a")));
    let plan = plan(&[observed], answer(vec![service("a"), service("b")]));
    let actions: Vec<&Action> = plan.children.iter().map(|s| &s.action).collect();
    assert_eq!(actions, [&Action::Unchanged, &Action::Create]);
}

// Prunes.

#[test]
fn observed_children_of_this_plugin_no_longer_desired_are_pruned() {
    let ours = observed_child("Secret", "old", Some("database"));
    let theirs = observed_child("Secret", "kept", Some("other"));
    let unlabelled = observed_child("Secret", "manual", None);
    let observed = [ours.clone(), theirs, unlabelled];
    let plan = plan(&observed, answer(vec![service("db")]));
    assert_eq!(plan.prune, [ours]);
}

#[test]
fn a_still_desired_child_is_not_pruned() {
    let mut observed = as_served(&prepared(service("db")));
    observed["metadata"]["labels"][PLUGIN_LABEL] = "database".into();
    assert!(
        plan(&[observed], answer(vec![service("db")]))
            .prune
            .is_empty()
    );
}

// The status, the parent patch, the events, the requeue.

#[test]
fn a_status_the_parent_lacks_is_written_and_one_it_has_is_not() {
    let status = json!({"phase": "Running"});
    let asked = Desired {
        status: Some(status.clone()),
        ..Desired::default()
    };
    assert_eq!(plan(&[], asked.clone()).status, Some(status.clone()));
    let mut has_it = parent();
    has_it["status"] = status.clone();
    let plan = decide(&composite(), &database_grant(), &has_it, &[], asked).unwrap();
    assert_eq!(plan.status, None);
    assert_eq!(plan.answer.status, Some(status), "the answer is kept whole");
}

#[test]
fn no_status_is_written_when_none_is_asked() {
    assert_eq!(plan(&[], Desired::default()).status, None);
}

fn annotate(key: &str, value: &str) -> Desired {
    Desired {
        parent_patch: Some(MetadataPatch {
            labels: Default::default(),
            annotations: [(key.to_string(), value.to_string())].into(),
        }),
        ..Desired::default()
    }
}

fn annotator_grant() -> Effective {
    crate::policy::Policy::load(&[grant_file(
        "plugins:\n  pod-annotator:\n    parent: [Pod]\n    decoratorKeys: [\"example.com/*\"]\n",
    )
    .path()])
    .unwrap()
    .grant("pod-annotator")
    .unwrap()
}

fn grant_file(yaml: &str) -> tempfile::NamedTempFile {
    use std::io::Write as _;
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(yaml.as_bytes()).unwrap();
    file
}

#[test]
fn a_decorator_patches_only_what_changes_on_its_parent() {
    let (m, g) = (decorator(), annotator_grant());
    let plan = decide(&m, &g, &pod(), &[], annotate("example.com/seen", "yes")).unwrap();
    assert_eq!(
        plan.parent_patch,
        Some(json!({"metadata": {"annotations": {"example.com/seen": "yes"}}}))
    );
    let plan = decide(
        &m,
        &g,
        &pod(),
        &[],
        annotate("example.com/injected", "true"),
    )
    .unwrap();
    assert_eq!(plan.parent_patch, None, "the pod has it already");
}

#[test]
fn events_are_kept_and_the_requeue_is_raised_to_the_floor() {
    let g = grant("plugins:\n  database:\n    quotas: {requeueFloorSeconds: 7}\n");
    let asked = Desired {
        events: events(2),
        requeue_after: Some(Duration::ZERO),
        ..Desired::default()
    };
    let floored = decide(&composite(), &g, &parent(), &[], asked).unwrap();
    assert_eq!(floored.answer.events, events(2));
    assert_eq!(floored.requeue_after, Some(Duration::from_secs(7)));
    assert_eq!(plan(&[], Desired::default()).requeue_after, None);
}

#[test]
fn an_empty_answer_plans_nothing_but_prunes() {
    let ours = observed_child("Service", "db", Some("database"));
    let plan = plan(std::slice::from_ref(&ours), Desired::default());
    assert!(plan.children.is_empty());
    assert_eq!(plan.prune, [ours]);
    assert_eq!((plan.status, plan.parent_patch), (None, None));
}

// Each refusal of the fence: nothing is planned.

#[test]
fn a_child_of_an_undeclared_kind_is_refused() {
    let child = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
    assert!(matches!(
        refusal(&composite(), &database_grant(), &parent(), answer(vec![child])),
        FenceError::UndeclaredKind { kind, .. } if kind == "ConfigMap"
    ));
}

#[test]
fn a_child_in_a_foreign_namespace_is_refused() {
    let mut child = service("db");
    child["metadata"]["namespace"] = "elsewhere".into();
    assert!(matches!(
        refusal(&composite(), &database_grant(), &parent(), answer(vec![child])),
        FenceError::ForeignNamespace { namespace, .. } if namespace == "elsewhere"
    ));
}

#[test]
fn a_child_returned_twice_is_refused() {
    let twice = answer(vec![service("db"), service("db")]);
    assert_eq!(
        refusal(&composite(), &database_grant(), &parent(), twice),
        FenceError::Duplicate {
            kind: "Service".into(),
            name: "db".into()
        }
    );
}

#[test]
fn answers_outside_the_plugins_mode_are_refused() {
    let wrong = |mode, what| FenceError::WrongMode { mode, what };
    let g = database_grant();
    let patch = annotate("example.com/seen", "yes");
    assert_eq!(
        refusal(&composite(), &g, &parent(), patch),
        wrong("composite", "a parent patch")
    );
    let (m, g) = (decorator(), annotator_grant());
    let status = Desired {
        status: Some(json!({"phase": "x"})),
        ..Desired::default()
    };
    assert_eq!(
        refusal(&m, &g, &pod(), status),
        wrong("decorator", "a status")
    );
}

#[test]
fn children_of_a_parent_without_uid_are_refused() {
    let mut parent = parent();
    parent["metadata"].as_object_mut().unwrap().remove("uid");
    assert_eq!(
        refusal(
            &composite(),
            &database_grant(),
            &parent,
            answer(vec![service("db")])
        ),
        FenceError::ParentWithoutUid
    );
}

#[test]
fn answers_over_the_quotas_are_refused() {
    let g = grant(
        "plugins:\n  database:\n    quotas: {statusBytes: 10, eventsPerAnswer: 1, childrenPerParent: 1}\n",
    );
    let two = answer(vec![service("a"), service("b")]);
    assert_eq!(
        refusal(&composite(), &g, &parent(), two),
        FenceError::TooManyChildren { count: 2, max: 1 }
    );
    let big = Desired {
        status: Some(json!({"phase": "a long phase"})),
        ..Desired::default()
    };
    assert!(matches!(
        refusal(&composite(), &g, &parent(), big),
        FenceError::StatusTooLarge { max: 10, .. }
    ));
    let loud = Desired {
        events: events(2),
        ..Desired::default()
    };
    assert_eq!(
        refusal(&composite(), &g, &parent(), loud),
        FenceError::TooManyEvents { count: 2, max: 1 }
    );
}

#[test]
fn a_decorator_key_not_granted_is_refused() {
    let (m, g) = (decorator(), annotator_grant());
    assert_eq!(
        refusal(&m, &g, &pod(), annotate("other.io/x", "y")),
        FenceError::KeyNotGranted {
            key: "other.io/x".into(),
            reserved: false
        }
    );
}

#[test]
fn a_child_finalizer_not_granted_is_refused() {
    let mut child = service("db");
    child["metadata"]["finalizers"] = json!(["example.com/never"]);
    assert!(matches!(
        refusal(&composite(), &database_grant(), &parent(), answer(vec![child])),
        FenceError::FinalizerNotGranted { finalizer, .. } if finalizer == "example.com/never"
    ));
}
