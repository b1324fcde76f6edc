//! The aggregated API's registration: the APIService exists (optional: a
//! warning when absent), kube-apiserver finds it `Available`, and every
//! certificate of its `caBundle` (the CA the aggregator verifies the host's
//! serving certificate with) is within its validity.

use jiff::Timestamp;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::Api;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use crate::report::{Check, Status};
use kubeplug_api::der;

const REGISTRATION: &str = "APIService";
const BUNDLE: &str = "APIService CA bundle";

/// A certificate expiring within this long is a warning: time to renew it
/// before the aggregator stops trusting the host (`kubectl get plugins`
/// and previews fail, and discovery is incomplete for every client).
pub const RENEW_WITHIN_SECONDS: i64 = 14 * 24 * 60 * 60;

/// Where a certificate stands at a given moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    Valid {
        until: Timestamp,
    },
    /// Valid, but not for [`RENEW_WITHIN_SECONDS`] more.
    ExpiresSoon {
        on: Timestamp,
        days: i64,
    },
    Expired {
        on: Timestamp,
    },
    NotYetValid {
        from: Timestamp,
    },
}

/// Where a certificate valid from `not_before` to `not_after` stands at
/// `now`.
pub fn classify(not_before: Timestamp, not_after: Timestamp, now: Timestamp) -> Validity {
    if now > not_after {
        Validity::Expired { on: not_after }
    } else if now < not_before {
        Validity::NotYetValid { from: not_before }
    } else {
        let left = not_after.as_second() - now.as_second();
        if left < RENEW_WITHIN_SECONDS {
            Validity::ExpiresSoon {
                on: not_after,
                days: left / (24 * 60 * 60),
            }
        } else {
            Validity::Valid { until: not_after }
        }
    }
}

/// The APIService `name` and its CA bundle, as of `now`: two checks.
pub async fn check(client: &kube::Client, name: &str, now: Timestamp) -> Vec<Check> {
    match Api::<APIService>::all(client.clone()).get_opt(name).await {
        Ok(Some(service)) => vec![availability(name, &service), ca_bundle(&service, now)],
        Ok(None) => vec![
            Check::warn(
                REGISTRATION,
                format!(
                    "APIService {name} is not registered: the aggregated API (kubectl get plugins) is optional; to serve it, see docs/aggregated-api.md (deploy/overlays/aggregated-api)"
                ),
            ),
            Check::skipped(BUNDLE, format!("no APIService {name}")),
        ],
        Err(error) => vec![
            Check::warn(
                REGISTRATION,
                format!("cannot read APIService {name}: {error}"),
            ),
            Check::skipped(BUNDLE, format!("APIService {name} could not be read")),
        ],
    }
}

/// Its `Available` condition.
fn availability(name: &str, service: &APIService) -> Check {
    let target = service
        .spec
        .as_ref()
        .and_then(|s| s.service.as_ref())
        .map(|s| {
            format!(
                "service {}/{}:{}",
                s.namespace.as_deref().unwrap_or_default(),
                s.name.as_deref().unwrap_or_default(),
                s.port.unwrap_or(443)
            )
        })
        .unwrap_or_else(|| "served by kube-apiserver itself".into());
    let available = service
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Available"));
    match available {
        Some(c) if c.status == "True" => {
            Check::ok(REGISTRATION, format!("{name} Available ({target})"))
        }
        Some(c) => Check::fail(
            REGISTRATION,
            format!(
                "{name} is not Available ({target}): {}: {}: is the host running with --api-listen, and does the Service reach it?",
                c.reason.as_deref().unwrap_or("no reason"),
                c.message.as_deref().unwrap_or("no message")
            ),
        ),
        None => Check::fail(
            REGISTRATION,
            format!(
                "{name} has no Available condition yet ({target}): kube-apiserver has not checked it; wait a moment, or see whether the aggregator runs"
            ),
        ),
    }
}

