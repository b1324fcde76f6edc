//! A plugin that misbehaves on command, to prove the host survives it.
//!
//! Parent: `Hostile` (`test.kubeplug.io/v1`). `spec.behave` picks what a
//! reconcile does: `ok` (returns one ConfigMap), `loop` (spins forever),
//! `alloc` (grows memory without bound), `panic`, `malformed` (returns a child
//! that is not JSON), `error` (returns a typed error), `undeclared` (returns a
//! Secret, a kind its manifest does not declare).
//!
//! Config keys: `manifest: panic` makes `manifest()` panic (load-time
//! checks); `name` renames the plugin; `claim: databases` makes it claim the
//! `Database` kind (to test that two plugins cannot own one parent kind);
//! `finalizer: true` declares the finalizer `test.kubeplug.io/hold`, which
//! `finalize` releases only once the parent is annotated
//! `test.kubeplug.io/release: "true"`.

use kubeplug_sdk::k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kubeplug_sdk::{Context, Error, FinalizeResponse, Manifest, Plugin, Resource, Response};
use serde::Deserialize;

/// The plugin (public so a native build, where nothing exports it, still uses it).
pub struct Hostile;

/// The configuration keys listed in the module docs.
#[derive(Deserialize, Default)]
pub struct Config {
    #[serde(default)]
    manifest: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    claim: Option<String>,
    #[serde(default)]
    finalizer: bool,
}

const FINALIZER: &str = "test.kubeplug.io/hold";
const RELEASE: &str = "test.kubeplug.io/release";

impl Plugin for Hostile {
    type Config = Config;

    fn manifest(config: &Config) -> Result<Manifest, Error> {
        if config.manifest.as_deref() == Some("panic") {
            panic!("hostile plugin asked to panic in manifest()");
        }
        let parent = match config.claim.as_deref() {
            Some("databases") => Resource::namespaced("example.com", "v1", "Database", "databases"),
            _ => Resource::namespaced("test.kubeplug.io", "v1", "Hostile", "hostiles"),
        };
        let name = config.name.as_deref().unwrap_or("hostile");
        let manifest =
            Manifest::composite(name, "0.1.0", parent).child(Resource::of::<ConfigMap>());
        Ok(if config.finalizer {
            manifest.finalizer(FINALIZER)
        } else {
            manifest
        })
    }

    fn reconcile(ctx: &Context<Config>) -> Result<Response, Error> {
        let behave = ctx.parent["spec"]["behave"].as_str().unwrap_or("ok");
        match behave {
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "alloc" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "panic" => panic!("hostile plugin asked to panic"),
            "error" => Err(Error::Failed("hostile plugin asked to fail".into())),
            "malformed" => Ok(Response::default().child_json("{not json")),
            "undeclared" => {
                let mut secret = Secret::default();
                secret.metadata.name = Some(format!("{}-smuggled", ctx.name()));
                Response::default().child(&secret)
            }
            _ => {
                let mut cm = ConfigMap::default();
                cm.metadata.name = Some(format!("{}-ok", ctx.name()));
                Response::default().child(&cm)
            }
        }
    }

    fn finalize(ctx: &Context<Config>) -> Result<FinalizeResponse, Error> {
        if ctx.parent["metadata"]["annotations"][RELEASE] == "true" {
            Ok(FinalizeResponse::done())
        } else {
            Ok(FinalizeResponse::pending(1))
        }
    }
}

kubeplug_sdk::export_plugin!(Hostile);
