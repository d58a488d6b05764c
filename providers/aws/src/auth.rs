//! Credentials as ESO gets them (`providers/v1/aws/auth`): a ServiceAccount's token exchanged
//! with `AssumeRoleWithWebIdentity` (IRSA), else static keys from a Secret, else the SDK's
//! default chain (the pod's own); then each of `additionalRoles` and `role` assumed in turn with
//! the credentials before it. Whatever the chain, its result is kept until five minutes before
//! it expires ([`Held`]), so one client assumes its roles once per session, not once per call.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use api::meta::SecretKeySelector;
use api::providers::aws::{AwsProvider, AwsTag};
use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_credential_types::Credentials;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider, future};
use provider::{CredentialsReader, Error, Result};

use crate::calls::{Calls, CountCalls};
use crate::errors::sdk_error;

/// IRSA's annotations on the ServiceAccount, as EKS reads them.
const ROLE_ARN_ANNOTATION: &str = "eks.amazonaws.com/role-arn";
const AUDIENCE_ANNOTATION: &str = "eks.amazonaws.com/audience";
const DEFAULT_AUDIENCE: &str = "sts.amazonaws.com";
/// The session name ESO gives web-identity sessions; used for every session we open.
const SESSION_NAME: &str = "external-secrets-provider-aws";
/// Credentials are renewed this long before they expire, so a call never carries stale ones.
const RENEW_BEFORE_EXPIRY: Duration = Duration::from_secs(5 * 60);
/// Attempts per call, throttling included; the SDK waits with jittered exponential backoff.
const MAX_ATTEMPTS: u32 = 5;

/// The SDK configuration of one client: region, retries, counted calls, and the credentials
/// chain the spec asks for.
pub(crate) async fn sdk_config(
    spec: &AwsProvider,
    reader: Arc<dyn CredentialsReader>,
    calls: Calls,
) -> Result<SdkConfig> {
    let region = Region::new(spec.region.clone());
    let auth = spec.auth.clone().unwrap_or_default();
    let base: Option<SharedCredentialsProvider> = if let Some(jwt) = &auth.jwt {
        let account = jwt
            .service_account_ref
            .as_ref()
            .ok_or_else(|| Error::InvalidSpec("auth.jwt.serviceAccountRef is required".into()))?;
        let namespace = account.namespace.clone().unwrap_or_default();
        let annotations = reader
            .service_account_annotations(&namespace, &account.name)
            .await?;
        let role_arn = annotations
            .get(ROLE_ARN_ANNOTATION)
            .filter(|r| !r.is_empty())
            .ok_or_else(|| Error::Credentials {
                reference: format!("ServiceAccount {namespace}/{}", account.name),
                reason: format!(
                    "an IAM role must be named by its {ROLE_ARN_ANNOTATION} annotation"
                ),
            })?
            .clone();
        let mut audiences = vec![audience(&annotations)];
        audiences.extend(account.audiences.iter().flatten().cloned());
        // The exchange itself is not signed: it needs no credentials, only a token.
        let sts = sts_client(&loader(&region).no_credentials().load().await, &calls);
        Some(SharedCredentialsProvider::new(WebIdentity {
            sts,
            reader,
            namespace,
            account: account.name.clone(),
            audiences,
            role_arn,
        }))
    } else if let Some(keys) = &auth.secret_ref {
        let access_key =
            read_key(reader.as_ref(), &keys.access_key_id, "accessKeyIDSecretRef").await?;
        let secret_key = read_key(
            reader.as_ref(),
            &keys.secret_access_key,
            "secretAccessKeySecretRef",
        )
        .await?;
        let token = match &keys.session_token {
            Some(t) => Some(read_key(reader.as_ref(), t, "sessionTokenSecretRef").await?),
            None => None,
        };
        Some(SharedCredentialsProvider::new(Credentials::new(
            access_key,
            secret_key,
            token,
            None,
            "secretRef",
        )))
    } else {
        None
    };
    let mut credentials = match base {
        Some(p) => p,
        None => loader(&region)
            .load()
            .await
            .credentials_provider()
            .ok_or_else(|| Error::Backend("the SDK's default credentials chain is empty".into()))?,
    };
    let chain = spec
        .additional_roles
        .iter()
        .flatten()
        .map(|r| (r.clone(), false))
        .chain(
            spec.role
                .iter()
                .filter(|r| !r.is_empty())
                .map(|r| (r.clone(), true)),
        );
    for (role_arn, is_last) in chain {
        let before = loader(&region)
            .credentials_provider(Held::new(credentials))
            .load()
            .await;
        let session = if is_last {
            SessionOptions::from_spec(spec)
        } else {
            SessionOptions::default()
        };
        credentials = SharedCredentialsProvider::new(AssumeRole {
            sts: sts_client(&before, &calls),
            role_arn,
            session,
        });
    }
    Ok(loader(&region)
        .credentials_provider(Held::new(credentials))
        .load()
        .await)
}

