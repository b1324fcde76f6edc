//! The `kubeplug` binary: the command line ([`cli`], [`args`]), the wiring
//! of a running host ([`run`]), the aggregated API ([`api`]), the
//! admission and conversion webhooks' listener ([`webhooks`]) and their
//! self-made serving certificate ([`certs`]), the admin
//! server and logging. Everything it wires lives in the crates below it
//! (docs/architecture.md).

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
