//! Which webhooks of its parent kind a plugin offers (its manifest) or its
//! grant allows: named here, beside the manifest that declares them, so
//! that the module reading reviews ([`crate::webhook`]) depends on the
//! manifest and never the other way round.

/// One webhook of a plugin's parent kind, named as in the contract and in
/// the host's paths (`/validate/<plugin>`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Webhook {
    Validate,
    Mutate,
    Convert,
}

impl Webhook {
    pub const ALL: [Webhook; 3] = [Webhook::Validate, Webhook::Mutate, Webhook::Convert];

    pub fn as_str(self) -> &'static str {
        match self {
            Webhook::Validate => "validate",
            Webhook::Mutate => "mutate",
            Webhook::Convert => "convert",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Webhook::ALL.into_iter().find(|w| w.as_str() == text)
    }

    /// How a grant allows it.
    pub fn grant_key(self) -> String {
        match self {
            Webhook::Convert => "conversion: true".into(),
            other => format!("admission: [{}]", other.as_str()),
        }
    }
}

/// Webhooks of a plugin's parent kind: those a plugin offers (its
/// manifest) or those its grant allows. All for its own parent kind, never
/// another.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Webhooks {
    pub validate: bool,
    pub mutate: bool,
    pub convert: bool,
}

impl Webhooks {
    pub fn is_none(&self) -> bool {
        *self == Webhooks::default()
    }

    pub fn has(&self, webhook: Webhook) -> bool {
        match webhook {
            Webhook::Validate => self.validate,
            Webhook::Mutate => self.mutate,
            Webhook::Convert => self.convert,
        }
    }

    /// The names of those present, in the contract's order.
    pub fn names(&self) -> Vec<&'static str> {
        Webhook::ALL
            .into_iter()
            .filter(|w| self.has(*w))
            .map(Webhook::as_str)
            .collect()
    }
}

/// As a list of names (`[validate, convert]`), the way a manifest shows it.
impl serde::Serialize for Webhooks {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.names())
    }
}
