//! `kubeplug doctor`'s checks: each takes plain inputs (a manifest, the
//! grant in effect, a plugin directory, a Kubernetes client) and gives
//! [`report::Check`]s, one line each. The command (the binary's
//! `commands/doctor`) reads the arguments and the installation, connects,
//! and calls these in turn.
//!
//! Where to start: [`plugins`] (the plugin directory, loaded and admitted
//! as the live host would), then per plugin [`kinds`] (the kinds it names
//! are served), [`permissions`] (its ServiceAccount may do what the host
//! asks in its name) and [`host_rights`] (the host's ServiceAccount may do
//! what it does for it); [`apiservice`] for the aggregated API's
//! registration; [`report`] for how checks print.
//!
//! Read-only: SubjectAccessReviews are questions; nothing is written.

#![forbid(unsafe_code)]

pub mod apiservice;
pub mod host_rights;
pub mod kinds;
pub mod permissions;
pub mod plugins;
pub mod report;
