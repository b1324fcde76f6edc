//! The one Secret every replica serves from: read, created if absent,
//! replaced at the resourceVersion read, so that of two replicas renewing
//! at once one wins and the other reads what it wrote.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};

use super::issue::{CA_BUNDLE, CA_KEY, Stored, TLS_CERT, TLS_KEY};

/// The Secret `name` of the host's namespace.
pub struct SecretStore {
    api: Api<Secret>,
    name: String,
}

/// How a write ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    Yes,
    /// Another writer was first (the Secret was created, or changed, since
    /// it was read): read it again.
    Lost,
}

impl SecretStore {
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        SecretStore {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Secret, `None` if there is none.
    pub async fn get(&self) -> Result<Option<Secret>, kube::Error> {
        self.api.get_opt(&self.name).await
    }

    /// Write `stored` over `found` (the Secret as read, at its
    /// resourceVersion), or create the Secret if none was found.
    pub async fn write(
        &self,
        found: Option<Secret>,
        stored: &Stored,
    ) -> Result<Written, kube::Error> {
        let written = match found {
            None => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        labels: Some(BTreeMap::from([
                            ("app.kubernetes.io/name".into(), "kubeplug".into()),
                            ("app.kubernetes.io/component".into(), "serving-certs".into()),
                        ])),
                        ..ObjectMeta::default()
                    },
                    type_: Some("kubernetes.io/tls".into()),
                    data: Some(data(stored)),
                    ..Secret::default()
                };
                self.api.create(&PostParams::default(), &secret).await
            }
            Some(mut secret) => {
                secret
                    .data
                    .get_or_insert_with(BTreeMap::new)
                    .extend(data(stored));
                secret.string_data = None;
                self.api
                    .replace(&self.name, &PostParams::default(), &secret)
                    .await
            }
        };
        match written {
            Ok(_) => Ok(Written::Yes),
            // AlreadyExists on create, Conflict on replace.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Written::Lost),
            Err(error) => Err(error),
        }
    }
}

/// What `secret` holds, if it holds all four keys as text.
pub fn stored(secret: &Secret) -> Option<Stored> {
    let data = secret.data.as_ref()?;
    let text = |key: &str| {
        data.get(key)
            .and_then(|value| String::from_utf8(value.0.clone()).ok())
    };
    Some(Stored {
        ca_bundle: text(CA_BUNDLE)?,
        ca_key: text(CA_KEY)?,
        cert: text(TLS_CERT)?,
        key: text(TLS_KEY)?,
    })
}

fn data(stored: &Stored) -> BTreeMap<String, ByteString> {
    [
        (CA_BUNDLE, &stored.ca_bundle),
        (CA_KEY, &stored.ca_key),
        (TLS_CERT, &stored.cert),
        (TLS_KEY, &stored.key),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), ByteString(value.clone().into_bytes())))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_holds_what_was_stored_and_needs_every_key() {
        let stored = Stored {
            ca_bundle: "a".into(),
            ca_key: "b".into(),
            cert: "c".into(),
            key: "d".into(),
        };
        let mut secret = Secret {
            data: Some(data(&stored)),
            ..Secret::default()
        };
        assert_eq!(super::stored(&secret), Some(stored));
        secret.data.as_mut().unwrap().remove(CA_KEY);
        assert_eq!(super::stored(&secret), None);
        assert_eq!(super::stored(&Secret::default()), None);
    }
}
