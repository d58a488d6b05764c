//! One Vault token per client, shared by every reconcile that uses it: logged in on first use,
//! renewed before it expires when it can be, logged in again when it cannot or when Vault says
//! it is no longer valid, revoked when the client is closed. A single lock makes concurrent
//! callers wait for one login instead of each logging in.

use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use provider::{CredentialsReader, Error, Result};
use tokio::sync::Mutex;
use tracing::debug;
use vaultrs::api::AuthInfo;
use vaultrs::client::VaultClient;

use crate::connection::Connection;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LoginLabels {
    pub method: String,
}

/// `vault_logins_total{method}`.
pub type Logins = Family<LoginLabels, Counter>;

/// How to obtain a token. Credentials are read when logging in, through the reader the client
/// manager scoped to the caller.
#[derive(Clone, Debug)]
pub(crate) enum Login {
    /// No `auth`: requests go without a token.
    Anonymous,
    /// `tokenSecretRef`: used as it is, never renewed or revoked.
    Static { secret: SecretKey },
    AppRole {
        mount: String,
        role_id: Value,
        secret_id: SecretKey,
    },
    Kubernetes {
        mount: String,
        role: String,
        jwt: Jwt,
    },
    /// userPass and ldap share the login shape.
    Password {
        method: &'static str,
        mount: String,
        username: String,
        password: SecretKey,
    },
    Jwt {
        mount: String,
        role: Option<String>,
        jwt: Jwt,
    },
    /// The client certificate is on the connection; only the role is sent.
    Cert { mount: String, role: String },
}

/// A value given inline or read from a Secret.
#[derive(Clone, Debug)]
pub(crate) enum Value {
    Inline(String),
    Secret(SecretKey),
}

#[derive(Clone, Debug)]
pub(crate) struct SecretKey {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) key: String,
}

#[derive(Clone, Debug)]
pub(crate) enum Jwt {
    Secret(SecretKey),
    ServiceAccount {
        namespace: String,
        name: String,
        audiences: Vec<String>,
    },
}

impl Login {
    pub(crate) fn method(&self) -> &'static str {
        match self {
            Self::Anonymous => "none",
            Self::Static { .. } => "token",
            Self::AppRole { .. } => "approle",
            Self::Kubernetes { .. } => "kubernetes",
            Self::Password { method, .. } => method,
            Self::Jwt { .. } => "jwt",
            Self::Cert { .. } => "cert",
        }
    }
}

/// How long before it expires a token is replaced at the latest, so that no call starts with a
/// token that expires on its way.
const LAST_MARGIN: Duration = Duration::from_secs(5);

struct Token {
    api: Arc<VaultClient>,
    /// `None`: does not expire as far as we know (static or root token).
    expires: Option<Instant>,
    ttl: Duration,
    /// A renewal would extend it: Vault says so, and no renewal came back capped by its max TTL.
    renewable: bool,
    revocable: bool,
}

impl Token {
    /// Renew once a third of the lifetime is left (at least 5 s before expiry); one that no
    /// renewal would extend is used until 5 s before it expires, then replaced.
    fn fresh(&self, now: Instant) -> bool {
        self.expires.is_none_or(|at| {
            let margin = if self.renewable {
                (self.ttl / 3).max(LAST_MARGIN)
            } else {
                LAST_MARGIN
            };
            at.saturating_duration_since(now) > margin
        })
    }
}

pub(crate) struct Session {
    connection: Connection,
    login: Login,
    credentials: Arc<dyn CredentialsReader>,
    logins: Logins,
    token: Mutex<Option<Token>>,
}

impl Session {
    pub(crate) fn new(
        connection: Connection,
        login: Login,
        credentials: Arc<dyn CredentialsReader>,
        logins: Logins,
    ) -> Self {
        Self {
            connection,
            login,
            credentials,
            logins,
            token: Mutex::default(),
        }
    }

    pub(crate) fn rest(&self) -> &crate::rest::Rest {
        self.connection.rest()
    }

    /// A client carrying a valid token.
    pub(crate) async fn api(&self) -> Result<Arc<VaultClient>> {
        let mut slot = self.token.lock().await;
        let now = Instant::now();
        if let Some(token) = slot.as_ref().filter(|t| t.fresh(now)) {
            return Ok(token.api.clone());
        }
        if let Some(token) = slot.as_ref().filter(|t| t.renewable) {
            match vaultrs::token::renew_self(token.api.as_ref(), None).await {
                Ok(auth) => {
                    let mut renewed = self.token_from(&auth, token.api.middle.token.clone())?;
                    // Less than its TTL: its max TTL caps it, and no renewal extends it further.
                    renewed.renewable &= renewed.ttl >= token.ttl;
                    // Still near its end after all: replaced now rather than at the next call.
                    if renewed.fresh(Instant::now()) {
                        let api = renewed.api.clone();
                        *slot = Some(renewed);
                        return Ok(api);
                    }
                }
                Err(e) => debug!(error = %e, "renewing the Vault token failed; logging in again"),
            }
        }
        let token = self.login().await?;
        let api = token.api.clone();
        *slot = Some(token);
        Ok(api)
    }

