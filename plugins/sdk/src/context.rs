//! [`Context`]: the request of one reconcile, with typed accessors.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::Error;
use crate::bindings::kubeplug::plugin::types as wit;

/// What the host observed for one parent, plus the plugin's configuration.
#[derive(Debug, Clone)]
pub struct Context<C> {
    /// The parent object.
    pub parent: Value,
    /// Observed children of the parent (all declared child kinds).
    pub observed: Vec<Value>,
    /// Related objects selected per the manifest.
    pub related: Vec<Value>,
    /// The plugin's configuration.
    pub config: C,
    /// Current time, RFC 3339 UTC. Use it instead of a clock.
    pub now: String,
    /// Random bytes from the host, fresh for every call (see the WIT).
    pub entropy: Vec<u8>,
}

impl<C> Context<C> {
    pub(crate) fn from_wit(request: wit::Request, config: C) -> Result<Self, Error> {
        let parse = |what: &str, text: &str| {
            serde_json::from_str::<Value>(text)
                .map_err(|e| Error::InvalidInput(format!("{what} is not JSON: {e}")))
        };
        Ok(Context {
            parent: parse("parent", &request.parent)?,
            observed: request
                .observed
                .iter()
                .map(|o| parse("observed object", o))
                .collect::<Result<_, _>>()?,
            related: request
                .related
                .iter()
                .map(|o| parse("related object", o))
                .collect::<Result<_, _>>()?,
            config,
            now: request.now,
            entropy: request.entropy,
        })
    }

    /// A context built by hand, for unit tests of plugin logic.
    pub fn new(parent: Value, config: C, now: &str) -> Self {
        Context {
            parent,
            observed: Vec::new(),
            related: Vec::new(),
            config,
            now: now.into(),
            entropy: vec![0; 32],
        }
    }

    /// The parent as `T` (a `k8s-openapi` type or your own CRD struct).
    pub fn parent<T: DeserializeOwned>(&self) -> Result<T, Error> {
        T::deserialize(&self.parent).map_err(|e| Error::InvalidInput(format!("parent: {e}")))
    }

    /// The parent's `metadata.name`.
    pub fn name(&self) -> &str {
        self.parent["metadata"]["name"].as_str().unwrap_or_default()
    }

    /// The parent's `metadata.namespace` (empty for cluster-scoped parents).
    pub fn namespace(&self) -> &str {
        self.parent["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
    }

    /// The parent's `metadata.generation`, for `status.observedGeneration`.
    pub fn generation(&self) -> Option<i64> {
        self.parent["metadata"]["generation"].as_i64()
    }

    /// The parent's current `.status` (null when it has none).
    pub fn status(&self) -> &Value {
        &self.parent["status"]
    }

    /// Observed children of type `K`.
    ///
    /// This deserializes the whole `k8s-openapi` type, which links its
    /// deserializer and those of every type it holds into the plugin (a
    /// `Pod` or `StatefulSet` costs some 100 KiB of Wasm). To read a few
    /// fields, prefer [`Context::observed_as`] with a small struct of your
    /// own.
    pub fn observed<K: k8s_openapi::Resource + DeserializeOwned>(&self) -> Vec<K> {
        of_type::<K, K>(&self.observed)
    }

    /// Observed children of kind `K` (a `k8s-openapi` type, used only for
    /// its `apiVersion` and `kind`), read as `T`: your own struct with the
    /// fields you need (see [`Meta`](crate::Meta)), or a `serde_json::Value`.
    ///
    /// ```
    /// use kubeplug_sdk::Context;
    /// use kubeplug_sdk::k8s_openapi::api::apps::v1::Deployment;
    /// use serde::Deserialize;
    ///
    /// #[derive(Deserialize)]
    /// struct DeploymentView {
    ///     status: Option<StatusView>,
    /// }
    /// #[derive(Deserialize)]
    /// #[serde(rename_all = "camelCase")]
    /// struct StatusView {
    ///     ready_replicas: Option<i32>,
    /// }
    ///
    /// fn ready<C>(ctx: &Context<C>) -> i32 {
    ///     ctx.observed_as::<Deployment, DeploymentView>()
    ///         .iter()
    ///         .filter_map(|d| d.status.as_ref()?.ready_replicas)
    ///         .sum()
    /// }
    /// ```
    pub fn observed_as<K: k8s_openapi::Resource, T: DeserializeOwned>(&self) -> Vec<T> {
        of_type::<K, T>(&self.observed)
    }

    /// The observed child of type `K` named `name`, if any. See
    /// [`Context::observed`] on size.
    pub fn observed_named<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        name: &str,
    ) -> Option<K> {
        self.observed_named_as::<K, K>(name)
    }

    /// The observed child of kind `K` named `name`, if any, read as `T`
    /// (see [`Context::observed_as`]).
    pub fn observed_named_as<K: k8s_openapi::Resource, T: DeserializeOwned>(
        &self,
        name: &str,
    ) -> Option<T> {
        self.observed
            .iter()
            .filter(|o| is_type::<K>(o) && o["metadata"]["name"] == name)
            .find_map(|o| T::deserialize(o).ok())
    }

    /// Related objects of type `K`. See [`Context::observed`] on size.
    pub fn related<K: k8s_openapi::Resource + DeserializeOwned>(&self) -> Vec<K> {
        of_type::<K, K>(&self.related)
    }

    /// Related objects of kind `K`, read as `T` (see
    /// [`Context::observed_as`]).
    pub fn related_as<K: k8s_openapi::Resource, T: DeserializeOwned>(&self) -> Vec<T> {
        of_type::<K, T>(&self.related)
    }

    /// The related object of kind `K` named `name` in the parent's
    /// namespace (or cluster-scoped), read as `T`: how a plugin reads an
    /// object its parent references by name ([`crate::Reference::named`]).
    /// `None` when the object does not exist (or does not read as `T`).
    pub fn related_named_as<K: k8s_openapi::Resource, T: DeserializeOwned>(
        &self,
        name: &str,
    ) -> Option<T> {
        let namespace = self.namespace();
        self.related
            .iter()
            .filter(|o| is_type::<K>(o) && o["metadata"]["name"] == name)
            .filter(|o| {
                let ns = o["metadata"]["namespace"].as_str().unwrap_or_default();
                ns.is_empty() || ns == namespace
            })
            .find_map(|o| T::deserialize(o).ok())
    }
}

fn is_type<K: k8s_openapi::Resource>(object: &Value) -> bool {
    object["apiVersion"] == K::API_VERSION && object["kind"] == K::KIND
}

/// Objects of kind `K` read as `T`; objects that do not deserialize are
/// skipped, since the API server has validated them and a plugin cannot do
/// better.
fn of_type<K: k8s_openapi::Resource, T: DeserializeOwned>(objects: &[Value]) -> Vec<T> {
    objects
        .iter()
        .filter(|o| is_type::<K>(o))
        .filter_map(|o| T::deserialize(o).ok())
        .collect()
}
