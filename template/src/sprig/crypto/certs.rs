//! Sprig's certificate functions. Each returns sprig's `certificate` struct, modelled as a map
//! with `Cert` and `Key` (PEM text), so `.Cert` and `.Key` read the same. The certificates carry
//! what sprig's Go template puts in them: the common name, IP and DNS SANs, validity from now
//! for the given days, a random 128-bit serial, digital signature and key encipherment usage
//! (plus certificate signing for a CA), server and client auth, and basic constraints.

use std::collections::BTreeMap;
use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, DnValue,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyUsagePurpose, RsaKeySize, SanType, SerialNumber,
};

use super::keys::{PrivateKey, pem_encode};
use crate::budget::cost;
use crate::funcs::{Arity, FuncError, FuncResult, Funcs, expect_string, wrong_type};
use crate::sprig::args::int_param as expect_int;
use crate::sprig::encoding::base64_decode;
use crate::value::Value;

pub(super) fn register(funcs: &mut Funcs) {
    let (generates, signs) = (
        |_: &[Value]| cost::RSA_2048,
        |_: &[Value]| cost::RSA_PRIVATE,
    );
    funcs.insert("buildCustomCert", Arity::Exact(2), build_custom_cert);
    funcs.insert_costly("genCA", Arity::Exact(2), generates, |a| {
        gen_ca(a, generated_key()?)
    });
    funcs.insert_costly("genCAWithKey", Arity::Exact(3), signs, |a| {
        gen_ca(a, given_key(&a[2])?)
    });
    funcs.insert_costly("genSelfSignedCert", Arity::Exact(4), generates, |a| {
        gen_self_signed(a, generated_key()?)
    });
    funcs.insert_costly("genSelfSignedCertWithKey", Arity::Exact(5), signs, |a| {
        gen_self_signed(a, given_key(&a[4])?)
    });
    // Signed with the CA's key, which the template gives.
    let generates_and_signs = |_: &[Value]| cost::RSA_2048 + cost::RSA_PRIVATE;
    funcs.insert_costly("genSignedCert", Arity::Exact(5), generates_and_signs, |a| {
        gen_signed(a, generated_key()?)
    });
    funcs.insert_costly("genSignedCertWithKey", Arity::Exact(6), signs, |a| {
        gen_signed(a, given_key(&a[5])?)
    });
}

fn generated_key() -> Result<PrivateKey, FuncError> {
    PrivateKey::generate_rsa(RsaKeySize::_2048)
        .map_err(|e| FuncError(format!("error generating rsa key: {e}")))
}

fn given_key(pem: &Value) -> Result<PrivateKey, FuncError> {
    PrivateKey::from_pem(expect_string(pem)?)
        .map_err(|e| FuncError(format!("parsing private key: {e}")))
}

fn certificate(cert: String, key: String) -> Value {
    Value::Map(BTreeMap::from([
        ("Cert".to_owned(), Value::String(cert)),
        ("Key".to_owned(), Value::String(key)),
    ]))
}

/// `buildCustomCert b64cert b64key`: checks both decode and parse, then hands them back.
fn build_custom_cert(args: &[Value]) -> FuncResult {
    let cert = base64_decode(expect_string(&args[0])?.as_bytes())
        .map_err(|_| FuncError("unable to decode base64 certificate".into()))?;
    let key = base64_decode(expect_string(&args[1])?.as_bytes())
        .map_err(|_| FuncError("unable to decode base64 private key".into()))?;
    let cert =
        String::from_utf8(cert).map_err(|_| FuncError("unable to decode certificate".into()))?;
    let key = String::from_utf8(key)
        .map_err(|_| FuncError("error parsing private key: no PEM data in input".into()))?;
    parse_certificate(&cert)?;
    PrivateKey::from_pem(&key).map_err(|e| FuncError(format!("error parsing private key: {e}")))?;
    Ok(certificate(cert, key))
}

/// The DER of the first PEM block, which must be an X.509 certificate.
fn parse_certificate(pem_text: &str) -> Result<Vec<u8>, FuncError> {
    let block =
        pem::parse(pem_text).map_err(|_| FuncError("unable to decode certificate".into()))?;
    let der = block.into_contents();
    x509_parser::parse_x509_certificate(&der)
        .map_err(|e| FuncError(format!("error parsing certificate: decodedCert.Bytes: {e}")))?;
    Ok(der)
}

fn gen_ca(args: &[Value], key: PrivateKey) -> FuncResult {
    let cn = expect_string(&args[0])?;
    let days = expect_int(&args[1])?;
    let mut params = base_params(cn, &Value::Nil, &Value::Nil, days)?;
    params.key_usages.push(KeyUsagePurpose::KeyCertSign);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key.pair).map_err(creating)?;
    Ok(certificate(cert.pem_go(), key.to_go_pem()))
}

