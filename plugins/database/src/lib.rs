//! `database`: a `Database` (`example.com/v1`) becomes a headless Service, a
//! StatefulSet and a credentials Secret; its status reports the phase and the
//! database's pods.
//!
//! The Secret is create-only: the host creates it once with a plain create
//! (an existing one counts as created) and never re-applies it, so the
//! password never rotates, not across replicas or restarts either. When the
//! Secret is observed the plugin returns it unchanged, so `render` shows what
//! is there.
//!
//! Writes of Databases are validated ([`admission`]) and converted between
//! `example.com/v1` and `example.com/v2` ([`convert`]) when the platform
//! serves those webhooks (`deploy/components/webhooks/database-v2.yaml`);
//! reconcile always reads v1.

// Deny, not forbid: the generated export glue is unsafe and allowed where
// it is expanded; everything written here stays safe.
#![deny(unsafe_code)]

pub mod admission;
pub mod convert;
mod spec;
mod status;
pub mod storage;
pub mod versions;

use std::collections::BTreeMap;

use kubeplug_sdk::k8s_openapi::ByteString;
use kubeplug_sdk::k8s_openapi::api::apps::v1::StatefulSet;
use kubeplug_sdk::k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kubeplug_sdk::serde_json::{Value, json};
use kubeplug_sdk::{
    AdmissionRequest, Context, Error, Event, LabelValue, Manifest, Plugin, Resource, Response,
    Verdict,
};
use serde::Deserialize;

pub use spec::{Database, DatabaseSpec, Engine};

/// Label keys that tie a database's pods to it. The selector of a StatefulSet
/// is immutable, so it holds only what never changes: the database's name.
const NAME_LABEL: &str = "app.kubernetes.io/name";
const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
const ENGINE_LABEL: &str = "example.com/engine";

/// The plugin.
pub struct DatabasePlugin;

/// The plugin's configuration (`config:` in its settings file).
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Pull the engines' images from this registry (a mirror, e.g.
    /// `mirror.example.com/library`) instead of Docker Hub.
    pub image_registry: Option<String>,
    /// One engine's registry, in place of `imageRegistry` for that engine
    /// (e.g. `{postgresql: pg.mirror.example.com}`).
    pub engine_registries: BTreeMap<Engine, String>,
}

impl Config {
    fn validate(&self) -> Result<(), Error> {
        let registries = self
            .image_registry
            .iter()
            .map(|r| ("imageRegistry".to_string(), r))
            .chain(
                self.engine_registries
                    .iter()
                    .map(|(e, r)| (format!("engineRegistries.{}", e.as_str()), r)),
            );
        for (field, registry) in registries {
            let valid = !registry.is_empty()
                && !registry.ends_with('/')
                && registry
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-_/:".contains(&b));
            if !valid {
                return Err(Error::InvalidConfig(format!(
                    "{field} must be a registry host and path without a trailing slash, got {registry:?}"
                )));
            }
        }
        Ok(())
    }

    /// The image of `engine` at `version`, from the configured registry.
    fn image(&self, engine: Engine, version: &str) -> String {
        match self
            .engine_registries
            .get(&engine)
            .or(self.image_registry.as_ref())
        {
            Some(registry) => format!("{registry}/{}:{version}", engine.image()),
            None => format!("{}:{version}", engine.image()),
        }
    }
}

fn selector_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_LABEL.to_string(), "database".to_string()),
        (INSTANCE_LABEL.to_string(), name.to_string()),
    ])
}

/// Built with `--features v2`: a second version of this plugin that differs
/// only in one label, for the live-upgrade acceptance tests.
const REVISION_LABEL: Option<(&str, &str)> = if cfg!(feature = "v2") {
    Some(("example.com/plugin-revision", "v2"))
} else {
    None
};

/// Version reported in the manifest.
const VERSION: &str = if cfg!(feature = "v2") {
    "0.2.0"
} else {
    env!("CARGO_PKG_VERSION")
};

fn labels(name: &str, engine: Engine) -> BTreeMap<String, String> {
    let mut labels = selector_labels(name);
    if let Some((k, v)) = REVISION_LABEL {
        labels.insert(k.into(), v.into());
    }
    labels.insert(MANAGED_BY_LABEL.into(), "kubeplug".into());
    labels.insert(ENGINE_LABEL.into(), engine.as_str().into());
    labels
}

fn meta(name: &str, namespace: &str, labels: &BTreeMap<String, String>) -> Value {
    json!({"name": name, "namespace": namespace, "labels": labels})
}

/// Name of the credentials Secret of database `name`.
pub fn secret_name(name: &str) -> String {
    format!("{name}-credentials")
}

/// A password from the host's entropy: 32 lowercase hex-ish characters.
fn password(entropy: &[u8]) -> Result<String, Error> {
    if entropy.len() < 16 {
        return Err(Error::Failed("host supplied too little entropy".into()));
    }
    const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzACDEFGHJKLMNPQRTUVWXY345679";
    Ok(entropy
        .iter()
        .take(24)
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect())
}

