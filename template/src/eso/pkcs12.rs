//! PKCS#12: ESO reads archives with go-pkcs12's `DecodeChain` (exactly one key, the first
//! certificate is the leaf) and writes them with its `Modern` encoder (PBES2 with
//! PBKDF2-HMAC-SHA-256 and AES-256-CBC, an HMAC-SHA-256 MAC, 2048 iterations each), returned as
//! base64 text. An archive is read from the raw bytes (templates call `b64dec` first).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use cms::cert::x509::attr::{Attribute, AttributeValue, Attributes};
use cms::cert::x509::spki::AlgorithmIdentifierOwned;
use cms::content_info::{CmsVersion, ContentInfo};
use cms::encrypted_data::EncryptedData;
use cms::enveloped_data::EncryptedContentInfo;
use der::asn1::{BmpString, ObjectIdentifier, OctetString, SetOfVec};
use der::{Any, Decode as _, Encode as _};
use hmac::{KeyInit as _, Mac as _};
use pkcs12::pbe_params::EncryptedPrivateKeyInfo;
use pkcs12::pfx::{Pfx, Version};
use pkcs12::safe_bag::SafeBag;
use pkcs12::{CertBag, DigestInfo, MacData};
use sha1::Digest as _;

use super::args::{expect_binary, nil_dereference, text};
use super::chain::{self, Cert};
use super::keys::{self, PrivateKey};
use super::pem::{self, CERTIFICATE};
use crate::funcs::{FuncError, FuncResult};
use crate::value::Value;

const ITERATIONS: u32 = 2048;
const SALT_LEN: usize = 16;

const DATA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.7.1");
const ENCRYPTED_DATA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.7.6");
const SHROUDED_KEY_BAG: ObjectIdentifier =
    ObjectIdentifier::new_unwrap("1.2.840.113549.1.12.10.1.2");
const CERT_BAG: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.12.10.1.3");
const X509_CERT: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.22.1");
const LOCAL_KEY_ID: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.21");
const FRIENDLY_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.20");
const PBES2: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.5.13");
/// PKCS#12's own password-based schemes (SHA-1 key derivation), which older tools write.
const PBE_SHA1_3DES: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.12.1.3");
const PBE_SHA1_RC2_40: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.12.1.6");
const KEY_BAG: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.12.10.1.1");
const SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.1");
/// Java's trust-anchor attribute, holding the usages the anchor is trusted for.
const JAVA_TRUST_STORE: ObjectIdentifier =
    ObjectIdentifier::new_unwrap("2.16.840.1.113894.746875.1.1");
const ANY_EXTENDED_KEY_USAGE: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.37.0");

// ---- reading ----

/// What go-pkcs12's `DecodeChain` gives back.
struct Decoded {
    key: Vec<u8>,
    cert: Vec<u8>,
    ca_certs: Vec<Vec<u8>>,
}

fn p12_error(e: p12_keystore::error::Error) -> String {
    use p12_keystore::error::Error as E;
    match e {
        E::MacError(_) => "pkcs12: decryption password incorrect".to_owned(),
        E::UnpadError | E::Pkcs5Error(_) => {
            "pkcs12: decryption error, incorrect padding".to_owned()
        }
        E::UnsupportedEncryptionScheme | E::UnsupportedMacAlgorithm => UNSUPPORTED.to_owned(),
        E::X509Error(_) => "x509: malformed certificate".to_owned(),
        _ => "pkcs12: error reading P12 data".to_owned(),
    }
}

const READ_ERROR: &str = "pkcs12: error reading P12 data";

/// The safes of a PFX whose content is plain data (the only kind readers accept).
fn safes_of(pfx: &Pfx) -> Option<Result<pkcs12::AuthenticatedSafe<'_>, String>> {
    if pfx.auth_safe.content_type != DATA {
        return None;
    }
    let read = || {
        let content = OctetString::from_der(&pfx.auth_safe.content.to_der().ok()?).ok()?;
        pkcs12::AuthenticatedSafe::from_der(content.as_bytes()).ok()
    };
    Some(read().ok_or_else(|| READ_ERROR.to_owned()))
}

/// go-pkcs12 insists on a MAC (unless the password is empty) and on one or two safes, which
/// p12-keystore does not check.
fn check_shape(data: &[u8], password: &str) -> Result<(), String> {
    let pfx = Pfx::from_der(data).map_err(|_| READ_ERROR.to_owned())?;
    if pfx.mac_data.is_none() && !password.is_empty() {
        return Err("pkcs12: no MAC in data".to_owned());
    }
    if let Some(safes) = safes_of(&pfx) {
        let safes = safes?;
        if !(1..=2).contains(&safes.len()) {
            return Err(format!(
                "pkcs12: expected between 1 and 2 items in the authenticated safe, but this file has {}",
                safes.len()
            ));
        }
    }
    Ok(())
}

// Every key derivation of a read runs as many iterations as the archive names (p12-keystore
// accepts up to a million each), so a read is charged by them before it runs. What can be seen
// without deriving a key: the MAC's count, each encrypted safe's, and each key bag's in a
// plain safe. A key bag inside an encrypted safe is seen only once that safe is decrypted;
// the charge holds room for one there at the safe's own count (tools encrypt keys and
// certificates alike, and put keys in a plain safe anyway), and `check_hidden` refuses more.

