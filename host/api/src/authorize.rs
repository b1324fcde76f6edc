//! Delegated authorization: the cluster's RBAC decides, through a
//! SubjectAccessReview per (user, request) pair, cached briefly as
//! kube-apiserver's delegating authorizer does.

use std::collections::BTreeMap;

use dashmap::DashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};

use crate::requestheader::UserInfo;

/// What a request does, in RBAC's terms (resources only: discovery is
/// public).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// API group of the resource (this API's, or a parent's for previews).
    pub group: String,
    pub verb: String,
    pub resource: String,
    /// A subresource (`details` of `plugins`), or none.
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// How long a decision is reused (kube-apiserver: 10 s allowed, 10 s denied).
const TTL: Duration = Duration::from_secs(10);

/// A decision is for a user as the front proxy named them (name, uid,
/// groups and extra: RBAC, webhooks and impersonation rules may decide on
/// any of them) and what they asked.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    name: String,
    uid: Option<String>,
    groups: Vec<String>,
    extra: BTreeMap<String, Vec<String>>,
    what: Attributes,
}

impl Key {
    fn new(user: &UserInfo, what: &Attributes) -> Key {
        Key {
            name: user.name.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
            what: what.clone(),
        }
    }
}

/// Decisions kept at most: the previews' rate limits bound how fast new
/// keys arrive; this bounds what a burst of them can hold (a few MiB).
const MAX_ENTRIES: usize = 10_000;

pub struct Authorizer {
    client: kube::Client,
    /// Decisions and when they were made, shared by every request's task.
    cache: DashMap<Key, (bool, Instant)>,
}

/// The API server did not answer a SubjectAccessReview.
#[derive(Debug, thiserror::Error)]
#[error("SubjectAccessReview failed: {0}")]
pub struct AccessReviewError(pub kube::Error);

impl Authorizer {
    pub fn new(client: kube::Client) -> Self {
        Authorizer {
            client,
            cache: DashMap::new(),
        }
    }

    /// Ok(true) if RBAC allows `user` to do `what`.
    pub async fn allowed(
        &self,
        user: &UserInfo,
        what: &Attributes,
    ) -> Result<bool, AccessReviewError> {
        let key = Key::new(user, what);
        if let Some(entry) = self.cache.get(&key)
            && entry.1.elapsed() < TTL
        {
            return Ok(entry.0);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
                extra: Some(user.extra.clone()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(what.group.clone()),
                    resource: Some(what.resource.clone()),
                    subresource: what.subresource.clone(),
                    verb: Some(what.verb.clone()),
                    namespace: what.namespace.clone(),
                    name: what.name.clone(),
                    ..Default::default()
                }),
                non_resource_attributes: None,
            },
            ..Default::default()
        };
        let api: kube::Api<SubjectAccessReview> = kube::Api::all(self.client.clone());
        let answer = api
            .create(&kube::api::PostParams::default(), &review)
            .await
            .map_err(AccessReviewError)?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        // Concurrent requests may each add one past the bound: it stays a
        // bound on memory all the same.
        self.cache.retain(|_, (_, at)| at.elapsed() < TTL);
        if self.cache.len() >= MAX_ENTRIES {
            self.cache.clear();
        }
        self.cache.insert(key, (allowed, Instant::now()));
        Ok(allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(uid: Option<&str>, extra: &[(&str, &str)]) -> UserInfo {
        UserInfo {
            name: "alice".into(),
            uid: uid.map(String::from),
            groups: vec!["system:authenticated".into()],
            extra: extra
                .iter()
                .map(|(k, v)| (k.to_string(), vec![v.to_string()]))
                .collect(),
        }
    }

    #[test]
    fn a_decision_is_never_reused_for_another_uid_or_other_extra() {
        let what = Attributes {
            group: "kubeplug.io".into(),
            verb: "get".into(),
            resource: "plugins".into(),
            subresource: None,
            namespace: None,
            name: None,
        };
        let plain = Key::new(&user(None, &[]), &what);
        assert_eq!(plain, Key::new(&user(None, &[]), &what));
        assert_ne!(plain, Key::new(&user(Some("u-1"), &[]), &what));
        assert_ne!(
            Key::new(&user(Some("u-1"), &[]), &what),
            Key::new(&user(Some("u-2"), &[]), &what)
        );
        assert_ne!(
            plain,
            Key::new(&user(None, &[("scopes.example.com", "read")]), &what)
        );
        let details = Attributes {
            subresource: Some("details".into()),
            ..what.clone()
        };
        assert_ne!(plain, Key::new(&user(None, &[]), &details));
    }
}
