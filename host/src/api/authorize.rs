//! Delegated authorization: the cluster's RBAC decides, through a
//! SubjectAccessReview per (user, request) pair, cached briefly as
//! kube-apiserver's delegating authorizer does.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};

use super::requestheader::UserInfo;

/// What a request does, in RBAC's terms (resources only: discovery is
/// public).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// API group of the resource (this API's, or a parent's for previews).
    pub group: String,
    pub verb: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// How long a decision is reused (kube-apiserver: 10 s allowed, 10 s denied).
const TTL: Duration = Duration::from_secs(10);

/// A decision is for a user, their groups and what they asked.
type Key = (String, Vec<String>, Attributes);

pub struct Authorizer {
    client: kube::Client,
    /// Decisions and when they were made.
    cache: Mutex<HashMap<Key, (bool, Instant)>>,
}

impl Authorizer {
    pub fn new(client: kube::Client) -> Self {
        Authorizer {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Ok(true) if RBAC allows `user` to do `what`.
    pub async fn allowed(&self, user: &UserInfo, what: &Attributes) -> Result<bool, String> {
        let key = (user.name.clone(), user.groups.clone(), what.clone());
        if let Some((allowed, at)) = self.cache.lock().expect("authz cache").get(&key)
            && at.elapsed() < TTL
        {
            return Ok(*allowed);
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
            .map_err(|e| format!("SubjectAccessReview failed: {e}"))?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        let mut cache = self.cache.lock().expect("authz cache");
        cache.retain(|_, (_, at)| at.elapsed() < TTL);
        cache.insert(key, (allowed, Instant::now()));
        Ok(allowed)
    }
}