/// The iteration count of a password-based encryption scheme p12-keystore reads.
fn iterations_of(alg: &AlgorithmIdentifierOwned) -> Option<u64> {
    let params = alg.parameters.as_ref()?.to_der().ok()?;
    match alg.oid {
        PBES2 => match pkcs5::pbes2::Parameters::from_der(&params).ok()?.kdf {
            pkcs5::pbes2::Kdf::Pbkdf2(kdf) => Some(kdf.iteration_count.into()),
            // Priced by memory rather than iterations; go-pkcs12 does not read it either.
            _ => None,
        },
        PBE_SHA1_3DES | PBE_SHA1_RC2_40 => {
            let params = pkcs12::pbe_params::Pkcs12PbeParams::from_der(&params).ok()?;
            u64::try_from(params.iterations).ok()
        }
        _ => None,
    }
}

/// A shrouded key bag's encryption scheme.
fn shrouded_scheme(bag: &SafeBag) -> Option<AlgorithmIdentifierOwned> {
    (bag.bag_id == SHROUDED_KEY_BAG).then_some(())?;
    let explicit =
        der::asn1::ContextSpecific::<EncryptedPrivateKeyInfo>::from_der(&bag.bag_value).ok()?;
    Some(explicit.value.encryption_algorithm)
}

/// A shrouded key bag's iteration count; `Some(0)` for a plain key bag, `None` for another.
fn key_bag_iterations(bag: &SafeBag) -> Option<u64> {
    match bag.bag_id {
        KEY_BAG => Some(0),
        _ => iterations_of(&shrouded_scheme(bag)?),
    }
}

/// PBES2 with scrypt: priced by memory rather than iterations, and go-pkcs12 does not read it
/// (p12-keystore does, up to a limit that still takes a second a key), so it is refused before
/// any key is derived.
fn unpriced(alg: &AlgorithmIdentifierOwned) -> bool {
    alg.oid == PBES2 && iterations_of(alg).is_none()
}

const UNSUPPORTED: &str = "pkcs12: unknown digest algorithm or encryption scheme";

/// An encrypted safe's content and scheme; `None` for a plain one.
fn encrypted(safe: &ContentInfo) -> Option<EncryptedContentInfo> {
    if safe.content_type != ENCRYPTED_DATA {
        return None;
    }
    Some(
        EncryptedData::from_der(&safe.content.to_der().ok()?)
            .ok()?
            .enc_content_info,
    )
}

fn plain_bags(safe: &ContentInfo) -> Vec<SafeBag> {
    if safe.content_type != DATA {
        return Vec::new();
    }
    let read = || {
        let content = OctetString::from_der(&safe.content.to_der().ok()?).ok()?;
        Vec::<SafeBag>::from_der(content.as_bytes()).ok()
    };
    read().unwrap_or_default()
}

/// The key-derivation iterations reading `data` runs at most, counted without running one:
/// what a read is charged. Unreadable input is refused before any derivation.
pub(super) fn planned_iterations(data: &[u8]) -> u64 {
    let Ok(pfx) = Pfx::from_der(data) else {
        return 0;
    };
    let mac = pfx
        .mac_data
        .as_ref()
        .and_then(|m| u64::try_from(m.iterations).ok())
        .unwrap_or(0);
    let Some(Ok(safes)) = safes_of(&pfx) else {
        return mac;
    };
    safes.iter().fold(mac, |sum, safe| {
        let safe_cost = match encrypted(safe) {
            // Decrypted here to look inside, then by p12-keystore, and one key bag in it.
            Some(info) => iterations_of(&info.content_enc_alg).map_or(0, |n| n.saturating_mul(3)),
            None => plain_bags(safe)
                .iter()
                .filter_map(key_bag_iterations)
                .fold(0, u64::saturating_add),
        };
        sum.saturating_add(safe_cost)
    })
}

/// Decrypts what `alg` encrypted under `password`, for the schemes p12-keystore reads; `None`
/// when that fails (p12-keystore then says why).
fn decrypt(alg: &AlgorithmIdentifierOwned, data: &[u8], password: &str) -> Option<Vec<u8>> {
    let params = alg.parameters.as_ref()?.to_der().ok()?;
    match alg.oid {
        PBES2 => {
            let params = pkcs5::pbes2::Parameters::from_der(&params).ok()?;
            matches!(params.kdf, pkcs5::pbes2::Kdf::Pbkdf2(_)).then_some(())?;
            params.decrypt(password.as_bytes(), data).ok()
        }
        PBE_SHA1_3DES => decrypt_pbes1::<des::TdesEde3>(&params, data, password, 24),
        PBE_SHA1_RC2_40 => decrypt_pbes1::<rc2::Rc2>(&params, data, password, 5),
        _ => None,
    }
}

