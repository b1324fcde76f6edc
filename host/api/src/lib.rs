//! The host's aggregated API, `kubeplug.io/v1alpha1`, registered with an
//! `APIService` so that users reach it with `kubectl` and the cluster's own
//! authentication and RBAC: `kubectl get plugins [-w]`, `kubectl get plugin
//! NAME -o yaml`, `kubectl explain plugins`.
//!
//! Served over TLS on its own listener (`--api-listen`). Every connection
//! must present a client certificate from the front proxy (kube-apiserver's
//! aggregation layer), so a direct request is refused in the handshake; the
//! proxy's headers name the user ([`requestheader`]), and a
//! SubjectAccessReview decides what they may do ([`authorize`]).
//!
//! No generic Rust API-server library fits: kube-rs is a client, and the
//! crates that serve Kubernetes-style APIs target CRD-like storage, not a
//! read-only view of process state. hyper and rustls (both already in the
//! tree through kube) carry it. What is served is typed: discovery, Status
//! errors and watch events are k8s-openapi's types; `Plugin` and `Preview`
//! are ours ([`plugin`], [`previews`]), and the OpenAPI documents are generated from them
//! ([`openapi`]). The Table, watch framing and delegated auth are small and
//! here.
//!
//! Where to start: [`serve`] ([`server`]), which routes a request
//! ([`route`]), admits it, and answers from the [`Tracker`] or by running a
//! preview. The listeners' TLS, shared with the host's webhooks, is
//! [`tls`].

#![forbid(unsafe_code)]

mod authorize;
pub mod der;
#[cfg(test)]
mod fixtures;
mod group;
pub mod limits;
mod openapi;
mod plugin;
mod previews;
pub mod requestheader;
mod resources;
mod responses;
mod route;
mod schema;
mod selectors;
mod server;
mod table;
pub mod tls;
pub mod tracker;

pub use group::{API_VERSION, DETAILS, GROUP, VERSION};
pub use server::{AcceptorError, ApiSettings, ServeError, serve};
pub use tracker::Tracker;
