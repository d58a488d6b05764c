//! mTLS from files, in ESO's layout: a directory (`/etc/provider/certs`, or `TLS_CERT_DIR`) with
//! `ca.crt` (the CA client certificates must chain to), `tls.crt` and `tls.key` (the server's),
//! each name overridable by `TLS_CA_CERT_FILE`, `TLS_CERT_FILE`, `TLS_KEY_FILE`. Unlike ESO's
//! server, the files are read again when they change, so a rotated certificate is served without
//! a restart; a new file that does not load leaves the previous configuration in place.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use tracing::{info, warn};

/// Where ESO's provider servers read their certificates.
pub const DEFAULT_CERT_DIR: &str = "/etc/provider/certs";
pub const CA_FILE: &str = "ca.crt";
pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";

/// The three files the server's TLS is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// Client certificates must chain to a certificate of this bundle.
    pub ca: PathBuf,
    /// The server's certificate chain.
    pub cert: PathBuf,
    /// The server's private key.
    pub key: PathBuf,
}

impl TlsFiles {
    /// `ca.crt`, `tls.crt` and `tls.key` in `dir`.
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            ca: dir.join(CA_FILE),
            cert: dir.join(CERT_FILE),
            key: dir.join(KEY_FILE),
        }
    }

    /// ESO's layout: `dir`, else `$TLS_CERT_DIR`, else [`DEFAULT_CERT_DIR`]; file names from
    /// `$TLS_CA_CERT_FILE`, `$TLS_CERT_FILE` and `$TLS_KEY_FILE` when set (a name in the
    /// directory, or an absolute path).
    pub fn from_env(dir: Option<&Path>) -> Self {
        let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let dir = dir
            .map(Path::to_path_buf)
            .or_else(|| env("TLS_CERT_DIR").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CERT_DIR));
        let file = |var: &str, default: &str| {
            dir.join(env(var).map_or_else(|| PathBuf::from(default), PathBuf::from))
        };
        Self {
            ca: file("TLS_CA_CERT_FILE", CA_FILE),
            cert: file("TLS_CERT_FILE", CERT_FILE),
            key: file("TLS_KEY_FILE", KEY_FILE),
        }
    }
}

/// Why the TLS files could not be used. Messages name files, never their contents.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {what}", path.display())]
    Pem { path: PathBuf, what: &'static str },
    #[error("{}: {source}", path.display())]
    Ca {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("client certificate verifier from {}: {source}", path.display())]
    Verifier {
        path: PathBuf,
        source: rustls::server::VerifierBuilderError,
    },
    #[error("server certificate {} with key {}: {source}", cert.display(), key.display())]
    ServerCert {
        cert: PathBuf,
        key: PathBuf,
        source: rustls::Error,
    },
}

/// The contents of the three files, as last read.
#[derive(Clone, PartialEq, Eq)]
struct Contents {
    ca: Vec<u8>,
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl Contents {
    async fn read(files: &TlsFiles) -> Result<Self, TlsError> {
        let read = |path: &Path| {
            let path = path.to_path_buf();
            async move {
                tokio::fs::read(&path)
                    .await
                    .map_err(|source| TlsError::Read { path, source })
            }
        };
        Ok(Self {
            ca: read(&files.ca).await?,
            cert: read(&files.cert).await?,
            key: read(&files.key).await?,
        })
    }
}

fn certificates(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |what| TlsError::Pem {
        path: path.to_path_buf(),
        what,
    };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| bad("not valid PEM"))?;
    if certs.is_empty() {
        return Err(bad("holds no PEM certificate"));
    }
    Ok(certs)
}

/// A server configuration requiring client certificates that chain to `ca`, offering `h2` by
/// ALPN (gRPC peers such as Python's grpcio insist on it), TLS 1.2 and 1.3.
fn server_config(files: &TlsFiles, contents: &Contents) -> Result<ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = RootCertStore::empty();
    for ca in certificates(&files.ca, &contents.ca)? {
        roots.add(ca).map_err(|source| TlsError::Ca {
            path: files.ca.clone(),
            source,
        })?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|source| TlsError::Verifier {
            path: files.ca.clone(),
            source,
        })?;
    let chain = certificates(&files.cert, &contents.cert)?;
    // The key's own parse error could quote a line of it: say only that it is not a key.
    let key = PrivateKeyDer::from_pem_slice(&contents.key).map_err(|_| TlsError::Pem {
        path: files.key.clone(),
        what: "holds no PEM private key",
    })?;
    let server_cert = |source| TlsError::ServerCert {
        cert: files.cert.clone(),
        key: files.key.clone(),
        source,
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(server_cert)?
        .with_client_cert_verifier(verifier)
        // Fails when the key is not the certificate's.
        .with_single_cert(chain, key)
        .map_err(server_cert)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// The current server configuration, replaced when the files change.
pub struct ReloadingConfig {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
    /// What the files held when last read, loaded or not: a bad file is reported once, and a
    /// half-written one is read again at the next look.
    seen: Mutex<Contents>,
}

impl ReloadingConfig {
    /// Reads the files; they must load.
    pub async fn load(files: TlsFiles) -> Result<Self, TlsError> {
        // The one crypto provider of the process, for whatever builds a configuration without
        // naming one.
        let _ = CryptoProvider::install_default(rustls::crypto::aws_lc_rs::default_provider());
        let contents = Contents::read(&files).await?;
        let config = server_config(&files, &contents)?;
        Ok(Self {
            files,
            current: RwLock::new(Arc::new(config)),
            seen: Mutex::new(contents),
        })
    }

    /// The configuration a new connection is accepted with.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .expect("TLS config lock poisoned")
            .clone()
    }

    /// Reads the files and, when they changed and load, uses them for new connections.
    /// Connections already accepted keep the configuration they were accepted with.
    pub async fn reload(&self) {
        let contents = match Contents::read(&self.files).await {
            Ok(c) => c,
            Err(e) => {
                // Missing for a moment while a volume is updated; said once per change.
                let mut seen = self.seen.lock().expect("TLS contents lock poisoned");
                if !seen.ca.is_empty() || !seen.cert.is_empty() || !seen.key.is_empty() {
                    warn!(error = %e, "cannot read the TLS files; keeping the certificates in use");
                    *seen = Contents {
                        ca: Vec::new(),
                        cert: Vec::new(),
                        key: Vec::new(),
                    };
                }
                return;
            }
        };
        {
            let mut seen = self.seen.lock().expect("TLS contents lock poisoned");
            if *seen == contents {
                return;
            }
            *seen = contents.clone();
        }
        match server_config(&self.files, &contents) {
            Ok(config) => {
                *self.current.write().expect("TLS config lock poisoned") = Arc::new(config);
                info!(
                    ca = %self.files.ca.display(),
                    cert = %self.files.cert.display(),
                    "TLS files changed: new connections use the new certificates"
                );
            }
            Err(e) => {
                warn!(error = %e, "TLS files changed but do not load; keeping the certificates in use");
            }
        }
    }

    /// Looks at the files every `interval`, forever.
    pub async fn watch(self: Arc<Self>, interval: Duration) {
        loop {
            tokio::time::sleep(interval).await;
            self.reload().await;
        }
    }
}