/// Every certificate of the APIService's `caBundle`, as of `now`.
fn ca_bundle(service: &APIService, now: Timestamp) -> Check {
    let name = service.metadata.name.as_deref().unwrap_or_default();
    let Some(spec) = service.spec.as_ref().filter(|s| s.service.is_some()) else {
        return Check::skipped(BUNDLE, format!("{name} is served by kube-apiserver itself"));
    };
    let pem = spec
        .ca_bundle
        .as_ref()
        .map(|b| b.0.as_slice())
        .unwrap_or_default();
    if pem.is_empty() {
        return if spec.insecure_skip_tls_verify == Some(true) {
            Check::warn(
                BUNDLE,
                format!(
                    "{name} has no caBundle and insecureSkipTLSVerify: the aggregator trusts any server; put the CA of the host's serving certificate in caBundle"
                ),
            )
        } else {
            Check::fail(
                BUNDLE,
                format!(
                    "{name} has no caBundle: the aggregator cannot verify the host's serving certificate; put its CA there (deploy/apiservice/gen-cert)"
                ),
            )
        };
    }
    bundle(name, pem, now)
}

/// The worst of the certificates in `pem` as of `now`.
pub fn bundle(name: &str, pem: &[u8], now: Timestamp) -> Check {
    let renew = "issue a new CA and serving certificate (deploy/apiservice/gen-cert, or cert-manager) and put the CA in the APIService's caBundle";
    let certs = match CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>() {
        Ok(certs) if !certs.is_empty() => certs,
        Ok(_) => {
            return Check::fail(
                BUNDLE,
                format!("{name}'s caBundle holds no PEM certificate: {renew}"),
            );
        }
        Err(error) => {
            return Check::fail(
                BUNDLE,
                format!("{name}'s caBundle is not PEM: {error}: {renew}"),
            );
        }
    };
    let mut worst: Option<(Status, String)> = None;
    let mut valid = Vec::new();
    for cert in &certs {
        let who = der::subject_common_name(cert)
            .map(|cn| format!("certificate CN={cn}"))
            .unwrap_or_else(|| "a certificate without a common name".into());
        let Some((not_before, not_after)) = der::validity(cert) else {
            worst = Some((
                Status::Fail,
                format!("{name}'s caBundle holds {who} whose validity cannot be read: {renew}"),
            ));
            continue;
        };
        let found = match classify(not_before, not_after, now) {
            Validity::Valid { until } => {
                valid.push(format!("{who} valid until {}", day(until)));
                continue;
            }
            Validity::ExpiresSoon { on, days } => (
                Status::Warn,
                format!(
                    "{name}'s caBundle: {who} expires on {} (in {days} days): {renew}",
                    day(on)
                ),
            ),
            Validity::Expired { on } => (
                Status::Fail,
                format!(
                    "{name}'s caBundle: {who} expired on {} ({on}): {renew}",
                    day(on)
                ),
            ),
            Validity::NotYetValid { from } => (
                Status::Fail,
                format!(
                    "{name}'s caBundle: {who} is not valid before {from}: check the clocks, or {renew}"
                ),
            ),
        };
        if worst.as_ref().is_none_or(|(s, _)| rank(found.0) > rank(*s)) {
            worst = Some(found);
        }
    }
    match worst {
        Some((status, detail)) => Check::new(BUNDLE, status, detail),
        None => Check::ok(BUNDLE, valid.join("; ")),
    }
}

fn rank(status: Status) -> u8 {
    match status {
        Status::Ok | Status::Skipped => 0,
        Status::Warn => 1,
        Status::Fail => 2,
    }
}

