//! `render` and the live host hand a plugin the same observed children:
//! the same objects, read from files by the kit and from the caches by the
//! operator, go through each one's selection, and the selections agree.

use kube::core::DynamicObject;
use kubeplug_core::inputs::Parent;
use kubeplug_kube::informers::Object;
use serde_json::{Value, json};

const PARENT_UID: &str = "6f1c9d2e-7a51-4c1b-9a40-2b8f3e5d0c77";

fn parent() -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Database",
        "metadata": {"name": "orders", "namespace": "default", "uid": PARENT_UID},
    })
}

fn owner(uid: &str, controller: Option<bool>) -> Value {
    let mut reference = json!({
        "apiVersion": "example.com/v1",
        "kind": "Database",
        "name": "orders",
        "uid": uid,
    });
    if let Some(controller) = controller {
        reference["controller"] = controller.into();
    }
    reference
}

fn child(name: &str, namespace: &str, owners: Vec<Value>) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": owners},
    })
}

/// Objects of a child kind, each with whether the live host hands it to the
/// plugin as one of the parent's children.
fn cases() -> Vec<(Value, bool)> {
    vec![
        (
            child("controlled", "default", vec![owner(PARENT_UID, Some(true))]),
            true,
        ),
        (child("no-owner", "default", vec![]), false),
        // A plain ownerReference is a claim anyone who may write the object
        // can make: not the parent's child.
        (
            child("plain-owner", "default", vec![owner(PARENT_UID, None)]),
            false,
        ),
        (
            child(
                "not-controller",
                "default",
                vec![owner(PARENT_UID, Some(false))],
            ),
            false,
        ),
        (
            child(
                "other-controller",
                "default",
                vec![owner("a-different-uid", Some(true))],
            ),
            false,
        ),
        (
            child(
                "second-owner",
                "default",
                vec![
                    owner("a-different-uid", None),
                    owner(PARENT_UID, Some(true)),
                ],
            ),
            true,
        ),
        // A namespaced parent's children live in its namespace.
        (
            child("elsewhere", "team-b", vec![owner(PARENT_UID, Some(true))]),
            false,
        ),
    ]
}

#[test]
fn render_and_the_live_host_select_the_same_observed_children() {
    let parent = parent();
    let selector = Parent {
        name: "orders",
        namespace: Some("default"),
        uid: PARENT_UID,
    };
    for (object, expected) in cases() {
        let name = object["metadata"]["name"].clone();
        let from_files = kubeplug_kit::render::is_observed(&parent, &object);
        let cached = Object::new(serde_json::from_value::<DynamicObject>(object).unwrap());
        let from_caches = kubeplug_operator::inputs::is_observed(&selector, &cached);
        assert_eq!(
            from_files, from_caches,
            "{name}: render and the live host disagree"
        );
        assert_eq!(from_caches, expected, "{name}");
    }
}
