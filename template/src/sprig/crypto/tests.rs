//! Round trips, and values made by Go's sprig v3.3.0 (`testdata/go_reference.txt`: a bcrypt
//! hash, AES ciphertexts, a CA and private keys of each type) read back here.

use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::{FromDer, X509Certificate};

use super::keys::PrivateKey;
use crate::funcs::{FuncResult, Funcs};
use crate::sprig::encoding::base64_decode;
use crate::value::Value;

fn call(name: &str, args: &[Value]) -> FuncResult {
    let mut funcs = Funcs::default();
    crate::sprig::register(&mut funcs);
    (funcs.get(name).unwrap().call)(args)
}

fn text(v: FuncResult) -> String {
    match v.unwrap() {
        Value::String(s) => s,
        other => panic!("not a string: {other:?}"),
    }
}

fn go_reference(key: &str) -> String {
    include_str!("testdata/go_reference.txt")
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key} is in the reference file"))
        .to_owned()
}

fn go_b64(key: &str) -> String {
    String::from_utf8(base64_decode(go_reference(key).as_bytes()).unwrap()).unwrap()
}

fn s(text: &str) -> Value {
    Value::from(text)
}

#[test]
fn bcrypt_matches_go() {
    let hash = text(call("bcrypt", &[s("correct horse")]));
    assert!(hash.starts_with("$2a$10$") && hash.len() == 60, "{hash}");
    assert!(bcrypt::verify("correct horse", &hash).unwrap());
    assert!(bcrypt::verify("correct horse", &go_reference("BCRYPT")).unwrap());
    assert_eq!(
        text(call("bcrypt", &[s(&"x".repeat(73))])),
        "failed to encrypt string with bcrypt: bcrypt: password length exceeds 72 bytes"
    );
    let line = text(call("htpasswd", &[s("alice"), s("pw")]));
    let (user, hash) = line.split_once(':').unwrap();
    assert_eq!(user, "alice");
    assert!(bcrypt::verify("pw", hash).unwrap());
}

#[test]
fn aes_reads_go_and_round_trips() {
    assert_eq!(
        text(call(
            "decryptAES",
            &[s("secretkey"), s(&go_reference("AES"))]
        )),
        "hello world, this is secret!"
    );
    let long = "a password longer than thirty-two bytes, cut";
    assert_eq!(
        text(call("decryptAES", &[s(long), s(&go_reference("AESLONG"))])),
        "x"
    );
    for plain in ["a", "exactly sixteen!", "ünïcödé text that spans blocks"] {
        let sealed = text(call("encryptAES", &[s("k"), s(plain)]));
        assert_eq!(text(call("decryptAES", &[s("k"), s(&sealed)])), plain);
    }
}

fn parse_cert(pem_text: &str) -> Vec<u8> {
    let block = pem::parse(pem_text).unwrap();
    assert_eq!(block.tag(), "CERTIFICATE");
    block.into_contents()
}

fn cert_and_key(v: &Value) -> (String, String) {
    let Value::Map(map) = v else {
        panic!("not a certificate map: {v:?}");
    };
    match (&map["Cert"], &map["Key"]) {
        (Value::String(c), Value::String(k)) => (c.clone(), k.clone()),
        other => panic!("Cert and Key are not strings: {other:?}"),
    }
}

#[test]
fn private_keys_use_gos_encodings() {
    for (kind, tag) in [
        ("rsa", "RSA PRIVATE KEY"),
        ("ecdsa", "EC PRIVATE KEY"),
        ("ed25519", "PRIVATE KEY"),
    ] {
        let pem_text = text(call("genPrivateKey", &[s(kind)]));
        assert_eq!(pem::parse(&pem_text).unwrap().tag(), tag);
        // Reading a key and writing it again gives the same text, for ours and for Go's.
        assert_eq!(
            PrivateKey::from_pem(&pem_text).unwrap().to_go_pem(),
            pem_text
        );
        let go = go_b64(&format!("KEY_{kind}"));
        assert_eq!(PrivateKey::from_pem(&go).unwrap().to_go_pem(), go, "{kind}");
    }
    assert_eq!(text(call("genPrivateKey", &[s("foo")])), "Unknown type foo");
    assert!(call("genPrivateKey", &[s("dsa")]).is_err());
}

