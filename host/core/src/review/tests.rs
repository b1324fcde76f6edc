use serde_json::{Value, json};

use super::*;
use crate::manifest::{ApiResource, Manifest, Mode};
use crate::policy::Policy;

/// The cases the Python SDK's fixture runner checks its port of these
/// decisions against: the core must give exactly the answers recorded
/// there, or the two runners would judge one fixture differently.
fn python_port_cases() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../plugins/sdk-python/tests/webhook_cases.json"
    );
    let text = std::fs::read_to_string(path).expect("the Python port's webhook cases");
    serde_json::from_str(&text).expect("the cases are JSON")
}

/// A composite plugin's manifest: the one the Python port judges.
fn composite() -> Manifest {
    Manifest::new(
        "x",
        "0.1.0",
        ApiResource::new("example.com", "v1", "X", "xs", true),
        Mode::Composite,
    )
}

#[test]
fn the_python_port_computes_patches_and_refusals_as_the_core_does() {
    let cases = python_port_cases();
    let cases = cases["patch"].as_array().expect("patch cases");
    assert!(cases.len() > 10, "cases to check");
    // The port judges a composite plugin under the default grant.
    let grant = Policy::default().grant("x").expect("the default grant");
    let manifest = composite();
    let fence = Fence::new(&grant, &manifest);
    for case in cases {
        let answered = match mutated(&fence, &case["before"], Some(&case["after"])) {
            AdmissionAnswer::Patched { patch } => Ok(patch),
            AdmissionAnswer::Unchanged => Ok(Vec::new()),
            AdmissionAnswer::Failed(Refusal::Mutation(refused)) => Err(refused.to_string()),
            other => panic!("{}: {other:?}", case["name"]),
        };
        let recorded = match case.get("refused") {
            Some(refused) => Err(refused.as_str().expect("a reason").to_string()),
            None => Ok(case["ops"].as_array().expect("ops").clone()),
        };
        assert_eq!(answered, recorded, "{}", case["name"]);
    }
}

#[test]
fn the_python_port_checks_conversions_as_the_core_does() {
    let cases = python_port_cases();
    let cases = cases["conversion"].as_array().expect("conversion cases");
    assert!(cases.len() > 5, "cases to check");
    for case in cases {
        let call = ConversionCall {
            uid: "u".into(),
            desired_api_version: case["apiVersion"].as_str().expect("a version").into(),
            objects: case["objects"].as_array().expect("objects").clone(),
        };
        let converted_objects = case["converted"].as_array().expect("converted").clone();
        let answered = match converted(&call, converted_objects) {
            ConversionAnswer::Converted(_) => None,
            ConversionAnswer::Failed(Refusal::Conversion(refused)) => Some(refused.to_string()),
            other => panic!("{}: {other:?}", case["name"]),
        };
        let recorded = case
            .get("refused")
            .map(|r| r.as_str().expect("a reason").to_string());
        assert_eq!(answered, recorded, "{}", case["name"]);
    }
}

#[test]
fn a_failed_plugin_is_answered_by_its_grants_failure_policy() {
    let failed = AdmissionAnswer::Failed(Refusal::Mutation(MutationError::Outside {
        pointer: "/status/x".into(),
        fields: vec!["spec".into()],
    }));
    let fail = failed.response("db", FailurePolicy::Fail);
    assert!(!fail.allowed);
    let denial = fail.status.expect("a denial");
    assert_eq!((denial.code, denial.reason), (500, "InternalError"));
    assert_eq!(
        denial.message,
        "kubeplug: plugin db failed: its mutation is refused by its fence: /status/x is outside spec, metadata.labels and metadata.annotations"
    );
    let ignore = failed.response("db", FailurePolicy::Ignore);
    assert!(ignore.allowed && ignore.status.is_none());
    assert_eq!(
        ignore.warnings,
        [
            "kubeplug: plugin db failed: its mutation is refused by its fence: /status/x is outside spec, metadata.labels and metadata.annotations (allowed: failurePolicy Ignore in its grant)"
        ]
    );
    let over = validated(Verdict::Allowed {
        warnings: vec!["w".into(); webhook::MAX_WARNINGS + 1],
    });
    assert_eq!(over.result(), "failed");
    assert_eq!(
        over.response("db", FailurePolicy::Fail)
            .status
            .unwrap()
            .message,
        "kubeplug: plugin db failed: answered with 17 warnings (at most 16)"
    );
}

#[test]
fn a_denial_is_forbidden_with_its_causes() {
    let denied = validated(Verdict::Denied {
        message: "no".into(),
        causes: vec![("spec.a".into(), "bad".into())],
    });
    let status = denied.response("db", FailurePolicy::Fail).status.unwrap();
    assert_eq!((status.code, status.reason), (403, "Forbidden"));
    assert_eq!(status.causes, [("spec.a".to_string(), "bad".to_string())]);
}

#[test]
fn a_mutation_of_a_delete_or_to_the_same_object_leaves_it_unchanged() {
    let grant = Policy::default().grant("x").expect("the default grant");
    let manifest = composite();
    let fence = Fence::new(&grant, &manifest);
    let object = json!({"spec": {"a": 1}});
    assert_eq!(mutated(&fence, &object, None), AdmissionAnswer::Unchanged);
    assert_eq!(
        mutated(&fence, &object, Some(&object)),
        AdmissionAnswer::Unchanged
    );
    let call = |operation| AdmissionCall {
        uid: "u".into(),
        group: "example.com".into(),
        version: "v1".into(),
        kind: "X".into(),
        namespace: "shop".into(),
        name: "a".into(),
        operation,
        object: Some(object.clone()),
        old_object: Some(object.clone()),
        username: "u".into(),
        groups: Vec::new(),
        dry_run: false,
    };
    assert_eq!(mutation_input(&call(Operation::Delete)), None);
    assert_eq!(mutation_input(&call(Operation::Update)), Some(&object));
    assert_eq!(
        admission_scope(&call(Operation::Create), "x", &fence),
        Ok(None)
    );
    let mut elsewhere = call(Operation::Create);
    elsewhere.namespace = "kube-system".into();
    assert_eq!(
        admission_scope(&elsewhere, "x", &fence),
        Ok(Some(AdmissionAnswer::OutOfScope))
    );
}

#[test]
fn a_warning_is_one_line_within_the_api_servers_length() {
    assert_eq!(warning("a\nb  c"), "a b c");
    let long = format!("start {} (allowed: failurePolicy Ignore)", "x".repeat(1000));
    let w = warning(&long);
    assert!(w.len() <= WARNING_BYTES, "{}", w.len());
    assert!(w.starts_with("start ") && w.ends_with("(allowed: failurePolicy Ignore)"));
}
