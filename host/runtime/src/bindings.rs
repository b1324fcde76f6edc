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

/// The optional exports' types (`references`, `admission`, `conversion` in
/// `wit/plugin.wit`), generated from the world that carries them. Only
/// their types are used: the host finds each export by name, so a plugin
/// without them still loads through [`Plugin`] (see `plugin::Caller`).
pub mod optional {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "plugin-with-admission",
        exports: { default: async },
        with: {
            "kubeplug:plugin/types": super::types,
            "kubeplug:plugin/log": super::log,
        },
    });

    pub use self::exports::kubeplug::plugin::{admission, references};
}

/// The optional references export (`references` in `wit/plugin.wit`).
pub const REFERENCES_EXPORT: &str = "kubeplug:plugin/references@0.1.0";

/// The optional admission export (`admission` in `wit/plugin.wit`).
pub const ADMISSION_EXPORT: &str = "kubeplug:plugin/admission@0.1.0";
/// The optional conversion export (`conversion` in `wit/plugin.wit`).
pub const CONVERSION_EXPORT: &str = "kubeplug:plugin/conversion@0.1.0";
