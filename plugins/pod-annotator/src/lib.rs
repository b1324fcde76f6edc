//! `pod-annotator`: a decorator that stamps Pods in the configured namespaces
//! with `example.com/injected: "true"` and the time it did so, once.
//!
//! Configuration: `{"namespaces": ["team-a", "team-b"]}`. An empty or missing
//! list is refused: stamping every Pod of a cluster is never what was meant.

// Deny, not forbid: the generated export glue is unsafe and allowed where
// it is expanded; everything written here stays safe.
#![deny(unsafe_code)]

use kubeplug_sdk::k8s_openapi::api::core::v1::Pod;
use kubeplug_sdk::{Context, Error, Event, Manifest, Meta, Plugin, Resource, Response};
use serde::Deserialize;

/// Set to `"true"` on stamped pods.
pub const INJECTED: &str = "example.com/injected";
/// When the pod was stamped (the request's `now`).
pub const INJECTED_AT: &str = "example.com/injected-at";

/// The plugin's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub namespaces: Vec<String>,
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// The part of the parent Pod the plugin reads (the whole `Pod` type would
/// link its deserializer into the plugin).
#[derive(Debug, Deserialize)]
struct PodView {
    #[serde(default)]
    metadata: Meta,
}

/// The plugin.
pub struct PodAnnotator;

impl Plugin for PodAnnotator {
    type Config = Config;

    fn manifest(config: &Config) -> Result<Manifest, Error> {
        if config.namespaces.is_empty() {
            return Err(Error::InvalidConfig(
                "`namespaces` must name at least one namespace".into(),
            ));
        }
        if let Some(bad) = config.namespaces.iter().find(|n| !is_dns_label(n)) {
            return Err(Error::InvalidConfig(format!(
                "`namespaces`: {bad:?} is not a valid namespace name"
            )));
        }
        Ok(Manifest::decorator(
            "pod-annotator",
            env!("CARGO_PKG_VERSION"),
            Resource::of::<Pod>(),
        )
        .namespaces(config.namespaces.iter().cloned())
        // It reads a Pod's annotations only: the host caches Pods
        // metadata-only for it.
        .metadata_only(Resource::of::<Pod>()))
    }

    fn reconcile(ctx: &Context<Config>) -> Result<Response, Error> {
        // The host filters by namespace too; checking here keeps `render`
        // honest and the plugin safe under any host.
        if !ctx.config.namespaces.iter().any(|n| n == ctx.namespace()) {
            return Ok(Response::default());
        }
        let pod: PodView = ctx.parent()?;
        let stamped = pod
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(INJECTED));
        if stamped {
            return Ok(Response::default());
        }
        Ok(Response::default()
            .annotation(INJECTED, "true")
            .annotation(INJECTED_AT, &ctx.now)
            .event(Event::normal(
                "Annotated",
                format!("stamped pod {} with {INJECTED}", ctx.name()),
            )))
    }
}

kubeplug_sdk::export_plugin!(PodAnnotator);