/// PKCS#12's SHA-1 scheme (RFC 7292 appendix B): key and IV derived from the password, then
/// CBC with PKCS#7 padding.
fn decrypt_pbes1<C>(params: &[u8], data: &[u8], password: &str, key_len: usize) -> Option<Vec<u8>>
where
    C: cbc::cipher::BlockCipherDecrypt + cbc::cipher::KeyInit,
{
    use cbc::cipher::{BlockModeDecrypt as _, KeyIvInit as _, block_padding::Pkcs7};
    use pkcs12::kdf::{Pkcs12KeyType, derive_key_utf8};
    let params = pkcs12::pbe_params::Pkcs12PbeParams::from_der(params).ok()?;
    let derive = |kind, len| {
        derive_key_utf8::<sha1::Sha1>(
            password,
            params.salt.as_bytes(),
            kind,
            params.iterations,
            len,
        )
        .ok()
    };
    let key = derive(Pkcs12KeyType::EncryptionKey, key_len)?;
    let iv = derive(Pkcs12KeyType::Iv, 8)?;
    cbc::Decryptor::<C>::new_from_slices(&key, &iv)
        .ok()?
        .decrypt_padded_vec::<Pkcs7>(data)
        .ok()
}

/// Looks inside the encrypted safes for key bags before p12-keystore decrypts each: more key
/// bags than the one Go reads, or one that names more iterations than the charge held room
/// for, are refused without deriving their keys.
fn check_hidden(data: &[u8], password: &str) -> Result<(), String> {
    let Ok(pfx) = Pfx::from_der(data) else {
        return Ok(());
    };
    let Some(Ok(safes)) = safes_of(&pfx) else {
        return Ok(());
    };
    let (mut keys, mut hidden) = (0usize, 0usize);
    // The first key naming more iterations than the charge held room for, and that room.
    let mut over = None;
    for safe in &safes {
        let Some(info) = encrypted(safe) else {
            let bags = plain_bags(safe);
            if bags
                .iter()
                .filter_map(shrouded_scheme)
                .any(|a| unpriced(&a))
            {
                return Err(UNSUPPORTED.to_owned());
            }
            keys += bags
                .iter()
                .filter(|b| key_bag_iterations(b).is_some())
                .count();
            continue;
        };
        if unpriced(&info.content_enc_alg) {
            return Err(UNSUPPORTED.to_owned());
        }
        let (Some(room), Some(content)) = (
            iterations_of(&info.content_enc_alg),
            info.encrypted_content.as_ref(),
        ) else {
            continue;
        };
        let Some(bags) = decrypt(&info.content_enc_alg, content.as_bytes(), password)
            .and_then(|plain| Vec::<SafeBag>::from_der(&plain).ok())
        else {
            continue;
        };
        if bags
            .iter()
            .filter_map(shrouded_scheme)
            .any(|a| unpriced(&a))
        {
            return Err(UNSUPPORTED.to_owned());
        }
        for iterations in bags.iter().filter_map(key_bag_iterations) {
            hidden += 1;
            if iterations > room {
                over = over.or(Some((iterations, room)));
            }
        }
    }
    if hidden > 0 && keys + hidden > 1 {
        return Err("pkcs12: expected exactly one key bag".to_owned());
    }
    match over {
        Some((iterations, room)) => Err(format!(
            "pkcs12: a key inside an encrypted safe asks for {iterations} key-derivation iterations, more than the {room} of its safe"
        )),
        None => Ok(()),
    }
}

fn decode_chain(data: &[u8], password: &str) -> Result<Decoded, String> {
    check_shape(data, password)?;
    check_hidden(data, password)?;
    let archive = p12_keystore::Pkcs12Archive::from_pkcs12(data, password).map_err(p12_error)?;
    if archive.keys.len() > 1 {
        return Err("pkcs12: expected exactly one key bag".to_owned());
    }
    let mut certs = archive.certs.into_iter().map(|c| c.cert.as_der().to_vec());
    let Some(cert) = certs.next() else {
        return Err("pkcs12: certificate missing".to_owned());
    };
    let Some(key) = archive.keys.into_iter().next() else {
        return Err("pkcs12: private key missing".to_owned());
    };
    Ok(Decoded {
        key: key.key.as_der().to_vec(),
        cert,
        ca_certs: certs.collect(),
    })
}

fn key_with(password: &str, input: &[u8]) -> FuncResult {
    let wrap = |e: String| FuncError(format!("unable to decode pkcs12 with password: {e}"));
    let decoded = decode_chain(input, password).map_err(wrap)?;
    let key = keys::parse_pkcs8(&decoded.key).map_err(|e| wrap(e.0))?;
    Ok(Value::String(pem::encode_der(
        "PRIVATE KEY",
        &key.to_pkcs8()?,
    )))
}

fn cert_with(password: &str, input: &[u8]) -> FuncResult {
    let decoded = decode_chain(input, password).map_err(|e| {
        FuncError(format!(
            "unable to decode pkcs12 certificate with password: {e}"
        ))
    })?;
    let all: Vec<&Vec<u8>> = std::iter::once(&decoded.cert)
        .chain(&decoded.ca_certs)
        .collect();
    let unordered: String = all
        .iter()
        .map(|der| pem::encode_der(CERTIFICATE, der))
        .collect();
    // ESO orders the chain when it can, and keeps the archive's order when it cannot.
    let ordered = chain::parse_pem_certs(unordered.as_bytes())
        .and_then(chain::order_chain)
        .map(|chain| chain.iter().map(Cert::pem).collect::<String>());
    Ok(Value::String(ordered.unwrap_or(unordered)))
}

