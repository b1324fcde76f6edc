//! The commands that need no cluster, one module each; what they share is in
//! [`offline`]. `kubeplug run` is [`crate::run`]; `release-finalizers` and
//! `replay` live beside what they drive ([`crate::finalizers`],
//! [`crate::replay::fetch`]).

pub mod inspect;
pub mod new;
pub mod offline;
pub mod render;
pub mod test;
