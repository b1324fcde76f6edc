//! kubeplug's author's kit: run a plugin on files ([`render`]), test it on
//! fixtures and start a new one ([`kit`]), its webhooks included
//! ([`webhook`]). Built on the core and the runtime only, so that it
//! decides as the live host does without ever needing a cluster or the
//! operator.

#![forbid(unsafe_code)]

pub mod kit;
pub mod platform;
pub mod references;
pub mod render;
mod stored;
pub mod webhook;
