//! kubeplug's operator: the plugin registry ([`registry`]: scan, admit,
//! serve, watch files), one controller per plugin ([`controller`]: queue,
//! workers, error policy), [`reconcile`] (executes a plugin's
//! [`kubeplug_core::plan::Plan`]), [`shadow`] runs of candidates,
//! [`preview`]s, [`replay`] captures and the API server's
//! [`webhooks`] (admission and conversion of a plugin's parent kind);
//! [`fence_paths`] lists every path into a plugin and where it is fenced.

#![forbid(unsafe_code)]

pub mod controller;
pub mod error;
pub mod fence;
pub mod fence_paths;
pub mod inputs;
pub mod metrics;
pub mod migrate;
pub mod preview;
pub mod reconcile;
pub mod registry;
pub mod replay;
pub mod serving;
pub mod shadow;
pub mod webhooks;
pub mod whatif;
