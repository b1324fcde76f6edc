//! The serving certificate's decisions, without a cluster: which names it
//! carries, when it and its CA are renewed, and which CAs every `caBundle`
//! trusts. [`super`] reads and writes the Secret and acts on them.
//!
//! As Gatekeeper's cert-controller: one self-signed CA and one serving
//! certificate it signs, both renewed before they expire. Unlike it, a
//! renewed CA does not replace the old one in the bundle at once: the old
//! CA stays trusted until it expires, so a replica still serving the
//! previous certificate keeps verifying while the others catch up.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData as _,
};
use rustls::client::danger::ServerCertVerifier as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use kubeplug_api::der;

/// The Secret's keys: `ca.crt` is the bundle every client trusts (the
/// current CA first, then older ones until they expire), `ca.key` the
/// current CA's key, `tls.crt` and `tls.key` the serving certificate (as a
/// `kubernetes.io/tls` Secret has them).
pub const CA_BUNDLE: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";

/// A bundle holds the current CA and at most this many older ones.
const OLDER_CAS: usize = 2;

/// Certificates start this long before they are made, for clocks behind
/// ours; a tenth of their lifetime at most, so that a short one (a test's)
/// is not due for renewal as soon as it is made.
const BACKDATE: Duration = Duration::from_secs(5 * 60);

fn backdate(lifetime: Duration) -> SignedDuration {
    SignedDuration::try_from(BACKDATE.min(lifetime / 10)).unwrap_or(SignedDuration::ZERO)
}

/// The common name of every CA the host makes, before its time of making.
const CA_NAME: &str = "kubeplug-ca";

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    /// rcgen refused a key or a certificate.
    #[error("failed to generate a key or certificate")]
    Generate(#[from] rcgen::Error),
    /// A time out of the range a certificate can hold.
    #[error("a validity bound out of range")]
    Time,
    /// The stored CA cannot sign (its certificate or key unreadable, or
    /// not a pair).
    #[error("the stored CA cannot sign: {0}")]
    Ca(&'static str),
}

/// What the Secret holds, as PEM text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub ca_bundle: String,
    pub ca_key: String,
    pub cert: String,
    pub key: String,
}

/// How long what the host makes is valid.
#[derive(Debug, Clone, Copy)]
pub struct Lifetimes {
    pub serving: Duration,
    pub ca: Duration,
}

impl Lifetimes {
    /// A serving certificate valid `serving`, its CA five times as long:
    /// a CA renewal (which changes every `caBundle`) is rarer than a
    /// serving one (which changes none).
    pub fn for_serving(serving: Duration) -> Self {
        Lifetimes {
            serving,
            ca: serving.saturating_mul(5),
        }
    }
}

/// What to do with the Secret's certificates now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    /// Serve them as they are.
    Keep,
    /// Drop CAs that expired from the bundle; serve the rest as it is.
    Prune,
    /// A new serving certificate from the same CA.
    Serving(Reason),
    /// A new CA (the old one kept in the bundle until it expires) and a new
    /// serving certificate from it.
    Ca(Reason),
}

/// Why a certificate is replaced: a short word, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// None stored yet.
    Missing,
    /// Unreadable, or its key is not its own.
    Unreadable,
    /// Less than a third of its lifetime left.
    Expiring,
    /// It does not verify, from the current CA, for every name the host
    /// serves (the names changed, or another CA signed it).
    Invalid,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Missing => "missing",
            Reason::Unreadable => "unreadable",
            Reason::Expiring => "expiring",
            Reason::Invalid => "invalid",
        }
    }
}

