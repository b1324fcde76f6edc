//! Signatures in Sigstore cosign's key-based format, so that `cosign verify
//! --key` accepts what `kubeplug push --sign-key` writes and `kubeplug
//! verify` checks what either wrote. Pure: keys, bytes and verdicts; the
//! registry side is [`crate::push`]'s and [`crate::verify`]'s.
//!
//! The format (cosign's `pkg/oci/static`, `pkg/oci/remote/signatures.go`,
//! `pkg/cosign/verifiers.go`): the signatures of manifest `sha256:<hex>`
//! are an OCI image manifest tagged `sha256-<hex>.sig` in the same
//! repository. Each layer, of media type
//! `application/vnd.dev.cosign.simplesigning.v1+json`, is a "simple
//! signing" payload naming that digest; its annotation
//! `dev.cosignproject.cosign/signature` is the base64 of an ASN.1 (DER)
//! ECDSA P-256 / SHA-256 signature over the payload's bytes. The config is
//! an ordinary OCI image config whose `rootfs.diff_ids` are the layers
//! (uncompressed, so their digests). cosign accepts a signature when it
//! verifies under the key and the payload's `docker-manifest-digest` is
//! the digest being verified; `docker-reference` is informative only.
//!
//! Keys are ECDSA P-256 (what cosign makes), unencrypted PEM: PKCS#8
//! `PRIVATE KEY` or SEC1 `EC PRIVATE KEY` to sign, SPKI `PUBLIC KEY` to
//! verify. Caveats: no Rekor transparency-log entry and no certificate, so
//! `cosign verify` needs `--insecure-ignore-tlog=true`; cosign's encrypted
//! key files are refused ([`KeyError::CosignEncrypted`]).

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair as _,
    UnparsedPublicKey,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{PrivateKeyDer, SubjectPublicKeyInfoDer};
use serde_json::{Value, json};

use crate::layout::{self, IMAGE_CONFIG, MANIFEST};

/// The media type of a signature layer.
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The payload's `critical.type`.
const PAYLOAD_TYPE: &str = "cosign container image signature";

/// A P-256 SubjectPublicKeyInfo is these 26 bytes (SEQUENCE, the
/// `id-ecPublicKey` and `prime256v1` OIDs, a BIT STRING header) and the
/// 65-byte uncompressed point: ring verifies against the point.
const P256_SPKI_PREFIX: &[u8] = &[
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];
/// The start of a P-256 PKCS#8 PrivateKeyInfo after its outer SEQUENCE
/// header: version 0 and the algorithm identifier. A SEC1 key becomes
/// PKCS#8 (what ring reads) by following these with its DER as an OCTET
/// STRING.
const P256_PKCS8_ALGORITHM: &[u8] = &[
    0x02, 0x01, 0x00, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
    0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07,
];

/// Why a key file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// `cosign generate-key-pair`'s file: scrypt and secretbox, a format
    /// of cosign's own.
    #[error(
        "this is cosign's encrypted key format ({0}), which kubeplug does not read; cosign cannot \
         export it, so make a PEM key both can use: `openssl genpkey -algorithm EC -pkeyopt \
         ec_paramgen_curve:P-256 -out key.pem`, `openssl pkey -in key.pem -pubout -out key.pub`, \
         and `cosign import-key-pair --key key.pem` for cosign"
    )]
    CosignEncrypted(String),
    /// A password-protected PKCS#8 file.
    #[error(
        "the key is encrypted (ENCRYPTED PRIVATE KEY); decrypt it first: `openssl pkey -in KEY -out key.pem`"
    )]
    Encrypted,
    /// No PEM block of the kind wanted.
    #[error("no PEM {0} block")]
    Missing(&'static str),
    /// PEM that does not decode.
    #[error("not valid PEM")]
    Pem(#[source] rustls::pki_types::pem::Error),
    /// Another algorithm, another curve, or a malformed key.
    #[error(
        "not an ECDSA P-256 key (cosign's kind; RSA, Ed25519 and other curves are not supported)"
    )]
    NotP256,
}

/// A private key that signs payloads.
pub struct SigningKey {
    pair: EcdsaKeyPair,
    rng: SystemRandom,
}