fn loader(region: &Region) -> aws_config::ConfigLoader {
    aws_config::defaults(BehaviorVersion::latest())
        .region(region.clone())
        .retry_config(RetryConfig::standard().with_max_attempts(MAX_ATTEMPTS))
        // [`Held`] is the one cache, shared by validation and every call.
        .identity_cache(aws_config::identity::IdentityCache::no_cache())
}

/// An STS client, at ESO's `AWS_STS_ENDPOINT` when it is set.
fn sts_client(config: &SdkConfig, calls: &Calls) -> aws_sdk_sts::Client {
    let mut builder =
        aws_sdk_sts::config::Builder::from(config).interceptor(CountCalls::new(calls.clone()));
    if let Some(url) = eso_endpoint("AWS_STS_ENDPOINT") {
        builder = builder.endpoint_url(url);
    }
    aws_sdk_sts::Client::from_conf(builder.build())
}

/// ESO's endpoint variable for a service, when set: it wins over the SDK's own, as in ESO.
pub(crate) fn eso_endpoint(variable: &str) -> Option<String> {
    std::env::var(variable).ok().filter(|v| !v.is_empty())
}

fn audience(annotations: &BTreeMap<String, String>) -> String {
    annotations
        .get(AUDIENCE_ANNOTATION)
        .filter(|a| !a.is_empty())
        .cloned()
        .unwrap_or_else(|| DEFAULT_AUDIENCE.to_owned())
}

async fn read_key(
    reader: &dyn CredentialsReader,
    selector: &SecretKeySelector,
    field: &str,
) -> Result<String> {
    let namespace = selector.namespace.as_deref().unwrap_or_default();
    let name = selector.name.as_deref().unwrap_or_default();
    let key = selector.key.as_deref().unwrap_or_default();
    let bytes = reader.secret_key(namespace, name, key).await?;
    let text = String::from_utf8(bytes).map_err(|_| Error::Credentials {
        reference: format!("Secret {namespace}/{name}"),
        reason: format!("key {key:?} (auth.secretRef.{field}) is not UTF-8 text"),
    })?;
    // Keys pasted with a trailing newline are the common mistake; AWS never has whitespace.
    let text = text.trim();
    if text.is_empty() {
        return Err(Error::Credentials {
            reference: format!("Secret {namespace}/{name}"),
            reason: format!("key {key:?} (auth.secretRef.{field}) is empty"),
        });
    }
    Ok(text.to_owned())
}

/// Keeps what the provider inside gives until [`RENEW_BEFORE_EXPIRY`] before it expires.
/// Concurrent callers wait for one fetch.
#[derive(Debug)]
pub(crate) struct Held {
    inner: SharedCredentialsProvider,
    held: tokio::sync::Mutex<Option<Credentials>>,
}

impl Held {
    pub(crate) fn new(inner: SharedCredentialsProvider) -> Self {
        Self {
            inner,
            held: tokio::sync::Mutex::new(None),
        }
    }

    async fn get(&self) -> Result<Credentials, CredentialsError> {
        let mut held = self.held.lock().await;
        if let Some(c) = held.as_ref()
            && c.expiry()
                .is_none_or(|e| e > SystemTime::now() + RENEW_BEFORE_EXPIRY)
        {
            return Ok(c.clone());
        }
        let fresh = self.inner.provide_credentials().await?;
        *held = Some(fresh.clone());
        Ok(fresh)
    }
}