/// `pkcs12key ARCHIVE`
pub fn key(args: &[Value]) -> FuncResult {
    key_with("", &expect_binary(&args[0])?)
}

/// `pkcs12keyPass PASSWORD ARCHIVE`
pub fn key_pass(args: &[Value]) -> FuncResult {
    key_with(text(&args[0])?, &expect_binary(&args[1])?)
}

/// `pkcs12cert ARCHIVE`
pub fn cert(args: &[Value]) -> FuncResult {
    cert_with("", &expect_binary(&args[0])?)
}

/// `pkcs12certPass PASSWORD ARCHIVE`
pub fn cert_pass(args: &[Value]) -> FuncResult {
    cert_with(text(&args[0])?, &expect_binary(&args[1])?)
}

// ---- writing ----

fn der_error(_: der::Error) -> FuncError {
    FuncError("pkcs12: error writing P12 data".to_owned())
}

/// Go converts the password to UCS-2 for the MAC, which refuses characters beyond the BMP.
fn check_password(password: &str) -> Result<(), FuncError> {
    if password.chars().any(|c| u32::from(c) > 0xFFFF) {
        return Err(FuncError(
            "pkcs12: string contains characters that cannot be encoded in UCS-2".to_owned(),
        ));
    }
    Ok(())
}

fn attribute(oid: ObjectIdentifier, value: &impl der::Encode) -> Result<Attribute, FuncError> {
    let value = Any::from_der(&value.to_der().map_err(der_error)?).map_err(der_error)?;
    Ok(Attribute {
        oid,
        values: SetOfVec::<AttributeValue>::from_iter([value]).map_err(der_error)?,
    })
}

/// A bag's attributes; Go writes the set even when it is empty (CA certificates).
fn attributes(list: Vec<Attribute>) -> Result<Option<Attributes>, FuncError> {
    let mut set = Attributes::new();
    for a in list {
        set.insert(a).map_err(der_error)?;
    }
    Ok(Some(set))
}

fn cert_bag(der: &[u8], attrs: Vec<Attribute>) -> Result<SafeBag, FuncError> {
    let bag = CertBag {
        cert_id: X509_CERT,
        cert_value: OctetString::new(der).map_err(der_error)?,
    };
    Ok(SafeBag {
        bag_id: CERT_BAG,
        bag_value: bag.to_der().map_err(der_error)?,
        bag_attributes: attributes(attrs)?,
    })
}

/// PBES2 encryption with fresh salt and IV, as go-pkcs12's `Modern` does it.
fn encrypt(data: &[u8], password: &str) -> Result<(AlgorithmIdentifierOwned, Vec<u8>), FuncError> {
    let salt: [u8; SALT_LEN] = rand::random();
    let iv: [u8; 16] = rand::random();
    let failed = |_| FuncError("pkcs12: encryption failed".to_owned());
    let params = pkcs5::pbes2::Parameters::generate_pbkdf2_sha256_aes256cbc(ITERATIONS, &salt, iv)
        .map_err(failed)?;
    let encrypted = params.encrypt(password.as_bytes(), data).map_err(failed)?;
    let params = Any::from_der(&params.to_der().map_err(der_error)?).map_err(der_error)?;
    Ok((
        AlgorithmIdentifierOwned {
            oid: PBES2,
            parameters: Some(params),
        },
        encrypted,
    ))
}

fn encrypted_safe(bags: &Vec<SafeBag>, password: &str) -> Result<ContentInfo, FuncError> {
    let (alg, encrypted) = encrypt(&bags.to_der().map_err(der_error)?, password)?;
    let data = EncryptedData {
        version: CmsVersion::V0,
        enc_content_info: EncryptedContentInfo {
            content_type: DATA,
            content_enc_alg: alg,
            encrypted_content: Some(OctetString::new(encrypted).map_err(der_error)?),
        },
        unprotected_attrs: None,
    };
    Ok(ContentInfo {
        content_type: ENCRYPTED_DATA,
        content: Any::from_der(&data.to_der().map_err(der_error)?).map_err(der_error)?,
    })
}

fn data_content(der: Vec<u8>) -> Result<ContentInfo, FuncError> {
    let octets = OctetString::new(der).map_err(der_error)?;
    Ok(ContentInfo {
        content_type: DATA,
        content: Any::from_der(&octets.to_der().map_err(der_error)?).map_err(der_error)?,
    })
}