/// The names the serving certificate carries: each Service's in-cluster
/// names in `namespace` (`NAME.NS.svc`, which the API server dials, and
/// `NAME.NS.svc.cluster.local`), then `localhost` and `127.0.0.1`, for a
/// host on loopback and port-forwards.
pub fn serving_names(services: &[String], namespace: &str) -> Vec<String> {
    let mut names: Vec<String> = services
        .iter()
        .flat_map(|service| {
            [
                format!("{service}.{namespace}.svc"),
                format!("{service}.{namespace}.svc.cluster.local"),
            ]
        })
        .collect();
    names.extend(["localhost".to_string(), "127.0.0.1".to_string()]);
    names.dedup();
    names
}

/// When a certificate valid from `not_before` to `not_after` is renewed:
/// once a third of its lifetime is left (cert-controller renews a fixed 90
/// days ahead, which a short lifetime would not survive).
pub fn renew_at(not_before: Timestamp, not_after: Timestamp) -> Timestamp {
    let life = not_after.duration_since(not_before);
    not_after
        .checked_sub(life / 3)
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

/// What to do with `stored` at `now` for a certificate serving `names`.
pub fn decide(stored: Option<&Stored>, names: &[String], now: Timestamp) -> Renewal {
    let Some(stored) = stored else {
        return Renewal::Ca(Reason::Missing);
    };
    let Some(ca) = pem_certs(&stored.ca_bundle).into_iter().next() else {
        return Renewal::Ca(Reason::Unreadable);
    };
    let Some((ca_from, ca_until)) = der::validity(&ca) else {
        return Renewal::Ca(Reason::Unreadable);
    };
    if !ca_key_matches(&ca, &stored.ca_key) {
        return Renewal::Ca(Reason::Unreadable);
    }
    if now >= renew_at(ca_from, ca_until) {
        return Renewal::Ca(Reason::Expiring);
    }
    let Some(leaf) = pem_certs(&stored.cert).into_iter().next() else {
        return Renewal::Serving(Reason::Unreadable);
    };
    if !serving_key_matches(&stored.cert, &stored.key) {
        return Renewal::Serving(Reason::Unreadable);
    }
    if !verifies(&ca, &leaf, names, now) {
        return Renewal::Serving(Reason::Invalid);
    }
    match der::validity(&leaf) {
        Some((from, until)) if now < renew_at(from, until) => {}
        Some(_) => return Renewal::Serving(Reason::Expiring),
        None => return Renewal::Serving(Reason::Unreadable),
    }
    if pruned(&stored.ca_bundle, now) != stored.ca_bundle {
        return Renewal::Prune;
    }
    Renewal::Keep
}

/// What the Secret holds after `renewal` of `stored` (which must be
/// `Some` unless the renewal is of the CA). `Keep` returns it unchanged.
pub fn renew(
    stored: Option<&Stored>,
    renewal: &Renewal,
    names: &[String],
    lifetimes: Lifetimes,
    now: Timestamp,
) -> Result<Stored, IssueError> {
    match (renewal, stored) {
        (Renewal::Keep, Some(stored)) => Ok(stored.clone()),
        (Renewal::Prune, Some(stored)) => Ok(Stored {
            ca_bundle: pruned(&stored.ca_bundle, now),
            ..stored.clone()
        }),
        (Renewal::Serving(_), Some(stored)) => {
            let (issuer, ca_until) = stored_ca(stored)?;
            let (cert, key) = serving(&issuer, ca_until, names, lifetimes, now)?;
            Ok(Stored {
                cert,
                key,
                ..stored.clone()
            })
        }
        (_, stored) => {
            let (params, ca_key, ca_until) = new_ca(lifetimes, now)?;
            let ca_pem = pem("CERTIFICATE", params.self_signed(&ca_key)?.der());
            let ca_key_pem = pem("PRIVATE KEY", &ca_key.serialize_der());
            let issuer = Issuer::new(params, ca_key);
            let (cert, key) = serving(&issuer, ca_until, names, lifetimes, now)?;
            let older = stored.map_or("", |s| s.ca_bundle.as_str());
            Ok(Stored {
                ca_bundle: merge_bundle(&ca_pem, older, now),
                ca_key: ca_key_pem,
                cert,
                key,
            })
        }
    }
}

/// The bundle to trust: the certificates of `current`, then those of
/// `older` that are neither expired at `now` nor already in it, at most
/// [`OLDER_CAS`] of them, as PEM.
pub fn merge_bundle(current: &str, older: &str, now: Timestamp) -> String {
    let mut kept: Vec<CertificateDer<'static>> = Vec::new();
    let current = pem_certs(current);
    let mut older_kept = 0;
    for cert in current.iter().chain(pem_certs(older).iter()) {
        let is_current = kept.len() < current.len();
        let unexpired = der::validity(cert).is_some_and(|(_, until)| now < until);
        if kept.contains(cert) || !(is_current || unexpired) {
            continue;
        }
        if !is_current {
            if older_kept == OLDER_CAS {
                continue;
            }
            older_kept += 1;
        }
        kept.push(cert.clone());
    }
    kept.iter().map(|cert| pem("CERTIFICATE", cert)).collect()
}

/// `bundle` (current CA first) without the older CAs that expired.
fn pruned(bundle: &str, now: Timestamp) -> String {
    let certs = pem_certs(bundle);
    let Some((current, older)) = certs.split_first() else {
        return String::new();
    };
    let older: String = older.iter().map(|cert| pem("CERTIFICATE", cert)).collect();
    merge_bundle(&pem("CERTIFICATE", current), &older, now)
}

/// The serving certificate chain and key of `stored`, as rustls takes them.
pub fn serving_pair(
    stored: &Stored,
) -> Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let certs = pem_certs(&stored.cert);
    let key = PrivateKeyDer::from_pem_slice(stored.key.as_bytes()).ok()?;
    (!certs.is_empty()).then_some((certs, key))
}

