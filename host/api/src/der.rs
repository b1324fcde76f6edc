//! Just enough DER to read a certificate's subject common name and its
//! validity: the front-proxy's client certificate must name an allowed proxy
//! (`requestheader-allowed-names`), and rustls checks the chain but not
//! names; `kubeplug doctor` says when an APIService's CA expires.

/// One TLV: its tag and contents; the rest of the input after it.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (bytes, after) = rest.split_at(n);
        rest = after;
        bytes
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b))
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
/// `[0] EXPLICIT Version` of a TBSCertificate.
const VERSION: u8 = 0xa0;
/// 2.5.4.3, commonName.
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// The subject's common name of a DER certificate, read as kube-apiserver
/// reads it (Go's `pkix.Name.CommonName`, which `requestheader-allowed-names`
/// is checked against): one name, the *last* commonName attribute of the
/// subject whose value is a string. A certificate naming several CNs is
/// judged by that one alone, never by whichever of them is allowed.
pub fn subject_common_name(cert: &[u8]) -> Option<String> {
    subject(cert).and_then(|s| common_names(s).pop())
}

/// The subject Name of a certificate: the sixth field of the TBSCertificate
/// (version, serial, signature, issuer, validity, subject), the version
/// being optional.
fn subject(cert: &[u8]) -> Option<&[u8]> {
    // serial, signature, issuer, validity
    let (tag, subject, _) = tlv(tbs_field(cert, 4)?)?;
    (tag == SEQUENCE).then_some(subject)
}

/// The TBSCertificate of `cert` from its field after the optional version
/// on, `skip` fields further (serial: 0, signature, issuer, validity: 3,
/// subject: 4).
fn tbs_field(cert: &[u8], skip: usize) -> Option<&[u8]> {
    let (tag, certificate, _) = tlv(cert)?;
    (tag == SEQUENCE).then_some(())?;
    let (tag, mut tbs, _) = tlv(certificate)?;
    (tag == SEQUENCE).then_some(())?;
    let (tag, _, after) = tlv(tbs)?;
    if tag == VERSION {
        tbs = after;
    }
    for _ in 0..skip {
        tbs = tlv(tbs)?.2;
    }
    Some(tbs)
}

/// A certificate's SubjectPublicKeyInfo, whole (tag and length too): the
/// host checks that the CA key it keeps is its CA certificate's
/// (the binary's `certs`).
pub fn subject_public_key_info(cert: &[u8]) -> Option<&[u8]> {
    let field = tbs_field(cert, 5)?;
    let (tag, _, after) = tlv(field)?;
    (tag == SEQUENCE).then(|| &field[..field.len() - after.len()])
}

/// A certificate's validity: (notBefore, notAfter).
pub fn validity(cert: &[u8]) -> Option<(jiff::Timestamp, jiff::Timestamp)> {
    let (tag, validity, _) = tlv(tbs_field(cert, 3)?)?;
    (tag == SEQUENCE).then_some(())?;
    let (tag, before, rest) = tlv(validity)?;
    let not_before = time(tag, before)?;
    let (tag, after, _) = tlv(rest)?;
    Some((not_before, time(tag, after)?))
}

/// An X.509 Time (RFC 5280 4.1.2.5): UTCTime `YYMMDDHHMMSSZ` (years 1950
/// to 2049) or GeneralizedTime `YYYYMMDDHHMMSSZ`, always in UTC with
/// seconds, as the RFC requires of certificates.
fn time(tag: u8, bytes: &[u8]) -> Option<jiff::Timestamp> {
    const UTC_TIME: u8 = 0x17;
    const GENERALIZED_TIME: u8 = 0x18;
    let text = std::str::from_utf8(bytes).ok()?.strip_suffix('Z')?;
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (year, rest): (u16, &str) = match (tag, text.len()) {
        (UTC_TIME, 12) => {
            let yy: u16 = text[..2].parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &text[2..])
        }
        (GENERALIZED_TIME, 14) => (text[..4].parse().ok()?, &text[4..]),
        _ => return None,
    };
    let (month, day, hour, minute, second) = (
        &rest[..2],
        &rest[2..4],
        &rest[4..6],
        &rest[6..8],
        &rest[8..],
    );
    // RFC 3339, whose parser checks every field's range.
    format!("{year:04}-{month}-{day}T{hour}:{minute}:{second}Z")
        .parse()
        .ok()
}

