use serde_json::{Value, json};

use super::*;

fn database() -> ApiResource {
    ApiResource::new("example.com", "v1", "Database", "databases", true)
}

fn review(operation: &str, object: Value, old: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "example.com", "version": "v1", "kind": "Database"},
            "resource": {"group": "example.com", "version": "v1", "resource": "databases"},
            "namespace": "team-a",
            "name": "db",
            "operation": operation,
            "userInfo": {"username": "alice", "groups": ["devs", "system:authenticated"]},
            "object": object,
            "oldObject": old,
            "dryRun": true
        }
    })
}

#[test]
fn an_admission_review_is_read_with_its_objects_and_user() {
    let db =
        json!({"apiVersion": "example.com/v1", "kind": "Database", "metadata": {"name": "db"}});
    let call = admission_request(review("UPDATE", db.clone(), db.clone())).unwrap();
    assert_eq!(call.operation, Operation::Update);
    assert_eq!(
        (call.uid.as_str(), call.namespace.as_str()),
        ("u-1", "team-a")
    );
    assert_eq!(call.object.as_ref(), Some(&db));
    assert_eq!(call.old_object.as_ref(), Some(&db));
    assert_eq!(call.username, "alice");
    assert_eq!(call.groups, ["devs", "system:authenticated"]);
    assert!(call.dry_run);
    call.check_kind("database", &database()).unwrap();

    let created = admission_request(review("CREATE", db, Value::Null)).unwrap();
    assert_eq!(created.old_object, None);
}

#[test]
fn a_review_that_is_not_one_is_malformed() {
    let mut connect = review("CONNECT", json!({}), Value::Null);
    assert!(matches!(
        admission_request(connect.clone()),
        Err(ReviewError::Malformed(_))
    ));
    connect["kind"] = json!("ConversionReview");
    assert!(matches!(
        admission_request(connect),
        Err(ReviewError::Malformed(_))
    ));
    assert!(matches!(
        admission_request(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"operation": "CREATE"}})),
        Err(ReviewError::Malformed(m)) if m.contains("uid")
    ));
}

#[test]
fn a_review_of_another_kind_or_version_is_not_granted() {
    let mut r = review("CREATE", json!({}), Value::Null);
    r["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "Secret"});
    let call = admission_request(r.clone()).unwrap();
    let refused = call.check_kind("database", &database()).unwrap_err();
    assert!(
        matches!(&refused, ReviewError::NotGranted(m) if m.contains("Database.example.com only, not Secret")),
        "{refused}"
    );
    r["request"]["kind"] = json!({"group": "example.com", "version": "v2", "kind": "Database"});
    let call = admission_request(r).unwrap();
    assert!(matches!(
        call.check_kind("database", &database()),
        Err(ReviewError::NotGranted(m)) if m.contains("must name that version")
    ));
}

#[test]
fn a_mutation_becomes_a_json_patch_of_its_changes() {
    let before = json!({
        "apiVersion": "example.com/v1alpha1", "kind": "MyApp",
        "metadata": {"name": "a", "labels": {"team": "a"}},
        "spec": {"image": "", "old": 1}
    });
    let after = json!({
        "apiVersion": "example.com/v1alpha1", "kind": "MyApp",
        "metadata": {"name": "a", "labels": {"team": "a", "app.kubernetes.io/name": "a"}, "annotations": {"x": "1"}},
        "spec": {"image": "nginx:1.27", "replicas": 1}
    });
    let ops = patch(&before, &after, |_| Ok::<(), String>(())).unwrap();
    assert_eq!(
        ops,
        vec![
            json!({"op": "add", "path": "/metadata/annotations", "value": {"x": "1"}}),
            json!({"op": "add", "path": "/metadata/labels/app.kubernetes.io~1name", "value": "a"}),
            json!({"op": "replace", "path": "/spec/image", "value": "nginx:1.27"}),
            json!({"op": "remove", "path": "/spec/old"}),
            json!({"op": "add", "path": "/spec/replicas", "value": 1}),
        ]
    );
    assert!(
        patch(&before, &before, |_| Ok::<(), String>(()))
            .unwrap()
            .is_empty()
    );
}

/// One change the fence refuses refuses the whole answer: what the fence
/// allows is `fence`'s (its tests).
#[test]
fn one_refused_change_refuses_the_whole_patch() {
    let before = json!({"metadata": {"name": "a"}, "spec": {"a": 1}});
    let after = json!({"metadata": {"name": "b"}, "spec": {"a": 2}});
    let refused = patch(&before, &after, |p| {
        if p.starts_with("/spec") {
            Ok(())
        } else {
            Err(format!("{p} no"))
        }
    });
    assert_eq!(refused, Err("/metadata/name no".to_string()));
}

#[test]
fn a_verdict_over_its_quotas_is_refused() {
    let allowed = |n: usize, len: usize| Verdict::Allowed {
        warnings: vec!["w".repeat(len); n],
    };
    check_verdict(&allowed(MAX_WARNINGS, MAX_TEXT)).unwrap();
    assert!(
        check_verdict(&allowed(MAX_WARNINGS + 1, 1))
            .unwrap_err()
            .to_string()
            .contains("warnings")
    );
    assert!(
        check_verdict(&allowed(1, MAX_TEXT + 1))
            .unwrap_err()
            .to_string()
            .contains("warning of")
    );
    let denied = |causes: usize, len: usize| Verdict::Denied {
        message: "no".into(),
        causes: vec![("spec.engine".into(), "m".repeat(len)); causes],
    };
    check_verdict(&denied(MAX_CAUSES, 10)).unwrap();
    assert!(check_verdict(&denied(MAX_CAUSES + 1, 10)).is_err());
    assert!(check_verdict(&denied(1, MAX_TEXT + 1)).is_err());
}

fn conversion(objects: Vec<Value>, desired: &str) -> ConversionCall {
    conversion_request(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "c-1", "desiredAPIVersion": desired, "objects": objects}
    }))
    .unwrap()
}