/// The certificates of a PEM text; unreadable ones are left out.
fn pem_certs(text: &str) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(text.as_bytes())
        .filter_map(Result::ok)
        .collect()
}

fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// A PKCS#8 key from PEM, as rcgen signs with it.
fn key_pair(key: &str) -> Option<KeyPair> {
    let der = PrivateKeyDer::from_pem_slice(key.as_bytes()).ok()?;
    KeyPair::try_from(&der).ok()
}

/// Whether `key` (PEM) is the key of the CA certificate `ca`.
fn ca_key_matches(ca: &[u8], key: &str) -> bool {
    let Some(key) = key_pair(key) else {
        return false;
    };
    der::subject_public_key_info(ca) == Some(key.subject_public_key_info().as_slice())
}

/// Whether the serving key (PEM) is its certificate's.
fn serving_key_matches(cert: &str, key: &str) -> bool {
    let Ok(key) = PrivateKeyDer::from_pem_slice(key.as_bytes()) else {
        return false;
    };
    rustls::sign::CertifiedKey::from_der(pem_certs(cert), key, &kubeplug_api::tls::provider())
        .is_ok()
}

/// Whether `leaf` verifies from `ca` alone, at `now`, for every name, as a
/// TLS client (the API server) checks it.
fn verifies(
    ca: &CertificateDer<'_>,
    leaf: &CertificateDer<'_>,
    names: &[String],
    now: Timestamp,
) -> bool {
    let mut roots = rustls::RootCertStore::empty();
    if roots.add(ca.clone().into_owned()).is_err() {
        return false;
    }
    let Ok(verifier) = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        kubeplug_api::tls::provider(),
    )
    .build() else {
        return false;
    };
    let Ok(seconds) = u64::try_from(now.as_second()) else {
        return false;
    };
    let now = UnixTime::since_unix_epoch(Duration::from_secs(seconds));
    names.iter().all(|name| {
        ServerName::try_from(name.clone()).is_ok_and(|name| {
            verifier
                .verify_server_cert(leaf, &[], &name, &[], now)
                .is_ok()
        })
    })
}

