//! A plugin that misbehaves on command, to prove the host survives it.
//!
//! Parent: `Hostile` (`test.kubeplug.io/v1`). `spec.behave` picks what a
//! reconcile does: `ok` (returns one ConfigMap), `loop` (spins forever),
//! `alloc` (grows memory without bound), `panic`, `malformed` (returns a child
//! that is not JSON), `error` (returns a typed error). The config key
//! `manifest` set to `panic` makes `manifest()` panic, for load-time checks.

use kubeplug_sdk::k8s_openapi::api::core::v1::ConfigMap;
use kubeplug_sdk::{Context, Error, Manifest, Plugin, Resource, Response};
use serde::Deserialize;

struct Hostile;

#[derive(Deserialize, Default)]
struct Config {
    #[serde(default)]
    manifest: Option<String>,
}

impl Plugin for Hostile {
    type Config = Config;

    fn manifest(config: &Config) -> Result<Manifest, Error> {
        if config.manifest.as_deref() == Some("panic") {
            panic!("hostile plugin asked to panic in manifest()");
        }
        Ok(Manifest::composite(
            "hostile",
            "0.1.0",
            Resource::namespaced("test.kubeplug.io", "v1", "Hostile", "hostiles"),
        )
        .child(Resource::of::<ConfigMap>()))
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
            _ => {
                let mut cm = ConfigMap::default();
                cm.metadata.name = Some(format!("{}-ok", ctx.name()));
                Response::default().child(&cm)
            }
        }
    }
}

kubeplug_sdk::export_plugin!(Hostile);