/// The PFX around `safes`, with an HMAC-SHA-256 over them keyed from the password.
fn pfx(safes: Vec<ContentInfo>, password: &str) -> Result<String, FuncError> {
    let safes_der = safes.to_der().map_err(der_error)?;
    let salt: [u8; SALT_LEN] = rand::random();
    let mac_key = pkcs12::kdf::derive_key_utf8::<sha2::Sha256>(
        password,
        &salt,
        pkcs12::kdf::Pkcs12KeyType::Mac,
        ITERATIONS as i32,
        32,
    )
    .map_err(der_error)?;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&mac_key)
        .map_err(|_| FuncError("pkcs12: MAC failed".to_owned()))?;
    mac.update(&safes_der);
    let digest = mac.finalize().into_bytes().to_vec();
    let pfx = Pfx {
        version: Version::V3,
        auth_safe: data_content(safes_der)?,
        mac_data: Some(MacData {
            mac: DigestInfo {
                algorithm: AlgorithmIdentifierOwned {
                    oid: SHA256,
                    parameters: None,
                },
                digest: OctetString::new(digest).map_err(der_error)?,
            },
            mac_salt: OctetString::new(salt.to_vec()).map_err(der_error)?,
            iterations: ITERATIONS as i32,
        }),
    };
    Ok(STANDARD.encode(pfx.to_der().map_err(der_error)?))
}

/// go-pkcs12's `Modern.Encode`: the certificates in an encrypted safe (the leaf first, marked
/// with the key's local id, the SHA-1 of the leaf), then the shrouded key in a plain one.
fn encode_key_and_certs(
    key: &PrivateKey,
    leaf: &Cert,
    ca_certs: &[Cert],
    password: &str,
) -> Result<String, FuncError> {
    check_password(password)?;
    let local_id = OctetString::new(sha1::Sha1::digest(&leaf.raw).to_vec()).map_err(der_error)?;
    let local_id = attribute(LOCAL_KEY_ID, &local_id)?;

    let mut cert_bags = vec![cert_bag(&leaf.raw, vec![local_id.clone()])?];
    for ca in ca_certs {
        cert_bags.push(cert_bag(&ca.raw, vec![])?);
    }

    let (alg, encrypted) = encrypt(&key.to_pkcs8()?, password)?;
    let shrouded = EncryptedPrivateKeyInfo {
        encryption_algorithm: alg,
        encrypted_data: OctetString::new(encrypted).map_err(der_error)?,
    };
    let key_bag = SafeBag {
        bag_id: SHROUDED_KEY_BAG,
        bag_value: shrouded.to_der().map_err(der_error)?,
        bag_attributes: attributes(vec![local_id])?,
    };
    let key_safe = data_content(vec![key_bag].to_der().map_err(der_error)?)?;
    pfx(
        vec![encrypted_safe(&cert_bags, password)?, key_safe],
        password,
    )
}

/// The first PEM block, parsed as a certificate whatever its type; Go dereferences the missing
/// block when there is none.
fn first_cert(input: &[u8]) -> Result<(Cert, &[u8]), FuncError> {
    let (block, rest) = pem::decode(input);
    let block = block.ok_or_else(nil_dereference)?;
    Ok((chain::parse_cert(&block.bytes)?, rest))
}

/// ESO's `parseCaCerts`: certificates until the input is used up; anything left that is not a
/// PEM block makes Go dereference a missing block.
fn all_certs(mut input: &[u8]) -> Result<Vec<Cert>, FuncError> {
    let mut certs = Vec::new();
    while !input.is_empty() {
        let (cert, rest) = first_cert(input)?;
        certs.push(cert);
        input = rest;
    }
    Ok(certs)
}

fn first_key(input: &str) -> Result<PrivateKey, FuncError> {
    let (block, _) = pem::decode(input.as_bytes());
    keys::parse_any(&block.ok_or_else(nil_dereference)?.bytes)
}

fn pem_to_pkcs12_with(cert: &str, key: &str, password: &str, with_chain: bool) -> FuncResult {
    let (leaf, rest) = first_cert(cert.as_bytes())?;
    let ca_certs = if with_chain { all_certs(rest)? } else { vec![] };
    let key = first_key(key)?;
    Ok(Value::String(encode_key_and_certs(
        &key, &leaf, &ca_certs, password,
    )?))
}

/// `pemToPkcs12 CERT KEY`: the first certificate and the key.
pub fn pem_to_pkcs12(args: &[Value]) -> FuncResult {
    pem_to_pkcs12_with(text(&args[0])?, text(&args[1])?, "", false)
}

/// `pemToPkcs12Pass CERT KEY PASSWORD`
pub fn pem_to_pkcs12_pass(args: &[Value]) -> FuncResult {
    pem_to_pkcs12_with(text(&args[0])?, text(&args[1])?, text(&args[2])?, false)
}

/// `fullPemToPkcs12 CERTS KEY`: the first certificate, the key, and the rest as CA certificates.
pub fn full_pem_to_pkcs12(args: &[Value]) -> FuncResult {
    pem_to_pkcs12_with(text(&args[0])?, text(&args[1])?, "", true)
}

/// `fullPemToPkcs12Pass CERTS KEY PASSWORD`
pub fn full_pem_to_pkcs12_pass(args: &[Value]) -> FuncResult {
    pem_to_pkcs12_with(text(&args[0])?, text(&args[1])?, text(&args[2])?, true)
}

