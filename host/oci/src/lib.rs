//! kubeplug's OCI client: a plugin as OCI content ([`layout`], written out
//! by [`archive`]), pushed to a registry over the distribution API
//! ([`client`], logged in with [`credentials`]), signed and verified in
//! cosign's key-based format ([`signature`], [`push`], [`verify`]), and
//! pulled by digest ([`pull`]) for the host and `kubeplug doctor`.
//!
//! Where to start: [`client::Client`] for the registry side, [`layout`] for
//! what is stored. No Kubernetes and no Wasm engine here (`host/layers`
//! holds it to that): the commands and the host's puller wire it.
//! Failures are one typed [`Error`] ([`error`]).

#![forbid(unsafe_code)]

pub mod archive;
pub mod client;
pub mod credentials;
pub mod error;
pub mod layout;
pub mod pull;
pub mod push;
pub mod reference;
pub mod signature;
pub mod verify;

pub use error::{Error, Result};
pub use reference::Reference;
