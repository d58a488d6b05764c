//! The client of the remote API server, built from the store's `server`, `auth` or `authRef`
//! and the credentials they name, never from this process's own credentials. A ServiceAccount
//! token is requested again before it expires.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use api::meta::SecretKeySelector;
use api::providers::kubernetes::{KubernetesAuth, KubernetesProvider};
use base64::Engine;
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use provider::{CredentialKind, CredentialRef, CredentialsReader, Error, Result, ca_pems};
use secrecy::SecretString;

/// What ESO's CRD puts in `server.url` when it is left out: the API server of the cluster the
/// operator runs in.
const DEFAULT_URL: &str = "kubernetes.default";

/// How long before a requested token is asked for again when it says nothing of its lifetime.
const UNKNOWN_LIFETIME: Duration = Duration::from_secs(600);

/// Where the remote API server is, when the spec does not say.
#[derive(Clone, Debug, Default)]
pub enum Home {
    /// The cluster this process's own configuration points at (in a pod, the in-cluster API).
    #[default]
    Inferred,
    /// That cluster's URL, given by whoever builds the provider.
    Url(String),
}

impl Home {
    async fn url(&self) -> Result<String> {
        match self {
            Home::Url(url) => Ok(url.clone()),
            Home::Inferred => kube::Config::infer()
                .await
                .map(|c| c.cluster_url.to_string())
                .map_err(|e| {
                    Error::InvalidSpec(format!(
                        "server.url is not set and this process has no cluster of its own: {e}"
                    ))
                }),
        }
    }
}

/// The API server's URL as the spec gives it: unset (or ESO's default) is `home`, and an address
/// without a scheme is `https://`, as client-go reads it.
pub(crate) async fn server_url(spec: &KubernetesProvider, home: &Home) -> Result<String> {
    let url = spec
        .server
        .as_ref()
        .and_then(|s| s.url.as_deref())
        .map(str::trim)
        .filter(|u| !u.is_empty() && *u != DEFAULT_URL);
    match url {
        None => home.url().await,
        Some(url) if url.contains("://") => Ok(url.trim_end_matches('/').to_owned()),
        Some(url) => Ok(format!("https://{}", url.trim_end_matches('/'))),
    }
}

/// How the client authenticates.
#[derive(Clone, Debug)]
enum Identity {
    /// Everything is in the configuration (a token or client certificate read once, or a
    /// kubeconfig); the client manager rebuilds the client when the Secret changes.
    Fixed,
    /// A token requested for a ServiceAccount of the operator's cluster, used until most of its
    /// lifetime has passed.
    ServiceAccount {
        namespace: String,
        name: String,
        audiences: Vec<String>,
    },
}

/// The remote API server, and a client for it.
pub(crate) struct Connection {
    base: kube::Config,
    identity: Identity,
    credentials: Arc<dyn CredentialsReader>,
    current: tokio::sync::Mutex<Option<Current>>,
    /// The credentials, as a message names them when the server refuses them.
    pub(crate) described: String,
}

struct Current {
    client: kube::Client,
    renew_at: Option<SystemTime>,
}

fn secret_key(selector: &SecretKeySelector, field: &str) -> Result<(String, String, String)> {
    let name = selector
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Error::InvalidSpec(format!("{field}.name is required")))?;
    let key = selector
        .key
        .clone()
        .filter(|k| !k.is_empty())
        .ok_or_else(|| Error::InvalidSpec(format!("{field}.key is required")))?;
    let namespace = selector.namespace.clone().unwrap_or_default();
    Ok((namespace, name, key))
}

async fn read(
    credentials: &dyn CredentialsReader,
    selector: &SecretKeySelector,
    field: &str,
) -> Result<Vec<u8>> {
    let (namespace, name, key) = secret_key(selector, field)?;
    credentials.secret_key(&namespace, &name, &key).await
}

fn describe(kind: CredentialKind, namespace: &str, name: &str, field: &str) -> String {
    let reference = CredentialRef {
        kind,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    };
    format!("{field} ({reference})")
}

/// Which of `auth`'s methods is set; exactly one must be, as ESO's schema says.
pub(crate) fn method(auth: &KubernetesAuth) -> Result<&'static str> {
    let set: Vec<&str> = [
        auth.token.as_ref().map(|_| "token"),
        auth.service_account.as_ref().map(|_| "serviceAccount"),
        auth.cert.as_ref().map(|_| "cert"),
    ]
    .into_iter()
    .flatten()
    .collect();
    match set.as_slice() {
        [one] => Ok(one),
        [] => Err(Error::InvalidSpec(
            "auth: set one of token, serviceAccount or cert (the operator's own credentials are never used)".into(),
        )),
        several => Err(Error::InvalidSpec(format!(
            "auth: set exactly one of token, serviceAccount or cert, not {}",
            several.join(" and ")
        ))),
    }
}

