//! Just enough DER to read a certificate's subject common name: the
//! front-proxy's client certificate must name an allowed proxy
//! (`requestheader-allowed-names`), and rustls checks the chain but not names.

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
    let (tag, certificate, _) = tlv(cert)?;
    (tag == SEQUENCE).then_some(())?;
    let (tag, mut tbs, _) = tlv(certificate)?;
    (tag == SEQUENCE).then_some(())?;
    let (tag, _, after) = tlv(tbs)?;
    if tag == VERSION {
        tbs = after;
    }
    // serial, signature, issuer, validity
    for _ in 0..4 {
        tbs = tlv(tbs)?.2;
    }
    let (tag, subject, _) = tlv(tbs)?;
    (tag == SEQUENCE).then_some(subject)
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

    #[test]
    fn garbage_has_no_name() {
        assert!(subject_common_name(b"\x30\x82\xff").is_none());
        assert!(subject_common_name(&[]).is_none());
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