/// The CA parameters the host signs with: a name of its own per CA (so two
/// CAs in a bundle are told apart by name too), allowed to sign serving
/// certificates only.
fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// A fresh CA valid from [`BACKDATE`] ago for `lifetimes.ca`.
fn new_ca(
    lifetimes: Lifetimes,
    now: Timestamp,
) -> Result<(CertificateParams, KeyPair, Timestamp), IssueError> {
    let mut params = ca_params(&format!("{CA_NAME}@{}", now.as_second()));
    let until = add(now, lifetimes.ca)?;
    params.not_before = offset(sub(now, backdate(lifetimes.ca))?)?;
    params.not_after = offset(until)?;
    Ok((params, KeyPair::generate()?, until))
}

/// The current CA of `stored`, ready to sign, and when it expires.
fn stored_ca(stored: &Stored) -> Result<(Issuer<'static, KeyPair>, Timestamp), IssueError> {
    let ca = pem_certs(&stored.ca_bundle)
        .into_iter()
        .next()
        .ok_or(IssueError::Ca("no CA certificate"))?;
    let name = der::subject_common_name(&ca).ok_or(IssueError::Ca("no common name"))?;
    let (_, until) = der::validity(&ca).ok_or(IssueError::Ca("no validity"))?;
    if !ca_key_matches(&ca, &stored.ca_key) {
        return Err(IssueError::Ca("the key is not the certificate's"));
    }
    let key = key_pair(&stored.ca_key).ok_or(IssueError::Ca("the key is unreadable"))?;
    Ok((Issuer::new(ca_params(&name), key), until))
}

/// A serving certificate for `names` from `issuer`, valid for
/// `lifetimes.serving` but never beyond its CA: (certificate, key) as PEM.
fn serving(
    issuer: &Issuer<'_, KeyPair>,
    ca_until: Timestamp,
    names: &[String],
    lifetimes: Lifetimes,
    now: Timestamp,
) -> Result<(String, String), IssueError> {
    let mut params = CertificateParams::new(names.to_vec())?;
    let mut name = DistinguishedName::new();
    name.push(
        DnType::CommonName,
        names.first().map_or("kubeplug", String::as_str),
    );
    params.distinguished_name = name;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = offset(sub(now, backdate(lifetimes.serving))?)?;
    params.not_after = offset(add(now, lifetimes.serving)?.min(ca_until))?;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    Ok((
        pem("CERTIFICATE", cert.der()),
        pem("PRIVATE KEY", &key.serialize_der()),
    ))
}

fn add(now: Timestamp, by: Duration) -> Result<Timestamp, IssueError> {
    let by = SignedDuration::try_from(by).map_err(|_| IssueError::Time)?;
    now.checked_add(by).map_err(|_| IssueError::Time)
}

fn sub(now: Timestamp, by: SignedDuration) -> Result<Timestamp, IssueError> {
    now.checked_sub(by).map_err(|_| IssueError::Time)
}

