//! kubeplug: a Kubernetes operator host whose reconcile logic runs in
//! sandboxed WebAssembly component plugins.
//!
//! Where to start:
//! - [`runtime`]: load a `.wasm` plugin and call it safely.
//! - [`manifest`]: what a plugin declares, and the fence the host enforces.
//! - [`admission`]: whether the live host would serve a plugin, and as what
//!   (pure; shared by `run`, `render`, `inspect` and `kubeplug test`).
//! - [`plan`]: turn a plugin's answer into the exact objects to write (pure).
//! - [`render`]: run a plugin on files, no cluster (`kubeplug render`).
//! - [`informers`] → [`controller`] (queue, workers) → [`reconcile`] →
//!   [`apply`]: the operator (`kubeplug run`).
//! - [`shadow`], [`rollback`], [`rollout`]: safe rollouts of new plugin
//!   versions.
//! - [`replay`]: failed calls kept with their inputs, fetched with
//!   `kubeplug replay` and rerun with `kubeplug render --request`.
//! - [`yaml`]: how every YAML file is read and every YAML text written.

// Unsafe code only where wasmtime requires it (`runtime::cache`, which
// loads precompiled components); the binaries forbid it outright.
#![deny(unsafe_code)]

pub mod admin;
pub mod admission;
pub mod api;
pub mod apply;
pub mod args;
pub mod cli;
pub mod client;
pub mod commands;
pub mod contract;
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
pub mod report;
pub mod rollback;
pub mod rollout;
pub mod run;
pub mod runtime;
pub mod shadow;
pub mod yaml;
