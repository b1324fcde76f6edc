//! kubeplug's operator: the plugin registry ([`registry`]: scan, admit,
//! serve, watch files), one controller per plugin ([`controller`]: queue,
//! triggers, workers, error policy), what a plugin is handed and how a call
//! is decided ([`inputs`], shared by reconciles, previews and what-ifs),
//! [`reconcile`] (executes a plugin's [`kubeplug_core::plan::Plan`]) under
//! the run-time [`fence`], the [`serving`] face that [`preview`]s,
//! [`whatif`]s and webhooks reach a plugin through, [`shadow`] runs of
//! candidates, [`replay`] captures and the API server's [`webhooks`]
//! (admission and conversion of a plugin's parent kind); [`fence_paths`]
//! lists every path into a plugin and where it is fenced.
//!
//! Start at [`controller::Controller::start`]. No module imports one that
//! imports it back: `inputs` and `fence` sit below `reconcile`, `preview`,
//! `whatif` and `shadow`, and the controller's worker ties them together.

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
