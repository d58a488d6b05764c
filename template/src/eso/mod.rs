//! ESO's own template functions (engine v2), next to sprig's: PKCS#12, PEM, certificate chains,
//! JWK, YAML and RSA decryption. Each Go function takes and returns `string`s; a Go string may
//! hold any bytes (a PKCS#12 archive after `b64dec`, an RSA plaintext), which our `String` cannot,
//! so binary inputs also accept [`Value::Bytes`] and a binary output comes back as `Bytes`.

mod args;
mod chain;
mod jwk;
mod keys;
mod pem;
mod pkcs12;
mod rsa_decrypt;
mod subject;
mod yaml;

use crate::budget::cost;
use crate::funcs::{Arity, Funcs};
use crate::value::Value;

pub fn register(funcs: &mut Funcs) {
    let exact = Arity::Exact;
    // The archive is the last argument.
    let reads = |args: &[Value]| {
        let archive = args.last().and_then(|a| args::expect_binary(a).ok());
        cost::pkcs12_read(archive.map_or(0, |a| pkcs12::planned_iterations(&a)))
    };
    funcs.insert_costly("pkcs12key", exact(1), reads, pkcs12::key);
    funcs.insert_costly("pkcs12keyPass", exact(2), reads, pkcs12::key_pass);
    funcs.insert_costly("pkcs12cert", exact(1), reads, pkcs12::cert);
    funcs.insert_costly("pkcs12certPass", exact(2), reads, pkcs12::cert_pass);
    let writes = |_: &[Value]| cost::PKCS12_WRITE;
    funcs.insert_costly("pemToPkcs12", exact(2), writes, pkcs12::pem_to_pkcs12);
    funcs.insert_costly(
        "pemToPkcs12Pass",
        exact(3),
        writes,
        pkcs12::pem_to_pkcs12_pass,
    );
    funcs.insert_costly(
        "fullPemToPkcs12",
        exact(2),
        writes,
        pkcs12::full_pem_to_pkcs12,
    );
    funcs.insert_costly(
        "fullPemToPkcs12Pass",
        exact(3),
        writes,
        pkcs12::full_pem_to_pkcs12_pass,
    );
    funcs.insert_costly(
        "pemTruststoreToPKCS12",
        exact(1),
        writes,
        pkcs12::truststore,
    );
    funcs.insert_costly(
        "pemTruststoreToPKCS12Pass",
        exact(2),
        writes,
        pkcs12::truststore_pass,
    );
    funcs.insert("filterPEM", exact(2), pem::filter_pem);
    funcs.insert("filterCertChain", exact(2), chain::filter_cert_chain);
    funcs.insert("certSANs", exact(1), chain::cert_sans);
    funcs.insert("jwkPublicKeyPem", exact(1), jwk::public_key_pem);
    funcs.insert("jwkPrivateKeyPem", exact(1), jwk::private_key_pem);
    funcs.insert("toYaml", exact(1), yaml::to_yaml);
    funcs.insert("fromYaml", exact(1), yaml::from_yaml);
    funcs.insert_costly(
        "rsaDecrypt",
        exact(4),
        |_| cost::RSA_PRIVATE,
        rsa_decrypt::rsa_decrypt,
    );
}

#[cfg(test)]
mod testutil;