impl SigningKey {
    /// Read a PEM private key (PKCS#8 or SEC1).
    pub fn from_pem(pem: &[u8]) -> Result<Self, KeyError> {
        refuse_encrypted(pem)?;
        let der = match PrivateKeyDer::from_pem_slice(pem) {
            Ok(der) => der,
            Err(rustls::pki_types::pem::Error::NoItemsFound) => {
                return Err(KeyError::Missing("PRIVATE KEY or EC PRIVATE KEY"));
            }
            Err(error) => return Err(KeyError::Pem(error)),
        };
        let pkcs8 = match &der {
            PrivateKeyDer::Pkcs8(key) => key.secret_pkcs8_der().to_vec(),
            PrivateKeyDer::Sec1(key) => sec1_to_pkcs8(key.secret_sec1_der()),
            _ => return Err(KeyError::NotP256),
        };
        let rng = SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &pkcs8, &rng)
            .map_err(|_| KeyError::NotP256)?;
        Ok(SigningKey { pair, rng })
    }

    /// The base64 signature of `payload`, as the annotation carries it.
    pub fn sign(&self, payload: &[u8]) -> String {
        let signature = self
            .pair
            .sign(&self.rng, payload)
            .expect("P-256 signing fails only without system randomness");
        base64::engine::general_purpose::STANDARD.encode(signature.as_ref())
    }

    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.pair.public_key().as_ref().to_vec())
    }
}

/// A public key that checks signatures: the uncompressed P-256 point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey(Vec<u8>);

impl PublicKey {
    /// Read a PEM `PUBLIC KEY` (SubjectPublicKeyInfo, as `cosign.pub` and
    /// `openssl pkey -pubout` write it).
    pub fn from_pem(pem: &[u8]) -> Result<Self, KeyError> {
        let spki = match SubjectPublicKeyInfoDer::from_pem_slice(pem) {
            Ok(spki) => spki,
            Err(rustls::pki_types::pem::Error::NoItemsFound) => {
                return Err(KeyError::Missing("PUBLIC KEY"));
            }
            Err(error) => return Err(KeyError::Pem(error)),
        };
        match spki.strip_prefix(P256_SPKI_PREFIX) {
            Some(point) if point.len() == 65 && point[0] == 0x04 => Ok(PublicKey(point.to_vec())),
            _ => Err(KeyError::NotP256),
        }
    }

    /// Whether `signature` (base64) is this key's over `payload`.
    pub fn verifies(&self, payload: &[u8], signature: &str) -> bool {
        let Ok(signature) = base64::engine::general_purpose::STANDARD.decode(signature.trim())
        else {
            return false;
        };
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &self.0)
            .verify(payload, &signature)
            .is_ok()
    }
}

/// The labels cosign and OpenSSL give encrypted keys, refused with a way
/// out rather than "no key found".
fn refuse_encrypted(pem: &[u8]) -> Result<(), KeyError> {
    let text = String::from_utf8_lossy(pem);
    for line in text.lines() {
        let Some(label) = line
            .trim()
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        if label.contains("SIGSTORE") || label.contains("COSIGN") {
            return Err(KeyError::CosignEncrypted(label.to_string()));
        }
        if label == "ENCRYPTED PRIVATE KEY" {
            return Err(KeyError::Encrypted);
        }
    }
    Ok(())
}

/// A SEC1 `ECPrivateKey` wrapped as the PKCS#8 `PrivateKeyInfo` of a P-256
/// key; ring checks that the inner key agrees (its curve, its public key).
fn sec1_to_pkcs8(sec1: &[u8]) -> Vec<u8> {
    let mut body = P256_PKCS8_ALGORITHM.to_vec();
    der_header(&mut body, 0x04, sec1.len());
    body.extend_from_slice(sec1);
    let mut out = Vec::new();
    der_header(&mut out, 0x30, body.len());
    out.extend(body);
    out
}

/// A DER tag and definite length.
fn der_header(out: &mut Vec<u8>, tag: u8, len: usize) {
    out.push(tag);
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|&b| b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
}

/// The tag holding the signatures of `digest`: `sha256-<hex>.sig`.
pub fn tag(digest: &str) -> String {
    format!("{}.sig", digest.replacen(':', "-", 1))
}

