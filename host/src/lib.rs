//! kubeplug: a Kubernetes operator host whose reconcile logic runs in
//! sandboxed WebAssembly component plugins.
//!
//! Where to start:
//! - [`runtime`]: load a `.wasm` plugin and call it safely.
//! - [`manifest`]: what a plugin declares, and the fence the host enforces.
//! - [`plan`]: turn a plugin's answer into the exact objects to write (pure).
//! - [`render`]: run a plugin on files, no cluster (`kubeplug render`).
//! - [`informers`] → [`controller`] (queue, workers) → [`reconcile`] →
//!   [`apply`]: the operator (`kubeplug run`).
//! - [`shadow`], [`rollback`]: safe rollouts of new plugin versions.
//! - [`replay`]: failed calls kept with their inputs, fetched with
//!   `kubeplug replay` and rerun with `kubeplug render --request`.

pub mod admin;
pub mod api;
pub mod apply;
pub mod args;
pub mod cli;
pub mod client;
pub mod commands;
pub mod controller;
pub mod discovery;
pub mod drain;
pub mod finalizers;
pub mod health;
pub mod identity;
pub mod informers;
pub mod kit;
pub mod leader;
pub mod logging;
pub mod manifest;
pub mod metrics;
pub mod plan;
pub mod policy;
pub mod preview;
pub mod queue;
pub mod reconcile;
pub mod registry;
pub mod render;
pub mod replay;
pub mod rollback;
pub mod run;
pub mod runtime;
pub mod shadow;