/// The text of a DER string value, for the string types Go's `asn1`
/// decodes into a `string`; `None` for any other type.
fn string(tag: u8, bytes: &[u8]) -> Option<String> {
    const UTF8: u8 = 0x0c;
    const NUMERIC: u8 = 0x12;
    const PRINTABLE: u8 = 0x13;
    const T61: u8 = 0x14;
    const IA5: u8 = 0x16;
    const BMP: u8 = 0x1e;
    match tag {
        UTF8 | NUMERIC | PRINTABLE | IA5 => String::from_utf8(bytes.to_vec()).ok(),
        // Go reads T61String as Latin-1.
        T61 => Some(bytes.iter().map(|&b| char::from(b)).collect()),
        BMP if bytes.len().is_multiple_of(2) => String::from_utf16(
            &bytes
                .chunks(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect::<Vec<_>>(),
        )
        .ok(),
        _ => None,
    }
}

/// Name ::= SEQUENCE OF SET OF SEQUENCE { type OID, value ANY }: every
/// commonName, in order.
fn common_names(mut name: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    while let Some((tag, mut set, rest)) = tlv(name) {
        name = rest;
        if tag != SET {
            continue;
        }
        while let Some((tag, attribute, rest)) = tlv(set) {
            set = rest;
            if tag != SEQUENCE {
                continue;
            }
            let Some((OID, oid, value)) = tlv(attribute) else {
                continue;
            };
            if oid != COMMON_NAME {
                continue;
            }
            // Go keeps only values it decodes as strings; others leave the
            // name as it was.
            if let Some(text) = tlv(value).and_then(|(tag, text, _)| string(tag, text)) {
                out.push(text);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v1 certificate (no version field) for `O=system:masters,
    /// CN=front-proxy-client` issued by `CN=front-proxy-ca` (openssl): the
    /// issuer's CN comes first in the DER and must not be taken for the
    /// subject's.
    const CERT: &str = "MIIBSDCB8AIUGb4qxqhdNum6POz9FWWvhs5/SbgwCgYIKoZIzj0EAwIwGTEXMBUGA1UEAwwOZnJvbnQtcHJveHktY2EwHhcNMjYxMTMwMDY1NTEyWhcNMzYxMTI3MDY1NTEyWjA2MRcwFQYDVQQKDA5zeXN0ZW06bWFzdGVyczEbMBkGA1UEAwwSZnJvbnQtcHJveHktY2xpZW50MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEviosvu35TtoJc9Vb2e7TXMSdHDyY1F1YB+6f6pS8LbwVHpxdnZT5ZM1eGfXdi9kZ5XN99THZrzojQSv7IHvOETAKBggqhkjOPQQDAgNHADBEAiAhkOnqhWQJz8kDXsUlq+z2Uv3mEAVTcky968SaQXTUZwIgWheYw4pjcws4x+yG8zlnKbqM5GemhrXJUOwWy9dn5tE=";

    #[test]
    fn reads_the_subject_common_name() {
        let der = decode(CERT);
        assert_eq!(
            subject_common_name(&der).as_deref(),
            Some("front-proxy-client")
        );
    }

    /// `CN=front-proxy-client, CN=mallory` (openssl `-subj
    /// /CN=front-proxy-client/CN=mallory`), issued by `CN=front-proxy-ca`:
    /// Go's `Subject.CommonName` is `mallory`, the last one.
    const TWO_NAMES: &str = "MIIBQjCB6QIUBI3dK4VnEdfc8/byTmnqqUOQvVgwCgYIKoZIzj0EAwIwGTEXMBUGA1UEAwwOZnJvbnQtcHJveHktY2EwHhcNMjYxMjAxMDkyNTUwWhcNMzYxMTI4MDkyNTUwWjAvMRswGQYDVQQDDBJmcm9udC1wcm94eS1jbGllbnQxEDAOBgNVBAMMB21hbGxvcnkwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAS7mPhscSHQ70NtbhqwDTsIeQCWP9GmM+nsE0XAHPNBcz2/yzXhe062rJQRqx/j38GL+klsHKlIjbV4h4XmKmSJMAoGCCqGSM49BAMCA0gAMEUCIQDNbE4tS9Wq1Was35aHCP6e7Yv6Zk+sPxmZU6lN505NuQIgV/vVCNG3THVjjtZsKCnf/KxsR3qnaoJ5v36oWSHbnbI=";

    #[test]
    fn of_several_common_names_the_last_one_counts_as_in_go() {
        let der = decode(TWO_NAMES);
        assert_eq!(subject_common_name(&der).as_deref(), Some("mallory"));
    }

    #[test]
    fn only_string_values_are_names() {
        // SET { SEQUENCE { OID 2.5.4.3, INTEGER 1 } } then a UTF8String CN.
        let name = [
            0x31, 0x0a, 0x30, 0x08, 0x06, 0x03, 0x55, 0x04, 0x03, 0x02, 0x01, 0x01, //
            0x31, 0x0a, 0x30, 0x08, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x01, b'a',
        ];
        assert_eq!(common_names(&name), vec!["a"]);
        let int_last = [name[12..].to_vec(), name[..12].to_vec()].concat();
        assert_eq!(common_names(&int_last), vec!["a"]);
    }

    /// `CN=expired-ca`, valid from 2020-01-01 to 2020-02-01 (UTCTime).
    const EXPIRED: &str = "MIIBWDCB/qADAgECAgEBMAoGCCqGSM49BAMCMBUxEzARBgNVBAMMCmV4cGlyZWQtY2EwHhcNMjAwMTAxMDAwMDAwWhcNMjAwMjAxMDAwMDAwWjAVMRMwEQYDVQQDDApleHBpcmVkLWNhMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAERVLbYfxtDguxMLdW/GuOiVJm18yJ1qBcwVN3uzNXN8PBKXJEj98MZl2QlGoRTCG9XCpz35XfTCUB2f/+TXDS1KM/MD0wDwYDVR0TAQH/BAUwAwEB/zALBgNVHQ8EBAMCAQYwHQYDVR0OBBYEFCxG1Lru2MOf82Ubv0s8feDmAKUfMAoGCCqGSM49BAMCA0kAMEYCIQDtPlZ19KQJ5fmaNn6OM0bMo1Ke5z0Y25XjwI5g2WTQDgIhAJ8hrJA0SO/B2vsmdGQwZ9QJB+88Tj2kZ2lqaKKyLjfB";

    /// The same key, valid from 2025-01-01 (UTCTime) to 2060-01-01
    /// (GeneralizedTime: past 2049).
    const UNTIL_2060: &str = "MIIBWTCCAQCgAwIBAgIBAjAKBggqhkjOPQQDAjAVMRMwEQYDVQQDDApleHBpcmVkLWNhMCAXDTI1MDEwMTAwMDAwMFoYDzIwNjAwMTAxMDAwMDAwWjAVMRMwEQYDVQQDDApleHBpcmVkLWNhMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAERVLbYfxtDguxMLdW/GuOiVJm18yJ1qBcwVN3uzNXN8PBKXJEj98MZl2QlGoRTCG9XCpz35XfTCUB2f/+TXDS1KM/MD0wDwYDVR0TAQH/BAUwAwEB/zALBgNVHQ8EBAMCAQYwHQYDVR0OBBYEFCxG1Lru2MOf82Ubv0s8feDmAKUfMAoGCCqGSM49BAMCA0cAMEQCIDBveRht8GnD+wuNjQXgg7AbRgYrCXTiadnPbP3rmbRtAiAvGUg/ekWAbElMhUA398j3bhIJPvt6egvQYI74jCuCYg==";

    #[test]
    fn reads_the_validity_in_utc_and_generalized_time() {
        let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
        assert_eq!(
            validity(&decode(EXPIRED)),
            Some((at("2020-01-01T00:00:00Z"), at("2020-02-01T00:00:00Z")))
        );
        assert_eq!(
            validity(&decode(UNTIL_2060)),
            Some((at("2025-01-01T00:00:00Z"), at("2060-01-01T00:00:00Z")))
        );
        // A v1 certificate (no version field) has its validity too.
        assert!(validity(&decode(CERT)).is_some());
        assert_eq!(
            subject_common_name(&decode(EXPIRED)).as_deref(),
            Some("expired-ca")
        );
    }

    #[test]
    fn times_outside_the_rfc_are_refused() {
        assert!(time(0x17, b"200101000000").is_none(), "no Z");
        assert!(time(0x17, b"2001010000Z").is_none(), "no seconds");
        assert!(time(0x18, b"20200101000000.5Z").is_none(), "fractions");
        assert!(time(0x17, b"201301000000Z").is_none(), "month 13");
        assert_eq!(
            time(0x17, b"500101000000Z"),
            Some("1950-01-01T00:00:00Z".parse().unwrap())
        );
    }

    #[test]
    fn garbage_has_no_name() {
        assert!(subject_common_name(b"\x30\x82\xff").is_none());
        assert!(subject_common_name(&[]).is_none());
        assert!(validity(b"\x30\x82\xff").is_none());
    }

    fn decode(b64: &str) -> Vec<u8> {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = Vec::new();
        let (mut acc, mut bits) = (0u32, 0);
        for c in b64.bytes().filter(|&c| c != b'=') {
            acc = (acc << 6) | ALPHABET.iter().position(|&a| a == c).unwrap() as u32;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
            }
        }
        out
    }
}