/// go-pkcs12's `Modern.EncodeTrustStore`: each certificate marked as a Java trust anchor for
/// any usage, named by its subject as Go prints it.
fn truststore_with(certs: &str, password: &str) -> FuncResult {
    let certs = all_certs(certs.as_bytes())?;
    check_password(password)?;
    let trusted = attribute(JAVA_TRUST_STORE, &ANY_EXTENDED_KEY_USAGE)?;
    let mut bags = Vec::new();
    for cert in &certs {
        let name = BmpString::from_utf8(&cert.subject).map_err(|_| {
            FuncError(
                "pkcs12: string contains characters that cannot be encoded in UCS-2".to_owned(),
            )
        })?;
        let name = attribute(FRIENDLY_NAME, &name)?;
        bags.push(cert_bag(&cert.raw, vec![trusted.clone(), name])?);
    }
    Ok(Value::String(pfx(
        vec![encrypted_safe(&bags, password)?],
        password,
    )?))
}

/// `pemTruststoreToPKCS12 CERTS`
pub fn truststore(args: &[Value]) -> FuncResult {
    truststore_with(text(&args[0])?, "")
}

/// `pemTruststoreToPKCS12Pass CERTS PASSWORD`
pub fn truststore_pass(args: &[Value]) -> FuncResult {
    truststore_with(text(&args[0])?, text(&args[1])?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eso::testutil::{call, call_values, fixture, fixture_text};

    fn bytes(name: &str) -> Value {
        Value::Bytes(fixture(name))
    }

    fn p12_from_base64(v: Value) -> Value {
        let Value::String(b64) = v else {
            panic!("not text: {v:?}")
        };
        Value::Bytes(STANDARD.decode(b64).unwrap())
    }

    /// PBES2 naming `iterations`: nothing is derived to write it.
    fn pbes2_naming(iterations: u32) -> AlgorithmIdentifierOwned {
        let params = pkcs5::pbes2::Parameters::generate_pbkdf2_sha256_aes256cbc(
            iterations,
            &[7; SALT_LEN],
            [9; 16],
        )
        .unwrap();
        AlgorithmIdentifierOwned {
            oid: PBES2,
            parameters: Some(Any::from_der(&params.to_der().unwrap()).unwrap()),
        }
    }

    /// A shrouded key bag naming `iterations` around noise: reading it derives a key for
    /// nothing.
    fn hostile_key_bag(iterations: u32) -> SafeBag {
        let info = EncryptedPrivateKeyInfo {
            encryption_algorithm: pbes2_naming(iterations),
            encrypted_data: OctetString::new(vec![0u8; 48]).unwrap(),
        };
        SafeBag {
            bag_id: SHROUDED_KEY_BAG,
            bag_value: info.to_der().unwrap(),
            bag_attributes: None,
        }
    }

    /// Runs `call` on `archive` (with password `pass`) within `steps`: the error and how long
    /// it took.
    fn read_within(archive: &[u8], pass: &str, steps: u64) -> (String, std::time::Duration) {
        let funcs = crate::Funcs::eso();
        let t = crate::Template::parse("t", "{{ pkcs12keyPass .pass .p12 }}", &funcs).unwrap();
        let data = Value::Map(
            [
                ("pass".to_owned(), Value::from(pass)),
                ("p12".to_owned(), Value::Bytes(archive.to_vec())),
            ]
            .into(),
        );
        let mut budget = crate::Budget::new(steps, std::time::Duration::from_secs(600));
        let started = std::time::Instant::now();
        let err = t
            .execute_within(&data, 1 << 20, &mut budget)
            .expect_err("refused");
        (err.to_string(), started.elapsed())
    }

    /// The key derivations of a read run as many iterations as the archive names: a read is
    /// charged by them before any runs, so an archive naming a million for its MAC is refused
    /// by a budget that cannot pay, without running them.
    #[test]
    fn a_hostile_iteration_count_is_charged_before_the_work() {
        let Value::String(b64) = call_values(
            "pemToPkcs12Pass",
            &[
                Value::from(fixture_text("leaf.crt")),
                Value::from(fixture_text("leaf.key")),
                Value::from("pw"),
            ],
        )
        .unwrap() else {
            unreachable!()
        };
        let mut pfx = Pfx::from_der(&STANDARD.decode(b64).unwrap()).unwrap();
        // What it costs as written: two derivations of 2048 iterations and the MAC's.
        assert_eq!(planned_iterations(&pfx.to_der().unwrap()), 2048 * 5);
        pfx.mac_data.as_mut().unwrap().iterations = 1_000_000;
        let hostile = pfx.to_der().unwrap();
        assert_eq!(planned_iterations(&hostile), 1_000_000 + 2048 * 4);
        let (err, took) = read_within(&hostile, "pw", 1_000_000);
        assert!(
            err.contains(
                "template exceeded its budget of 1000000 steps: pkcs12keyPass costs 2026384 steps"
            ),
            "{err}"
        );
        assert!(took < std::time::Duration::from_millis(500), "{took:?}");
    }

    /// Key bags inside an encrypted safe are seen only once it is decrypted: each would cost a
    /// derivation of up to a million iterations. More than the one key Go reads is refused
    /// before their keys are derived, and so is one naming more iterations than its safe.
    #[test]
    fn key_bags_hidden_in_an_encrypted_safe_cost_no_derivation() {
        let hostile = |bags: Vec<SafeBag>| {
            let safe = encrypted_safe(&bags, "pw").unwrap();
            STANDARD.decode(pfx(vec![safe], "pw").unwrap()).unwrap()
        };
        let many = hostile((0..20).map(|_| hostile_key_bag(1_000_000)).collect());
        // The charge holds the safe twice and room for one key in it.
        assert_eq!(planned_iterations(&many), 2048 + 2048 * 3);
        let (err, took) = read_within(&many, "pw", crate::Budget::DEFAULT_STEPS);
        assert!(
            err.ends_with("error calling pkcs12keyPass: unable to decode pkcs12 with password: pkcs12: expected exactly one key bag"),
            "{err}"
        );
        assert!(took < std::time::Duration::from_millis(500), "{took:?}");
        let one = hostile(vec![hostile_key_bag(1_000_000)]);
        let (err, took) = read_within(&one, "pw", crate::Budget::DEFAULT_STEPS);
        assert!(
            err.ends_with("pkcs12: a key inside an encrypted safe asks for 1000000 key-derivation iterations, more than the 2048 of its safe"),
            "{err}"
        );
        assert!(took < std::time::Duration::from_millis(500), "{took:?}");
    }

    /// A key encrypted with scrypt (which p12-keystore would run, and go-pkcs12 does not read)
    /// is refused before its key is derived, in a plain safe or an encrypted one.
    #[test]
    fn a_key_derived_with_scrypt_is_refused_unread() {
        let mut scheme = pkcs5::pbes2::Parameters::generate_pbkdf2_sha256_aes256cbc(
            2048,
            &[7; SALT_LEN],
            [9; 16],
        )
        .unwrap();
        scheme.kdf = pkcs5::pbes2::Kdf::Scrypt(pkcs5::pbes2::ScryptParams {
            salt: pkcs5::pbes2::Salt::new([7; SALT_LEN]).unwrap(),
            cost_parameter: 1 << 20,
            block_size: 8,
            parallelization: 1,
            key_length: None,
        });
        let bag = || {
            let info = EncryptedPrivateKeyInfo {
                encryption_algorithm: AlgorithmIdentifierOwned {
                    oid: PBES2,
                    parameters: Some(Any::from_der(&scheme.to_der().unwrap()).unwrap()),
                },
                encrypted_data: OctetString::new(vec![0u8; 48]).unwrap(),
            };
            SafeBag {
                bag_id: SHROUDED_KEY_BAG,
                bag_value: info.to_der().unwrap(),
                bag_attributes: None,
            }
        };
        let plain = data_content(vec![bag()].to_der().unwrap()).unwrap();
        let hidden = encrypted_safe(&vec![bag()], "pw").unwrap();
        for safe in [plain, hidden] {
            let archive = STANDARD.decode(pfx(vec![safe], "pw").unwrap()).unwrap();
            let (err, took) = read_within(&archive, "pw", crate::Budget::DEFAULT_STEPS);
            assert!(err.ends_with(UNSUPPORTED), "{err}");
            assert!(took < std::time::Duration::from_millis(500), "{took:?}");
        }
    }

    // The expected outputs were printed by ESO's own functions (see testdata/make.sh).
    #[test]
    fn reads_archives_like_eso() {
        for (archive, password, key, certs) in [
            (
                "leaf-pass.p12",
                "s3cret",
                "expected/leaf-pass.key",
                "expected/leaf-pass.certs",
            ),
            (
                "leaf-nopass.p12",
                "",
                "expected/leaf-nopass.key",
                "expected/leaf-nopass.certs",
            ),
            (
                "ec-legacy.p12",
                "legacy",
                "expected/ec-legacy.key",
                "expected/ec-legacy.certs",
            ),
            ("go-full.p12", "gopass", "leaf.key", "chain.pem"),
        ] {
            let pass = Value::from(password);
            assert_eq!(
                call_values("pkcs12keyPass", &[pass.clone(), bytes(archive)]).unwrap(),
                Value::String(fixture_text(key)),
                "{archive}"
            );
            assert_eq!(
                call_values("pkcs12certPass", &[pass, bytes(archive)]).unwrap(),
                Value::String(fixture_text(certs)),
                "{archive}"
            );
        }
        assert_eq!(
            call_values("pkcs12key", &[bytes("leaf-nopass.p12")]).unwrap(),
            Value::String(fixture_text("expected/leaf-nopass.key"))
        );
        assert_eq!(
            call_values("pkcs12cert", &[bytes("leaf-nopass.p12")]).unwrap(),
            Value::String(fixture_text("expected/leaf-nopass.certs"))
        );
    }

    #[test]
    fn wrong_password() {
        let wrong = Value::from("wrong");
        assert_eq!(
            call_values("pkcs12keyPass", &[wrong.clone(), bytes("leaf-pass.p12")])
                .unwrap_err()
                .0,
            "unable to decode pkcs12 with password: pkcs12: decryption password incorrect"
        );
        assert_eq!(
            call_values("pkcs12certPass", &[wrong, bytes("leaf-pass.p12")])
                .unwrap_err()
                .0,
            "unable to decode pkcs12 certificate with password: pkcs12: decryption password incorrect"
        );
        assert_eq!(
            call_values("pkcs12key", &[bytes("leaf-pass.p12")])
                .unwrap_err()
                .0,
            "unable to decode pkcs12 with password: pkcs12: decryption password incorrect"
        );
        let err = call("pkcs12key", &["not an archive"]).unwrap_err().0;
        assert!(
            err.starts_with("unable to decode pkcs12 with password: pkcs12:"),
            "{err}"
        );
    }

    #[test]
    fn writes_what_it_and_go_pkcs12_read() {
        let chain = fixture_text("chain.pem");
        let leaf_key = fixture_text("leaf.key");
        for (key, expected_key) in [("leaf.key", "leaf.key"), ("leaf-pkcs1.key", "leaf.key")] {
            let out = call("fullPemToPkcs12Pass", &[&chain, &fixture_text(key), "pw"]).unwrap();
            let archive = p12_from_base64(out);
            let pass = Value::from("pw");
            assert_eq!(
                call_values("pkcs12keyPass", &[pass.clone(), archive.clone()]).unwrap(),
                Value::String(fixture_text(expected_key))
            );
            assert_eq!(
                call_values("pkcs12certPass", &[pass, archive.clone()]).unwrap(),
                Value::String(chain.clone())
            );
            // A second reader, p12-keystore's own chain linking, agrees.
            let Value::Bytes(der) = archive else {
                unreachable!()
            };
            let store = p12_keystore::KeyStore::from_pkcs12(
                &der,
                "pw",
                p12_keystore::Pkcs12ImportPolicy::Strict,
            )
            .unwrap();
            let (_, keychain) = store.private_key_chain().unwrap();
            assert_eq!(keychain.certs().len(), 3);
        }
        // SEC 1 EC key, no password, leaf only: Go's canonical PKCS#8 comes back.
        let out = call(
            "pemToPkcs12",
            &[&fixture_text("ec.crt"), &fixture_text("ec.key")],
        )
        .unwrap();
        let archive = p12_from_base64(out);
        assert_eq!(
            call_values("pkcs12key", std::slice::from_ref(&archive)).unwrap(),
            Value::String(fixture_text("expected/ec.key.pkcs8"))
        );
        assert_eq!(
            call_values("pkcs12cert", &[archive]).unwrap(),
            Value::String(fixture_text("ec.crt"))
        );
        // pemToPkcs12 keeps only the first certificate.
        let out = call("pemToPkcs12Pass", &[&chain, &leaf_key, "x"]).unwrap();
        assert_eq!(
            call_values("pkcs12certPass", &[Value::from("x"), p12_from_base64(out)]).unwrap(),
            Value::String(fixture_text("leaf.crt"))
        );
    }

    #[test]
    fn truststore_marks_anchors_and_names_them_as_go() {
        let out = call(
            "pemTruststoreToPKCS12Pass",
            &[&fixture_text("chain.pem"), "pw"],
        )
        .unwrap();
        let Value::Bytes(ours) = p12_from_base64(out) else {
            unreachable!()
        };
        let names = |der: &[u8]| {
            let archive = p12_keystore::Pkcs12Archive::from_pkcs12(der, "pw").unwrap();
            assert!(archive.keys.is_empty());
            archive
                .certs
                .iter()
                .map(|c| (c.friendly_name.clone().unwrap(), c.trusted))
                .collect::<Vec<_>>()
        };
        let go = p12_keystore::Pkcs12Archive::from_pkcs12(&fixture("go-truststore.p12"), "gopass")
            .unwrap()
            .certs
            .iter()
            .map(|c| (c.friendly_name.clone().unwrap(), c.trusted))
            .collect::<Vec<_>>();
        assert_eq!(names(&ours), go);
        assert_eq!(go[2].0, "CN=Example Root,O=Example\\, Inc.,C=DE",);
    }

    #[test]
    fn missing_blocks_fail_as_go_does() {
        let nil = "runtime error: invalid memory address or nil pointer dereference";
        let (crt, key) = (fixture_text("leaf.crt"), fixture_text("leaf.key"));
        assert_eq!(call("pemToPkcs12", &["", &key]).unwrap_err().0, nil);
        assert_eq!(call("pemToPkcs12", &[&crt, ""]).unwrap_err().0, nil);
        assert_eq!(
            call("fullPemToPkcs12", &[&format!("{crt}\n"), &key])
                .unwrap_err()
                .0,
            nil
        );
        assert_eq!(
            call("pemToPkcs12", &[&crt, &fixture_text("root.crt")])
                .unwrap_err()
                .0,
            "unable to parse private key type"
        );
        assert_eq!(call("pemTruststoreToPKCS12", &["junk"]).unwrap_err().0, nil);
    }
}
