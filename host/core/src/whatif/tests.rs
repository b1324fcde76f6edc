use serde_json::json;

use super::*;
use crate::contract::Desired;
use crate::manifest::ApiResource;
use crate::plan::Step;
use crate::policy::GateFile;

fn plan(children: Vec<Step>, prune: Vec<Value>, status: Option<Value>) -> Plan {
    Plan {
        answer: Desired::default(),
        children,
        prune,
        status,
        parent_patch: None,
        requeue_after: None,
    }
}

/// A step of `action` on `child`, declared as a resource named after its kind.
fn step(child: Value, action: Action) -> Step {
    let kind = child["kind"].as_str().unwrap_or_default().to_string();
    let plural = format!("{}s", kind.to_lowercase());
    let resource = ApiResource::new("", "v1", &kind, &plural, true);
    Step::new(resource, child, action)
}

fn sts(image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "annotations": {APPLIED_HASH: image}},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "db", "image": image, "ports": [{"containerPort": 5432}]}
        ]}}},
    })
}

fn database() -> KindRef {
    KindRef {
        group: "example.com".into(),
        kind: "Database".into(),
    }
}

#[test]
fn fields_name_list_items_by_index_and_odd_keys_in_brackets() {
    let mut live = sts("postgres:16");
    // The API server's defaults are not changes.
    live["spec"]["template"]["spec"]["containers"][0]["terminationMessagePath"] =
        json!("/dev/termination-log");
    let mut desired = sts("mirror/postgres:16");
    desired["metadata"]["labels"] = json!({"app.kubernetes.io/name": "db"});
    assert_eq!(
        changed_fields(&live, &desired),
        BTreeSet::from([
            "metadata.annotations[\"kubeplug.io/applied-hash\"]".to_string(),
            "metadata.labels".to_string(),
            "spec.template.spec.containers[0].image".to_string(),
        ])
    );
    // A list that grows is named whole.
    let mut longer = live.clone();
    longer["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "sidecar"}));
    assert_eq!(
        changed_fields(&live, &longer),
        BTreeSet::from(["spec.template.spec.containers".to_string()])
    );
    assert!(changed_fields(&live, &live).is_empty());
}

#[test]
fn a_tally_counts_each_parent_once_per_kind_and_field() {
    let mut tally = Tally::default();
    let update = |image: &str| {
        let live = sts("postgres:16");
        step(sts(image), Action::Update { uid: None, live })
    };
    let parent = json!({"status": {"phase": "Running"}});
    for name in ["a/one", "a/two"] {
        tally.plan(
            name,
            &database(),
            &parent,
            &plan(vec![update("mirror/postgres:16")], vec![], None),
        );
    }
    let same = step(sts("postgres:16"), Action::Unchanged);
    tally.plan(
        "a/three",
        &database(),
        &parent,
        &plan(vec![same], vec![], None),
    );
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"}});
    tally.plan(
        "b/four",
        &database(),
        &parent,
        &plan(
            vec![step(svc.clone(), Action::Create)],
            vec![sts("postgres:16")],
            Some(json!({"phase": "Pending"})),
        ),
    );
    tally.refused("b/five", "child kind Secret is not declared");
    tally.failed("b/six", "the plugin trapped");

    let summary = tally.summary();
    assert_eq!(
        (
            summary.parents,
            summary.changed,
            summary.unchanged,
            summary.refused,
            summary.failed
        ),
        (6, 3, 1, 1, 1)
    );
    // The summary names only the schema part of a path...
    assert_eq!(
        summary.updates,
        vec![FieldCount {
            kind: "StatefulSet.apps".into(),
            field: "spec".into(),
            parents: 2,
            examples: vec![],
        }]
    );
    assert_eq!(
        summary.creates,
        vec![KindCount {
            kind: "Service".into(),
            parents: 1
        }]
    );
    assert_eq!(
        summary.prunes,
        vec![KindCount {
            kind: "StatefulSet.apps".into(),
            parents: 1
        }]
    );
    assert_eq!(summary.status[0].field, "status");
    assert!((summary.changed_percent() - 50.0).abs() < 1e-9);

    // ...the details, the whole path.
    let details = tally.details();
    assert_eq!(details.changed, vec!["a/one", "a/two", "b/four"]);
    assert_eq!(
        details.updates[0].field,
        "spec.template.spec.containers[0].image"
    );
    assert_eq!(details.updates[0].examples, vec!["a/one", "a/two"]);
    assert_eq!(details.status[0].field, "status.phase");
    assert_eq!(details.refusals[0]["parent"], "b/five");
    assert_eq!(details.failures[0]["error"], "the plugin trapped");
    assert_eq!(details.examples.len(), 3);
}

#[test]
fn an_update_that_only_drops_fields_says_so() {
    let mut tally = Tally::default();
    let mut live = sts("postgres:16");
    live["spec"]["serviceName"] = json!("db");
    let mut desired = sts("postgres:16");
    desired["metadata"]["annotations"][APPLIED_HASH] = json!("new");
    tally.plan(
        "a/one",
        &database(),
        &json!({}),
        &plan(
            vec![step(desired, Action::Update { uid: None, live })],
            vec![],
            None,
        ),
    );
    assert_eq!(tally.summary().updates[0].field, REMOVED_FIELDS);
}

fn gate(text: &str) -> Result<Gate, String> {
    serde_json::from_str::<GateFile>(text)
        .expect("a gate")
        .into_gate()
        .map_err(|e| e.to_string())
}

#[test]
fn a_gate_names_every_rule_broken() {
    let summary = Summary {
        parents: 200,
        changed: 66,
        refused: 1,
        prunes: vec![KindCount {
            kind: "StatefulSet.apps".into(),
            parents: 2,
        }],
        ..Summary::default()
    };
    let ten = gate(r#"{"maxChangedPercent": 10}"#).unwrap();
    assert_eq!(
        ten.breaches(&summary),
        vec![
            "66 of 200 parents (33.0 %) would change, more than the gate's 10 %",
            "the fence would refuse 1 answers (the gate allows 0)",
        ]
    );
    let open =
        gate(r#"{"maxChangedPercent": 50, "maxRefused": 1, "noPrunes": ["Service"]}"#).unwrap();
    assert!(open.breaches(&summary).is_empty());
    let strict = gate(r#"{"noPrunes": ["StatefulSet.apps"], "maxRefused": 5}"#).unwrap();
    assert_eq!(
        strict.breaches(&summary),
        vec!["2 parents would lose a StatefulSet.apps (the gate allows no prunes of it)"]
    );
    assert!(
        gate(r#"{"noPrunes": ["*"], "maxRefused": 5}"#)
            .unwrap()
            .breaches(&summary)
            .len()
            == 1
    );
    // Nothing to judge: no parents change.
    assert!(ten.breaches(&Summary::default()).is_empty());
}

#[test]
fn a_gate_refuses_what_cannot_mean_anything() {
    assert!(
        gate(r#"{"maxChangedPercent": 120}"#)
            .unwrap_err()
            .contains("between 0 and 100")
    );
    assert!(
        gate(r#"{"noPrunes": ["statefulset"]}"#)
            .unwrap_err()
            .contains("promotion.noPrunes")
    );
    assert!(serde_json::from_str::<GateFile>(r#"{"maxChanged": 5}"#).is_err());
}

#[test]
fn a_summary_names_no_key_a_value_could_have_built() {
    for (path, seen) in [
        ("spec.template.spec.containers[0].image", "spec"),
        ("metadata.labels[\"team-of-hunter2\"]", "metadata.labels"),
        ("metadata.labels.hunter2", "metadata.labels"),
        (
            "metadata.annotations[\"example.com/x\"]",
            "metadata.annotations",
        ),
        ("metadata.hunter2", "metadata"),
        ("data.hunter2", "data"),
        ("status.hunter2.deep", "status"),
        ("hunter2.spec", "*"),
        ("[\"hunter2.x\"]", "*"),
        (REMOVED_FIELDS, REMOVED_FIELDS),
    ] {
        assert_eq!(schema_part(path), seen, "{path}");
    }
    // A parent counts once per schema part, however many paths it changes.
    let mut tally = Tally::default();
    let mut live = sts("postgres:16");
    live["metadata"]["labels"] = json!({"app": "db"});
    let mut desired = live.clone();
    desired["metadata"]["labels"] = json!({"app": "db", "hunter2": "x", "swordfish": "y"});
    tally.plan(
        "a/one",
        &database(),
        &json!({"status": {"phase": "Running"}}),
        &plan(
            vec![step(desired, Action::Update { uid: None, live })],
            vec![],
            Some(json!({"hunter2": 1, "swordfish": 2})),
        ),
    );
    let summary = serde_json::to_string(&tally.summary()).unwrap();
    assert!(
        !summary.contains("hunter2") && !summary.contains("swordfish"),
        "{summary}"
    );
    let summary = tally.summary();
    assert_eq!(summary.updates.len(), 1);
    assert_eq!(
        (
            summary.updates[0].field.as_str(),
            summary.updates[0].parents
        ),
        ("metadata.labels", 1)
    );
    assert_eq!(
        (summary.status[0].field.as_str(), summary.status[0].parents),
        ("status", 1)
    );
    assert_eq!(tally.details().updates.len(), 2);
}
