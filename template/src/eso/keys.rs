//! Private and public keys as Go's `crypto/x509` reads and writes them. ESO parses a key, then
//! marshals it again (PKCS#8 for private keys, PKIX for public ones), so the output is Go's
//! canonical encoding whatever the input's was.

use der::asn1::OctetStringRef;
use der::{Decode as _, Encode as _};
use pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _, ObjectIdentifier, PrivateKeyInfoRef};
use rsa::pkcs1::DecodeRsaPrivateKey as _;
use rsa::pkcs8::EncodePublicKey as _;
use spki::{AlgorithmIdentifierRef, SubjectPublicKeyInfoRef};

use crate::funcs::FuncError;

const RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
const EC: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
const P521: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.35");
const ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");
const X25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.110");

/// A private key of a kind Go's x509 package can marshal.
pub enum PrivateKey {
    Rsa(Box<rsa::PrivateKey>),
    P256(p256::SecretKey),
    P384(p384::SecretKey),
    P521(p521::SecretKey),
    /// The 32-byte seed.
    Ed25519([u8; 32]),
    X25519([u8; 32]),
}

/// ESO's `parsePrivateKey`: PKCS#1, then PKCS#8, then SEC 1.
pub fn parse_any(der: &[u8]) -> Result<PrivateKey, FuncError> {
    if let Ok(k) = rsa::PrivateKey::from_pkcs1_der(der) {
        return Ok(PrivateKey::Rsa(Box::new(k)));
    }
    if let Ok(k) = parse_pkcs8(der) {
        return Ok(k);
    }
    if let Some(k) = parse_sec1(der) {
        return Ok(k);
    }
    Err(FuncError("unable to parse private key type".to_owned()))
}

fn unknown_algorithm(oid: ObjectIdentifier) -> FuncError {
    FuncError(format!(
        "x509: PKCS#8 wrapping contained private key with unknown algorithm: {oid}"
    ))
}

fn malformed(what: &str) -> FuncError {
    FuncError(format!("x509: failed to parse {what}"))
}

/// Go's `x509.ParsePKCS8PrivateKey` for the algorithms Go knows.
pub fn parse_pkcs8(der: &[u8]) -> Result<PrivateKey, FuncError> {
    let info = PrivateKeyInfoRef::from_der(der).map_err(|_| {
        malformed("private key (use ParsePKCS1PrivateKey instead for this key format)")
    })?;
    let oid = info.algorithm.oid;
    let bad = || malformed("private key");
    match oid {
        RSA => rsa::PrivateKey::from_pkcs8_der(der)
            .map(|k| PrivateKey::Rsa(Box::new(k)))
            .map_err(|_| malformed("RSA private key")),
        EC => {
            let curve = info
                .algorithm
                .parameters
                .and_then(|p| p.decode_as::<ObjectIdentifier>().ok())
                .ok_or_else(|| malformed("EC private key embedded in PKCS#8"))?;
            ec_from_sec1(curve, info.private_key.as_bytes()).ok_or_else(bad)
        }
        ED25519 | X25519 => {
            let seed =
                <&OctetStringRef>::from_der(info.private_key.as_bytes()).map_err(|_| bad())?;
            let seed: [u8; 32] = seed.as_bytes().try_into().map_err(|_| bad())?;
            Ok(if oid == ED25519 {
                PrivateKey::Ed25519(seed)
            } else {
                PrivateKey::X25519(seed)
            })
        }
        other => Err(unknown_algorithm(other)),
    }
}

/// Go's `x509.ParseECPrivateKey`: the curve must be named inside the key.
fn parse_sec1(der: &[u8]) -> Option<PrivateKey> {
    let key = sec1::EcPrivateKey::from_der(der).ok()?;
    let curve = key.parameters?.named_curve()?;
    ec_from_sec1(curve, der)
}

fn ec_from_sec1(curve: ObjectIdentifier, sec1_der: &[u8]) -> Option<PrivateKey> {
    match curve {
        P256 => p256::SecretKey::from_sec1_der(sec1_der)
            .ok()
            .map(PrivateKey::P256),
        P384 => p384::SecretKey::from_sec1_der(sec1_der)
            .ok()
            .map(PrivateKey::P384),
        P521 => p521::SecretKey::from_sec1_der(sec1_der)
            .ok()
            .map(PrivateKey::P521),
        _ => None,
    }
}

fn encoding_failed() -> FuncError {
    FuncError("x509: failed to marshal private key".to_owned())
}

impl PrivateKey {
    /// Go's `x509.MarshalPKCS8PrivateKey`.
    pub fn to_pkcs8(&self) -> Result<Vec<u8>, FuncError> {
        let doc = match self {
            PrivateKey::Rsa(k) => k.to_pkcs8_der(),
            PrivateKey::P256(k) => k.to_pkcs8_der(),
            PrivateKey::P384(k) => k.to_pkcs8_der(),
            PrivateKey::P521(k) => k.to_pkcs8_der(),
            PrivateKey::Ed25519(seed) => return curve25519_pkcs8(ED25519, seed),
            PrivateKey::X25519(seed) => return curve25519_pkcs8(X25519, seed),
        };
        doc.map(|d| d.as_bytes().to_vec())
            .map_err(|_| encoding_failed())
    }
}

/// RFC 8410's encoding, as Go writes it: version 0, no parameters, no public key.
fn curve25519_pkcs8(oid: ObjectIdentifier, seed: &[u8; 32]) -> Result<Vec<u8>, FuncError> {
    let inner = OctetStringRef::new(seed)
        .and_then(|s| s.to_der())
        .map_err(|_| encoding_failed())?;
    let info = PrivateKeyInfoRef::new(
        AlgorithmIdentifierRef {
            oid,
            parameters: None,
        },
        OctetStringRef::new(&inner).map_err(|_| encoding_failed())?,
    );
    info.to_der().map_err(|_| encoding_failed())
}

/// A public key of a kind Go's x509 package can marshal.
pub enum PublicKey {
    Rsa(rsa::PublicKey),
    P256(p256::PublicKey),
    P384(p384::PublicKey),
    P521(p521::PublicKey),
    Ed25519([u8; 32]),
}

impl PublicKey {
    /// Go's `x509.MarshalPKIXPublicKey`.
    pub fn to_pkix(&self) -> Result<Vec<u8>, FuncError> {
        let doc = match self {
            PublicKey::Rsa(k) => k.to_public_key_der(),
            PublicKey::P256(k) => k.to_public_key_der(),
            PublicKey::P384(k) => k.to_public_key_der(),
            PublicKey::P521(k) => k.to_public_key_der(),
            PublicKey::Ed25519(k) => return ed25519_pkix(k),
        };
        doc.map(|d| d.as_bytes().to_vec())
            .map_err(|_| FuncError("x509: failed to marshal public key".to_owned()))
    }
}

fn ed25519_pkix(key: &[u8; 32]) -> Result<Vec<u8>, FuncError> {
    let failed = || FuncError("x509: failed to marshal public key".to_owned());
    let info = SubjectPublicKeyInfoRef {
        algorithm: AlgorithmIdentifierRef {
            oid: ED25519,
            parameters: None,
        },
        subject_public_key: der::asn1::BitStringRef::from_bytes(key).map_err(|_| failed())?,
    };
    info.to_der().map_err(|_| failed())
}
