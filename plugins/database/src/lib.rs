//! `database`: a `Database` (`example.com/v1`) becomes a headless Service, a
//! StatefulSet and a credentials Secret; its status reports the phase and the
//! database's pods.
//!
//! The Secret is create-only: the host creates it once with a plain create
//! (an existing one counts as created) and never re-applies it, so the
//! password never rotates, not across replicas or restarts either. When the
//! Secret is observed the plugin returns it unchanged, so `render` shows what
//! is there.

mod spec;
mod status;

use std::collections::BTreeMap;

use kubeplug_sdk::k8s_openapi::ByteString;
use kubeplug_sdk::k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use kubeplug_sdk::k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, Pod, PodSpec,
    PodTemplateSpec, Probe, Secret, SecretKeySelector, Service, ServicePort, ServiceSpec,
    TCPSocketAction, Volume, VolumeMount,
};
use kubeplug_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kubeplug_sdk::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kubeplug_sdk::{Context, Error, Event, LabelValue, Manifest, Plugin, Resource, Response};
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
}

impl Config {
    fn validate(&self) -> Result<(), Error> {
        if let Some(registry) = &self.image_registry {
            let valid = !registry.is_empty()
                && !registry.ends_with('/')
                && registry
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-_/:".contains(&b));
            if !valid {
                return Err(Error::InvalidConfig(format!(
                    "imageRegistry must be a registry host and path without a trailing slash, got {registry:?}"
                )));
            }
        }
        Ok(())
    }

    /// The image of `engine` at `version`, from the configured registry.
    fn image(&self, engine: Engine, version: &str) -> String {
        match &self.image_registry {
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

fn meta(name: String, namespace: &str, labels: &BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(namespace.to_string()),
        labels: Some(labels.clone()),
        ..Default::default()
    }
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

fn secret(ctx: &Context<Config>, db: &Database) -> Result<(Secret, bool), Error> {
    let name = secret_name(ctx.name());
    if let Some(existing) = ctx.observed_named_as::<Secret, SecretData>(&name) {
        // Keep what is there; return only what we own so that server-side
        // apply keeps our fields and leaves others' alone.
        let kept = Secret {
            metadata: meta(name, ctx.namespace(), &labels(ctx.name(), db.spec.engine)),
            data: existing.data,
            type_: Some("Opaque".into()),
            ..Default::default()
        };
        return Ok((kept, false));
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
    let secret = Secret {
        metadata: meta(name, ctx.namespace(), &labels(ctx.name(), db.spec.engine)),
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    Ok((secret, true))
}

fn service(ctx: &Context<Config>, db: &Database) -> Service {
    let engine = db.spec.engine;
    Service {
        metadata: meta(
            ctx.name().to_string(),
            ctx.namespace(),
            &labels(ctx.name(), engine),
        ),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(selector_labels(ctx.name())),
            ports: Some(vec![ServicePort {
                name: Some(engine.as_str().into()),
                port: engine.port(),
                target_port: Some(IntOrString::String(engine.as_str().into())),
                ..Default::default()
            }]),
            publish_not_ready_addresses: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn secret_env(env: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: env.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn stateful_set(ctx: &Context<Config>, db: &Database) -> StatefulSet {
    let engine = db.spec.engine;
    let labels = labels(ctx.name(), engine);
    let secret = secret_name(ctx.name());
    let env = engine
        .credential_env()
        .iter()
        .map(|(env, key)| secret_env(env, &secret, key))
        .collect();
    let container = Container {
        name: engine.as_str().into(),
        image: Some(ctx.config.image(engine, &db.spec.version)),
        ports: Some(vec![ContainerPort {
            name: Some(engine.as_str().into()),
            container_port: engine.port(),
            ..Default::default()
        }]),
        env: Some(env),
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String(engine.as_str().into()),
                host: None,
            }),
            period_seconds: Some(10),
            ..Default::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: "data".into(),
            mount_path: engine.data_dir().into(),
            ..Default::default()
        }]),
        ..Default::default()
    };
    StatefulSet {
        metadata: meta(ctx.name().to_string(), ctx.namespace(), &labels),
        spec: Some(StatefulSetSpec {
            service_name: Some(ctx.name().to_string()),
            replicas: Some(db.spec.replicas),
            selector: LabelSelector {
                match_labels: Some(selector_labels(ctx.name())),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels.clone()),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    // Storage classes differ per cluster; data lives in an
                    // emptyDir until the spec grows a storage field.
                    volumes: Some(vec![Volume {
                        name: "data".into(),
                        empty_dir: Some(EmptyDirVolumeSource::default()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
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
        ))
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
}

kubeplug_sdk::export_plugin!(DatabasePlugin);
