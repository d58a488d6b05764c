//! Private keys as sprig makes and reads them: `genPrivateKey`, and the PEM rules of sprig's
//! `parsePrivateKeyPEM` and `pemBlockForKey` (RSA as PKCS#1 "RSA PRIVATE KEY", ECDSA as SEC 1
//! "EC PRIVATE KEY", Ed25519 as PKCS#8 "PRIVATE KEY"), over rcgen key pairs that sign.

use rcgen::{KeyPair, PKCS_ECDSA_P256_SHA256, PKCS_ED25519, PKCS_RSA_SHA256, RsaKeySize};

use super::der;
use crate::budget::cost;
use crate::funcs::{Arity, FuncError, FuncResult, Funcs, expect_string};
use crate::value::Value;

const OID_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const OID_EC: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
const OID_P521: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x23];

pub(super) fn register(funcs: &mut Funcs) {
    funcs.insert_costly(
        "genPrivateKey",
        Arity::Exact(1),
        |a| match &a[0] {
            Value::String(kind) if kind.is_empty() || kind == "rsa" => cost::RSA_4096,
            _ => 0,
        },
        gen_private_key,
    );
}

/// `genPrivateKey "rsa"|"ecdsa"|"ed25519"`: a new key in Go's PEM form. An unknown type gives
/// sprig's "Unknown type ..." text as the result; DSA (deprecated, and absent from the
/// maintained crypto libraries) is refused with an error.
fn gen_private_key(args: &[Value]) -> FuncResult {
    let kind = expect_string(&args[0])?;
    let key = match kind {
        "" | "rsa" => PrivateKey::generate_rsa(RsaKeySize::_4096),
        "ecdsa" => PrivateKey::generate_p256(),
        "ed25519" => PrivateKey::generate_ed25519(),
        "dsa" => return Err(FuncError("dsa keys are not supported".into())),
        other => return Ok(Value::String(format!("Unknown type {other}"))),
    };
    Ok(Value::String(key.map_err(FuncError)?.to_go_pem()))
}

/// A key pair that can sign, with the key material Go would write out for it.
pub(super) struct PrivateKey {
    pub(super) pair: KeyPair,
    material: Material,
}

enum Material {
    /// The PKCS#1 `RSAPrivateKey`.
    Rsa(Vec<u8>),
    /// The curve's OID and the private scalar (big-endian, padded to the curve's size).
    Ec {
        curve: &'static [u8],
        scalar: Vec<u8>,
    },
    Ed25519(Vec<u8>),
}

fn generation_failed<E>(_: E) -> String {
    "failed to generate private key".into()
}

impl PrivateKey {
    pub(super) fn generate_rsa(size: RsaKeySize) -> Result<Self, String> {
        let pair = KeyPair::generate_rsa_for(&PKCS_RSA_SHA256, size).map_err(generation_failed)?;
        let pkcs1 = pkcs8_inner(pair.serialized_der())
            .filter(|(oid, _)| *oid == OID_RSA)
            .map(|(_, inner)| inner.to_vec())
            .ok_or_else(|| generation_failed(()))?;
        Ok(Self {
            pair,
            material: Material::Rsa(pkcs1),
        })
    }

    fn generate_p256() -> Result<Self, String> {
        let pair = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(generation_failed)?;
        let scalar = pkcs8_inner(pair.serialized_der())
            .and_then(|(_, sec1)| sec1_scalar(sec1))
            .ok_or_else(|| generation_failed(()))?;
        Self::from_ec(OID_P256, scalar).map_err(generation_failed)
    }

    fn generate_ed25519() -> Result<Self, String> {
        let pair = KeyPair::generate_for(&PKCS_ED25519).map_err(generation_failed)?;
        let seed = pkcs8_inner(pair.serialized_der())
            .and_then(|(_, inner)| der::expect(inner, der::OCTET_STRING))
            .map(|(seed, _)| seed.to_vec())
            .ok_or_else(|| generation_failed(()))?;
        Self::from_ed25519(seed).map_err(generation_failed)
    }

