//! Calls into a plugin's optional exports for the API server's webhooks:
//! `validate` and `mutate` (`admission`) and `convert` (`conversion`). Each
//! runs like a reconcile, in a fresh instance within the plugin's limits,
//! with a deadline no later than the webhook's own.

use std::time::Duration;

use serde_json::Value;

use super::super::answer::AnswerBytes;
use super::super::bindings;
use super::super::bindings::optional::admission as wit;
use super::{Caller, Plugin};
use crate::CallError;
use kubeplug_core::contract::Limits;
use kubeplug_core::webhook::{AdmissionCall, Operation, Verdict, Webhooks};

impl AnswerBytes for wit::Verdict {
    fn bytes(&self) -> usize {
        match self {
            wit::Verdict::Allowed(warnings) => warnings.iter().map(|w| 16 + w.len()).sum(),
            wit::Verdict::Denied(d) => {
                d.message.len()
                    + d.causes
                        .iter()
                        .map(|c| 16 + c.field.len() + c.message.len())
                        .sum::<usize>()
            }
        }
    }
}

impl AnswerBytes for Option<String> {
    fn bytes(&self) -> usize {
        self.as_ref().map_or(0, String::len)
    }
}

impl AnswerBytes for Vec<String> {
    fn bytes(&self) -> usize {
        self.iter().map(|o| 16 + o.len()).sum()
    }
}

impl Caller {
    /// The webhooks the plugin offers, from its `admission` export's
    /// `offered` (see `wit/plugin.wit`); a component without that function
    /// offers the functions it exports.
    pub(super) fn offered(&self, limits: Limits, config: &str) -> Result<Webhooks, CallError> {
        let component = self.loaded.pre.instance_pre().component();
        let Some(export) = component
            .get_export_index(None, bindings::ADMISSION_EXPORT)
            .and_then(|i| component.get_export_index(Some(&i), "offered"))
        else {
            return Ok(Webhooks {
                validate: self.validate.is_some(),
                mutate: self.mutate.is_some(),
                convert: self.convert.is_some(),
            });
        };
        let offered = self.run(limits, async |store, instance| {
            let call =
                instance.get_typed_func::<(&str,), (Vec<wit::Webhook>,)>(&mut *store, &export)?;
            Ok(call.call_async(&mut *store, (config,)).await?.0)
        })?;
        let mut webhooks = Webhooks::default();
        for webhook in offered {
            match webhook {
                wit::Webhook::Validate => webhooks.validate = true,
                wit::Webhook::Mutate => webhooks.mutate = true,
                wit::Webhook::Convert => webhooks.convert = true,
            }
        }
        // What it offers it must export.
        webhooks.validate &= self.validate.is_some();
        webhooks.mutate &= self.mutate.is_some();
        webhooks.convert &= self.convert.is_some();
        Ok(webhooks)
    }
}

impl Plugin {
    /// The optional exports this component has.
    pub fn exports(&self) -> Webhooks {
        let caller = &self.inner.caller;
        Webhooks {
            validate: caller.validate.is_some(),
            mutate: caller.mutate.is_some(),
            convert: caller.convert.is_some(),
        }
    }

    /// The plugin's limits with a deadline no later than `deadline`.
    fn limits_within(&self, deadline: Duration) -> Limits {
        let mut limits = self.limits();
        limits.timeout = limits.timeout.min(deadline);
        limits
    }

    fn missing(&self, export: &str) -> CallError {
        CallError::Malformed {
            plugin: self.name().into(),
            reason: format!("the component does not export {export}"),
        }
    }

    fn admission_request(&self, call: &AdmissionCall, now: &str) -> wit::AdmissionRequest {
        wit::AdmissionRequest {
            operation: match call.operation {
                Operation::Create => wit::Operation::Create,
                Operation::Update => wit::Operation::Update,
                Operation::Delete => wit::Operation::Delete,
            },
            object: call.object.as_ref().map(Value::to_string),
            old_object: call.old_object.as_ref().map(Value::to_string),
            user: wit::UserInfo {
                username: call.username.clone(),
                groups: call.groups.clone(),
            },
            dry_run: call.dry_run,
            config: self.config().to_string(),
            now: now.to_string(),
        }
    }

    /// Ask the plugin's `validate` about one write.
    pub fn validate(
        &self,
        call: &AdmissionCall,
        now: &str,
        deadline: Duration,
    ) -> Result<Verdict, CallError> {
        let export = self
            .inner
            .caller
            .validate
            .ok_or_else(|| self.missing("validate"))?;
        let verdict: wit::Verdict = self.call_export(
            &export,
            (self.admission_request(call, now),),
            self.limits_within(deadline),
            |_| Ok(()),
        )?;
        Ok(match verdict {
            wit::Verdict::Allowed(warnings) => Verdict::Allowed { warnings },
            wit::Verdict::Denied(d) => Verdict::Denied {
                message: d.message,
                causes: d.causes.into_iter().map(|c| (c.field, c.message)).collect(),
            },
        })
    }

    /// Ask the plugin's `mutate` for the object as it should be stored;
    /// `None`: leave it.
    pub fn mutate(
        &self,
        call: &AdmissionCall,
        now: &str,
        deadline: Duration,
    ) -> Result<Option<Value>, CallError> {
        let export = self
            .inner
            .caller
            .mutate
            .ok_or_else(|| self.missing("mutate"))?;
        let answer: Option<String> = self.call_export(
            &export,
            (self.admission_request(call, now),),
            self.limits_within(deadline),
            |_| Ok(()),
        )?;
        answer
            .map(|text| match serde_json::from_str::<Value>(&text) {
                Ok(object @ Value::Object(_)) => Ok(object),
                Ok(_) => Err("the mutated object is not a JSON object".to_string()),
                Err(e) => Err(format!("the mutated object is not JSON: {e}")),
            })
            .transpose()
            .map_err(|reason| CallError::Malformed {
                plugin: self.name().into(),
                reason,
            })
    }

    /// Ask the plugin's `convert` for `objects` at `api_version`.
    pub fn convert(
        &self,
        objects: &[Value],
        api_version: &str,
        deadline: Duration,
    ) -> Result<Vec<Value>, CallError> {
        let export = self
            .inner
            .caller
            .convert
            .ok_or_else(|| self.missing("convert"))?;
        let texts: Vec<String> = objects.iter().map(Value::to_string).collect();
        let asked = texts.len();
        let answer: Vec<String> = self.call_export(
            &export,
            (texts, api_version.to_string(), self.config().to_string()),
            self.limits_within(deadline),
            |converted: &Vec<String>| {
                if converted.len() > asked {
                    return Err(format!("{} objects for {asked} asked", converted.len()));
                }
                Ok(())
            },
        )?;
        answer
            .iter()
            .map(|text| match serde_json::from_str::<Value>(text) {
                Ok(object @ Value::Object(_)) => Ok(object),
                _ => Err(CallError::Malformed {
                    plugin: self.name().into(),
                    reason: "a converted object is not a JSON object".into(),
                }),
            })
            .collect()
    }
}
