//! The Rust SDK for kubeplug plugins.
//!
//! Start with [`Plugin`]: implement it for a unit struct and call
//! [`export_plugin!`]. The SDK turns the WIT contract (`wit/plugin.wit`) into
//! typed Rust: the request's JSON objects become `k8s-openapi` types or your own
//! serde structs, and [`Response`] serializes what you return.
//!
//! ```no_run
//! use kubeplug_sdk::{Context, Error, Manifest, Plugin, Resource, Response};
//!
//! struct Hello;
//! impl Plugin for Hello {
//!     type Config = serde_json::Value;
//!     fn manifest(_config: &Self::Config) -> Result<Manifest, Error> {
//!         Ok(Manifest::composite("hello", "0.1.0",
//!             Resource::namespaced("example.com", "v1", "Hello", "hellos")))
//!     }
//!     fn reconcile(_ctx: &Context<Self::Config>) -> Result<Response, Error> {
//!         Ok(Response::default())
//!     }
//! }
//! kubeplug_sdk::export_plugin!(Hello);
//! ```
//!
//! # Staying small
//!
//! Plugins ship as files, often in a ConfigMap (1 MiB cap), and every type a
//! plugin (de)serializes links its code. A whole `k8s-openapi` type is heavy:
//! deserializing a `Pod` or serializing a `StatefulSet` links the code of
//! every type it holds (`PodSpec`, `Container`, volume sources, and a date
//! library for `ObjectMeta`'s timestamps), a few hundred KiB of Wasm. So:
//!
//! - read objects through small structs of the fields you use:
//!   [`Context::related_as`], [`Context::observed_as`] and
//!   [`Context::observed_named_as`] select objects by a `k8s-openapi` kind and
//!   read them as your struct; [`Meta`] is the usual `metadata`;
//! - write status conditions with [`Condition`] and [`time`], which read and
//!   write what `k8s-openapi`'s `Condition` does, without the date library;
//! - build children as `serde_json::json!` values (or small `Serialize`
//!   structs of your own) rather than `k8s-openapi` types.
//!
//! The shipped plugins do all three and stay under 360 KiB; see
//! `plugins/database` for a composite plugin written this way.
//!
//! # Allocation
//!
//! A Wasm build gets the SDK's allocator ([`alloc`]): blocks in power-of-two
//! classes, cheap for the many short-lived allocations of JSON trees in a
//! call that runs in a fresh instance, bumped out of a 512 KiB arena the
//! instance starts with, so that a typical call never grows its memory.
//! Turn off the default `allocator` feature to install your own
//! `#[global_allocator]`.

// Deny, not forbid: the generated export glue is unsafe and allowed where
// it is expanded, the allocator (`alloc`) where it hands out memory;
// everything else written here stays safe.
#![deny(unsafe_code)]

pub mod admission;
pub mod alloc;
mod conditions;
mod context;
mod manifest;
mod meta;
mod references;
mod response;

pub mod log;

#[doc(hidden)]
pub mod adapter;

/// Bindings generated from `wit/plugin.wit`. Plugin code rarely needs them
/// directly: the types below wrap them.
#[doc(hidden)]
#[allow(unsafe_code, reason = "wit-bindgen's generated ABI glue")]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "plugin-with-admission",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "kubeplug_sdk::bindings",
    });
}

/// The guest's allocator (see [`alloc`]): installed in every Wasm build of a
/// plugin unless the `allocator` feature is off (for a plugin that brings its
/// own). Wasm guests here are single-threaded, so its unsynchronized state
/// is only ever reached from one thread.
#[cfg(all(
    target_arch = "wasm32",
    not(target_feature = "atomics"),
    feature = "allocator"
))]
#[global_allocator]
static ALLOCATOR: alloc::SizeClasses = alloc::SizeClasses::new();

