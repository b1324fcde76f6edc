//! Skipping a call whose inputs are those of the parent's last call that
//! wrote nothing: a plugin is a pure function of its request, so the same
//! request gives the same answer, which would write nothing again.
//!
//! What counts (the [`Fingerprint`]): the plugin's digest and config, the
//! grant it runs under, and the request's parent, observed children and
//! related objects as the caches hold them, each without its
//! `metadata.resourceVersion` (the caches already drop `managedFields`
//! but the host's own status entries, see
//! [`kubeplug_kube::informers::Object`]). Not counted: `now` and
//! `entropy`, fresh for every call; a plugin that decides by the clock asks
//! for a requeue, and a call that asked for one is never remembered.
//!
//! Guarantees: a parent is only skipped when its last call succeeded, its
//! plan wrote nothing (no child created, updated or pruned, no status, no
//! parent patch) and asked for no requeue. Why "wrote nothing" and not
//! "was fully written": after a write, the same inputs can come back from
//! someone reverting it before its echo was reconciled, and that drift
//! must be repaired. Forgotten: when the parent is gone, when a call is
//! made (so a failure leaves nothing to match), at a resync, when this
//! replica loses leadership and when the plugin is upgraded or rolled back.
//! Never consulted while a shadow runs (it compares live decisions) or for
//! a parent being deleted (`finalize` is always called).

use dashmap::DashMap;
use sha2::{Digest, Sha256};

use kubeplug_core::policy::Effective;
use kubeplug_kube::informers::ObjectKey;
use kubeplug_runtime::{Plugin, Request};

/// The hash of everything a call reads (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint([u8; 32]);

/// The object's text without its `"resourceVersion":"…"` entry. The first
/// occurrence is the metadata's: `apiVersion`, `kind` and `metadata` come
/// first in a cached object's text, and a quote inside a string value is
/// escaped, so the pattern cannot start inside one.
fn without_resource_version(text: &str) -> (&str, &str) {
    const KEY: &str = "\"resourceVersion\":\"";
    let Some(start) = text.find(KEY) else {
        return (text, "");
    };
    let value = start + KEY.len();
    match text[value..].find('"') {
        Some(end) => (&text[..start], &text[value + end + 1..]),
        None => (text, ""),
    }
}

fn object_digest(text: &str) -> [u8; 32] {
    let (before, after) = without_resource_version(text);
    let mut h = Sha256::new();
    h.update((before.len() as u64).to_le_bytes());
    h.update(before);
    h.update(after);
    h.finalize().into()
}

/// Each object's digest, in a fixed order: the caches list in no promised
/// order.
fn set_digest(h: &mut Sha256, texts: &[std::sync::Arc<str>]) {
    let mut digests: Vec<[u8; 32]> = texts.iter().map(|t| object_digest(t)).collect();
    digests.sort_unstable();
    h.update((digests.len() as u64).to_le_bytes());
    for d in digests {
        h.update(d);
    }
}

impl Fingerprint {
    /// The fingerprint of calling `plugin` with `request` under the grant
    /// whose digest is `grant`.
    pub fn of(plugin: &Plugin, grant: &[u8; 32], request: &Request) -> Fingerprint {
        Self::of_parts(plugin.digest(), plugin.config(), grant, request)
    }

    /// The fingerprint of `request` alone (no plugin, no grant): for tests
    /// that build a reconcile's decision without a Wasm engine.
    #[cfg(test)]
    pub(crate) fn of_request(request: &Request) -> Fingerprint {
        Self::of_parts("", "", &[0; 32], request)
    }

    fn of_parts(digest: &str, config: &str, grant: &[u8; 32], request: &Request) -> Fingerprint {
        let mut h = Sha256::new();
        for part in [digest, config] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        h.update(grant);
        h.update(object_digest(&request.parent));
        set_digest(&mut h, &request.observed);
        set_digest(&mut h, &request.related);
        Fingerprint(h.finalize().into())
    }
}

/// The fingerprint of each parent's last call that wrote nothing, shared by
/// the plugin's workers.
pub struct LastCalls {
    grant: [u8; 32],
    unchanged: DashMap<ObjectKey, Fingerprint>,
}

impl LastCalls {
    /// For a plugin acting under `grant` (fixed for a controller's life).
    pub fn new(grant: &Effective) -> Self {
        LastCalls {
            grant: Sha256::digest(format!("{grant:?}")).into(),
            unchanged: DashMap::new(),
        }
    }

