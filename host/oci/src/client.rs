//! A registry repository over the OCI distribution API, as `push` and
//! `verify` need it: blobs and manifests up and down, authenticated as the
//! registry asks on its first 401 (Basic, or a Bearer token from its token
//! service, RFC 6750 and the distribution token protocol), with the
//! credentials of [`crate::credentials`].
//!
//! Caveats: one connection per request (a push is a few dozen requests).

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Method, StatusCode, Uri};
use hyper_util::rt::TokioIo;

use crate::credentials::{Credentials, Login};
use crate::error::{Context as _, Result, bail};
use crate::layout;
use crate::reference::Reference;

/// How long one request may take: a plugin is at most tens of MB.
const TIMEOUT: Duration = Duration::from_secs(120);
/// What a manifest `GET` accepts: ours, and docker's for `verify` of other
/// images.
const ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
     application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json, \
     application/vnd.docker.distribution.manifest.list.v2+json";
/// The OAuth2 client id sent with an identity token, as the token
/// protocol asks for one.
const CLIENT_ID: &str = "kubeplug";

/// How to reach a registry and log in to it (`kubeplug push`'s
/// `--insecure`, `--username`, `--password`); the default is anonymous,
/// and plain HTTP only on loopback.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Plain HTTP to a registry that is not on loopback.
    pub insecure: bool,
    /// With `password`, instead of the credentials `docker login` or
    /// `podman login` saved.
    pub username: Option<String>,
    pub password: Option<String>,
}

/// A registry's repository, with what authenticates to it.
pub struct Client {
    /// `http(s)://host[:port]`.
    base: String,
    repository: String,
    login: Login,
    /// What was accepted last (`Basic …` or `Bearer …`).
    authorization: Option<HeaderValue>,
    tls: tokio_rustls::TlsConnector,
}

struct Answer {
    status: StatusCode,
    headers: hyper::HeaderMap,
    body: Bytes,
}

impl Client {
    /// The repository of `reference`: plain HTTP on loopback (as docker
    /// and containerd do) or with `--insecure`, HTTPS with the system's
    /// roots otherwise.
    pub fn new(reference: &Reference, args: &Access) -> Result<Self> {
        let scheme = if args.insecure || reference.is_loopback() {
            "http"
        } else {
            "https"
        };
        let explicit = match (&args.username, &args.password) {
            (Some(username), Some(password)) => Some(Credentials::Basic {
                username: username.clone(),
                password: password.clone(),
            }),
            (None, None) => None,
            _ => bail!("--username and --password go together"),
        };
        Ok(Client {
            base: format!("{scheme}://{}", api_host(&reference.registry)),
            repository: reference.repository.clone(),
            login: Login::new(&reference.registry, explicit),
            authorization: None,
            tls: tls()?,
        })
    }

