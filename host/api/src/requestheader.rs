//! Delegated authentication, as kube-apiserver's aggregation layer expects
//! of an extension API server: a request counts only if it came through the
//! front proxy, proven by a client certificate signed by the
//! request-header CA and naming an allowed proxy; the user is then whoever
//! the proxy's headers say. Everything comes from the ConfigMap
//! `kube-system/extension-apiserver-authentication` that kube-apiserver
//! publishes (`--requestheader-*` flags).

use std::collections::BTreeMap;

use http::HeaderMap;
use k8s_openapi::api::core::v1::ConfigMap;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// The front proxy's settings.
#[derive(Debug, Clone)]
pub struct RequestHeader {
    /// CAs a proxy's client certificate must chain to.
    pub client_ca: Vec<CertificateDer<'static>>,
    /// Common names a proxy's certificate may carry (empty: any).
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub uid_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_prefixes: Vec<String>,
}

/// Who made a request, as the front proxy vouches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

pub const NAMESPACE: &str = "kube-system";
pub const NAME: &str = "extension-apiserver-authentication";

/// Why the front proxy's settings cannot be used (each message shows its
/// cause, so none is a source).
#[derive(Debug, thiserror::Error)]
pub enum FrontProxyError {
    #[error("cannot read ConfigMap {NAMESPACE}/{NAME}: {0}")]
    Read(kube::Error),
    #[error("no requestheader-client-ca-file: the API server has no front proxy configured")]
    NoClientCa,
    #[error("requestheader-client-ca-file: {0}")]
    ClientCa(rustls::pki_types::pem::Error),
    #[error("requestheader-client-ca-file holds no certificate")]
    NoCertificate,
    /// A list (its key) that is not a JSON array of strings.
    #[error("{key}: {error}")]
    List {
        key: &'static str,
        error: serde_json::Error,
    },
    #[error("requestheader-username-headers is empty")]
    NoUsernameHeaders,
}

/// A request the front proxy does not vouch for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyUserError {
    /// Its client certificate's common name is not an allowed proxy's.
    #[error("client certificate with cn={0} is not an allowed front proxy")]
    NotAllowed(String),
    #[error("no user in the request headers")]
    NoUser,
}

impl RequestHeader {
    /// Read the published settings.
    pub async fn load(client: &kube::Client) -> Result<Self, FrontProxyError> {
        let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), NAMESPACE);
        let cm = api.get(NAME).await.map_err(FrontProxyError::Read)?;
        Self::from_data(&cm.data.unwrap_or_default())
    }

    /// Parse the ConfigMap's data (lists are JSON arrays in strings).
    pub fn from_data(data: &BTreeMap<String, String>) -> Result<Self, FrontProxyError> {
        let pem = data
            .get("requestheader-client-ca-file")
            .filter(|p| !p.trim().is_empty())
            .ok_or(FrontProxyError::NoClientCa)?;
        let client_ca = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(FrontProxyError::ClientCa)?;
        if client_ca.is_empty() {
            return Err(FrontProxyError::NoCertificate);
        }
        let list = |key: &'static str| -> Result<Vec<String>, FrontProxyError> {
            match data.get(key) {
                None => Ok(Vec::new()),
                Some(text) if text.trim().is_empty() => Ok(Vec::new()),
                Some(text) => {
                    serde_json::from_str(text).map_err(|error| FrontProxyError::List { key, error })
                }
            }
        };
        let header = RequestHeader {
            client_ca,
            allowed_names: list("requestheader-allowed-names")?,
            username_headers: list("requestheader-username-headers")?,
            uid_headers: list("requestheader-uid-headers")?,
            group_headers: list("requestheader-group-headers")?,
            extra_prefixes: list("requestheader-extra-headers-prefix")?,
        };
        if header.username_headers.is_empty() {
            return Err(FrontProxyError::NoUsernameHeaders);
        }
        Ok(header)
    }

    /// The user of a request whose TLS client certificate (already verified
    /// against [`Self::client_ca`]) has `proxy_name` as its subject's common
    /// name (one, read as kube-apiserver reads it: see
    /// [`crate::der::subject_common_name`]).
    pub fn user(
        &self,
        proxy_name: Option<&str>,
        headers: &HeaderMap,
    ) -> Result<UserInfo, ProxyUserError> {
        if !self.allowed_names.is_empty()
            && !proxy_name.is_some_and(|n| self.allowed_names.iter().any(|a| a == n))
        {
            return Err(ProxyUserError::NotAllowed(
                proxy_name.unwrap_or_default().into(),
            ));
        }
        let first = |names: &[String]| {
            names
                .iter()
                .find_map(|h| headers.get(h.as_str())?.to_str().ok())
                .filter(|v| !v.is_empty())
                .map(String::from)
        };
        let name = first(&self.username_headers).ok_or(ProxyUserError::NoUser)?;
        let groups = self
            .group_headers
            .iter()
            .flat_map(|h| headers.get_all(h.as_str()))
            .filter_map(|v| v.to_str().ok())
            .map(String::from)
            .collect();
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (key, value) in headers {
            let key = key.as_str();
            for prefix in &self.extra_prefixes {
                let prefix = prefix.to_ascii_lowercase();
                if let (Some(rest), Ok(value)) = (key.strip_prefix(&prefix), value.to_str()) {
                    extra
                        .entry(percent_decode(rest).to_ascii_lowercase())
                        .or_default()
                        .push(value.to_string());
                }
            }
        }
        Ok(UserInfo {
            name,
            uid: first(&self.uid_headers),
            groups,
            extra,
        })
    }
}

