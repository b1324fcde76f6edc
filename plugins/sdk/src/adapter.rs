//! Glue between the generated bindings and [`Plugin`]; used by
//! [`export_plugin!`](crate::export_plugin) only.

use crate::bindings::exports::kubeplug::plugin::admission as wit_admission;
use crate::bindings::exports::kubeplug::plugin::references as wit_references;
use crate::bindings::kubeplug::plugin::types as wit;
use crate::{AdmissionRequest, Context, Error, Plugin};

impl From<Error> for wit::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::InvalidConfig(m) => wit::Error::InvalidConfig(m),
            Error::InvalidInput(m) => wit::Error::InvalidInput(m),
            Error::Failed(m) => wit::Error::Failed(m),
        }
    }
}

/// Where a panic's message goes. Under WASI (wasm32-wasip2) std prints it to
/// stderr, which the host captures. The shipped plugins are built without
/// WASI (wasm32-unknown-unknown: an instance with no WASI imports costs the
/// host a few microseconds less per call), where std prints nowhere, so the
/// message is sent as an error log instead and the host reports it with the
/// trap. Set on every entry: each call runs in a fresh instance.
fn entered() {
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    std::panic::set_hook(Box::new(|info| crate::log::error(&info.to_string(), &[])));
}

fn parse_config<P: Plugin>(config: &str) -> Result<P::Config, Error> {
    let config = if config.trim().is_empty() {
        "{}"
    } else {
        config
    };
    serde_json::from_str(config).map_err(|e| Error::InvalidConfig(e.to_string()))
}

pub fn manifest<P: Plugin>(config: &str) -> Result<wit::PluginManifest, wit::Error> {
    entered();
    let config = parse_config::<P>(config)?;
    Ok(P::manifest(&config)?.into_wit())
}

/// What [`crate::Manifest::metadata_only`] declared; nothing when the
/// config or manifest is refused (`manifest` reports that).
pub fn metadata_only<P: Plugin>(config: &str) -> Vec<wit::ApiResource> {
    entered();
    parse_config::<P>(config)
        .and_then(|config| P::manifest(&config))
        .map(|m| m.metadata_only.into_iter().map(|r| r.into_wit()).collect())
        .unwrap_or_default()
}

/// What [`crate::Manifest::references`] declared; nothing when the
/// config or manifest is refused (`manifest` reports that).
pub fn reference_kinds<P: Plugin>(config: &str) -> Vec<wit::ApiResource> {
    entered();
    parse_config::<P>(config)
        .and_then(|config| P::manifest(&config))
        .map(|m| m.references.into_iter().map(|r| r.into_wit()).collect())
        .unwrap_or_default()
}

pub fn references<P: Plugin>(
    parent: &str,
    config: &str,
) -> Result<Vec<wit_references::Reference>, wit::Error> {
    entered();
    let config = parse_config::<P>(config)?;
    let parent: serde_json::Value = serde_json::from_str(parent)
        .map_err(|e| Error::InvalidInput(format!("parent is not JSON: {e}")))?;
    Ok(P::references(&parent, &config)?
        .into_iter()
        .map(|r| r.into_wit())
        .collect())
}

fn context<P: Plugin>(request: wit::Request) -> Result<Context<P::Config>, Error> {
    let config = parse_config::<P>(&request.config)?;
    Context::from_wit(request, config)
}

pub fn reconcile<P: Plugin>(request: wit::Request) -> Result<wit::Response, wit::Error> {
    entered();
    let ctx = context::<P>(request)?;
    Ok(P::reconcile(&ctx)?.into_wit())
}

pub fn finalize<P: Plugin>(request: wit::Request) -> Result<wit::FinalizeResponse, wit::Error> {
    entered();
    let ctx = context::<P>(request)?;
    Ok(P::finalize(&ctx)?.into_wit())
}

/// What [`crate::Manifest::validates`] and its siblings declared; nothing
/// when the config or manifest is refused (`manifest` reports that).
pub fn offered<P: Plugin>(config: &str) -> Vec<wit_admission::Webhook> {
    entered();
    parse_config::<P>(config)
        .and_then(|config| P::manifest(&config))
        .map(|m| m.webhooks.into_iter().map(|w| w.into_wit()).collect())
        .unwrap_or_default()
}

fn admission_request<P: Plugin>(
    request: wit_admission::AdmissionRequest,
) -> Result<AdmissionRequest<P::Config>, Error> {
    let config = parse_config::<P>(&request.config)?;
    AdmissionRequest::from_wit(request, config)
}

pub fn validate<P: Plugin>(
    request: wit_admission::AdmissionRequest,
) -> Result<wit_admission::Verdict, wit::Error> {
    entered();
    let request = admission_request::<P>(request)?;
    Ok(P::validate(&request)?.into_wit())
}

/// `None` also when the plugin hands the object back unchanged, so the
/// host sees no patch to check.
pub fn mutate<P: Plugin>(
    request: wit_admission::AdmissionRequest,
) -> Result<Option<String>, wit::Error> {
    entered();
    let request = admission_request::<P>(request)?;
    let Some(object) = P::mutate(&request)? else {
        return Ok(None);
    };
    if request.object.as_ref() == Some(&object) {
        return Ok(None);
    }
    Ok(Some(object.to_string()))
}

pub fn convert<P: Plugin>(
    objects: Vec<String>,
    api_version: &str,
    config: &str,
) -> Result<Vec<String>, wit::Error> {
    entered();
    let config = parse_config::<P>(config)?;
    let objects = objects
        .iter()
        .map(|o| {
            serde_json::from_str(o)
                .map_err(|e| Error::InvalidInput(format!("object to convert is not JSON: {e}")))
        })
        .collect::<Result<Vec<serde_json::Value>, _>>()?;
    let converted = P::convert(objects, api_version, &config)?;
    Ok(converted.iter().map(|o| o.to_string()).collect())
}
