//! kubeplug's pure core: what a plugin declares ([`manifest`]), the
//! contract's data ([`contract`]), which observed objects it is handed
//! ([`inputs`]), what its answer means in writes
//! ([`plan`]), what its parents may name ([`reference`]), what the
//! platform grants it ([`policy`], [`admission`]), what the host answers
//! its webhooks' reviews ([`review`]), the rights the host
//! uses in its name and for it ([`rights`]), what the grant lets it
//! be handed and change on every path ([`fence`]), how a new version is
//! judged ([`rollback`], [`rollout`]), how a sharded plugin's parents are
//! split between replicas ([`shard`]) and where two objects differ
//! ([`diff`]).
//!
//! No Kubernetes client, async runtime or Wasm engine: every decision here
//! is a function of its inputs, tested without a cluster (`host/layers`
//! keeps it so).

#![forbid(unsafe_code)]

pub mod admission;
pub mod contract;
pub mod diff;
pub mod fence;
pub mod inputs;
pub mod key;
pub mod manifest;
pub mod plan;
pub mod policy;
pub mod reference;
pub mod report;
pub mod review;
pub mod rights;
pub mod rollback;
pub mod rollout;
pub mod shard;
pub mod webhook;
pub mod whatif;
pub mod yaml;