/// Refuses what a kubeconfig in a user's Secret could use to act as this process: commands to
/// run, auth plugins, and files (such as the operator's own ServiceAccount token) to read.
fn check_kubeconfig(config: &Kubeconfig) -> Result<()> {
    let refuse = |what: &str| {
        Err(Error::InvalidSpec(format!(
            "authRef: the kubeconfig uses {what}, which is not allowed: give credentials and certificates inline (token, client-certificate-data, certificate-authority-data)"
        )))
    };
    for cluster in config.clusters.iter().filter_map(|c| c.cluster.as_ref()) {
        if cluster.certificate_authority.is_some() {
            return refuse("certificate-authority (a file)");
        }
    }
    for user in config
        .auth_infos
        .iter()
        .filter_map(|a| a.auth_info.as_ref())
    {
        if user.exec.is_some() {
            return refuse("exec (a command)");
        }
        if user.auth_provider.is_some() {
            return refuse("auth-provider");
        }
        if user.token_file.is_some()
            || user.client_certificate.is_some()
            || user.client_key.is_some()
        {
            return refuse("tokenFile, client-certificate or client-key (files)");
        }
    }
    Ok(())
}

impl Connection {
    /// Reads the credentials and builds the client; fails naming the field when a credential
    /// cannot be read.
    pub(crate) async fn build(
        spec: &KubernetesProvider,
        home: &Home,
        credentials: Arc<dyn CredentialsReader>,
    ) -> Result<Self> {
        let (base, identity, described) = match (&spec.auth_ref, &spec.auth) {
            (Some(_), Some(_)) => {
                return Err(Error::InvalidSpec("set auth or authRef, not both".into()));
            }
            (Some(auth_ref), None) => {
                let (namespace, name, _) = secret_key(auth_ref, "authRef")?;
                let text = read(credentials.as_ref(), auth_ref, "authRef").await?;
                let text = String::from_utf8(text).map_err(|_| {
                    Error::InvalidSpec("authRef: the kubeconfig is not UTF-8".into())
                })?;
                let kubeconfig = Kubeconfig::from_yaml(&text)
                    .map_err(|e| Error::InvalidSpec(format!("authRef: not a kubeconfig: {e}")))?;
                check_kubeconfig(&kubeconfig)?;
                let config =
                    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                        .await
                        .map_err(|e| Error::InvalidSpec(format!("authRef: {e}")))?;
                (
                    config,
                    Identity::Fixed,
                    describe(CredentialKind::Secret, &namespace, &name, "authRef"),
                )
            }
            (None, None) => {
                return Err(Error::InvalidSpec(
                    "set auth or authRef (the operator's own credentials are never used)".into(),
                ));
            }
            (None, Some(auth)) => {
                let url = server_url(spec, home).await?;
                let mut config = kube::Config::new(url.parse().map_err(|e| {
                    Error::InvalidSpec(format!("server.url: {url:?} is not a URL: {e}"))
                })?);
                let server = spec.server.clone().unwrap_or_default();
                let pems = ca_pems(
                    server.ca_bundle.as_ref().map(|b| b.0.as_slice()),
                    server.ca_provider.as_ref(),
                    credentials.as_ref(),
                )
                .await?;
                if !pems.is_empty() {
                    config.root_cert = Some(der_certificates(&pems)?);
                }
                let (identity, described) = match method(auth)? {
                    "token" => {
                        let selector = &auth.token.as_ref().expect("method checked").bearer_token;
                        let field = "auth.token.bearerToken";
                        let (namespace, name, _) = secret_key(selector, field)?;
                        let token = read(credentials.as_ref(), selector, field).await?;
                        let token = String::from_utf8(token).map_err(|_| {
                            Error::InvalidSpec(format!("{field}: the token is not UTF-8"))
                        })?;
                        config.auth_info = AuthInfo {
                            token: Some(SecretString::from(token.trim().to_owned())),
                            ..AuthInfo::default()
                        };
                        (
                            Identity::Fixed,
                            describe(CredentialKind::Secret, &namespace, &name, field),
                        )
                    }
                    "cert" => {
                        let cert = auth.cert.as_ref().expect("method checked");
                        let b64 = base64::engine::general_purpose::STANDARD;
                        let field = "auth.cert.clientCert";
                        let (namespace, name, _) = secret_key(&cert.client_cert, field)?;
                        let pem = read(credentials.as_ref(), &cert.client_cert, field).await?;
                        let key = read(
                            credentials.as_ref(),
                            &cert.client_key,
                            "auth.cert.clientKey",
                        )
                        .await?;
                        config.auth_info = AuthInfo {
                            client_certificate_data: Some(b64.encode(pem)),
                            client_key_data: Some(SecretString::from(b64.encode(key))),
                            ..AuthInfo::default()
                        };
                        (
                            Identity::Fixed,
                            describe(CredentialKind::Secret, &namespace, &name, "auth.cert"),
                        )
                    }
                    _ => {
                        let sa = auth.service_account.as_ref().expect("method checked");
                        let namespace = sa.namespace.clone().unwrap_or_default();
                        let described = describe(
                            CredentialKind::ServiceAccountToken,
                            &namespace,
                            &sa.name,
                            "auth.serviceAccount",
                        );
                        (
                            Identity::ServiceAccount {
                                namespace,
                                name: sa.name.clone(),
                                audiences: sa.audiences.clone().unwrap_or_default(),
                            },
                            described,
                        )
                    }
                };
                (config, identity, described)
            }
        };
        let connection = Self {
            base: with_timeouts(base),
            identity,
            credentials,
            current: tokio::sync::Mutex::new(None),
            described,
        };
        // Credentials that cannot be read fail the client now, naming them.
        connection.client().await?;
        Ok(connection)
    }