/// `2020-02-01`.
fn day(at: Timestamp) -> String {
    let text = at.to_string();
    text.split('T').next().unwrap_or(&text).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    /// `CN=expired-ca`, valid from 2020-01-01 to 2020-02-01 (openssl ca
    /// -startdate/-enddate).
    const EXPIRED: &str = "-----BEGIN CERTIFICATE-----
MIIBWDCB/qADAgECAgEBMAoGCCqGSM49BAMCMBUxEzARBgNVBAMMCmV4cGlyZWQt
Y2EwHhcNMjAwMTAxMDAwMDAwWhcNMjAwMjAxMDAwMDAwWjAVMRMwEQYDVQQDDApl
eHBpcmVkLWNhMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAERVLbYfxtDguxMLdW
/GuOiVJm18yJ1qBcwVN3uzNXN8PBKXJEj98MZl2QlGoRTCG9XCpz35XfTCUB2f/+
TXDS1KM/MD0wDwYDVR0TAQH/BAUwAwEB/zALBgNVHQ8EBAMCAQYwHQYDVR0OBBYE
FCxG1Lru2MOf82Ubv0s8feDmAKUfMAoGCCqGSM49BAMCA0kAMEYCIQDtPlZ19KQJ
5fmaNn6OM0bMo1Ke5z0Y25XjwI5g2WTQDgIhAJ8hrJA0SO/B2vsmdGQwZ9QJB+88
Tj2kZ2lqaKKyLjfB
-----END CERTIFICATE-----
";

    #[test]
    fn a_certificate_is_classified_against_a_fixed_now() {
        let (from, until) = (at("2020-01-01T00:00:00Z"), at("2020-02-01T00:00:00Z"));
        assert_eq!(
            classify(from, until, at("2019-12-31T23:59:59Z")),
            Validity::NotYetValid { from }
        );
        assert_eq!(
            classify(from, until, at("2020-01-01T00:00:00Z")),
            Validity::Valid { until }
        );
        assert_eq!(
            classify(from, at("2021-01-01T00:00:00Z"), at("2020-06-01T00:00:00Z")),
            Validity::Valid {
                until: at("2021-01-01T00:00:00Z")
            }
        );
        // Fourteen days or more left: valid; a second less: renew.
        let fourteen_days = at("2020-01-18T00:00:00Z");
        assert!(matches!(
            classify(from, until, at("2020-01-17T23:59:59Z")),
            Validity::Valid { .. }
        ));
        assert_eq!(
            classify(from, until, fourteen_days),
            Validity::Valid { until }
        );
        assert_eq!(
            classify(from, until, at("2020-01-18T00:00:01Z")),
            Validity::ExpiresSoon {
                on: until,
                days: 13
            }
        );
        assert_eq!(
            classify(from, until, at("2020-01-31T23:59:59Z")),
            Validity::ExpiresSoon { on: until, days: 0 }
        );
        assert_eq!(
            classify(from, until, at("2020-02-01T00:00:01Z")),
            Validity::Expired { on: until }
        );
    }

    #[test]
    fn an_expired_bundle_fails_naming_the_certificate_and_the_date() {
        let check = bundle(
            "v1alpha1.kubeplug.io",
            EXPIRED.as_bytes(),
            at("2026-01-01T00:00:00Z"),
        );
        assert_eq!(check.status, Status::Fail);
        assert!(
            check.detail.starts_with(
                "v1alpha1.kubeplug.io's caBundle: certificate CN=expired-ca expired on 2020-02-01"
            ),
            "{}",
            check.detail
        );
        assert!(
            check.detail.contains("caBundle"),
            "the fix: {}",
            check.detail
        );
    }

    #[test]
    fn a_bundle_expiring_soon_warns_and_a_valid_one_is_ok() {
        let soon = bundle("x", EXPIRED.as_bytes(), at("2020-01-25T00:00:00Z"));
        assert_eq!(soon.status, Status::Warn);
        assert!(
            soon.detail.contains("expires on 2020-02-01 (in 7 days)"),
            "{}",
            soon.detail
        );
        let fine = bundle("x", EXPIRED.as_bytes(), at("2020-01-01T12:00:00Z"));
        assert_eq!(fine.status, Status::Ok, "{}", fine.detail);
        assert_eq!(
            fine.detail,
            "certificate CN=expired-ca valid until 2020-02-01"
        );
    }

    #[test]
    fn the_worst_certificate_of_a_bundle_decides() {
        let two = format!("{EXPIRED}{EXPIRED}");
        assert_eq!(
            bundle("x", two.as_bytes(), at("2020-03-01T00:00:00Z")).status,
            Status::Fail
        );
    }

    #[test]
    fn a_bundle_that_is_not_pem_fails() {
        assert_eq!(
            bundle("x", b"garbage", at("2020-03-01T00:00:00Z")).status,
            Status::Fail
        );
    }
}
