//! The HTTP side of a Vault client: the server's CA (caBundle or caProvider), a client
//! certificate for mutual TLS, the extra headers, and the namespaces to send.

use std::time::Duration;

use api::meta::SecretKeySelector;
use api::providers::vault::VaultProvider;
use provider::{CredentialsReader, Error, Result};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use vaultrs::client::{VaultClient, VaultClientSettingsBuilder};

use crate::rest::Rest;

#[derive(Clone)]
pub(crate) struct Connection {
    address: String,
    http: reqwest::Client,
    /// With the `cert` login method's certificate when that is the method.
    login_http: reqwest::Client,
    namespace: Option<String>,
    auth_namespace: Option<String>,
    rest: Rest,
}

fn selector_key<'a>(s: &'a SecretKeySelector, default: &'a str) -> &'a str {
    s.key
        .as_deref()
        .filter(|k| !k.is_empty())
        .unwrap_or(default)
}

async fn secret(
    credentials: &dyn CredentialsReader,
    s: &SecretKeySelector,
    default_key: &str,
) -> Result<Vec<u8>> {
    credentials
        .secret_key(
            s.namespace.as_deref().unwrap_or_default(),
            s.name.as_deref().unwrap_or_default(),
            selector_key(s, default_key),
        )
        .await
}

fn identity(cert: &[u8], key: &[u8], field: &str) -> Result<reqwest::Identity> {
    let mut pem = cert.to_vec();
    pem.push(b'\n');
    pem.extend_from_slice(key);
    reqwest::Identity::from_pem(&pem)
        .map_err(|e| Error::InvalidSpec(format!("{field}: not a PEM certificate and key: {e}")))
}

impl Connection {
    pub(crate) async fn build(
        spec: &VaultProvider,
        credentials: &dyn CredentialsReader,
    ) -> Result<Self> {
        let headers = headers(spec)?;
        let pems = provider::ca_pems(
            spec.ca_bundle.as_ref().map(|b| b.0.as_slice()),
            spec.ca_provider.as_ref(),
            credentials,
        )
        .await?;
        let mut roots = Vec::new();
        for pem in pems {
            roots.extend(reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                Error::InvalidSpec(format!("caBundle/caProvider: not a PEM bundle: {e}"))
            })?);
        }
        let mut tls_identity = None;
        if let Some(tls) = &spec.client_tls
            && let (Some(cert), Some(key)) = (&tls.cert_secret_ref, &tls.key_secret_ref)
        {
            let cert = secret(credentials, cert, "tls.crt").await?;
            let key = secret(credentials, key, "tls.key").await?;
            tls_identity = Some(identity(&cert, &key, "tls")?);
        }
        let mut login_identity = tls_identity.clone();
        if let Some(cert_auth) = spec.auth.as_ref().and_then(|a| a.cert.as_ref())
            && let (Some(cert), Some(key)) = (&cert_auth.client_cert, &cert_auth.secret_ref)
        {
            let cert = secret(credentials, cert, "tls.crt").await?;
            let key = secret(credentials, key, "tls.key").await?;
            login_identity = Some(identity(&cert, &key, "auth.cert")?);
        }
        let build = |identity: Option<reqwest::Identity>| {
            let mut builder = reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .default_headers(headers.clone());
            for root in &roots {
                builder = builder.add_root_certificate(root.clone());
            }
            if let Some(identity) = identity {
                builder = builder.identity(identity);
            }
            builder
                .build()
                .map_err(|e| Error::InvalidSpec(format!("cannot build an HTTP client: {e}")))
        };
        let namespace = spec.namespace.clone().filter(|n| !n.is_empty());
        let http = build(tls_identity)?;
        let address = spec.server.trim_end_matches('/').to_owned();
        let base = reqwest::Url::parse(&address)
            .map_err(|e| Error::InvalidSpec(format!("server: {e}")))?;
        Ok(Self {
            rest: Rest::new(base, http.clone(), namespace.clone(), consistent(spec)),
            address,
            http,
            login_http: build(login_identity)?,
            auth_namespace: spec
                .auth
                .as_ref()
                .and_then(|a| a.namespace.clone())
                .filter(|n| !n.is_empty())
                .or_else(|| namespace.clone()),
            namespace,
        })
    }

    /// Secret operations, on our own HTTP calls.
    pub(crate) fn rest(&self) -> &Rest {
        &self.rest
    }

    /// A client for secret operations with `token`.
    pub(crate) fn client(&self, token: &str) -> Result<VaultClient> {
        self.make(token, self.namespace.clone(), &self.http)
    }

    /// A client without a token, in the login namespace, for logging in.
    pub(crate) fn login_client(&self) -> Result<VaultClient> {
        self.make("", self.auth_namespace.clone(), &self.login_http)
    }

    fn make(
        &self,
        token: &str,
        namespace: Option<String>,
        http: &reqwest::Client,
    ) -> Result<VaultClient> {
        let mut settings = VaultClientSettingsBuilder::default();
        settings.address(&self.address).token(token).verify(true);
        if let Some(ns) = namespace {
            settings.namespace(Some(ns));
        }
        let settings = settings
            .build()
            .map_err(|e| Error::InvalidSpec(format!("server: {e}")))?;
        let mut client =
            VaultClient::new(settings).map_err(|e| Error::InvalidSpec(format!("server: {e}")))?;
        client.http = rustify::clients::reqwest::Client::new(&self.address, http.clone());
        Ok(client)
    }
}

/// As ESO: either consistency option keeps read-after-write states.
fn consistent(spec: &VaultProvider) -> bool {
    spec.read_your_writes == Some(true) || spec.forward_inconsistent == Some(true)
}

/// `headers`, plus the header of `forwardInconsistent`, which ESO sends only together with
/// `readYourWrites`.
fn headers(spec: &VaultProvider) -> Result<HeaderMap> {
    let mut map = HeaderMap::new();
    for (name, value) in spec.headers.iter().flatten() {
        let bad = |e: String| Error::InvalidSpec(format!("headers.{name}: {e}"));
        map.insert(
            HeaderName::from_bytes(name.as_bytes()).map_err(|e| bad(e.to_string()))?,
            HeaderValue::from_str(value).map_err(|e| bad(e.to_string()))?,
        );
    }
    if spec.forward_inconsistent == Some(true) && spec.read_your_writes == Some(true) {
        map.insert(
            "X-Vault-Inconsistent",
            HeaderValue::from_static("forward-active-node"),
        );
    }
    Ok(map)
}