    fn from_rsa(pkcs1: &[u8]) -> Result<Self, String> {
        let pair = KeyPair::try_from(pkcs1).map_err(|e| format!("parsing RSA private key: {e}"))?;
        Ok(Self {
            pair,
            material: Material::Rsa(pkcs1.to_vec()),
        })
    }

    fn from_ec(curve: &'static [u8], scalar: &[u8]) -> Result<Self, String> {
        let size = match curve {
            OID_P256 => 32,
            OID_P384 => 48,
            _ => 66,
        };
        let digits = scalar
            .iter()
            .position(|b| *b != 0)
            .map_or(&[][..], |i| &scalar[i..]);
        if digits.len() > size {
            return Err("invalid EC private key".into());
        }
        let mut padded = vec![0u8; size - digits.len()];
        padded.extend_from_slice(digits);
        let sec1 = sec1(curve, &padded, None);
        let pair = KeyPair::try_from(sec1.as_slice())
            .map_err(|e| format!("parsing EC private key: {e}"))?;
        Ok(Self {
            pair,
            material: Material::Ec {
                curve,
                scalar: padded,
            },
        })
    }

    fn from_ed25519(seed: Vec<u8>) -> Result<Self, String> {
        if seed.len() != 32 {
            return Err("invalid Ed25519 private key".into());
        }
        let pair = KeyPair::try_from(ed25519_pkcs8(&seed).as_slice())
            .map_err(|e| format!("parsing Ed25519 private key: {e}"))?;
        Ok(Self {
            pair,
            material: Material::Ed25519(seed),
        })
    }

    /// Sprig's `parsePrivateKeyPEM`: the first PEM block, read by its type.
    pub(super) fn from_pem(text: &str) -> Result<Self, String> {
        let block = pem::parse(text).map_err(|_| "no PEM data in input".to_owned())?;
        let der = block.contents();
        match block.tag() {
            "PRIVATE KEY" => {
                Self::from_pkcs8(der).map_err(|e| format!("decoding PEM as PKCS#8: {e}"))
            }
            "RSA PRIVATE KEY" => Self::from_rsa(der),
            "EC PRIVATE KEY" => {
                let (curve, scalar) = sec1_parts(der, None)
                    .ok_or_else(|| "parsing EC private key from PEM: invalid key".to_owned())?;
                Self::from_ec(curve, scalar)
            }
            "DSA PRIVATE KEY" => Err("dsa keys are not supported".into()),
            tag if tag.ends_with(" PRIVATE KEY") => Err(format!("invalid private key type {tag}")),
            tag => Err(format!("no private key data in PEM block of type {tag}")),
        }
    }

    fn from_pkcs8(der: &[u8]) -> Result<Self, String> {
        let (body, _) = der::expect(der, der::SEQUENCE).ok_or("invalid PKCS#8 structure")?;
        let (_, rest) = der::expect(body, der::INTEGER).ok_or("invalid PKCS#8 structure")?;
        let (algorithm, rest) =
            der::expect(rest, der::SEQUENCE).ok_or("invalid PKCS#8 structure")?;
        let (inner, _) = der::expect(rest, der::OCTET_STRING).ok_or("invalid PKCS#8 structure")?;
        let (oid, params) = der::expect(algorithm, der::OID).ok_or("invalid PKCS#8 structure")?;
        match oid {
            OID_RSA => Self::from_rsa(inner),
            OID_EC => {
                let curve = der::expect(params, der::OID).map(|(curve, _)| curve);
                let (curve, scalar) = sec1_parts(inner, curve).ok_or("invalid EC private key")?;
                Self::from_ec(curve, scalar)
            }
            OID_ED25519 => {
                let (seed, _) =
                    der::expect(inner, der::OCTET_STRING).ok_or("invalid Ed25519 private key")?;
                Self::from_ed25519(seed.to_vec())
            }
            _ => Err("x509: PKCS#8 wrapping contained private key with unknown algorithm".into()),
        }
    }

