//! The `kubeplug` binary: the command line ([`cli`], [`args`]; each
//! command a shim in [`commands`]), the wiring of a running host ([`run`]),
//! the admission and conversion webhooks' listener ([`webhooks`]) and their
//! self-made serving certificate ([`certs`]), the puller of plugins named
//! by OCI artifact ([`artifacts`]), the admin server and logging.
//! Everything it wires lives in the crates below it (docs/architecture.md):
//! the aggregated API in [`kubeplug_api`], the OCI client in
//! [`kubeplug_oci`], doctor's checks in [`kubeplug_doctor`].

#![forbid(unsafe_code)]

pub mod admin;
pub mod args;
pub mod artifacts;
pub mod certs;
pub mod cli;
pub mod commands;
pub mod drain;
pub mod logging;
pub mod progress;
pub mod run;
pub mod webhooks;
