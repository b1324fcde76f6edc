//! Calls into a plugin's optional `references` export: the kinds its
//! parents may name (asked once at load) and what one parent names (asked
//! before its reconcile; see `kubeplug_core::reference`).

use std::collections::BTreeMap;

use super::super::answer::{AnswerBytes, api_resource};
use super::super::bindings;
use super::super::bindings::optional::references as wit;
use super::{Caller, Plugin};
use crate::CallError;
use kubeplug_core::contract::Limits;
use kubeplug_core::manifest::ApiResource;
use kubeplug_core::reference::{Asked, MAX_REFERENCES, Target};

impl AnswerBytes for Vec<wit::Reference> {
    fn bytes(&self) -> usize {
        self.iter()
            .map(|r| {
                let target = match &r.target {
                    wit::Target::Name(name) => name.len(),
                    wit::Target::Labels(pairs) => {
                        pairs.iter().map(|(k, v)| 16 + k.len() + v.len()).sum()
                    }
                };
                64 + r.resource.kind.len()
                    + r.resource.group.len()
                    + r.namespace.as_ref().map_or(0, String::len)
                    + target
            })
            .sum()
    }
}

impl Caller {
    /// The kinds the plugin's parents may name, from its `references`
    /// export's `kinds`; none without the export.
    pub(super) fn reference_kinds(
        &self,
        limits: Limits,
        config: &str,
    ) -> Result<Vec<ApiResource>, CallError> {
        self.kinds(limits, config, bindings::REFERENCES_EXPORT, "kinds")
    }
}

impl Plugin {
    /// True if the plugin's parents may name objects (it exports
    /// `references` and declared at least one kind).
    pub fn references_objects(&self) -> bool {
        self.inner.caller.references.is_some() && !self.manifest().references.is_empty()
    }

    /// What `parent` (JSON text) names, as the plugin answered: held to the
    /// fence by `kubeplug_core::reference::check`, never trusted here.
    /// Nothing for a plugin that does not reference objects.
    pub fn references(&self, parent: &str) -> Result<Vec<Asked>, CallError> {
        let Some(export) = self
            .inner
            .caller
            .references
            .filter(|_| self.references_objects())
        else {
            return Ok(Vec::new());
        };
        let answer: Vec<wit::Reference> = self.call_export(
            &export,
            (parent, self.config()),
            self.limits(),
            |refs: &Vec<wit::Reference>| {
                if refs.len() > MAX_REFERENCES {
                    return Err(format!(
                        "{} references (at most {MAX_REFERENCES} per parent)",
                        refs.len()
                    ));
                }
                Ok(())
            },
        )?;
        Ok(answer
            .into_iter()
            .map(|r| Asked {
                resource: api_resource(r.resource),
                namespace: r.namespace,
                target: match r.target {
                    wit::Target::Name(name) => Target::Name(name),
                    wit::Target::Labels(pairs) => Target::Labels(BTreeMap::from_iter(pairs)),
                },
            })
            .collect())
    }
}
