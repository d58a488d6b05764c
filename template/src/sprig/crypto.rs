//! Sprig's hashes and cryptography: digests, password hashing, AES, private keys and X.509
//! certificates, with Go's output formats (hex digests, PEM blocks as Go's `crypto/x509`
//! marshals them).

mod aes;
mod certs;
mod der;
mod hashes;
mod keys;
mod passwords;

use crate::funcs::Funcs;

pub fn register(funcs: &mut Funcs) {
    hashes::register(funcs);
    passwords::register(funcs);
    aes::register(funcs);
    keys::register(funcs);
    certs::register(funcs);
}

#[cfg(test)]
mod tests;
