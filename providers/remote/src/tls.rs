//! The client half of mTLS, from ESO's Secret keys `ca.crt`, `client.crt`, `client.key`.

use std::fmt;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use api::provider_class::{
    TLS_CA_KEY as CA_CERT, TLS_CLIENT_CERT_KEY as CLIENT_CERT, TLS_CLIENT_KEY_KEY as CLIENT_KEY,
};

/// PEM material for one server: the CA that signed its certificate and our client certificate.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TlsMaterial {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl fmt::Debug for TlsMaterial {
    // The key never reaches a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsMaterial").finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{key}: {reason}")]
    Material { key: &'static str, reason: String },
    #[error("{0}")]
    Config(String),
}

impl TlsMaterial {
    /// From a Secret's data; names the key that is missing.
    pub fn from_secret_data(get: impl Fn(&str) -> Option<Vec<u8>>) -> Result<Self, TlsError> {
        let field = |key: &'static str| {
            get(key).ok_or(TlsError::Material {
                key,
                reason: "missing".into(),
            })
        };
        Ok(Self {
            ca: field(CA_CERT)?,
            cert: field(CLIENT_CERT)?,
            key: field(CLIENT_KEY)?,
        })
    }

    /// A rustls client configuration: TLS 1.2 or newer, the server checked against `ca` only,
    /// our certificate offered, HTTP/2 by ALPN (gRPC servers in other languages insist on it).
    pub fn client_config(&self) -> Result<Arc<rustls::ClientConfig>, TlsError> {
        let bad = |key: &'static str| {
            move |e: rustls::pki_types::pem::Error| TlsError::Material {
                key,
                reason: e.to_string(),
            }
        };
        let mut roots = rustls::RootCertStore::empty();
        let cas: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&self.ca)
            .collect::<Result<_, _>>()
            .map_err(bad(CA_CERT))?;
        if cas.is_empty() {
            return Err(TlsError::Material {
                key: CA_CERT,
                reason: "holds no certificate".into(),
            });
        }
        for ca in cas {
            roots.add(ca).map_err(|e| TlsError::Material {
                key: CA_CERT,
                reason: e.to_string(),
            })?;
        }
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&self.cert)
            .collect::<Result<_, _>>()
            .map_err(bad(CLIENT_CERT))?;
        let key = PrivateKeyDer::from_pem_slice(&self.key).map_err(bad(CLIENT_KEY))?;
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| TlsError::Material {
            key: CLIENT_CERT,
            reason: e.to_string(),
        })?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }
}