    /// Upload a blob unless the registry has it.
    pub async fn blob(&mut self, digest: &str, bytes: &[u8]) -> Result<()> {
        let url = format!("{}/v2/{}/blobs/{digest}", self.base, self.repository);
        if self
            .request(Method::HEAD, &url, None, Bytes::new())
            .await?
            .status
            == StatusCode::OK
        {
            return Ok(());
        }
        let start = format!("{}/v2/{}/blobs/uploads/", self.base, self.repository);
        let answer = self
            .request(Method::POST, &start, None, Bytes::new())
            .await?;
        expect(&answer, StatusCode::ACCEPTED, &start)?;
        let location = answer
            .headers
            .get(header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .with_context(|| format!("{start}: no Location for the upload"))?;
        let location = if location.starts_with('/') {
            format!("{}{location}", self.base)
        } else {
            location.to_string()
        };
        let sep = if location.contains('?') { '&' } else { '?' };
        let put = format!("{location}{sep}digest={digest}");
        let answer = self
            .request(
                Method::PUT,
                &put,
                Some("application/octet-stream"),
                Bytes::copy_from_slice(bytes),
            )
            .await?;
        expect(&answer, StatusCode::CREATED, &url)
    }

    /// Put a manifest (or index) under a tag or its digest.
    pub async fn manifest(
        &mut self,
        reference: &str,
        media_type: &str,
        bytes: Vec<u8>,
    ) -> Result<()> {
        let url = format!("{}/v2/{}/manifests/{reference}", self.base, self.repository);
        let answer = self
            .request(Method::PUT, &url, Some(media_type), bytes.into())
            .await?;
        expect(&answer, StatusCode::CREATED, &url)
    }

    /// The manifest (or index) under a tag or digest, None when there is
    /// none.
    pub async fn get_manifest(&mut self, reference: &str) -> Result<Option<Bytes>> {
        let url = format!("{}/v2/{}/manifests/{reference}", self.base, self.repository);
        let answer = self.request(Method::GET, &url, None, Bytes::new()).await?;
        if answer.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        expect(&answer, StatusCode::OK, &url)?;
        Ok(Some(answer.body))
    }

    /// A blob, checked against its digest.
    pub async fn get_blob(&mut self, digest: &str) -> Result<Bytes> {
        let url = format!("{}/v2/{}/blobs/{digest}", self.base, self.repository);
        let mut answer = self.request(Method::GET, &url, None, Bytes::new()).await?;
        // Registries serve blobs from storage elsewhere (a CDN, a bucket):
        // followed once, without the registry's credentials.
        if answer.status.is_redirection()
            && let Some(location) = answer
                .headers
                .get(header::LOCATION)
                .and_then(|l| l.to_str().ok())
        {
            let location = if location.starts_with('/') {
                format!("{}{location}", self.base)
            } else {
                location.to_string()
            };
            answer = self
                .send(Method::GET, &location, None, Bytes::new(), None)
                .await?;
        }
        expect(&answer, StatusCode::OK, &url)?;
        if layout::digest(&answer.body) != digest {
            bail!("{url}: the registry's bytes do not match the digest");
        }
        Ok(answer.body)
    }

    /// A request, authenticated as the registry asks on a first 401.
    async fn request(
        &mut self,
        method: Method,
        url: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<Answer> {
        let answer = self
            .send(
                method.clone(),
                url,
                content_type,
                body.clone(),
                self.authorization.clone(),
            )
            .await?;
        if answer.status != StatusCode::UNAUTHORIZED {
            return Ok(answer);
        }
        let challenge = answer
            .headers
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        self.authorization = Some(self.authenticate(&challenge, url).await?);
        self.send(method, url, content_type, body, self.authorization.clone())
            .await
    }

    /// The `Authorization` answering `challenge`.
    async fn authenticate(&mut self, challenge: &str, url: &str) -> Result<HeaderValue> {
        let credentials = self.login.credentials()?.cloned();
        let Some(params) = challenge.strip_prefix("Bearer ") else {
            return match credentials {
                Some(Credentials::Basic { username, password }) => {
                    Ok(basic_header(&username, &password))
                }
                Some(Credentials::IdentityToken(_)) => bail!(
                    "{url}: the registry asks for a user and password, and the credentials found are an identity token"
                ),
                None => bail!(
                    "{url}: the registry asks for credentials: --username and --password, or a \
                     `docker login` (docker's config.json, podman's auth.json)"
                ),
            };
        };
        let params = parse_challenge(params);
        let realm = params
            .iter()
            .find(|(k, _)| k == "realm")
            .map(|(_, v)| v.clone())
            .with_context(|| format!("{url}: a Bearer challenge without a realm"))?;
        let scope = params
            .iter()
            .filter(|(k, _)| k == "service" || k == "scope");
        let answer = match &credentials {
            // The OAuth2 refresh-token grant of the token protocol.
            Some(Credentials::IdentityToken(token)) => {
                let form = form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(scope)
                    .append_pair("grant_type", "refresh_token")
                    .append_pair("client_id", CLIENT_ID)
                    .append_pair("refresh_token", token)
                    .finish();
                self.send(
                    Method::POST,
                    &realm,
                    Some("application/x-www-form-urlencoded"),
                    form.into(),
                    None,
                )
                .await?
            }
            basic => {
                let query = form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(scope)
                    .finish();
                let token_url = if query.is_empty() {
                    realm.clone()
                } else {
                    format!("{realm}?{query}")
                };
                let authorization = match basic {
                    Some(Credentials::Basic { username, password }) => {
                        Some(basic_header(username, password))
                    }
                    _ => None,
                };
                self.send(Method::GET, &token_url, None, Bytes::new(), authorization)
                    .await?
            }
        };
        expect(&answer, StatusCode::OK, &realm)?;
        let token: serde_json::Value = serde_json::from_slice(&answer.body)
            .with_context(|| format!("{realm}: not a token answer"))?;
        let token = token["token"]
            .as_str()
            .or(token["access_token"].as_str())
            .with_context(|| format!("{realm}: no token in the answer"))?;
        let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
            .context("the token is not a header value")?;
        value.set_sensitive(true);
        Ok(value)
    }

    /// One request on a fresh connection (TLS for `https`).
    async fn send(
        &self,
        method: Method,
        url: &str,
        content_type: Option<&str>,
        body: Bytes,
        authorization: Option<HeaderValue>,
    ) -> Result<Answer> {
        let uri: Uri = url.parse().with_context(|| format!("{url}: not a URL"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => bail!("{url}: not an http(s) URL"),
        };
        let authority = uri
            .authority()
            .with_context(|| format!("{url}: no host"))?
            .clone();
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(uri.path_and_query().map_or("/", |p| p.as_str()))
            .header(header::HOST, authority.as_str())
            .header(
                header::USER_AGENT,
                concat!("kubeplug/", env!("CARGO_PKG_VERSION")),
            )
            .header(header::ACCEPT, ACCEPT)
            .header(header::CONTENT_LENGTH, body.len());
        if let Some(content_type) = content_type {
            request = request.header(header::CONTENT_TYPE, content_type);
        }
        if let Some(authorization) = authorization {
            request = request.header(header::AUTHORIZATION, authorization);
        }
        let request = request.body(Full::new(body))?;
        let exchange = async {
            let stream = tokio::net::TcpStream::connect((host.as_str(), port))
                .await
                .with_context(|| format!("failed to connect to {authority}"))?;
            let response = if https {
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .with_context(|| format!("{host}: not a TLS server name"))?;
                let stream = self
                    .tls
                    .connect(name, stream)
                    .await
                    .with_context(|| format!("TLS with {authority} failed"))?;
                let (mut sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
                tokio::spawn(connection);
                sender.send_request(request).await?
            } else {
                let (mut sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
                tokio::spawn(connection);
                sender.send_request(request).await?
            };
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, crate::error::Error>(Answer {
                status,
                headers,
                body,
            })
        };
        tokio::time::timeout(TIMEOUT, exchange)
            .await
            .with_context(|| format!("{url}: no answer within {TIMEOUT:?}"))?
            .with_context(|| format!("the request to {url} failed"))
    }
}

fn basic_header(username: &str, password: &str) -> HeaderValue {
    use base64::Engine as _;
    let text = base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
    let mut value =
        HeaderValue::from_str(&format!("Basic {text}")).expect("base64 is a valid header value");
    value.set_sensitive(true);
    value
}

fn tls() -> Result<tokio_rustls::TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        // A root the system lists but rustls cannot parse is skipped, as
        // every rustls client does.
        let _ = roots.add(cert);
    }
    // ring: the provider kube and the host's listeners use, so there is one.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

fn expect(answer: &Answer, want: StatusCode, url: &str) -> Result<()> {
    if answer.status == want {
        return Ok(());
    }
    bail!(
        "{url} answered {}: {}",
        answer.status,
        String::from_utf8_lossy(&answer.body).trim()
    )
}

/// `realm="…",service="…",scope="…"` as pairs.
fn parse_challenge(params: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = params.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key.trim().trim_start_matches(',').trim().to_string();
        let (value, next) = match after.strip_prefix('"') {
            Some(quoted) => match quoted.split_once('"') {
                Some((v, next)) => (v.to_string(), next),
                None => (quoted.to_string(), ""),
            },
            None => match after.split_once(',') {
                Some((v, next)) => (v.trim().to_string(), next),
                None => (after.trim().to_string(), ""),
            },
        };
        out.push((key, value));
        rest = next.trim_start_matches(',').trim();
    }
    out
}

/// Where a registry's API answers: Docker Hub serves images named
/// `docker.io/...` (or `index.docker.io/...`) from `registry-1.docker.io`,
/// as docker and containerd resolve it; every other name is its own host.
fn api_host(registry: &str) -> &str {
    match registry {
        "docker.io" | "index.docker.io" => "registry-1.docker.io",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_hub_names_are_sent_to_its_registry_host() {
        assert_eq!(api_host("docker.io"), "registry-1.docker.io");
        assert_eq!(api_host("index.docker.io"), "registry-1.docker.io");
        assert_eq!(api_host("ghcr.io"), "ghcr.io");
        assert_eq!(api_host("localhost:5000"), "localhost:5000");
    }

    #[test]
    fn bearer_challenges_give_their_parameters() {
        let params = parse_challenge(
            r#"realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
        );
        assert_eq!(
            params,
            [
                (
                    "realm".to_string(),
                    "https://auth.example/token".to_string()
                ),
                ("service".into(), "registry.example".into()),
                ("scope".into(), "repository:a/b:pull,push".into()),
            ]
        );
    }

    #[test]
    fn basic_headers_are_sensitive() {
        let header = basic_header("a", "b");
        assert_eq!(header, "Basic YTpi");
        assert!(header.is_sensitive());
    }
}