/// The part of an observed Secret the plugin keeps.
#[derive(Deserialize)]
struct SecretData {
    #[serde(default)]
    data: Option<BTreeMap<String, ByteString>>,
}

fn secret(ctx: &Context<Config>, db: &Database) -> Result<(Value, bool), Error> {
    let name = secret_name(ctx.name());
    let labels = labels(ctx.name(), db.spec.engine);
    let mut secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(&name, ctx.namespace(), &labels),
        "type": "Opaque",
    });
    if let Some(existing) = ctx.observed_named_as::<Secret, SecretData>(&name) {
        // Keep what is there; return only what we own so that server-side
        // apply keeps our fields and leaves others' alone.
        if let Some(data) = existing.data {
            secret["data"] = json!(data);
        }
        return Ok((secret, false));
    }
    let data = BTreeMap::from([
        (
            "username".to_string(),
            ByteString(db.spec.engine.user().as_bytes().to_vec()),
        ),
        (
            "password".to_string(),
            ByteString(password(&ctx.entropy)?.into_bytes()),
        ),
    ]);
    secret["data"] = json!(data);
    Ok((secret, true))
}

fn service(ctx: &Context<Config>, db: &Database) -> Value {
    let engine = db.spec.engine;
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(ctx.name(), ctx.namespace(), &labels(ctx.name(), engine)),
        "spec": {
            "clusterIP": "None",
            "selector": selector_labels(ctx.name()),
            "ports": [{
                "name": engine.as_str(),
                "port": engine.port(),
                "targetPort": engine.as_str(),
            }],
            "publishNotReadyAddresses": true,
        },
    })
}

fn stateful_set(ctx: &Context<Config>, db: &Database) -> Value {
    let engine = db.spec.engine;
    let labels = labels(ctx.name(), engine);
    let secret = secret_name(ctx.name());
    let env: Vec<Value> = engine
        .credential_env()
        .iter()
        .map(|(env, key)| {
            json!({
                "name": env,
                "valueFrom": {"secretKeyRef": {"name": secret, "key": key}},
            })
        })
        .collect();
    let container = json!({
        "name": engine.as_str(),
        "image": ctx.config.image(engine, &db.spec.version),
        "ports": [{"name": engine.as_str(), "containerPort": engine.port()}],
        "env": env,
        "readinessProbe": {
            "tcpSocket": {"port": engine.as_str()},
            "periodSeconds": 10,
        },
        "volumeMounts": [{"name": "data", "mountPath": engine.data_dir()}],
    });
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta(ctx.name(), ctx.namespace(), &labels),
        "spec": {
            "serviceName": ctx.name(),
            "replicas": db.spec.replicas,
            "selector": {"matchLabels": selector_labels(ctx.name())},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [container],
                    // Storage classes differ per cluster; data lives in an
                    // emptyDir until the spec grows a storage field.
                    "volumes": [{"name": "data", "emptyDir": {}}],
                },
            },
        },
    })
}

impl Plugin for DatabasePlugin {
    type Config = Config;

    fn manifest(config: &Self::Config) -> Result<Manifest, Error> {
        config.validate()?;
        Ok(Manifest::composite(
            "database",
            VERSION,
            Resource::namespaced("example.com", "v1", "Database", "databases"),
        )
        .child(Resource::of::<StatefulSet>())
        .child(Resource::of::<Service>())
        .child(Resource::of::<Secret>())
        .related(
            Resource::of::<Pod>(),
            &[
                (NAME_LABEL, LabelValue::Literal("database".into())),
                (INSTANCE_LABEL, LabelValue::ParentName),
            ],
        )
        // Its checks and the v1 <-> v2 conversion (admission.rs, convert.rs).
        .validates()
        .converts())
    }

    fn reconcile(ctx: &Context<Self::Config>) -> Result<Response, Error> {
        let db: Database = ctx.parent()?;
        db.spec.validate()?;
        let (secret, created) = secret(ctx, &db)?;
        let mut response = Response::default()
            .child(&service(ctx, &db))?
            .child(&stateful_set(ctx, &db))?
            .create_only_child(&secret)?
            .status(&status::status(ctx, &db))?;
        if created {
            response = response.event(Event::normal(
                "CredentialsCreated",
                format!("created Secret {}", secret_name(ctx.name())),
            ));
        }
        Ok(response)
    }

    fn validate(request: &AdmissionRequest<Self::Config>) -> Result<Verdict, Error> {
        Ok(admission::validate(request))
    }

    fn convert(
        objects: Vec<Value>,
        api_version: &str,
        _config: &Self::Config,
    ) -> Result<Vec<Value>, Error> {
        convert::convert(objects, api_version)
    }
}

kubeplug_sdk::export_plugin!(DatabasePlugin);
