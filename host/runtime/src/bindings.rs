//! The host side of `wit/plugin.wit`, generated in one place.
//!
//! Everything else in the host talks to plugins through [`super::Plugin`],
//! which turns these WIT types into JSON values and typed errors.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "plugin",
    // Calls are async so that a deadline can stop a guest blocked in a
    // host call (see `plugin::Caller::run`).
    exports: { default: async },
});

pub use self::kubeplug::plugin::{log, types};

/// The export every plugin must have, with the contract version the host
/// speaks. Used to give a clear error when a plugin targets another version.
pub const RECONCILER_EXPORT: &str = "kubeplug:plugin/reconciler@0.1.0";
/// The package the export above belongs to, without version.
pub const RECONCILER_INTERFACE: &str = "kubeplug:plugin/reconciler";
/// The optional export of plugins that say what they read (`reads` in
/// `wit/plugin.wit`).
pub const READS_EXPORT: &str = "kubeplug:plugin/reads@0.1.0";
