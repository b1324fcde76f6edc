//! `kubeplug push`: a plugin's OCI content ([`super::package::layout`]) to
//! a registry, through the OCI distribution API: each blob (`HEAD`, then a
//! monolithic `POST` + `PUT` upload when missing), then the manifests, the
//! Wasm artifact under the tag and the image-volume index under
//! `<tag>-volume`.
//!
//! Caveats: one connection per request (a push is a dozen requests);
//! credentials from flags or the environment only (no docker
//! `config.json`, no credential helpers); nothing is signed.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Method, StatusCode, Uri};
use hyper_util::rt::TokioIo;

use super::package::layout::{self, Package};
use crate::args::PushArgs;

/// How long one request may take: a plugin is at most tens of MB.
const TIMEOUT: Duration = Duration::from_secs(120);

/// `HOST[:PORT]/REPOSITORY[:TAG]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
}

impl Reference {
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let bad = || anyhow::anyhow!("{text}: expected HOST[:PORT]/REPOSITORY[:TAG]");
        let (registry, rest) = text.split_once('/').ok_or_else(bad)?;
        if registry.is_empty() || !(registry.contains(['.', ':']) || registry == "localhost") {
            bail!(
                "{text}: name the registry (HOST[:PORT]/REPOSITORY[:TAG]); there is no default registry"
            );
        }
        if rest.contains('@') {
            bail!("{text}: push to a tag, not a digest");
        }
        let (repository, tag) = match rest.rsplit_once(':') {
            Some((repo, tag)) => (repo, Some(tag.to_string())),
            None => (rest, None),
        };
        let valid = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/".contains(&b))
        };
        if !valid(repository)
            || tag
                .as_deref()
                .is_some_and(|t| t.is_empty() || t.len() > 128)
        {
            return Err(bad());
        }
        Ok(Reference {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag,
        })
    }

    /// Plain HTTP for loopback registries (as docker and containerd do).
    pub fn is_loopback(&self) -> bool {
        let host = match self.registry.split_once(']') {
            Some((v6, _)) => &self.registry[..=v6.len()],
            None => self.registry.split(':').next().unwrap_or_default(),
        };
        matches!(host, "localhost" | "[::1]") || host.starts_with("127.")
    }
}

/// `kubeplug push`.
pub fn run(args: PushArgs) -> anyhow::Result<()> {
    let reference = Reference::parse(&args.reference)?;
    let package = super::package::load(&args.source)?;
    let tag = reference
        .tag
        .clone()
        .unwrap_or_else(|| package.version.clone());
    let scheme = if args.insecure || reference.is_loopback() {
        "http"
    } else {
        "https"
    };
    let mut client = Client {
        base: format!("{scheme}://{}", reference.registry),
        repository: reference.repository.clone(),
        basic: args.username.clone().zip(args.password.clone()),
        authorization: None,
        tls: tls()?,
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(push(&mut client, &package, &tag))?;
    let name = format!("{}/{}", reference.registry, reference.repository);
    println!("{name}:{tag}@{}", package.wasm.digest);
    println!(
        "{name}:{tag}{}@{}",
        layout::VOLUME_SUFFIX,
        package.volume.digest
    );
    Ok(())
}

/// Upload `package` with `tag`.
pub async fn push(client: &mut Client, package: &Package, tag: &str) -> anyhow::Result<()> {
    for (digest, bytes) in package.layers_and_configs() {
        client.blob(digest, bytes).await?;
    }
    let manifest = |d: &layout::Descriptor| package.blobs[&d.digest].clone();
    for d in &package.volume_manifests {
        client
            .manifest(&d.digest, d.media_type, manifest(d))
            .await?;
    }
    client
        .manifest(tag, package.wasm.media_type, manifest(&package.wasm))
        .await?;
    let volume_tag = format!("{tag}{}", layout::VOLUME_SUFFIX);
    client
        .manifest(
            &volume_tag,
            package.volume.media_type,
            manifest(&package.volume),
        )
        .await
}

fn tls() -> anyhow::Result<tokio_rustls::TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        // A root the system lists but rustls cannot parse is skipped, as
        // every rustls client does.
        let _ = roots.add(cert);
    }
    let config = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// A registry's repository, with what authenticates to it.