    /// The remote API server's URL, for messages.
    pub(crate) fn url(&self) -> String {
        self.base.cluster_url.to_string()
    }

    /// The client, built again with a new token once the ServiceAccount token is due.
    pub(crate) async fn client(&self) -> Result<kube::Client> {
        let mut current = self.current.lock().await;
        if let Some(c) = current.as_ref()
            && c.renew_at.is_none_or(|at| SystemTime::now() < at)
        {
            return Ok(c.client.clone());
        }
        let mut config = self.base.clone();
        let mut renew_at = None;
        if let Identity::ServiceAccount {
            namespace,
            name,
            audiences,
        } = &self.identity
        {
            let token = self
                .credentials
                .service_account_token(namespace, name, audiences)
                .await?;
            renew_at = Some(renewal(&token, SystemTime::now()));
            config.auth_info = AuthInfo {
                token: Some(SecretString::from(token)),
                ..AuthInfo::default()
            };
        }
        let client = kube::Client::try_from(config)
            .map_err(|e| Error::InvalidSpec(format!("building the client: {e}")))?;
        *current = Some(Current {
            client: client.clone(),
            renew_at,
        });
        Ok(client)
    }
}

/// A call that hangs (a server that stopped answering) must not hold a reconcile for kube's
/// default of almost five minutes.
fn with_timeouts(mut config: kube::Config) -> kube::Config {
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(Duration::from_secs(30));
    config.write_timeout = Some(Duration::from_secs(30));
    config
}

/// The certificates of PEM bundles, as DER.
fn der_certificates(pems: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
    let mut ders = Vec::new();
    for bundle in pems {
        let parsed = pem::parse_many(bundle)
            .map_err(|e| Error::InvalidSpec(format!("server CA: not PEM: {e}")))?;
        ders.extend(
            parsed
                .into_iter()
                .filter(|p| p.tag() == "CERTIFICATE")
                .map(|p| p.into_contents()),
        );
    }
    if ders.is_empty() {
        return Err(Error::InvalidSpec(
            "server: caBundle and caProvider hold no PEM certificate".into(),
        ));
    }
    Ok(ders)
}

/// When a token is asked for again: after four fifths of the lifetime its `iat` and `exp` claims
/// give it, or [`UNKNOWN_LIFETIME`] from `now` when it has none.
pub(crate) fn renewal(token: &str, now: SystemTime) -> SystemTime {
    let claims = token.split('.').nth(1).and_then(|payload| {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload.trim_end_matches('='))
            .ok()?;
        let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        Some((claims["iat"].as_u64()?, claims["exp"].as_u64()?))
    });
    match claims {
        Some((iat, exp)) if exp > iat => {
            UNIX_EPOCH + Duration::from_secs(iat) + Duration::from_secs(exp - iat) * 4 / 5
        }
        _ => now + UNKNOWN_LIFETIME,
    }
}