    /// Sprig's `pemBlockForKey`, as `pem.EncodeToMemory` writes it.
    pub(super) fn to_go_pem(&self) -> String {
        let (tag, der) = match &self.material {
            Material::Rsa(pkcs1) => ("RSA PRIVATE KEY", pkcs1.clone()),
            Material::Ec { curve, scalar } => (
                "EC PRIVATE KEY",
                sec1(curve, scalar, Some(self.pair.public_key_raw())),
            ),
            Material::Ed25519(seed) => ("PRIVATE KEY", ed25519_pkcs8(seed)),
        };
        pem_encode(tag, &der)
    }
}

/// Go's `pem.EncodeToMemory` without headers: 64-column base64 and LF line ends.
pub(super) fn pem_encode(tag: &str, der: &[u8]) -> String {
    let body = crate::sprig::encoding::base64_encode(der);
    let mut out = format!("-----BEGIN {tag}-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {tag}-----\n"));
    out
}

/// A PKCS#8 `PrivateKeyInfo`'s algorithm OID and inner private key.
fn pkcs8_inner(der: &[u8]) -> Option<(&[u8], &[u8])> {
    let (body, _) = der::expect(der, der::SEQUENCE)?;
    let (_, rest) = der::expect(body, der::INTEGER)?;
    let (algorithm, rest) = der::expect(rest, der::SEQUENCE)?;
    let (inner, _) = der::expect(rest, der::OCTET_STRING)?;
    let (oid, _) = der::expect(algorithm, der::OID)?;
    Some((oid, inner))
}

/// The private scalar of a SEC 1 `ECPrivateKey`.
fn sec1_scalar(der: &[u8]) -> Option<&[u8]> {
    let (body, _) = der::expect(der, der::SEQUENCE)?;
    let (_, rest) = der::expect(body, der::INTEGER)?;
    der::expect(rest, der::OCTET_STRING).map(|(scalar, _)| scalar)
}

/// A SEC 1 key's curve (its own, or the one PKCS#8 named outside it) and private scalar.
fn sec1_parts<'a>(
    der: &'a [u8],
    outer_curve: Option<&'a [u8]>,
) -> Option<(&'static [u8], &'a [u8])> {
    let scalar = sec1_scalar(der)?;
    let (body, _) = der::expect(der, der::SEQUENCE)?;
    let (_, rest) = der::expect(body, der::INTEGER)?;
    let (_, rest) = der::expect(rest, der::OCTET_STRING)?;
    let inner_curve = der::expect(rest, der::CONTEXT_0)
        .and_then(|(params, _)| der::expect(params, der::OID))
        .map(|(oid, _)| oid);
    let curve = match outer_curve.or(inner_curve)? {
        OID_P256 => OID_P256,
        OID_P384 => OID_P384,
        OID_P521 => OID_P521,
        _ => return None,
    };
    Some((curve, scalar))
}

/// Go's `MarshalECPrivateKey`: version 1, the scalar, the curve, and the public point.
fn sec1(curve: &[u8], scalar: &[u8], public: Option<&[u8]>) -> Vec<u8> {
    let mut body = der::write(der::INTEGER, &[1]);
    body.extend(der::write(der::OCTET_STRING, scalar));
    body.extend(der::write(der::CONTEXT_0, &der::write(der::OID, curve)));
    if let Some(point) = public {
        let mut bits = vec![0u8];
        bits.extend_from_slice(point);
        body.extend(der::write(
            der::CONTEXT_1,
            &der::write(der::BIT_STRING, &bits),
        ));
    }
    der::write(der::SEQUENCE, &body)
}

/// Go's `MarshalPKCS8PrivateKey` for Ed25519: version 0, no public key.
fn ed25519_pkcs8(seed: &[u8]) -> Vec<u8> {
    let mut body = der::write(der::INTEGER, &[0]);
    body.extend(der::write(
        der::SEQUENCE,
        &der::write(der::OID, OID_ED25519),
    ));
    body.extend(der::write(
        der::OCTET_STRING,
        &der::write(der::OCTET_STRING, seed),
    ));
    der::write(der::SEQUENCE, &body)
}