pub use admission::{AdmissionRequest, Cause, Operation, Verdict, Webhook};
pub use conditions::{Condition, Time, set_condition, time};
pub use context::Context;
pub use manifest::{LabelValue, Manifest, Mode, Related, Resource};
pub use meta::Meta;
pub use references::{Reference, Target};
pub use response::{Event, FinalizeResponse, Response};

pub use k8s_openapi;
pub use serde_json;
use serde_json::Value;

/// An error the plugin reports on purpose. The host records it on the parent
/// (as an Event) and retries with backoff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The configuration document is not acceptable.
    InvalidConfig(String),
    /// The parent or an observed object is not acceptable.
    InvalidInput(String),
    /// Anything else.
    Failed(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::InvalidConfig(m) => write!(f, "invalid config: {m}"),
            Error::InvalidInput(m) => write!(f, "invalid input: {m}"),
            Error::Failed(m) => write!(f, "failed: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// A reconcile plugin: a pure function from what the host observed to what
/// should exist.
pub trait Plugin {
    /// The plugin's configuration, deserialized from the document the host's
    /// operator supplies (`{}` when none). Validate it in [`Plugin::manifest`].
    type Config: serde::de::DeserializeOwned;

    /// Describe the plugin. Called once when the host loads it; return
    /// [`Error::InvalidConfig`] to refuse a bad configuration.
    fn manifest(config: &Self::Config) -> Result<Manifest, Error>;

    /// Decide the desired children, status and parent patch for one parent.
    fn reconcile(ctx: &Context<Self::Config>) -> Result<Response, Error>;

    /// The objects `parent` names, of the kinds declared with
    /// [`Manifest::references`]: the host looks them up and hands those it
    /// finds in [`Context::related`] (read them with
    /// [`Context::related_named_as`]). A function of the parent and config
    /// alone: the host asks again only when either changes. The default
    /// names nothing.
    fn references(_parent: &Value, _config: &Self::Config) -> Result<Vec<Reference>, Error> {
        Ok(Vec::new())
    }

    /// Clean up for a parent being deleted. Only called when the manifest
    /// declares a finalizer. The default reports cleanup done at once.
    fn finalize(_ctx: &Context<Self::Config>) -> Result<FinalizeResponse, Error> {
        Ok(FinalizeResponse::done())
    }

    /// Allow or deny a create, update or delete of a parent (served as a
    /// validating webhook when the platform grants it): for what the CRD's
    /// schema cannot say, such as fields that may not change. Offer it with
    /// [`Manifest::validates`]. The default allows everything.
    fn validate(_request: &AdmissionRequest<Self::Config>) -> Result<Verdict, Error> {
        Ok(Verdict::allow())
    }

    /// Default a parent on create and update (served as a mutating webhook
    /// when granted): the whole object as it should be stored, or `None` to
    /// leave it. Only `spec`, `metadata.labels` and `metadata.annotations`
    /// may change; mutations may run more than once for one write, so make
    /// them idempotent. The default changes nothing.
    fn mutate(_request: &AdmissionRequest<Self::Config>) -> Result<Option<Value>, Error> {
        Ok(None)
    }

    /// Convert objects of the parent kind to `api_version` (served as the
    /// CRD's conversion webhook when granted), in order and without loss:
    /// keep what the target version cannot hold in an annotation. The
    /// default converts nothing ([`admission::convert_none`]).
    fn convert(
        objects: Vec<Value>,
        api_version: &str,
        config: &Self::Config,
    ) -> Result<Vec<Value>, Error> {
        let name = Self::manifest(config).map_or_else(|_| "this plugin".into(), |m| m.name);
        admission::convert_none(&name, objects, api_version)
    }
}

/// Export a [`Plugin`] implementation as the component's `reconciler`.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        // Only a Wasm build exports the component interface: a native build
        // of a plugin crate (unit tests, benchmarks) must not define these
        // symbols, whose names native linkers reject.
        #[cfg(target_arch = "wasm32")]
        #[allow(unsafe_code, reason = "wit-bindgen's generated export glue")]
        const _: () = {
        struct __KubeplugGuest;

        impl $crate::bindings::exports::kubeplug::plugin::reconciler::Guest for __KubeplugGuest {
            fn manifest(
                config: ::std::string::String,
            ) -> ::std::result::Result<
                $crate::bindings::kubeplug::plugin::types::PluginManifest,
                $crate::bindings::kubeplug::plugin::types::Error,
            > {
                $crate::adapter::manifest::<$plugin>(&config)
            }

            fn reconcile(
                request: $crate::bindings::kubeplug::plugin::types::Request,
            ) -> ::std::result::Result<
                $crate::bindings::kubeplug::plugin::types::Response,
                $crate::bindings::kubeplug::plugin::types::Error,
            > {
                $crate::adapter::reconcile::<$plugin>(request)
            }

            fn finalize(
                request: $crate::bindings::kubeplug::plugin::types::Request,
            ) -> ::std::result::Result<
                $crate::bindings::kubeplug::plugin::types::FinalizeResponse,
                $crate::bindings::kubeplug::plugin::types::Error,
            > {
                $crate::adapter::finalize::<$plugin>(request)
            }
        }

        impl $crate::bindings::exports::kubeplug::plugin::reads::Guest for __KubeplugGuest {
            fn metadata_only(
                config: ::std::string::String,
            ) -> ::std::vec::Vec<$crate::bindings::kubeplug::plugin::types::ApiResource> {
                $crate::adapter::metadata_only::<$plugin>(&config)
            }
        }

        impl $crate::bindings::exports::kubeplug::plugin::references::Guest for __KubeplugGuest {
            fn kinds(
                config: ::std::string::String,
            ) -> ::std::vec::Vec<$crate::bindings::kubeplug::plugin::types::ApiResource> {
                $crate::adapter::reference_kinds::<$plugin>(&config)
            }

            fn references(
                parent: ::std::string::String,
                config: ::std::string::String,
            ) -> ::std::result::Result<
                ::std::vec::Vec<$crate::bindings::exports::kubeplug::plugin::references::Reference>,
                $crate::bindings::kubeplug::plugin::types::Error,
            > {
                $crate::adapter::references::<$plugin>(&parent, &config)
            }
        }

        impl $crate::bindings::exports::kubeplug::plugin::admission::Guest for __KubeplugGuest {
            fn offered(
                config: ::std::string::String,
            ) -> ::std::vec::Vec<$crate::bindings::exports::kubeplug::plugin::admission::Webhook> {
                $crate::adapter::offered::<$plugin>(&config)
            }

            fn validate(
                request: $crate::bindings::exports::kubeplug::plugin::admission::AdmissionRequest,
            ) -> ::std::result::Result<
                $crate::bindings::exports::kubeplug::plugin::admission::Verdict,
                $crate::bindings::kubeplug::plugin::types::Error,
            > {
                $crate::adapter::validate::<$plugin>(request)
            }

            fn mutate(
                request: $crate::bindings::exports::kubeplug::plugin::admission::AdmissionRequest,
            ) -> ::std::result::Result<
                ::std::option::Option<::std::string::String>,
                $crate::bindings::kubeplug::plugin::types::Error,
            > {
                $crate::adapter::mutate::<$plugin>(request)
            }
        }

        impl $crate::bindings::exports::kubeplug::plugin::conversion::Guest for __KubeplugGuest {
            fn convert(
                objects: ::std::vec::Vec<::std::string::String>,
                api_version: ::std::string::String,
                config: ::std::string::String,
            ) -> ::std::result::Result<
                ::std::vec::Vec<::std::string::String>,
                $crate::bindings::kubeplug::plugin::types::Error,
            > {
                $crate::adapter::convert::<$plugin>(objects, &api_version, &config)
            }
        }

        $crate::bindings::export!(__KubeplugGuest with_types_in $crate::bindings);
        };
    };
}