fn db(version: &str, labels: Value) -> Value {
    json!({
        "apiVersion": format!("example.com/{version}"), "kind": "Database",
        "metadata": {"name": "db", "namespace": "a", "uid": "1", "resourceVersion": "7", "labels": labels},
        "spec": {}
    })
}

#[test]
fn a_conversion_review_is_read_and_its_kind_checked() {
    let call = conversion(vec![db("v1", json!({}))], "example.com/v2");
    assert_eq!(call.uid, "c-1");
    assert_eq!(call.desired_api_version, "example.com/v2");
    call.check_kind("database", &database()).unwrap();
    let other = conversion(
        vec![json!({"apiVersion": "v1", "kind": "Secret"})],
        "example.com/v2",
    );
    assert!(matches!(
        other.check_kind("database", &database()),
        Err(ReviewError::NotGranted(m)) if m.contains("not Secret v1")
    ));
    let elsewhere = conversion(vec![], "other.io/v1");
    assert!(elsewhere.check_kind("database", &database()).is_err());
    assert!(matches!(
        conversion_request(
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": {"uid": "x"}})
        ),
        Err(ReviewError::Malformed(_))
    ));
}

#[test]
fn a_conversion_answer_must_be_the_same_objects_at_the_desired_version() {
    let call = conversion(
        vec![db("v1", json!({"kubeplug.io/shard": "2", "team": "a"}))],
        "example.com/v2",
    );
    let mut good = db("v2", json!({"kubeplug.io/shard": "2", "team": "b"}));
    good["metadata"]["annotations"] = json!({"example.com/v2-storage": "{}"});
    check_converted(&call, &[good.clone()]).unwrap();

    assert!(
        check_converted(&call, &[])
            .unwrap_err()
            .to_string()
            .contains("0 objects answered for 1")
    );
    let at_v1 = db("v1", json!({"kubeplug.io/shard": "2"}));
    assert!(
        check_converted(&call, &[at_v1])
            .unwrap_err()
            .to_string()
            .contains("not example.com/v2")
    );
    let mut renamed = good.clone();
    renamed["metadata"]["name"] = json!("other");
    assert!(
        check_converted(&call, &[renamed])
            .unwrap_err()
            .to_string()
            .contains("metadata.name")
    );
    let mut new_uid = good.clone();
    new_uid["metadata"]["uid"] = json!("2");
    assert!(
        check_converted(&call, &[new_uid])
            .unwrap_err()
            .to_string()
            .contains("metadata.uid")
    );
    let moved = db("v2", json!({"kubeplug.io/shard": "0"}));
    assert!(
        check_converted(&call, &[moved])
            .unwrap_err()
            .to_string()
            .contains("kubeplug.io~1shard")
    );
    let mut kind = good;
    kind["kind"] = json!("Other");
    assert!(
        check_converted(&call, &[kind])
            .unwrap_err()
            .to_string()
            .contains("changed kind")
    );
}

#[test]
fn a_round_trip_loss_names_each_field_with_both_values() {
    let original = db("v1", json!({"team": "a"}));
    assert!(round_trip_losses(&original, &original).is_empty());
    let losses = round_trip_losses(
        &json!({"spec": {"replicas": 3}, "metadata": {"labels": {"team": "a"}}}),
        &json!({"spec": {}, "metadata": {"labels": {}}}),
    );
    let paths: Vec<&str> = losses.iter().map(|l| l.path.as_str()).collect();
    assert_eq!(paths, ["/metadata/labels/team", "/spec/replicas"]);
    assert_eq!(losses[1].before, json!(3));
    assert_eq!(losses[1].after, Value::Null);
}

#[test]
fn a_review_is_weighed_by_its_values_not_only_its_length() {
    let text = |s: &str| review_cost(s.as_bytes());
    // Text inside strings is only text, escaped quotes included.
    let strings = format!("{{\"a\":\"{}\\\",[{{\"}}", "x".repeat(10_000));
    assert_eq!(
        text(&strings),
        review_floor(strings.len()) + 2 * 2 * VALUE_BYTES
    );
    // Numbers weigh tens of times their length.
    let numbers = format!("[{}0]", "0,".repeat(5_000));
    assert!(
        text(&numbers) > 20 * review_floor(numbers.len()),
        "{}",
        text(&numbers)
    );
    // A real object lands between the two.
    let object = serde_json::to_string(&db("v1", json!({"team": "a"}))).unwrap();
    let cost = text(&object);
    assert!(
        cost > review_floor(object.len()) && cost < 100 * object.len(),
        "{cost}"
    );
    assert_eq!(Webhook::Convert.max_body(), MAX_CONVERSION_BODY);
    assert!(Webhook::Validate.max_body() < MAX_CONVERSION_BODY);
}
