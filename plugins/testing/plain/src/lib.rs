//! A test guest built against the bare `plugin` world of `wit/plugin.wit`,
//! without the optional `reads` export: what plugins built before it, or
//! by toolchains that only know `plugin`, look like. The host must load it
//! and hand it whole objects. A decorator of ConfigMaps that annotates each
//! with the size of the parent it was handed.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "plugin",
});

use exports::kubeplug::plugin::reconciler::Guest;
use kubeplug::plugin::types::{
    ApiResource, Error, FinalizeResponse, MetadataPatch, Mode, PluginManifest, Request, Response,
};

struct Plain;

impl Guest for Plain {
    fn manifest(_config: String) -> Result<PluginManifest, Error> {
        Ok(PluginManifest {
            name: "plain".into(),
            version: "0.1.0".into(),
            parent: ApiResource {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
                plural: "configmaps".into(),
                namespaced: true,
            },
            mode: Mode::Decorator,
            children: Vec::new(),
            related: Vec::new(),
            namespaces: Vec::new(),
            finalizer: None,
            resync_seconds: None,
        })
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        Ok(Response {
            children: Vec::new(),
            status: None,
            parent_patch: Some(MetadataPatch {
                labels: Vec::new(),
                annotations: vec![(
                    "plain/parent-bytes".into(),
                    request.parent.len().to_string(),
                )],
            }),
            requeue_after_seconds: None,
            events: Vec::new(),
        })
    }

    fn finalize(_request: Request) -> Result<FinalizeResponse, Error> {
        Ok(FinalizeResponse {
            done: true,
            requeue_after_seconds: None,
            events: Vec::new(),
        })
    }
}

export!(Plain);