pub struct Client {
    /// `http(s)://host[:port]`.
    pub base: String,
    pub repository: String,
    pub basic: Option<(String, String)>,
    /// What was accepted last (`Basic …` or `Bearer …`).
    pub authorization: Option<HeaderValue>,
    pub tls: tokio_rustls::TlsConnector,
}

struct Answer {
    status: StatusCode,
    headers: hyper::HeaderMap,
    body: Bytes,
}

impl Client {
    /// Upload a blob unless the registry has it.
    async fn blob(&mut self, digest: &str, bytes: &[u8]) -> anyhow::Result<()> {
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
    async fn manifest(
        &mut self,
        reference: &str,
        media_type: &str,
        bytes: Vec<u8>,
    ) -> anyhow::Result<()> {
        let url = format!("{}/v2/{}/manifests/{reference}", self.base, self.repository);
        let answer = self
            .request(Method::PUT, &url, Some(media_type), bytes.into())
            .await?;
        expect(&answer, StatusCode::CREATED, &url)
    }

    /// A request, authenticated as the registry asks on a first 401.
    async fn request(
        &mut self,
        method: Method,
        url: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> anyhow::Result<Answer> {
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

    fn basic_header(&self) -> Option<HeaderValue> {
        use base64::Engine as _;
        let (user, password) = self.basic.as_ref()?;
        let text = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        HeaderValue::from_str(&format!("Basic {text}")).ok()
    }

    /// The `Authorization` answering `challenge` (RFC 6750 / the
    /// distribution token protocol).
    async fn authenticate(&self, challenge: &str, url: &str) -> anyhow::Result<HeaderValue> {
        let Some(params) = challenge.strip_prefix("Bearer ") else {
            return self.basic_header().with_context(|| {
                format!("{url}: the registry asks for credentials (--username, --password)")
            });
        };
        let params = parse_challenge(params);
        let realm = params
            .iter()
            .find(|(k, _)| k == "realm")
            .map(|(_, v)| v.clone())
            .with_context(|| format!("{url}: a Bearer challenge without a realm"))?;
        let query: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(
                params
                    .iter()
                    .filter(|(k, _)| k == "service" || k == "scope"),
            )
            .finish();
        let token_url = if query.is_empty() {
            realm
        } else {
            format!("{realm}?{query}")
        };
        let answer = self
            .send(
                Method::GET,
                &token_url,
                None,
                Bytes::new(),
                self.basic_header(),
            )
            .await?;
        expect(&answer, StatusCode::OK, &token_url)?;
        let token: serde_json::Value = serde_json::from_slice(&answer.body)
            .with_context(|| format!("{token_url}: not a token answer"))?;
        let token = token["token"]
            .as_str()
            .or(token["access_token"].as_str())
            .with_context(|| format!("{token_url}: no token in the answer"))?;
        HeaderValue::from_str(&format!("Bearer {token}")).context("the token is not a header value")
    }

    /// One request on a fresh connection (TLS for `https`).
    async fn send(
        &self,
        method: Method,
        url: &str,
        content_type: Option<&str>,
        body: Bytes,
        authorization: Option<HeaderValue>,
    ) -> anyhow::Result<Answer> {
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
            .header(
                header::ACCEPT,
                format!("{}, {}", layout::MANIFEST, layout::INDEX),
            )
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
            anyhow::Ok(Answer {
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

fn expect(answer: &Answer, want: StatusCode, url: &str) -> anyhow::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_name_a_registry_a_repository_and_maybe_a_tag() {
        let r = Reference::parse("localhost:5000/plugins/database:0.1.0").unwrap();
        assert_eq!(r.registry, "localhost:5000");
        assert_eq!(r.repository, "plugins/database");
        assert_eq!(r.tag.as_deref(), Some("0.1.0"));
        assert!(r.is_loopback());
        let r = Reference::parse("ghcr.io/acme/database").unwrap();
        assert_eq!(r.tag, None);
        assert!(!r.is_loopback());
        assert!(
            Reference::parse("127.0.0.1:5000/p/d:1")
                .unwrap()
                .is_loopback()
        );
        assert!(
            Reference::parse("database:0.1.0").is_err(),
            "no default registry"
        );
        assert!(Reference::parse("plugins/database").is_err());
        assert!(Reference::parse("ghcr.io/acme/Database").is_err());
        assert!(Reference::parse("ghcr.io/acme/db@sha256:00").is_err());
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
}
