//! JSON Web Keys to PEM, as ESO does with lestrrat-go/jwx v2: the JWK becomes a Go key, which
//! `x509` marshals as PKIX (public) or PKCS#8 (private). A private JWK is no public key to
//! Go's marshaller, nor a public JWK a private one: each refuses the other, as in ESO.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rsa::BoxedUint;
use serde_json::{Map, Value as Json};

use super::args::text;
use super::keys::{PrivateKey, PublicKey};
use super::pem;
use crate::funcs::{FuncError, FuncResult};
use crate::value::Value;

/// A parsed JWK with the Go type jwx gives it (for the messages), or a key Go's x509 cannot
/// take at all: a symmetric `oct` key, or X25519 (jwx v2 has its own type for it).
enum Jwk {
    Public(PublicKey, &'static str),
    Private(PrivateKey, &'static str),
    Foreign(&'static str),
}

fn invalid(what: &str) -> FuncError {
    FuncError(format!("failed to parse JWK: {what}"))
}

/// jwx accepts base64url with or without padding, and the standard alphabet too.
fn field(obj: &Map<String, Json>, name: &str) -> Result<Option<Vec<u8>>, FuncError> {
    let Some(v) = obj.get(name) else {
        return Ok(None);
    };
    let s = v
        .as_str()
        .ok_or_else(|| invalid(&format!("field {name:?} is not a string")))?;
    let s: String = s
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '+' => '-',
            '/' => '_',
            c => c,
        })
        .collect();
    URL_SAFE_NO_PAD
        .decode(s)
        .map(Some)
        .map_err(|_| invalid(&format!("failed to decode field {name:?}")))
}

fn required(obj: &Map<String, Json>, name: &str) -> Result<Vec<u8>, FuncError> {
    field(obj, name)?.ok_or_else(|| invalid(&format!("required field {name:?} is missing")))
}

fn uint(bytes: &[u8]) -> BoxedUint {
    BoxedUint::from_be_slice_vartime(bytes)
}

fn rsa_key(obj: &Map<String, Json>) -> Result<Jwk, FuncError> {
    let (n, e) = (uint(&required(obj, "n")?), uint(&required(obj, "e")?));
    let Some(d) = field(obj, "d")? else {
        let key = rsa::PublicKey::new(n, e).map_err(|_| invalid("invalid RSA public key"))?;
        return Ok(Jwk::Public(PublicKey::Rsa(key), "*rsa.PublicKey"));
    };
    let primes = vec![uint(&required(obj, "p")?), uint(&required(obj, "q")?)];
    let key = rsa::PrivateKey::from_components(n, e, uint(&d), primes)
        .map_err(|_| invalid("invalid RSA private key"))?;
    Ok(Jwk::Private(
        PrivateKey::Rsa(Box::new(key)),
        "*rsa.PrivateKey",
    ))
}

/// An uncompressed SEC 1 point from the JWK's coordinates, each padded to the field size.
fn point(x: &[u8], y: &[u8], size: usize) -> Result<Vec<u8>, FuncError> {
    if x.len() > size || y.len() > size {
        return Err(invalid("invalid EC coordinates"));
    }
    let mut out = vec![4u8];
    for c in [x, y] {
        out.extend(std::iter::repeat_n(0, size - c.len()));
        out.extend_from_slice(c);
    }
    Ok(out)
}

fn ec_key(obj: &Map<String, Json>) -> Result<Jwk, FuncError> {
    let crv = obj.get("crv").and_then(Json::as_str).unwrap_or_default();
    let (x, y) = (required(obj, "x")?, required(obj, "y")?);
    let d = field(obj, "d")?;
    let bad = || invalid("invalid EC key");
    macro_rules! curve {
        ($krate:ident, $size:expr, $public:ident, $private:ident) => {{
            match d {
                Some(d) => $krate::SecretKey::from_slice(&d)
                    .map(|k| Jwk::Private(PrivateKey::$private(k), "*ecdsa.PrivateKey"))
                    .map_err(|_| bad()),
                None => $krate::PublicKey::from_sec1_bytes(&point(&x, &y, $size)?)
                    .map(|k| Jwk::Public(PublicKey::$public(k), "*ecdsa.PublicKey"))
                    .map_err(|_| bad()),
            }
        }};
    }
    match crv {
        "P-256" => curve!(p256, 32, P256, P256),
        "P-384" => curve!(p384, 48, P384, P384),
        "P-521" => curve!(p521, 66, P521, P521),
        other => Err(invalid(&format!("unsupported elliptic curve {other:?}"))),
    }
}

fn okp_key(obj: &Map<String, Json>) -> Result<Jwk, FuncError> {
    let crv = obj.get("crv").and_then(Json::as_str).unwrap_or_default();
    let x = required(obj, "x")?;
    let d = field(obj, "d")?;
    let bytes32 = |b: Vec<u8>| <[u8; 32]>::try_from(b).map_err(|_| invalid("invalid OKP key"));
    match (crv, d) {
        ("Ed25519", Some(d)) => Ok(Jwk::Private(
            PrivateKey::Ed25519(bytes32(d)?),
            "ed25519.PrivateKey",
        )),
        ("Ed25519", None) => Ok(Jwk::Public(
            PublicKey::Ed25519(bytes32(x)?),
            "ed25519.PublicKey",
        )),
        ("X25519", Some(_)) => Ok(Jwk::Foreign("x25519.PrivateKey")),
        ("X25519", None) => Ok(Jwk::Foreign("x25519.PublicKey")),
        (other, _) => Err(invalid(&format!("unsupported curve {other:?}"))),
    }
}

fn parse(input: &str) -> Result<Jwk, FuncError> {
    let json: Json = serde_json::from_str(input).map_err(|_| invalid("invalid JSON"))?;
    let obj = json
        .as_object()
        .ok_or_else(|| invalid("not a JSON object"))?;
    match obj.get("kty").and_then(Json::as_str) {
        Some("RSA") => rsa_key(obj),
        Some("EC") => ec_key(obj),
        Some("OKP") => okp_key(obj),
        Some("oct") => {
            required(obj, "k")?;
            Ok(Jwk::Foreign("[]uint8"))
        }
        Some(other) => Err(invalid(&format!("invalid key type {other:?}"))),
        None => Err(invalid("required field \"kty\" is missing")),
    }
}

/// `jwkPublicKeyPem JWK`: a `PUBLIC KEY` block.
pub fn public_key_pem(args: &[Value]) -> FuncResult {
    let unsupported = |t: &str| FuncError(format!("x509: unsupported public key type: {t}"));
    match parse(text(&args[0])?)? {
        Jwk::Public(k, _) => Ok(Value::String(pem::encode_der("PUBLIC KEY", &k.to_pkix()?))),
        Jwk::Private(_, go_type) | Jwk::Foreign(go_type) => Err(unsupported(go_type)),
    }
}

/// `jwkPrivateKeyPem JWK`: a `PRIVATE KEY` block (PKCS#8).
pub fn private_key_pem(args: &[Value]) -> FuncResult {
    let unknown = |t: &str| {
        FuncError(format!(
            "x509: unknown key type while marshaling PKCS#8: {t}"
        ))
    };
    match parse(text(&args[0])?)? {
        Jwk::Private(k, _) => Ok(Value::String(pem::encode_der(
            "PRIVATE KEY",
            &k.to_pkcs8()?,
        ))),
        Jwk::Public(_, go_type) | Jwk::Foreign(go_type) => Err(unknown(go_type)),
    }
}

#[cfg(test)]
mod tests {
    use crate::eso::testutil::{call, fixture_text};
    use crate::value::Value;