    /// The fingerprint of calling `plugin` with `request`.
    pub fn fingerprint(&self, plugin: &Plugin, request: &Request) -> Fingerprint {
        Fingerprint::of(plugin, &self.grant, request)
    }

    /// True if the parent's last call that wrote nothing had `inputs`.
    pub fn unchanged(&self, key: &ObjectKey, inputs: &Fingerprint) -> bool {
        self.unchanged.get(key).is_some_and(|last| *last == *inputs)
    }

    /// A call with `inputs` succeeded and wrote nothing.
    pub fn wrote_nothing(&self, key: &ObjectKey, inputs: Fingerprint) {
        self.unchanged.insert(key.clone(), inputs);
    }

    /// Call the plugin for this parent next time, whatever its inputs.
    pub fn forget(&self, key: &ObjectKey) {
        self.unchanged.remove(key);
    }

    /// Call the plugin for every parent next time.
    pub fn forget_all(&self) {
        self.unchanged.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn text(rv: &str, spec: &str) -> Arc<str> {
        format!(
            r#"{{"apiVersion":"v1","kind":"X","metadata":{{"name":"a","resourceVersion":"{rv}"}},"spec":{spec}}}"#
        )
        .into()
    }

    fn request(parent: Arc<str>, observed: Vec<Arc<str>>) -> Request {
        Request::new(parent, observed, Vec::new())
    }

    fn digest(r: &Request) -> Fingerprint {
        Fingerprint::of_parts("sha256:1", "{}", &[0; 32], r)
    }

    #[test]
    fn a_new_plugin_digest_config_or_grant_changes_the_fingerprint() {
        let r = request(text("1", "{}"), vec![]);
        let base = digest(&r);
        assert_ne!(base, Fingerprint::of_parts("sha256:2", "{}", &[0; 32], &r));
        assert_ne!(
            base,
            Fingerprint::of_parts("sha256:1", "{\"a\":1}", &[0; 32], &r)
        );
        assert_ne!(base, Fingerprint::of_parts("sha256:1", "{}", &[1; 32], &r));
    }

    #[test]
    fn a_resource_version_only_change_keeps_the_fingerprint() {
        let a = request(text("1", "{}"), vec![text("7", "1")]);
        let b = request(text("2", "{}"), vec![text("9", "1")]);
        assert_eq!(digest(&a), digest(&b), "now and entropy differ too");
    }

    #[test]
    fn a_changed_parent_child_or_related_object_changes_the_fingerprint() {
        let base = request(text("1", "{}"), vec![text("7", "1")]);
        let parent = request(text("1", r#"{"x":1}"#), vec![text("7", "1")]);
        let child = request(text("1", "{}"), vec![text("7", "2")]);
        let more = request(text("1", "{}"), vec![text("7", "1"), text("8", "3")]);
        let related = Request::new(text("1", "{}"), vec![text("7", "1")], vec![text("3", "1")]);
        for other in [&parent, &child, &more, &related] {
            assert_ne!(digest(&base), digest(other));
        }
    }

    #[test]
    fn the_order_the_caches_list_children_in_does_not_matter() {
        let a = request(text("1", "{}"), vec![text("7", "1"), text("8", "2")]);
        let b = request(text("1", "{}"), vec![text("8", "2"), text("7", "1")]);
        assert_eq!(digest(&a), digest(&b));
    }

    #[test]
    fn a_resource_version_in_the_body_is_part_of_the_content() {
        let a = text("1", r#"{"ref":{"resourceVersion":"5"}}"#);
        let b = text("1", r#"{"ref":{"resourceVersion":"6"}}"#);
        assert_ne!(object_digest(&a), object_digest(&b));
    }

    #[test]
    fn a_parent_is_skipped_only_with_the_inputs_of_its_last_call_that_wrote_nothing() {
        let last = LastCalls {
            grant: [0; 32],
            unchanged: DashMap::new(),
        };
        let key = ObjectKey::new("ns", "a");
        let (one, two) = (Fingerprint([1; 32]), Fingerprint([2; 32]));
        assert!(!last.unchanged(&key, &one), "never called");
        last.wrote_nothing(&key, one);
        assert!(last.unchanged(&key, &one));
        assert!(!last.unchanged(&key, &two), "inputs changed");
        assert!(!last.unchanged(&ObjectKey::new("ns", "b"), &one));
        last.forget(&key);
        assert!(!last.unchanged(&key, &one), "forgotten: a call, a deletion");
        last.wrote_nothing(&key, one);
        last.forget_all();
        assert!(
            !last.unchanged(&key, &one),
            "forgotten: resync, leadership, upgrade"
        );
    }
}