impl ProvideCredentials for Held {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(self.get())
    }
}

/// `externalID` and session tags, which ESO sets when assuming `role` only.
#[derive(Clone, Debug, Default)]
struct SessionOptions {
    external_id: Option<String>,
    tags: Vec<AwsTag>,
    transitive_tag_keys: Vec<String>,
}

impl SessionOptions {
    fn from_spec(spec: &AwsProvider) -> Self {
        Self {
            external_id: spec.external_id.clone().filter(|e| !e.is_empty()),
            tags: spec.session_tags.clone().unwrap_or_default(),
            transitive_tag_keys: spec.transitive_tag_keys.clone().unwrap_or_default(),
        }
    }
}

#[derive(Debug)]
struct AssumeRole {
    sts: aws_sdk_sts::Client,
    role_arn: String,
    session: SessionOptions,
}

impl AssumeRole {
    async fn assume(&self) -> Result<Credentials, CredentialsError> {
        let mut request = self
            .sts
            .assume_role()
            .role_arn(&self.role_arn)
            .role_session_name(SESSION_NAME)
            .set_external_id(self.session.external_id.clone());
        for tag in &self.session.tags {
            let tag = aws_sdk_sts::types::Tag::builder()
                .key(&tag.key)
                .value(&tag.value)
                .build()
                .map_err(CredentialsError::invalid_configuration)?;
            request = request.tags(tag);
        }
        for key in &self.session.transitive_tag_keys {
            request = request.transitive_tag_keys(key);
        }
        let answer = request.send().await.map_err(|e| {
            CredentialsError::provider_error(format!(
                "assuming role {}: {}",
                self.role_arn,
                sdk_error("STS", "AssumeRole", e)
            ))
        })?;
        session_credentials(answer.credentials(), "AssumeRole")
    }
}

impl ProvideCredentials for AssumeRole {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(self.assume())
    }
}

/// IRSA: a fresh token of the ServiceAccount for each exchange, as a projected token would be.
struct WebIdentity {
    sts: aws_sdk_sts::Client,
    reader: Arc<dyn CredentialsReader>,
    namespace: String,
    account: String,
    audiences: Vec<String>,
    role_arn: String,
}

impl std::fmt::Debug for WebIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebIdentity")
            .field("account", &format!("{}/{}", self.namespace, self.account))
            .field("role_arn", &self.role_arn)
            .finish_non_exhaustive()
    }
}

impl WebIdentity {
    async fn exchange(&self) -> Result<Credentials, CredentialsError> {
        let token = self
            .reader
            .service_account_token(&self.namespace, &self.account, &self.audiences)
            .await
            .map_err(CredentialsError::provider_error)?;
        let answer = self
            .sts
            .assume_role_with_web_identity()
            .role_arn(&self.role_arn)
            .role_session_name(SESSION_NAME)
            .web_identity_token(token)
            .send()
            .await
            .map_err(|e| {
                CredentialsError::provider_error(format!(
                    "assuming role {} as ServiceAccount {}/{}: {}",
                    self.role_arn,
                    self.namespace,
                    self.account,
                    sdk_error("STS", "AssumeRoleWithWebIdentity", e)
                ))
            })?;
        session_credentials(answer.credentials(), "AssumeRoleWithWebIdentity")
    }
}

impl ProvideCredentials for WebIdentity {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(self.exchange())
    }
}

fn session_credentials(
    credentials: Option<&aws_sdk_sts::types::Credentials>,
    call: &'static str,
) -> Result<Credentials, CredentialsError> {
    let c = credentials.ok_or_else(|| {
        CredentialsError::unhandled(format!("STS {call} answered without credentials"))
    })?;
    let expiry = SystemTime::try_from(*c.expiration()).map_err(CredentialsError::unhandled)?;
    Ok(Credentials::new(
        c.access_key_id(),
        c.secret_access_key(),
        Some(c.session_token().to_owned()),
        Some(expiry),
        call,
    ))
}