/// Extra keys travel percent-encoded in header names.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1..i + 3)) {
            (b'%', Some(hex)) => match u8::from_str_radix(&String::from_utf8_lossy(hex), 16) {
                Ok(b) => {
                    out.push(b);
                    i += 3;
                    continue;
                }
                Err(_) => out.push(b'%'),
            },
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> RequestHeader {
        RequestHeader {
            client_ca: Vec::new(),
            allowed_names: vec!["front-proxy-client".into()],
            username_headers: vec!["X-Remote-User".into()],
            uid_headers: vec!["X-Remote-Uid".into()],
            group_headers: vec!["X-Remote-Group".into()],
            extra_prefixes: vec!["X-Remote-Extra-".into()],
        }
    }

    #[test]
    fn the_proxy_names_the_user_and_groups() {
        let mut headers = HeaderMap::new();
        headers.insert("x-remote-user", "alice".parse().unwrap());
        headers.append("x-remote-group", "team-a".parse().unwrap());
        headers.append("x-remote-group", "system:authenticated".parse().unwrap());
        headers.insert("x-remote-extra-scopes%2fa", "x".parse().unwrap());
        let user = settings()
            .user(Some("front-proxy-client"), &headers)
            .unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, vec!["team-a", "system:authenticated"]);
        assert_eq!(user.extra["scopes/a"], vec!["x"]);
        assert_eq!(user.uid, None);
    }

    #[test]
    fn another_client_certificate_or_no_user_is_refused() {
        let mut headers = HeaderMap::new();
        headers.insert("x-remote-user", "alice".parse().unwrap());
        assert!(settings().user(Some("mallory"), &headers).is_err());
        assert!(settings().user(None, &headers).is_err());
        assert!(
            settings()
                .user(Some("front-proxy-client"), &HeaderMap::new())
                .is_err()
        );
    }

    #[test]
    fn parses_what_kube_apiserver_publishes() {
        let ca =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/testdata/ca.crt"))
                .unwrap();
        let data: BTreeMap<String, String> = [
            ("requestheader-client-ca-file", ca.as_str()),
            ("requestheader-allowed-names", "[\"front-proxy-client\"]"),
            ("requestheader-username-headers", "[\"X-Remote-User\"]"),
            ("requestheader-group-headers", "[\"X-Remote-Group\"]"),
            (
                "requestheader-extra-headers-prefix",
                "[\"X-Remote-Extra-\"]",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let parsed = RequestHeader::from_data(&data).unwrap();
        assert_eq!(parsed.client_ca.len(), 1);
        assert_eq!(parsed.allowed_names, vec!["front-proxy-client"]);
        assert!(parsed.uid_headers.is_empty());
        let mut no_ca = data.clone();
        no_ca.remove("requestheader-client-ca-file");
        assert!(RequestHeader::from_data(&no_ca).is_err());
    }
}
