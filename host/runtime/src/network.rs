//! `wasi:http` without a network.
//!
//! Mainstream toolchains import `wasi:http` whether a plugin uses it or not:
//! componentize-js's default build does, for `fetch()`. Refusing those
//! components would make every team rebuild with special flags; linking the
//! interface for real would hand plugins the network. So the host links
//! wasmtime's `wasi:http` with hooks whose every outgoing request fails with
//! [`NO_NETWORK`]: a default build loads, and a plugin that calls `fetch()`
//! gets an error it can report (the host logs the attempt) instead of a trap.
//! Sockets are denied the same way by the WASI context (no socket
//! capability).

use std::future::Future;

use wasmtime_wasi_http::{Error, RequestOptions, Result, WasiBody, WasiHttpCtx, WasiHttpHooks};

/// What a plugin's outgoing request fails with.
pub const NO_NETWORK: &str = "plugins have no network";

/// Refused requests of one call that are logged; the rest are counted in
/// the last line, so a guest looping on `fetch()` cannot flood the log.
const LOGGED_REFUSALS: u32 = 3;

/// Hooks that refuse every outgoing request (see the module docs).
#[derive(Default)]
pub struct NoNetwork {
    /// Requests of this call refused so far.
    refused: u32,
}

impl WasiHttpHooks for NoNetwork {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Box<
        dyn Future<
                Output = Result<(
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), Error>> + Send>,
                )>,
            > + Send,
    > {
        // The call's span names the plugin and the object.
        self.refused = self.refused.saturating_add(1);
        if self.refused <= LOGGED_REFUSALS {
            let uri = request.uri().to_string();
            tracing::warn!(
                method = %request.method(),
                uri = %&uri[..uri.floor_char_boundary(256)],
                "the plugin tried to reach the network: refused ({NO_NETWORK})"
            );
        }
        if self.refused == LOGGED_REFUSALS {
            tracing::warn!("further requests of this call are refused without a log line");
        }
        Box::new(async { Err(Error::InternalError(Some(NO_NETWORK.into()))) })
    }
}

/// Per-call `wasi:http` state: the context and the refusing hooks.
pub struct Http {
    pub ctx: WasiHttpCtx,
    pub hooks: NoNetwork,
}

impl Default for Http {
    fn default() -> Self {
        Http {
            ctx: WasiHttpCtx::new(),
            hooks: NoNetwork::default(),
        }
    }
}