fn gen_self_signed(args: &[Value], key: PrivateKey) -> FuncResult {
    let cn = expect_string(&args[0])?;
    let days = expect_int(&args[3])?;
    let params = base_params(cn, &args[1], &args[2], days)?;
    let cert = params.self_signed(&key.pair).map_err(creating)?;
    Ok(certificate(cert.pem_go(), key.to_go_pem()))
}

fn gen_signed(args: &[Value], key: PrivateKey) -> FuncResult {
    let cn = expect_string(&args[0])?;
    let days = expect_int(&args[3])?;
    let (ca_cert, ca_key) = ca_parts(&args[4])?;
    let ca_der = parse_certificate(ca_cert)?;
    let signer = PrivateKey::from_pem(ca_key)
        .map_err(|e| FuncError(format!("error parsing private key: {e}")))?;
    let mut params = base_params(cn, &args[1], &args[2], days)?;
    params.use_authority_key_identifier_extension = true;
    let issuer = Issuer::from_ca_cert_der(&ca_der.into(), &signer.pair)
        .map_err(|e| FuncError(format!("error parsing certificate: {e}")))?;
    let cert = params.signed_by(&key.pair, &issuer).map_err(creating)?;
    Ok(certificate(cert.pem_go(), key.to_go_pem()))
}

/// The CA argument: sprig's `certificate` struct, here the map the gen functions return.
fn ca_parts(ca: &Value) -> Result<(&str, &str), FuncError> {
    let Value::Map(map) = ca else {
        return Err(wrong_type("sprig.certificate", ca));
    };
    let field = |name| match map.get(name) {
        Some(Value::String(s)) => Ok(s.as_str()),
        None => Ok(""),
        Some(other) => Err(wrong_type("string", other)),
    };
    Ok((field("Cert")?, field("Key")?))
}

fn creating(e: rcgen::Error) -> FuncError {
    FuncError(format!("error creating certificate: {e}"))
}

trait GoPem {
    fn pem_go(&self) -> String;
}

impl GoPem for rcgen::Certificate {
    fn pem_go(&self) -> String {
        pem_encode("CERTIFICATE", self.der())
    }
}

/// Sprig's `getBaseCertTemplate`.
fn base_params(
    cn: &str,
    ips: &Value,
    dns_names: &Value,
    days: i64,
) -> Result<CertificateParams, FuncError> {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    // Go leaves an empty common name out of the subject.
    if !cn.is_empty() {
        let value = rcgen::string::PrintableString::try_from(cn)
            .map(DnValue::PrintableString)
            .unwrap_or_else(|_| DnValue::Utf8String(cn.to_owned()));
        params.distinguished_name.push(DnType::CommonName, value);
    }
    for name in strings(dns_names, "error processing alternate dns name")? {
        let name = rcgen::string::Ia5String::try_from(name)
            .map_err(|_| FuncError("x509: SAN dNSName is not an IA5String".into()))?;
        params.subject_alt_names.push(SanType::DnsName(name));
    }
    for ip in strings(ips, "error parsing ip")? {
        let addr: IpAddr = ip
            .parse()
            .map_err(|_| FuncError("error parsing ip: not an IP address".into()))?;
        // Go writes an IPv4-mapped IPv6 address as the 4-byte IPv4 one.
        let addr = match addr {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
            v4 => v4,
        };
        params.subject_alt_names.push(SanType::IpAddress(addr));
    }
    let mut serial = [0u8; 16];
    rand::fill(&mut serial);
    params.serial_number = Some(SerialNumber::from_slice(&serial));
    let now = time::OffsetDateTime::now_utc();
    let validity = days
        .checked_mul(86_400)
        .and_then(|secs| now.checked_add(time::Duration::seconds(secs)))
        .ok_or_else(|| FuncError("daysValid is out of range".into()))?;
    params.not_before = now;
    params.not_after = validity;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.is_ca = IsCa::ExplicitNoCa;
    Ok(params)
}

/// A `[]interface{}` argument of strings; nil is an empty list, as in Go.
fn strings<'a>(v: &'a Value, problem: &str) -> Result<Vec<&'a str>, FuncError> {
    match v {
        Value::Nil => Ok(Vec::new()),
        Value::List(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.as_str()),
                _ => Err(FuncError(format!("{problem}: not a string"))),
            })
            .collect(),
        other => Err(wrong_type("[]interface {}", other)),
    }
}
