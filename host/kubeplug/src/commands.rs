//! Every command but `kubeplug run` ([`crate::run`]), one module each: those
//! that need no cluster share [`offline`]; `package` and `push` build OCI
//! content and `push` and `verify` talk to a registry, both through
//! [`kubeplug_oci`]; `release-finalizers`, `migrate`
//! and `doctor` talk to the API server, `replay` and `whatif` to a running
//! host's admin server (in a pod: through [`forward`]).

pub mod build;
pub mod doctor;
pub mod forward;
pub mod inspect;
pub mod migrate;
pub mod new;
pub mod offline;
pub mod package;
pub mod platform;
pub mod push;
pub mod release_finalizers;
pub mod render;
pub mod replay;
pub mod test;
pub mod verify;
pub mod whatif;
