//! kubeplug's Kubernetes plumbing, shared by every plugin: the API client
//! with its limits ([`client`]), true scopes ([`discovery`]), the informer
//! caches ([`informers`]), server-side apply ([`apply`]), fenced leases
//! ([`leader`]), who controls an object ([`owner`]), plugin identities ([`identity`]), work queues ([`queue`]), errors on one line ([`report`]),
//! finalizer release ([`finalizers`]) and API reachability ([`health`]).
//!
//! Knows nothing of Wasm: plugins reach it only through the operator.

#![forbid(unsafe_code)]

pub mod apply;
pub mod client;
pub mod discovery;
pub mod health;
pub mod identity;
pub mod informers;
pub mod leader;
pub mod owner;
pub mod queue;
pub mod report;