/// The simple-signing payload cosign signs for `digest` in `repository`
/// (`HOST[:PORT]/REPOSITORY`, cosign's `docker-reference`). Compact JSON
/// with sorted keys: the same bytes cosign writes.
pub fn payload(repository: &str, digest: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "critical": {
            "identity": { "docker-reference": repository },
            "image": { "docker-manifest-digest": digest },
            "type": PAYLOAD_TYPE,
        },
        "optional": null,
    }))
    .expect("JSON values serialize")
}

/// The layer descriptor of one signature.
pub fn layer(payload: &[u8], signature: &str) -> Value {
    json!({
        "mediaType": SIMPLE_SIGNING,
        "digest": layout::digest(payload),
        "size": payload.len(),
        "annotations": { SIGNATURE_ANNOTATION: signature },
    })
}

/// Whether `layers` (a signature manifest's) already hold a signature of
/// `payload` by `key`: pushing again then adds nothing, as cosign's own
/// duplicate check does. ECDSA signatures differ at each signing, so the
/// payload and the key are what is compared.
pub fn already_signed(layers: &[Value], payload: &[u8], key: &PublicKey) -> bool {
    let digest = layout::digest(payload);
    layers.iter().any(|layer| {
        layer["digest"] == digest.as_str()
            && layer["annotations"][SIGNATURE_ANNOTATION]
                .as_str()
                .is_some_and(|s| key.verifies(payload, s))
    })
}

/// The signature image over `layers`: its config and manifest bytes.
/// Signatures already there are kept as the registry had them, so that
/// other signers' (and their certificates and bundles) survive.
pub fn image(layers: Vec<Value>) -> (Vec<u8>, Vec<u8>) {
    let diff_ids: Vec<&Value> = layers.iter().map(|l| &l["digest"]).collect();
    let config = serde_json::to_vec(&json!({
        "architecture": "",
        "os": "",
        "config": {},
        "rootfs": { "type": "layers", "diff_ids": diff_ids },
    }))
    .expect("JSON values serialize");
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {
            "mediaType": IMAGE_CONFIG,
            "digest": layout::digest(&config),
            "size": config.len(),
        },
        "layers": layers,
    }))
    .expect("JSON values serialize");
    (config, manifest)
}

/// Why a manifest is not verified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unverified {
    /// No signature manifest, or one without signatures.
    #[error("it is not signed (no {0} tag)")]
    Unsigned(String),
    /// Signatures, none by the key.
    #[error("none of its {0} signature(s) is by this key")]
    OtherKey(usize),
    /// Signed by the key, but for another manifest: a signature copied
    /// from elsewhere.
    #[error("a signature by this key names {0}, not this manifest")]
    OtherDigest(String),
    /// Signed by the key, but not a cosign image-signature payload.
    #[error("a signature by this key is over something that is not a cosign image payload")]
    NotAPayload,
}

/// One signature as fetched: the payload and the annotation.
pub struct Fetched {
    pub payload: Vec<u8>,
    pub signature: Option<String>,
}

