//! The watch events of our own status writes, recognised at their source
//! so that they do not queue the parent again.
//!
//! A status write comes back through the parent's watch as a change, and
//! that change would reconcile the parent once more: a call whose only new
//! input is the status this plugin itself just returned. That call is
//! useless for a plugin whose status reports what it observed (everything
//! it could decide from reading its status back it could decide when it
//! returned it), and it is a third of the calls of a parent that converges
//! in two. So the status write's resourceVersion is kept per parent, and
//! the parent's watch event carrying exactly that resourceVersion queues
//! nothing: controller-runtime users filter the same events with a
//! generation-changed predicate, which also drops everyone else's status
//! writes; this drops only ours.
//!
//! Safe with the skip of unchanged inputs ([`super::unchanged`]): the next
//! call, whatever triggers it (a child, a related object, a spec change,
//! a requeue, a resync), sees the status we wrote, and its inputs differ
//! from any remembered call, so it is made. Any other change of the parent
//! has its own resourceVersion and queues it as before.
//!
//! Caveats: if the watch restarts and lists the parent at our write's
//! version, changes made between our read and our write are seen only by
//! the next call (a resync at the latest). A plugin that must act on the
//! status it wrote asks for a requeue.

use dashmap::DashMap;

use kubeplug_kube::informers::{Object, ObjectKey};

/// The resourceVersion of our latest status write per parent, until its
/// echo arrives.
#[derive(Default)]
pub struct Echoes {
    written: DashMap<ObjectKey, String>,
}

impl Echoes {
    /// Our status write of the parent at `key` was stored at `version`.
    pub fn wrote(&self, key: &ObjectKey, version: String) {
        self.written.insert(key.clone(), version);
    }

    /// True (once) if `parent`, at `key`, is the echo of our latest status
    /// write of it.
    pub fn is_echo(&self, key: &ObjectKey, parent: &Object) -> bool {
        let Some(version) = parent.metadata.resource_version.as_deref() else {
            return false;
        };
        self.written
            .remove_if(key, |_, written| written == version)
            .is_some()
    }

    /// The parent is gone.
    pub fn forget(&self, key: &ObjectKey) {
        self.written.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::{DynamicObject, ObjectMeta};

    fn parent(version: &str) -> Object {
        Object::new(DynamicObject {
            types: None,
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("a".into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            data: serde_json::Value::Null,
        })
    }

    #[test]
    fn the_echo_of_our_status_write_is_recognised_once() {
        let echoes = Echoes::default();
        let key = ObjectKey::new("ns", "a");
        echoes.wrote(&key, "12".into());
        assert!(!echoes.is_echo(&key, &parent("11")), "an earlier change");
        assert!(echoes.is_echo(&key, &parent("12")));
        assert!(!echoes.is_echo(&key, &parent("12")), "once");
    }

    #[test]
    fn someone_elses_change_is_no_echo() {
        let echoes = Echoes::default();
        let key = ObjectKey::new("ns", "a");
        assert!(!echoes.is_echo(&key, &parent("12")), "nothing written");
        echoes.wrote(&key, "12".into());
        assert!(!echoes.is_echo(&key, &parent("13")));
        echoes.forget(&key);
        assert!(!echoes.is_echo(&key, &parent("12")), "forgotten");
    }
}
