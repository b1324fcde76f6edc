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

/// The subject's common names of a DER certificate (usually one).
pub fn subject_common_names(cert: &[u8]) -> Vec<String> {
    subject(cert).map(common_names).unwrap_or_default()
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

/// Name ::= SEQUENCE OF SET OF SEQUENCE { type OID, value ANY }.
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
            // UTF8String, PrintableString, IA5String, ...: all bytes here.
            if let Some((_, text, _)) = tlv(value) {
                out.push(String::from_utf8_lossy(text).into_owned());
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
        assert_eq!(subject_common_names(&der), vec!["front-proxy-client"]);
    }

    #[test]
    fn garbage_has_no_name() {
        assert!(subject_common_names(b"\x30\x82\xff").is_empty());
        assert!(subject_common_names(&[]).is_empty());
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
