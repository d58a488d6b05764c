//! `rsaDecrypt SCHEME HASH CIPHERTEXT PRIVATE_KEY`: RSA-OAEP with the same hash for OAEP and
//! MGF1 and no label, or `None` to pass the input through. The ciphertext is raw bytes
//! (templates call `b64dec` first) and so may be the plaintext.

use rsa::Oaep;

use super::args::{binary_result, expect_binary, text};
use super::keys::{self, PrivateKey};
use super::pem;
use crate::funcs::{FuncError, FuncResult};
use crate::value::Value;

pub fn rsa_decrypt(args: &[Value]) -> FuncResult {
    let scheme = text(&args[0])?;
    let hash = text(&args[1])?;
    let input = &expect_binary(&args[2])?;
    let private_key = text(&args[3])?;
    match scheme {
        "None" => Ok(args[2].clone()),
        "RSA-OAEP" => {
            let (block, _) = pem::decode(private_key.as_bytes());
            let block = block.ok_or_else(|| FuncError("failed to decode PEM block".to_owned()))?;
            let key = keys::parse_any(&block.bytes)
                .map_err(|e| FuncError(format!("could not parse private key: {}", e.0)))?;
            let PrivateKey::Rsa(key) = key else {
                return Err(FuncError("could not parse RSA private key".to_owned()));
            };
            // ESO falls back to SHA-256 for any other name.
            let plain = match hash {
                "SHA1" => key.decrypt(Oaep::<sha1::Sha1>::new(), input),
                "SHA512" => key.decrypt(Oaep::<sha2::Sha512>::new(), input),
                _ => key.decrypt(Oaep::<sha2::Sha256>::new(), input),
            }
            .map_err(|_| {
                FuncError("error decrypting data with RSA: crypto/rsa: decryption error".to_owned())
            })?;
            Ok(binary_result(plain))
        }
        other => Err(FuncError(format!(
            "decryption scheme {other} is not supported"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;

    use crate::eso::testutil::{call, call_values, fixture_text};
    use crate::value::Value;

    fn ciphertext(hash: &str) -> Value {
        let b64 = fixture_text(&format!("oaep-{hash}.b64"));
        Value::Bytes(STANDARD.decode(b64.trim()).unwrap())
    }

    fn decrypt(hash: &str, ct: &str, key: &str) -> Result<Value, String> {
        let args = [
            Value::from("RSA-OAEP"),
            Value::from(hash),
            ciphertext(ct),
            Value::String(fixture_text(key)),
        ];
        call_values("rsaDecrypt", &args).map_err(|e| e.0)
    }

    // Ciphertexts made with `openssl pkeyutl` (OAEP and MGF1 with the same hash).
    #[test]
    fn decrypts_oaep() {
        assert_eq!(
            decrypt("SHA1", "sha1", "leaf.key"),
            Ok(Value::from("hello sha1"))
        );
        assert_eq!(
            decrypt("SHA256", "sha256", "leaf-pkcs1.key"),
            Ok(Value::from("hello sha256"))
        );
        assert_eq!(
            decrypt("SHA512", "sha512", "leaf.key"),
            Ok(Value::from("hello sha512"))
        );
        // Any other hash name means SHA-256, "None" too.
        assert_eq!(
            decrypt("MD5", "sha256", "leaf.key"),
            Ok(Value::from("hello sha256"))
        );
        assert_eq!(
            decrypt("None", "sha256", "leaf.key"),
            Ok(Value::from("hello sha256"))
        );
    }

    // Messages as ESO's function prints them.
    #[test]
    fn failures() {
        assert_eq!(
            decrypt("SHA1", "sha256", "leaf.key"),
            Err("error decrypting data with RSA: crypto/rsa: decryption error".to_owned())
        );
        assert_eq!(
            decrypt("SHA1", "sha1", "ec.key"),
            Err("could not parse RSA private key".to_owned())
        );
        assert_eq!(
            decrypt("SHA1", "sha1", "inter.crt"),
            Err("could not parse private key: unable to parse private key type".to_owned())
        );
        assert_eq!(
            call("rsaDecrypt", &["RSA-OAEP", "SHA1", "x", "not pem"])
                .unwrap_err()
                .0,
            "failed to decode PEM block"
        );
        assert_eq!(
            call("rsaDecrypt", &["RSA-OAEP2", "SHA1", "x", "y"])
                .unwrap_err()
                .0,
            "decryption scheme RSA-OAEP2 is not supported"
        );
        assert_eq!(
            call("rsaDecrypt", &["None", "SHA1", "x", "y"]).unwrap(),
            Value::from("x")
        );
    }
}
