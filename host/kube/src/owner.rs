//! Who controls an object: its one ownerReference with `controller: true`
//! (the API server allows at most one). Every path that asks which parent
//! a child belongs to (the triggers that map a child to its parent, the
//! children a parent observes, the clash check before a write) looks it up
//! here.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// The controller ownerReference in `meta`, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(name: &str, controller: Option<bool>) -> OwnerReference {
        OwnerReference {
            api_version: "example.com/v1".into(),
            kind: "Database".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller,
            block_owner_deletion: None,
        }
    }

    #[test]
    fn the_controller_is_the_reference_marked_controller_not_the_first() {
        let meta = ObjectMeta {
            owner_references: Some(vec![
                reference("a", None),
                reference("b", Some(false)),
                reference("c", Some(true)),
            ]),
            ..ObjectMeta::default()
        };
        assert_eq!(controller_of(&meta).map(|r| r.name.as_str()), Some("c"));
        let uncontrolled = ObjectMeta {
            owner_references: Some(vec![reference("a", Some(false))]),
            ..ObjectMeta::default()
        };
        assert_eq!(controller_of(&uncontrolled), None);
        assert_eq!(controller_of(&ObjectMeta::default()), None);
    }
}