/// Whether one of `signatures` is `key`'s over a payload naming `digest`;
/// the first problem found among the key's signatures otherwise.
pub fn check(digest: &str, key: &PublicKey, signatures: &[Fetched]) -> Result<(), Unverified> {
    let mut problem = None;
    for fetched in signatures {
        let payload = &fetched.payload;
        let Some(signature) = &fetched.signature else {
            continue;
        };
        if !key.verifies(payload, signature) {
            continue;
        }
        let Ok(claim) = serde_json::from_slice::<Value>(payload) else {
            problem.get_or_insert(Unverified::NotAPayload);
            continue;
        };
        if claim["critical"]["type"] != PAYLOAD_TYPE {
            problem.get_or_insert(Unverified::NotAPayload);
            continue;
        }
        match claim["critical"]["image"]["docker-manifest-digest"].as_str() {
            Some(named) if named == digest => return Ok(()),
            named => {
                problem.get_or_insert(Unverified::OtherDigest(
                    named.unwrap_or("no digest").to_string(),
                ));
            }
        }
    }
    Err(problem.unwrap_or(if signatures.is_empty() {
        Unverified::Unsigned(tag(digest))
    } else {
        Unverified::OtherKey(signatures.len())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Made by `openssl genpkey -algorithm EC -pkeyopt
    /// ec_paramgen_curve:P-256` and `openssl pkey -pubout`; a test key.
    const PKCS8: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgbcVGE2wYXXhvM2Fb
shnQnDDBA/kQ2UsdUvowF2WE5MqhRANCAAQK4f09gQlwBLVb8Rh0KGWgeXhChM2D
r5fL+TqNpYWjcj0R+3aBycQyYmz7xv9DBeSUdGSqnGtk1BHm5/2xTJGN
-----END PRIVATE KEY-----
";
    const PKCS8_PUB: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAECuH9PYEJcAS1W/EYdChloHl4QoTN
g6+Xy/k6jaWFo3I9Eft2gcnEMmJs+8b/QwXklHRkqpxrZNQR5uf9sUyRjQ==
-----END PUBLIC KEY-----
";
    /// `printf 'hello cosign' | openssl dgst -sha256 -sign` with PKCS8.
    const OPENSSL_SIGNATURE: &str = "MEUCICSFgpdpV5ku3v6r2xogalWuyOK6taCBCSRH2YUty1A+AiEAtmJwOm0ezxNnF0g/nKeUFm+fgarSajvN0Z8v2b5rAwk=";
    /// Made by `openssl ecparam -name prime256v1 -genkey -noout`.
    const SEC1: &str = "-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIEngOP1Ajypo1VDs8smpe5BnoAnLmBxK5a5wQxup3OQboAoGCCqGSM49
AwEHoUQDQgAEOWtX3a+TjEPoXH6xNW56ZtEYABvNi8uek3lkO8K/7nPT7Xdy4etN
DZL96lkpYcdWT0yyl5mZpb1v80BX27eC+Q==
-----END EC PRIVATE KEY-----
";
    const SEC1_PUB: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEOWtX3a+TjEPoXH6xNW56ZtEYABvN
i8uek3lkO8K/7nPT7Xdy4etNDZL96lkpYcdWT0yyl5mZpb1v80BX27eC+Q==
-----END PUBLIC KEY-----
";
    const DIGEST: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn public(pem: &str) -> PublicKey {
        PublicKey::from_pem(pem.as_bytes()).unwrap()
    }

    #[test]
    fn openssl_keys_sign_and_their_public_keys_verify() {
        for (private, public_pem) in [(PKCS8, PKCS8_PUB), (SEC1, SEC1_PUB)] {
            let key = SigningKey::from_pem(private.as_bytes()).unwrap();
            assert_eq!(key.public_key(), public(public_pem));
            let signature = key.sign(b"payload");
            assert!(public(public_pem).verifies(b"payload", &signature));
            assert!(!public(public_pem).verifies(b"payloaD", &signature));
        }
        assert!(
            !public(SEC1_PUB).verifies(
                b"payload",
                &SigningKey::from_pem(PKCS8.as_bytes())
                    .unwrap()
                    .sign(b"payload")
            )
        );
    }

    #[test]
    fn signatures_are_the_asn1_ecdsa_that_openssl_and_cosign_make() {
        assert!(public(PKCS8_PUB).verifies(b"hello cosign", OPENSSL_SIGNATURE));
        assert!(!public(PKCS8_PUB).verifies(b"hello cosign!", OPENSSL_SIGNATURE));
        assert!(!public(PKCS8_PUB).verifies(b"hello cosign", "not base64"));
    }

    #[test]
    fn cosign_and_encrypted_keys_are_refused_with_a_way_out() {
        let cosign = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJrZGYiOnt9fQ==\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n";
        let error = SigningKey::from_pem(cosign.as_bytes()).err().unwrap();
        assert!(matches!(error, KeyError::CosignEncrypted(_)));
        assert!(
            error.to_string().contains("cosign import-key-pair"),
            "{error}"
        );
        let encrypted =
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMAA=\n-----END ENCRYPTED PRIVATE KEY-----\n";
        assert!(matches!(
            SigningKey::from_pem(encrypted.as_bytes()),
            Err(KeyError::Encrypted)
        ));
        assert!(matches!(
            SigningKey::from_pem(PKCS8_PUB.as_bytes()),
            Err(KeyError::Missing(_))
        ));
        assert!(matches!(
            PublicKey::from_pem(PKCS8.as_bytes()),
            Err(KeyError::Missing(_))
        ));
    }

    #[test]
    fn other_algorithms_are_not_p256() {
        // `openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:1024 | openssl pkey -pubout`
        let rsa = "-----BEGIN PUBLIC KEY-----
MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQDAEoqYLNaJkGgCv5wp2zaAmU4z
M5Zn59BGvb1Wo2v5jeLtJQ3mVeIAra4oYweEeMXmMtzengyNI0msNOaTG6opxSE0
HvH7LiNJl5OtpTK9FghNl02TTcNbe6tht0c9QAf7wUNDsppjqiLSI5+C1vTqGx3a
xJl6KX/tL3iNMcAmVwIDAQAB
-----END PUBLIC KEY-----
";
        assert!(matches!(
            PublicKey::from_pem(rsa.as_bytes()),
            Err(KeyError::NotP256)
        ));
    }

    #[test]
    fn the_payload_is_the_simple_signing_document_cosign_writes() {
        let payload = payload("localhost:5000/plugins/database", DIGEST);
        assert_eq!(
            String::from_utf8(payload).unwrap(),
            format!(
                r#"{{"critical":{{"identity":{{"docker-reference":"localhost:5000/plugins/database"}},"image":{{"docker-manifest-digest":"{DIGEST}"}},"type":"cosign container image signature"}},"optional":null}}"#
            )
        );
        assert_eq!(tag(DIGEST), format!("sha256-{}.sig", &DIGEST[7..]));
    }

    #[test]
    fn the_signature_image_lists_its_layers_as_diff_ids() {
        let payload = payload("r/p", DIGEST);
        let (config, manifest) = image(vec![layer(&payload, "c2ln")]);
        let manifest: Value = serde_json::from_slice(&manifest).unwrap();
        let config: Value = serde_json::from_slice(&config).unwrap();
        assert_eq!(manifest["mediaType"], MANIFEST);
        assert_eq!(manifest["config"]["mediaType"], IMAGE_CONFIG);
        let layer = &manifest["layers"][0];
        assert_eq!(layer["mediaType"], SIMPLE_SIGNING);
        assert_eq!(layer["digest"], layout::digest(&payload).as_str());
        assert_eq!(layer["size"], payload.len());
        assert_eq!(layer["annotations"][SIGNATURE_ANNOTATION], "c2ln");
        assert_eq!(config["rootfs"]["diff_ids"], json!([layer["digest"]]));
    }

    #[test]
    fn a_payload_signed_by_the_key_is_signed_already_and_by_another_key_is_not() {
        let key = SigningKey::from_pem(PKCS8.as_bytes()).unwrap();
        let payload = payload("r/p", DIGEST);
        let layers = vec![layer(&payload, &key.sign(&payload))];
        assert!(already_signed(&layers, &payload, &key.public_key()));
        assert!(!already_signed(&layers, &payload, &public(SEC1_PUB)));
        assert!(!already_signed(&layers, b"other", &key.public_key()));
        assert!(!already_signed(&[], &payload, &key.public_key()));
    }

    fn fetched(payload: &[u8], signature: String) -> Fetched {
        Fetched {
            payload: payload.to_vec(),
            signature: Some(signature),
        }
    }

    #[test]
    fn verification_needs_the_key_and_a_payload_naming_the_digest() {
        let key = SigningKey::from_pem(PKCS8.as_bytes()).unwrap();
        let other = SigningKey::from_pem(SEC1.as_bytes()).unwrap();
        let right = payload("r/p", DIGEST);
        let elsewhere = payload("r/p", &DIGEST.replace('a', "b"));

        assert_eq!(
            check(DIGEST, &key.public_key(), &[]),
            Err(Unverified::Unsigned(tag(DIGEST)))
        );
        let by_other = fetched(&right, other.sign(&right));
        assert_eq!(
            check(DIGEST, &key.public_key(), std::slice::from_ref(&by_other)),
            Err(Unverified::OtherKey(1))
        );
        let copied = fetched(&elsewhere, key.sign(&elsewhere));
        assert_eq!(
            check(DIGEST, &key.public_key(), std::slice::from_ref(&copied)),
            Err(Unverified::OtherDigest(DIGEST.replace('a', "b")))
        );
        let not_a_payload = fetched(b"{}", key.sign(b"{}"));
        assert_eq!(
            check(DIGEST, &key.public_key(), &[not_a_payload]),
            Err(Unverified::NotAPayload)
        );
        // One good signature among others is enough.
        let good = fetched(&right, key.sign(&right));
        assert_eq!(
            check(DIGEST, &key.public_key(), &[by_other, copied, good]),
            Ok(())
        );
    }
}