#[test]
fn ca_and_signed_certificates_verify() {
    let ca = call("genCA", &[s("my-ca"), Value::Int(30)]).unwrap();
    let (ca_pem, ca_key) = cert_and_key(&ca);
    assert!(ca_key.starts_with("-----BEGIN RSA PRIVATE KEY-----\n"));
    let ca_der = parse_cert(&ca_pem);
    let (_, ca_cert) = X509Certificate::from_der(&ca_der).unwrap();
    assert_eq!(ca_cert.subject().to_string(), "CN=my-ca");
    assert!(ca_cert.is_ca());
    ca_cert.verify_signature(None).unwrap();
    let days = (ca_cert.validity().not_after.timestamp()
        - ca_cert.validity().not_before.timestamp())
        / 86_400;
    assert_eq!(days, 30);

    let ips = Value::List(vec![
        s("10.0.0.1"),
        s("::ffff:192.168.0.1"),
        s("2001:db8::1"),
    ]);
    let dns = Value::List(vec![s("a.example.com"), s("b.example.com")]);
    // Our CA, and one Go made.
    let go_ca = go_reference("CA");
    let (go_cert, go_key) = go_ca.split_once(' ').unwrap();
    let go_ca = call("buildCustomCert", &[s(go_cert), s(go_key)]).unwrap();
    for signer in [&ca, &go_ca] {
        let (signer_pem, _) = cert_and_key(signer);
        let signer_der = parse_cert(&signer_pem);
        let (_, signer_cert) = X509Certificate::from_der(&signer_der).unwrap();
        let leaf = call(
            "genSignedCert",
            &[
                s("leaf"),
                ips.clone(),
                dns.clone(),
                Value::Int(10),
                signer.clone(),
            ],
        )
        .unwrap();
        let (leaf_pem, leaf_key) = cert_and_key(&leaf);
        let leaf_der = parse_cert(&leaf_pem);
        let (_, leaf_cert) = X509Certificate::from_der(&leaf_der).unwrap();
        leaf_cert
            .verify_signature(Some(signer_cert.public_key()))
            .unwrap();
        assert_eq!(leaf_cert.issuer(), signer_cert.subject());
        assert!(!leaf_cert.is_ca());
        assert_eq!(
            PrivateKey::from_pem(&leaf_key)
                .unwrap()
                .pair
                .public_key_raw(),
            leaf_cert.public_key().subject_public_key.data.as_ref()
        );
        let mut names = Vec::new();
        for ext in leaf_cert.extensions() {
            if let ParsedExtension::SubjectAlternativeName(san) = ext.parsed_extension() {
                for name in &san.general_names {
                    names.push(match name {
                        GeneralName::DNSName(d) => (*d).to_owned(),
                        GeneralName::IPAddress(ip) => format!("{ip:?}"),
                        other => format!("{other:?}"),
                    });
                }
            }
        }
        assert_eq!(
            names,
            [
                "a.example.com",
                "b.example.com",
                "[10, 0, 0, 1]",
                "[192, 168, 0, 1]",
                "[32, 1, 13, 184, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]"
            ]
        );
    }
}

#[test]
fn certificates_with_given_keys() {
    for kind in ["rsa", "ecdsa", "ed25519"] {
        let key = go_b64(&format!("KEY_{kind}"));
        let made = [
            call("genCAWithKey", &[s("ca"), Value::Int(1), s(&key)]),
            call(
                "genSelfSignedCertWithKey",
                &[s("self"), Value::Nil, Value::Nil, Value::Int(1), s(&key)],
            ),
        ];
        for cert in made {
            let (cert_pem, cert_key) = cert_and_key(&cert.unwrap());
            assert_eq!(cert_key, key, "{kind}: the key comes back as Go writes it");
            let der = parse_cert(&cert_pem);
            let (_, parsed) = X509Certificate::from_der(&der).unwrap();
            parsed.verify_signature(None).unwrap();
        }
        let ca = call("genCA", &[s("ca"), Value::Int(1)]).unwrap();
        let leaf = call(
            "genSignedCertWithKey",
            &[
                s("leaf"),
                Value::Nil,
                Value::Nil,
                Value::Int(1),
                ca,
                s(&key),
            ],
        );
        assert_eq!(cert_and_key(&leaf.unwrap()).1, key);
    }
}

#[test]
fn certificate_argument_errors() {
    let ca = call("genCA", &[s("ca"), Value::Int(1)]).unwrap();
    let bad_ip = Value::List(vec![s("999.1.1.1")]);
    assert!(
        call(
            "genSelfSignedCert",
            &[s("x"), bad_ip, Value::Nil, Value::Int(1)]
        )
        .is_err()
    );
    let not_string = Value::List(vec![Value::Int(1)]);
    assert!(
        call(
            "genSelfSignedCert",
            &[s("x"), Value::Nil, not_string, Value::Int(1)]
        )
        .is_err()
    );
    assert!(
        call(
            "genSelfSignedCert",
            &[s("x"), s("1.2.3.4"), Value::Nil, Value::Int(1)]
        )
        .is_err()
    );
    assert!(
        call(
            "genSignedCert",
            &[s("x"), Value::Nil, Value::Nil, Value::Int(1), s("ca")]
        )
        .is_err()
    );
    assert!(call("genCAWithKey", &[s("x"), Value::Int(1), s("not a key")]).is_err());
    assert!(call("buildCustomCert", &[s("!!"), s("")]).is_err());
    let (cert, _) = cert_and_key(&ca);
    let cert64 = crate::sprig::encoding::base64_encode(cert.as_bytes());
    assert!(call("buildCustomCert", &[s(&cert64), s(&cert64)]).is_err());
}
