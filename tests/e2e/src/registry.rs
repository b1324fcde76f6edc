//! An OCI registry (CNCF Distribution, built once by `tests/registry/build`
//! and named by `$REGISTRY`), started on loopback with its storage in a
//! temporary directory, and a plain HTTP client of its distribution API.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::{eventually, free_port};

/// A running registry, stopped when dropped.
pub struct Registry {
    child: Child,
    pub port: u16,
    _storage: tempfile::TempDir,
    /// A TLS registry's certificates, read when it starts and by clients.
    _certs: Option<tempfile::TempDir>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    pub fn start() -> Self {
        Self::start_with(|_| String::new())
    }

    /// Started with the configuration `extra` adds (given the storage
    /// directory).
    pub fn start_with(extra: impl FnOnce(&Path) -> String) -> Self {
        let registry = Self::launch(String::new(), extra);
        eventually("the registry to answer", Duration::from_secs(90), || {
            let (status, _, _) = registry.get("/v2/", "*/*").ok()?;
            matches!(status, 200 | 401).then_some(())
        });
        registry
    }

    /// Started serving HTTPS only, as registries do off loopback, with a
    /// certificate for `localhost` from a CA of its own: the registry, and
    /// that CA's certificate (PEM) for clients to trust. [`Registry::get`]
    /// speaks plain HTTP, so it does not reach this one.
    pub fn start_tls() -> (Self, std::path::PathBuf) {
        let certs = tempfile::tempdir().expect("temp dir");
        let (ca, cert, key) = (
            certs.path().join("ca.crt"),
            certs.path().join("tls.crt"),
            certs.path().join("tls.key"),
        );
        let openssl = |args: &[&str]| crate::openssl(certs.path(), args);
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=e2e registry CA",
        ]);
        openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "tls.key",
            "-out",
            "tls.csr",
            "-subj",
            "/CN=localhost",
        ]);
        std::fs::write(
            certs.path().join("san.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "tls.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "tls.crt",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ]);
        let tls = format!(
            "  tls:\n    certificate: {}\n    key: {}\n",
            cert.display(),
            key.display()
        );
        let mut registry = Self::launch(tls, |_| String::new());
        registry._certs = Some(certs);
        // Listening is answering here: the server binds once configured.
        eventually("the registry to listen", Duration::from_secs(90), || {
            std::net::TcpStream::connect(("127.0.0.1", registry.port)).ok()
        });
        (registry, ca)
    }

    /// The registry process, `http` added to its `http:` section and
    /// `extra` to its configuration.
    fn launch(http: String, extra: impl FnOnce(&Path) -> String) -> Self {
        let bin = std::env::var("REGISTRY").expect("REGISTRY (tests/e2e/run sets it)");
        let storage = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let config = storage.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n{http}{}",
                storage.path().join("data").display(),
                extra(storage.path()),
            ),
        )
        .unwrap();
        let child = Command::new(bin)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the registry");
        Registry {
            child,
            port,
            _storage: storage,
            _certs: None,
        }
    }

    /// GET `path`: status, content type, body.
    pub fn get(&self, path: &str, accept: &str) -> std::io::Result<(u16, String, Vec<u8>)> {
        self.request("GET", path, &format!("Accept: {accept}"), &[])
    }

    /// `method` on `path` with one header line and a body: status, content
    /// type, body.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        header: &str,
        body: &[u8],
    ) -> std::io::Result<(u16, String, Vec<u8>)> {
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        write!(
            stream,
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{}\r\n{header}\r\nContent-Length: {}\r\n\r\n",
            self.port,
            body.len()
        )?;
        stream.write_all(body)?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer)?;
        let split = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| std::io::Error::other("no end of headers"))?;
        let head = String::from_utf8_lossy(&answer[..split]).to_string();
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let content_type = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-type")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_default();
        Ok((status, content_type, answer[split + 4..].to_vec()))
    }

    pub fn fetch(
        &self,
        repo: &str,
        kind: &str,
        reference: &str,
        accept: &str,
    ) -> (String, Vec<u8>) {
        let path = format!("/v2/{repo}/{kind}/{reference}");
        let (status, content_type, body) = self.get(&path, accept).expect("GET from the registry");
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
        (content_type, body)
    }

    pub fn json(&self, repo: &str, kind: &str, reference: &str, accept: &str) -> Value {
        serde_json::from_slice(&self.fetch(repo, kind, reference, accept).1).expect("JSON")
    }
}