    /// Forgets the token after Vault refused it, so the next call logs in again.
    pub(crate) async fn refused(&self, api: &Arc<VaultClient>) {
        let mut slot = self.token.lock().await;
        if slot.as_ref().is_some_and(|t| Arc::ptr_eq(&t.api, api)) {
            *slot = None;
        }
    }

    /// Revokes a token we logged in for.
    pub(crate) async fn close(&self) {
        if let Some(token) = self.token.lock().await.take().filter(|t| t.revocable)
            && let Err(e) = vaultrs::token::revoke_self(token.api.as_ref()).await
        {
            debug!(error = %e, "revoking the Vault token failed");
        }
    }

    async fn login(&self) -> Result<Token> {
        let login_api = self.connection.login_client()?;
        let auth = match &self.login {
            Login::Anonymous => {
                return Ok(Token {
                    api: Arc::new(self.connection.client("")?),
                    expires: None,
                    ttl: Duration::ZERO,
                    renewable: false,
                    revocable: false,
                });
            }
            Login::Static { secret } => {
                let token = self.read(secret).await?;
                return Ok(Token {
                    api: Arc::new(self.connection.client(token.trim())?),
                    expires: None,
                    ttl: Duration::ZERO,
                    renewable: false,
                    revocable: false,
                });
            }
            Login::AppRole {
                mount,
                role_id,
                secret_id,
            } => {
                let role_id = match role_id {
                    Value::Inline(id) => id.clone(),
                    Value::Secret(key) => self.read(key).await?,
                };
                let secret_id = self.read(secret_id).await?;
                vaultrs::auth::approle::login(&login_api, mount, role_id.trim(), secret_id.trim())
                    .await
            }
            Login::Kubernetes { mount, role, jwt } => {
                let jwt = self.jwt(jwt).await?;
                vaultrs::auth::kubernetes::login(&login_api, mount, role, &jwt).await
            }
            Login::Password {
                mount,
                username,
                password,
                ..
            } => {
                let password = self.read(password).await?;
                vaultrs::auth::userpass::login(&login_api, mount, username, &password).await
            }
            Login::Jwt { mount, role, jwt } => {
                let jwt = self.jwt(jwt).await?;
                vaultrs::auth::oidc::login(&login_api, mount, &jwt, role.clone()).await
            }
            Login::Cert { mount, role } => {
                vaultrs::auth::cert::login(&login_api, mount, role).await
            }
        };
        let method = self.login.method();
        let auth = auth.map_err(|e| {
            let message = format!("Vault {method} login failed: {e}");
            match crate::rest::CallError::from(e) {
                crate::rest::CallError::Status {
                    code: 500..=599, ..
                }
                | crate::rest::CallError::Transport(_) => Error::Unavailable(message),
                crate::rest::CallError::Status { .. } => Error::Backend(message),
            }
        })?;
        self.logins
            .get_or_create(&LoginLabels {
                method: method.to_owned(),
            })
            .inc();
        debug!(method, ttl = auth.lease_duration, "logged in to Vault");
        self.token_from(&auth, auth.client_token.clone())
    }

    fn token_from(&self, auth: &AuthInfo, token: String) -> Result<Token> {
        let ttl = Duration::from_secs(auth.lease_duration);
        Ok(Token {
            api: Arc::new(self.connection.client(&token)?),
            expires: (auth.lease_duration > 0).then(|| Instant::now() + ttl),
            ttl,
            renewable: auth.renewable,
            revocable: true,
        })
    }

    async fn read(&self, key: &SecretKey) -> Result<String> {
        let bytes = self
            .credentials
            .secret_key(&key.namespace, &key.name, &key.key)
            .await?;
        String::from_utf8(bytes).map_err(|_| Error::Credentials {
            reference: format!("Secret {}/{}", key.namespace, key.name),
            reason: format!("key {:?} is not UTF-8", key.key),
        })
    }

    async fn jwt(&self, jwt: &Jwt) -> Result<String> {
        match jwt {
            Jwt::Secret(key) => Ok(self.read(key).await?.trim().to_owned()),
            Jwt::ServiceAccount {
                namespace,
                name,
                audiences,
            } => {
                self.credentials
                    .service_account_token(namespace, name, audiences)
                    .await
            }
        }
    }
}