fn offset(at: Timestamp) -> Result<time::OffsetDateTime, IssueError> {
    time::OffsetDateTime::from_unix_timestamp(at.as_second()).map_err(|_| IssueError::Time)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    fn names() -> Vec<String> {
        serving_names(&["kubeplug-api".into(), "kubeplug-webhooks".into()], "ns")
    }

    fn lifetimes() -> Lifetimes {
        Lifetimes::for_serving(30 * DAY)
    }

    fn t0() -> Timestamp {
        "2030-01-01T00:00:00Z".parse().unwrap()
    }

    fn later(days: i64) -> Timestamp {
        t0().checked_add(SignedDuration::from_hours(24 * days))
            .unwrap()
    }

    fn fresh() -> Stored {
        renew(
            None,
            &Renewal::Ca(Reason::Missing),
            &names(),
            lifetimes(),
            t0(),
        )
        .unwrap()
    }

    fn first_ca(stored: &Stored) -> CertificateDer<'static> {
        pem_certs(&stored.ca_bundle).remove(0)
    }

    #[test]
    fn the_names_are_each_services_in_cluster_names_and_loopback() {
        assert_eq!(
            serving_names(&["kubeplug-api".into()], "kubeplug-system"),
            [
                "kubeplug-api.kubeplug-system.svc",
                "kubeplug-api.kubeplug-system.svc.cluster.local",
                "localhost",
                "127.0.0.1",
            ]
        );
        assert_eq!(names().len(), 6);
    }

    #[test]
    fn renewal_comes_when_a_third_of_the_lifetime_is_left() {
        let (from, until) = (t0(), later(30));
        assert_eq!(renew_at(from, until), later(20));
        assert_eq!(renew_at(until, until), until);
    }

    #[test]
    fn nothing_stored_makes_a_ca_and_a_certificate_that_verify_for_every_name() {
        assert_eq!(decide(None, &names(), t0()), Renewal::Ca(Reason::Missing));
        let stored = fresh();
        assert_eq!(pem_certs(&stored.ca_bundle).len(), 1);
        let leaf = pem_certs(&stored.cert).remove(0);
        assert!(verifies(&first_ca(&stored), &leaf, &names(), t0()));
        assert!(serving_pair(&stored).is_some());
        assert_eq!(decide(Some(&stored), &names(), later(1)), Renewal::Keep);
    }

    #[test]
    fn a_serving_certificate_with_a_third_left_is_renewed_from_the_same_ca() {
        let stored = fresh();
        // Valid 30 days: kept until day 20, renewed from then on.
        assert_eq!(decide(Some(&stored), &names(), later(19)), Renewal::Keep);
        let due = decide(Some(&stored), &names(), later(21));
        assert_eq!(due, Renewal::Serving(Reason::Expiring));
        let renewed = renew(Some(&stored), &due, &names(), lifetimes(), later(21)).unwrap();
        assert_eq!(
            renewed.ca_bundle, stored.ca_bundle,
            "the CA stays, so caBundles do not change"
        );
        assert_eq!(renewed.ca_key, stored.ca_key);
        assert_ne!(renewed.cert, stored.cert);
        assert_eq!(decide(Some(&renewed), &names(), later(22)), Renewal::Keep);
        // An expired one is renewed too.
        assert_eq!(
            decide(Some(&stored), &names(), later(31)),
            Renewal::Serving(Reason::Invalid)
        );
    }

    #[test]
    fn a_renewed_ca_keeps_the_old_one_in_the_bundle_until_it_expires() {
        let stored = fresh();
        // The CA lives 150 days: renewed from day 100.
        let due = decide(Some(&stored), &names(), later(101));
        assert_eq!(due, Renewal::Ca(Reason::Expiring));
        let renewed = renew(Some(&stored), &due, &names(), lifetimes(), later(101)).unwrap();
        let bundle = pem_certs(&renewed.ca_bundle);
        assert_eq!(bundle.len(), 2, "new and old CA during the overlap");
        assert_eq!(bundle[1], first_ca(&stored));
        assert_ne!(renewed.ca_key, stored.ca_key);
        // The new certificate verifies from the new CA; the old one still
        // verifies from the bundle's old CA while a replica serves it.
        let leaf = pem_certs(&renewed.cert).remove(0);
        assert!(verifies(&bundle[0], &leaf, &names(), later(101)));
        assert_eq!(decide(Some(&renewed), &names(), later(102)), Renewal::Keep);
        // Once the old CA expired, it leaves the bundle.
        let renewed = renew(
            Some(&renewed),
            &Renewal::Serving(Reason::Expiring),
            &names(),
            lifetimes(),
            later(140),
        )
        .unwrap();
        assert_eq!(decide(Some(&renewed), &names(), later(151)), Renewal::Prune);
        let pruned = renew(
            Some(&renewed),
            &Renewal::Prune,
            &names(),
            lifetimes(),
            later(151),
        )
        .unwrap();
        assert_eq!(pem_certs(&pruned.ca_bundle), [bundle[0].clone()]);
    }

    #[test]
    fn a_certificate_for_other_names_or_from_another_ca_is_replaced() {
        let stored = fresh();
        let more = [names(), vec!["kubeplug-extra.ns.svc".to_string()]].concat();
        assert_eq!(
            decide(Some(&stored), &more, later(1)),
            Renewal::Serving(Reason::Invalid)
        );
        let other = fresh();
        let mixed = Stored {
            cert: other.cert.clone(),
            key: other.key.clone(),
            ..stored.clone()
        };
        assert_eq!(
            decide(Some(&mixed), &names(), later(1)),
            Renewal::Serving(Reason::Invalid)
        );
        let wrong_key = Stored {
            key: other.key.clone(),
            ..stored.clone()
        };
        assert_eq!(
            decide(Some(&wrong_key), &names(), later(1)),
            Renewal::Serving(Reason::Unreadable)
        );
    }

    #[test]
    fn a_ca_whose_key_is_not_its_own_or_unreadable_is_replaced() {
        let stored = fresh();
        let other = fresh();
        let wrong = Stored {
            ca_key: other.ca_key,
            ..stored.clone()
        };
        assert_eq!(
            decide(Some(&wrong), &names(), later(1)),
            Renewal::Ca(Reason::Unreadable)
        );
        assert!(matches!(
            renew(
                Some(&wrong),
                &Renewal::Serving(Reason::Expiring),
                &names(),
                lifetimes(),
                later(1)
            ),
            Err(IssueError::Ca(_))
        ));
        let garbage = Stored {
            ca_bundle: "not PEM".into(),
            ..stored
        };
        assert_eq!(
            decide(Some(&garbage), &names(), later(1)),
            Renewal::Ca(Reason::Unreadable)
        );
    }

    #[test]
    fn a_short_lived_certificate_is_not_due_as_soon_as_it_is_made() {
        let short = Lifetimes::for_serving(Duration::from_secs(90));
        let stored = renew(None, &Renewal::Ca(Reason::Missing), &names(), short, t0()).unwrap();
        let at = |secs: i64| t0().checked_add(SignedDuration::from_secs(secs)).unwrap();
        assert_eq!(decide(Some(&stored), &names(), at(1)), Renewal::Keep);
        // Valid 99 s (9 s backdated): due with 33 s left, 57 s on.
        assert_eq!(decide(Some(&stored), &names(), at(56)), Renewal::Keep);
        assert_eq!(
            decide(Some(&stored), &names(), at(58)),
            Renewal::Serving(Reason::Expiring)
        );
    }

    #[test]
    fn a_serving_certificate_never_outlives_its_ca() {
        let stored = renew(
            None,
            &Renewal::Ca(Reason::Missing),
            &names(),
            Lifetimes {
                serving: 30 * DAY,
                ca: 10 * DAY,
            },
            t0(),
        )
        .unwrap();
        let (_, ca_until) = der::validity(&first_ca(&stored)).unwrap();
        let (_, until) = der::validity(&pem_certs(&stored.cert)[0]).unwrap();
        assert_eq!(until, ca_until);
    }

    #[test]
    fn a_bundle_keeps_the_current_cas_and_at_most_two_unexpired_older_ones() {
        let cas: Vec<String> = (0..4).map(|_| fresh().ca_bundle).collect();
        let older = cas[1..].concat();
        let merged = merge_bundle(&cas[0], &older, later(1));
        assert_eq!(pem_certs(&merged).len(), 3);
        assert_eq!(pem_certs(&merged)[0], pem_certs(&cas[0])[0]);
        // The current one is not repeated, and expired older ones go.
        assert_eq!(merge_bundle(&cas[0], &cas[0], later(1)), cas[0]);
        assert_eq!(merge_bundle(&cas[0], &cas[1], later(200)), cas[0]);
    }
}