    // JWKs written by jwx from the fixture keys; expected PEM printed by ESO's functions.
    #[test]
    fn converts_like_eso() {
        for name in ["leaf", "ec", "root", "ed25519", "p521"] {
            let public = fixture_text(&format!("jwk-{name}.pub.jwk"));
            let private = fixture_text(&format!("jwk-{name}.jwk"));
            assert_eq!(
                call("jwkPublicKeyPem", &[&public]).unwrap(),
                Value::String(fixture_text(&format!("expected/jwk-{name}.pub.pem"))),
                "{name}"
            );
            assert_eq!(
                call("jwkPrivateKeyPem", &[&private]).unwrap(),
                Value::String(fixture_text(&format!("expected/jwk-{name}.pem"))),
                "{name}"
            );
        }
    }

    #[test]
    fn refuses_what_go_refuses() {
        let err = |f: &str, jwk: &str| call(f, &[jwk]).unwrap_err().0;
        let rsa_private = fixture_text("jwk-leaf.jwk");
        let ec_public = fixture_text("jwk-root.pub.jwk");
        assert_eq!(
            err("jwkPublicKeyPem", &rsa_private),
            "x509: unsupported public key type: *rsa.PrivateKey"
        );
        assert_eq!(
            err("jwkPrivateKeyPem", &ec_public),
            "x509: unknown key type while marshaling PKCS#8: *ecdsa.PublicKey"
        );
        assert_eq!(
            err("jwkPublicKeyPem", &fixture_text("jwk-ed25519.jwk")),
            "x509: unsupported public key type: ed25519.PrivateKey"
        );
        let oct = r#"{"kty":"oct","k":"AAAA"}"#;
        assert_eq!(
            err("jwkPublicKeyPem", oct),
            "x509: unsupported public key type: []uint8"
        );
        assert_eq!(
            err("jwkPrivateKeyPem", oct),
            "x509: unknown key type while marshaling PKCS#8: []uint8"
        );
        let x25519 =
            r#"{"kty":"OKP","crv":"X25519","x":"hSDwCYkwp1R0i33ctD73Wg2_Og0mOBr066SpjqqbTmo"}"#;
        assert_eq!(
            err("jwkPublicKeyPem", x25519),
            "x509: unsupported public key type: x25519.PublicKey"
        );
        assert!(err("jwkPublicKeyPem", "nope").starts_with("failed to parse JWK"));
        assert!(err("jwkPublicKeyPem", r#"{"kty":"RSA"}"#).starts_with("failed to parse JWK"));
        let off_curve = r#"{"kty":"EC","crv":"P-256","x":"AAAA","y":"AAAA"}"#;
        assert!(err("jwkPublicKeyPem", off_curve).starts_with("failed to parse JWK"));
    }
}
