//! The serving certificates of the host's TLS listeners (the aggregated
//! API, the webhooks) and the CAs their clients are checked against: read
//! from PEM files, which rotate, so each listener re-reads them now and
//! then and keeps the previous ones on a failed read; or made by the host
//! itself (the binary's `certs`, which feeds a [`Current`]), reloaded as
//! soon as it is renewed.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Why a listener's certificate, key or CA could not be read; `what` names
/// them (`API certificate`, `webhook client CA`).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file that cannot be read, or holds no such item.
    #[error("cannot read the {what} {}", .path.display())]
    Unreadable {
        what: String,
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// A CA file without one certificate rustls can use.
    #[error("the {what} {} holds no usable CA certificate", .path.display())]
    NoCa { what: String, path: PathBuf },
}

/// The crypto provider every listener uses (kube's, so there is one).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The next connection on any of the host's listeners. An `accept` error
/// (e.g. out of file descriptors) is logged and retried: it never ends a
/// listener, nor the host.
pub async fn accept(listener: &tokio::net::TcpListener) -> (tokio::net::TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(error) => {
                tracing::warn!(addr = ?listener.local_addr().ok(), %error, "accepting a connection failed; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// How long a client may take over the handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// One connection's TLS handshake on the listener of `what` (`API`,
/// `webhook`), within [`HANDSHAKE`]; `None`, logged, when it fails.
pub async fn handshake(
    acceptor: &tokio_rustls::TlsAcceptor,
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    what: &str,
) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
    match tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "{what} connection refused in the TLS handshake");
            None
        }
        Err(_) => None,
    }
}

/// A serving certificate chain and its key, as the listeners take them.
pub struct Served {
    pub certs: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Served")
            .field("certs", &self.certs.len())
            .finish_non_exhaustive()
    }
}

/// The certificate of the moment; `changed()` says when it is renewed.
pub type Current = tokio::sync::watch::Receiver<Arc<Served>>;

/// Where a listener's serving certificate comes from.
#[derive(Debug, Clone)]
pub enum CertSource {
    /// PEM files (a mounted Secret), re-read every reload.
    Files { cert: PathBuf, key: PathBuf },
    /// The certificate the host makes and renews itself.
    Managed(Current),
}

impl CertSource {
    /// The certificate chain and key of the moment; `what` names them in
    /// errors.
    pub fn load(
        &self,
        what: &str,
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
        match self {
            CertSource::Files { cert, key } => serving_cert(cert, key, what),
            CertSource::Managed(current) => {
                let served = current.borrow();
                Ok((served.certs.clone(), served.key.clone_key()))
            }
        }
    }

    /// Wait until the listener should reload: `every`, or at once when a
    /// managed certificate is renewed.
    pub async fn reload_due(&mut self, every: Duration) {
        let renewed = async {
            match self {
                CertSource::Managed(current) => {
                    if current.changed().await.is_err() {
                        // The certificate's task ended: the timer alone.
                        std::future::pending::<()>().await;
                    }
                }
                CertSource::Files { .. } => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = renewed => {}
        }
    }
}

/// A certificate chain and its key, read from PEM files; `what` names them
/// in errors.
pub fn serving_cert(
    cert: &Path,
    key: &Path,
    what: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|source| TlsError::Unreadable {
            what: format!("{what} certificate"),
            path: cert.to_path_buf(),
            source,
        })?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsError::Unreadable {
        what: format!("{what} key"),
        path: key.to_path_buf(),
        source,
    })?;
    Ok((certs, key))
}

/// The CA certificates of a PEM file, as trust roots; `what` names it in
/// errors.
pub fn roots(path: &Path, what: &str) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|source| TlsError::Unreadable {
            what: what.to_string(),
            path: path.to_path_buf(),
            source,
        })?;
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(TlsError::NoCa {
            what: what.to_string(),
            path: path.to_path_buf(),
        });
    }
    Ok(roots)
}
