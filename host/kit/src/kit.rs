//! The plugin author's kit: `kubeplug test` runs a plugin over fixture
//! files (docs/fixtures.md) with no cluster, and `kubeplug new` scaffolds a
//! plugin project from templates built into the binary.
//!
//! - [`load`]: a plugin file compiled and admitted as the live host would;
//! - [`fixture`]: parse case files; [`outcome`]: the canonical answer both
//!   sides of a comparison share;
//! - [`check`]: run one case and compare, [`diff`]: show where they part;
//! - [`suite`]: a whole directory, the report, `--update`;
//! - [`scaffold`]: `kubeplug new`;
//! - [`go_shim`]: a Go plugin's core module made a component.

pub mod check;
pub mod diff;
pub mod fixture;
pub mod go_shim;
pub mod load;
pub mod outcome;
pub mod scaffold;
pub mod suite;

pub use suite::{Options, Report, SuiteError, Verdict, run};
