//! The promotion gate's settings (`promotion:` in a grant), as a platform
//! writes them and as the host reads them. The what-if judges a candidate
//! against them (`crate::whatif`); here is only what they are, so the grant
//! that holds them needs nothing of the what-if.

use serde::Deserialize;

use super::{KindRef, KindRefError};

/// The promotion gate of a plugin (`promotion:` in its grant): while a new
/// version's what-if breaks it, the version is kept out of service and the
/// previous one serves.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    /// At most this share of parents (percent) may change.
    pub max_changed_percent: Option<f64>,
    /// No parent may lose a child of these kinds (`*`: of any kind).
    pub no_prunes: Vec<KindRef>,
    pub no_prunes_any: bool,
    /// At most this many answers the fence refuses (default 0).
    pub max_refused: usize,
    /// At most this many failed calls (default 0).
    pub max_failed: usize,
}

/// `promotion:` as a platform writes it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GateFile {
    max_changed_percent: Option<f64>,
    #[serde(default)]
    no_prunes: Vec<String>,
    #[serde(default)]
    max_refused: usize,
    #[serde(default)]
    max_failed: usize,
}

/// A promotion gate that cannot mean anything.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GateError {
    /// A share of parents outside 0..=100.
    #[error("promotion.maxChangedPercent must be between 0 and 100, got {0}")]
    MaxChangedPercent(f64),
    /// A `noPrunes` kind not written `Kind.group`.
    #[error("promotion.noPrunes: {0}")]
    NoPrunes(KindRefError),
}

impl GateFile {
    pub fn into_gate(self) -> Result<Gate, GateError> {
        if let Some(p) = self.max_changed_percent
            && !(0.0..=100.0).contains(&p)
        {
            return Err(GateError::MaxChangedPercent(p));
        }
        let mut no_prunes = Vec::new();
        let mut any = false;
        for kind in &self.no_prunes {
            if kind == "*" {
                any = true;
            } else {
                no_prunes.push(KindRef::parse(kind).map_err(GateError::NoPrunes)?);
            }
        }
        Ok(Gate {
            max_changed_percent: self.max_changed_percent,
            no_prunes,
            no_prunes_any: any,
            max_refused: self.max_refused,
            max_failed: self.max_failed,
        })
    }
}
