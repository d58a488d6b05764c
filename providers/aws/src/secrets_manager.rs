//! Secrets Manager as ESO reads and writes it (`providers/v1/aws/secretsmanager`).

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_credential_types::provider::ProvideCredentials;
use aws_sdk_secretsmanager::Client;
use aws_sdk_secretsmanager::error::ProvideErrorMetadata;
use aws_sdk_secretsmanager::primitives::Blob;
use aws_sdk_secretsmanager::types::{Filter, FilterNameStringType, Tag};
use provider::json_path;
use provider::{
    Error, FindRequest, PushRemoteRef, PushRequest, RemoteRef, Result, SecretsClient, Validation,
};
use regex::Regex;

use crate::auth::eso_endpoint;
use crate::calls::{Calls, CountCalls};
use crate::errors::sdk_error;
use crate::push_metadata::{self, SecretsManagerSpec};
use crate::spec::Checked;

const SERVICE: &str = "SecretsManager";
/// The version ESO gives a secret it creates, so `version: uuid/00000000-…-000000000001` names
/// the first value it pushed.
const INITIAL_VERSION: &str = "00000000-0000-0000-0000-000000000001";
const DEFAULT_KMS_KEY: &str = "alias/aws/secretsmanager";

pub(crate) struct SecretsManager {
    /// `None` for a referent cluster store checked on its own.
    client: Option<(Client, SdkConfig)>,
    spec: Checked,
}

/// What a read returns: a secret's value as AWS holds it.
enum Value {
    Text(String),
    Binary(Vec<u8>),
}

impl Value {
    fn bytes(&self) -> &[u8] {
        match self {
            Self::Text(t) => t.as_bytes(),
            Self::Binary(b) => b,
        }
    }
}

fn not_found(code: Option<&str>, message: Option<&str>) -> bool {
    code == Some("ResourceNotFoundException")
        // A secret scheduled for deletion reads as absent, as in ESO.
        || message.is_some_and(|m| m.contains("marked for deletion"))
}

impl SecretsManager {
    pub(crate) fn new(config: Option<&SdkConfig>, spec: Checked, calls: Calls) -> Self {
        let client = config.map(|config| {
            let mut builder = aws_sdk_secretsmanager::config::Builder::from(config)
                .interceptor(CountCalls::new(calls));
            if let Some(url) = eso_endpoint("AWS_SECRETSMANAGER_ENDPOINT") {
                builder = builder.endpoint_url(url);
            }
            (Client::from_conf(builder.build()), config.clone())
        });
        Self { client, spec }
    }

    fn client(&self) -> Result<&Client> {
        self.client
            .as_ref()
            .map(|(c, _)| c)
            .ok_or_else(crate::no_namespace_yet)
    }

    fn name(&self, key: &str) -> String {
        format!("{}{key}", self.spec.prefix)
    }

    /// A secret's value at `version` (`uuid/<id>` or a stage; AWSCURRENT by default), or
    /// `None` when there is no such secret.
    async fn value(&self, name: &str, version: Option<&str>) -> Result<Option<Value>> {
        let mut request = self.client()?.get_secret_value().secret_id(name);
        request = match version.filter(|v| !v.is_empty()) {
            Some(v) => match v.strip_prefix("uuid/") {
                Some(id) => request.version_id(id),
                None => request.version_stage(v),
            },
            None => request.version_stage("AWSCURRENT"),
        };
        match request.send().await {
            Ok(out) => {
                if let Some(text) = out.secret_string() {
                    return Ok(Some(Value::Text(text.to_owned())));
                }
                if let Some(binary) = out.secret_binary() {
                    return Ok(Some(Value::Binary(binary.as_ref().to_vec())));
                }
                Err(Error::Backend(format!(
                    "invalid secret received: {name} has neither a string nor a binary value"
                )))
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| not_found(s.code(), s.message())) =>
            {
                Ok(None)
            }
            Err(e) => Err(sdk_error(SERVICE, "GetSecretValue", e)),
        }
    }

    /// The secret's tags, or `None` when there is no such secret.
    async fn describe(
        &self,
        name: &str,
    ) -> Result<Option<aws_sdk_secretsmanager::operation::describe_secret::DescribeSecretOutput>>
    {
        match self
            .client()?
            .describe_secret()
            .secret_id(name)
            .send()
            .await
        {
            Ok(out) => Ok(Some(out)),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| not_found(s.code(), s.message())) =>
            {
                Ok(None)
            }
            Err(e) => Err(sdk_error(SERVICE, "DescribeSecret", e)),
        }
    }

    /// The document `property` is read from: the value, or with `metadataPolicy: Fetch` the
    /// secret's tags as a JSON object.
    async fn document(&self, remote: &RemoteRef) -> Result<Value> {
        let name = self.name(&remote.key);
        if remote.fetch_metadata {
            let described = self.describe(&name).await?.ok_or(Error::NoSecret)?;
            let tags: BTreeMap<&str, &str> = described
                .tags()
                .iter()
                .map(|t| (t.key().unwrap_or_default(), t.value().unwrap_or_default()))
                .collect();
            return Ok(Value::Text(
                serde_json::to_string(&tags).expect("strings serialize"),
            ));
        }
        self.value(&name, remote.version.as_deref())
            .await?
            .ok_or(Error::NoSecret)
    }

    /// Every secret the filters list whose name `matcher` accepts, read in batches.
    async fn batch(
        &self,
        filters: Vec<Filter>,
        matcher: Option<&Regex>,
    ) -> Result<BTreeMap<String, Vec<u8>>> {
        let mut found = BTreeMap::new();
        let mut next = None;
        loop {
            let page = self
                .client()?
                .batch_get_secret_value()
                .set_filters(Some(filters.clone()))
                .set_next_token(next)
                .send()
                .await
                .map_err(|e| sdk_error(SERVICE, "BatchGetSecretValue", e))?;
            for entry in page.secret_values() {
                let Some(name) = entry.name() else { continue };
                if matcher.is_some_and(|m| !m.is_match(name)) {
                    continue;
                }
                if let Some(text) = entry.secret_string() {
                    found.insert(name.to_owned(), text.as_bytes().to_vec());
                } else if let Some(binary) = entry.secret_binary() {
                    found.insert(name.to_owned(), binary.as_ref().to_vec());
                }
            }
            next = page.next_token().map(str::to_owned);
            if next.is_none() {
                return Ok(found);
            }
        }
    }

    /// Every listed secret whose name `matcher` accepts, each read on its own (no path to
    /// batch by; ESO does the same).
    async fn list(
        &self,
        filters: Vec<Filter>,
        matcher: &Regex,
    ) -> Result<BTreeMap<String, Vec<u8>>> {
        let mut found = BTreeMap::new();
        let mut next = None;
        loop {
            let page = self
                .client()?
                .list_secrets()
                .set_filters(Some(filters.clone()))
                .set_next_token(next)
                .send()
                .await
                .map_err(|e| sdk_error(SERVICE, "ListSecrets", e))?;
            for entry in page.secret_list() {
                let Some(name) = entry.name().filter(|n| matcher.is_match(n)) else {
                    continue;
                };
                // A listed name is read as listed: the store's prefix is not added again.
                if let Some(value) = self.value(name, None).await? {
                    found.insert(name.to_owned(), value.bytes().to_vec());
                }
            }
            next = page.next_token().map(str::to_owned);
            if next.is_none() {
                return Ok(found);
            }
        }
    }

    async fn create(&self, name: &str, meta: &SecretsManagerSpec, value: Vec<u8>) -> Result<()> {
        let tags = push_metadata::tags_with_marker(&meta.tags)?;
        let mut request = self
            .client()?
            .create_secret()
            .name(name)
            .description(push_metadata::description(meta.description.as_deref()))
            .client_request_token(INITIAL_VERSION)
            .kms_key_id(
                meta.kms_key_id
                    .as_deref()
                    .filter(|k| !k.is_empty())
                    .unwrap_or(DEFAULT_KMS_KEY),
            )
            .set_tags(Some(sm_tags(&tags)));
        request = if as_string(meta)? {
            request.secret_string(text(value, name)?)
        } else {
            request.secret_binary(Blob::new(value))
        };
        request
            .send()
            .await
            .map_err(|e| sdk_error(SERVICE, "CreateSecret", e))?;
        Ok(())
    }

    /// ESO's tag update of a managed secret: only when the push names tags.
    async fn retag(&self, name: &str, current: &[Tag], meta: &SecretsManagerSpec) -> Result<()> {
        if meta.tags.is_empty() {
            return Ok(());
        }
        let wanted = push_metadata::tags_with_marker(&meta.tags)?;
        let current: BTreeMap<String, String> = current
            .iter()
            .map(|t| {
                (
                    t.key().unwrap_or_default().to_owned(),
                    t.value().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let (remove, set) = push_metadata::tag_changes(&current, &wanted);
        if !remove.is_empty() {
            self.client()?
                .untag_resource()
                .secret_id(name)
                .set_tag_keys(Some(remove))
                .send()
                .await
                .map_err(|e| sdk_error(SERVICE, "UntagResource", e))?;
        }
        if let Some(set) = set {
            self.client()?
                .tag_resource()
                .secret_id(name)
                .set_tags(Some(sm_tags(&set)))
                .send()
                .await
                .map_err(|e| sdk_error(SERVICE, "TagResource", e))?;
        }
        Ok(())
    }
}

fn sm_tags(tags: &BTreeMap<String, String>) -> Vec<Tag> {
    tags.iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

fn filter(key: FilterNameStringType, value: &str) -> Filter {
    Filter::builder().key(key).values(value).build()
}

/// `secretPushFormat`: `binary` (the default) or `string`.
fn as_string(meta: &SecretsManagerSpec) -> Result<bool> {
    match meta.secret_push_format.as_deref() {
        None | Some("" | "binary") => Ok(false),
        Some("string") => Ok(true),
        Some(other) => Err(Error::InvalidSpec(format!(
            "metadata.spec.secretPushFormat: {other:?} is not binary or string"
        ))),
    }
}

fn text(value: Vec<u8>, name: &str) -> Result<String> {
    String::from_utf8(value).map_err(|_| {
        Error::InvalidSpec(format!(
            "secretPushFormat string needs UTF-8 text, and the value pushed to {name} is not"
        ))
    })
}

/// What is refused in a push's metadata rather than ignored.
fn supported(meta: &SecretsManagerSpec) -> Result<()> {
    if meta.resource_policy.is_some() {
        return Err(Error::InvalidSpec(
            "metadata.spec.resourcePolicy is not supported by this operator".into(),
        ));
    }
    if meta
        .replication_locations
        .as_ref()
        .is_some_and(|r| !r.is_empty())
    {
        return Err(Error::InvalidSpec(
            "metadata.spec.replicationLocations is not supported by this operator".into(),
        ));
    }
    Ok(())
}

pub(crate) fn name_matcher(find: &FindRequest) -> Result<Option<Regex>> {
    find.name_regexp
        .as_deref()
        .map(|r| Regex::new(r).map_err(|e| Error::InvalidSpec(format!("find.name.regexp: {e}"))))
        .transpose()
}

#[async_trait]
impl SecretsClient for SecretsManager {
    async fn get_secret(&self, remote: &RemoteRef) -> Result<Vec<u8>> {
        let document = self.document(remote).await?;
        let Some(property) = remote.property.as_deref().filter(|p| !p.is_empty()) else {
            return Ok(document.bytes().to_vec());
        };
        let text = String::from_utf8_lossy(document.bytes());
        json_path::key_or_property(&text, property).ok_or_else(|| {
            Error::Backend(format!(
                "key {property} does not exist in secret {}",
                remote.key
            ))
        })
    }

    async fn get_secret_map(&self, remote: &RemoteRef) -> Result<BTreeMap<String, Vec<u8>>> {
        crate::as_map(&remote.key, &self.get_secret(remote).await?)
    }

    async fn get_all_secrets(&self, find: &FindRequest) -> Result<BTreeMap<String, Vec<u8>>> {
        let matcher = name_matcher(find)?;
        let mut filters: Vec<Filter> = find
            .tags
            .iter()
            .flat_map(|(k, v)| {
                [
                    filter(FilterNameStringType::TagKey, k),
                    filter(FilterNameStringType::TagValue, v),
                ]
            })
            .collect();
        match (&matcher, find.tags.is_empty()) {
            (None, true) => Err(Error::InvalidSpec(
                "find needs name or tags for Secrets Manager".into(),
            )),
            (Some(matcher), _) if find.path.is_none() => self.list(filters, matcher).await,
            _ => {
                if let Some(path) = &find.path {
                    filters.push(filter(FilterNameStringType::Name, path));
                }
                self.batch(filters, matcher.as_ref()).await
            }
        }
    }

    async fn push_secret(&self, push: &PushRequest) -> Result<()> {
        let meta: SecretsManagerSpec = push_metadata::parse(push.metadata.as_ref())?;
        supported(&meta)?;
        let string = as_string(&meta)?;
        let name = self.name(&push.remote.remote_key);
        let property = push.remote.property.as_deref().filter(|p| !p.is_empty());
        let with_property = |existing: Option<&str>| -> Result<Vec<u8>> {
            let Some(property) = property else {
                return Ok(push.value.clone());
            };
            let value = String::from_utf8(push.value.clone()).map_err(|_| {
                Error::InvalidSpec(format!("the value for property {property:?} is not UTF-8"))
            })?;
            json_path::set_property(existing, property, &value)
                .map(String::into_bytes)
                .map_err(|why| {
                    Error::Conflict(format!(
                        "PushSecret to {name} with a property requires a JSON secret: {why}"
                    ))
                })
        };
        let Some(described) = self.describe(&name).await? else {
            return self.create(&name, &meta, with_property(None)?).await;
        };
        let tags: BTreeMap<String, String> = described
            .tags()
            .iter()
            .map(|t| {
                (
                    t.key().unwrap_or_default().into(),
                    t.value().unwrap_or_default().into(),
                )
            })
            .collect();
        if !push_metadata::is_managed(&tags) {
            return Err(Error::Conflict(format!(
                "secret {name} is not managed by external-secrets (it has no managed-by: external-secrets tag)"
            )));
        }
        let existing = match described.version_ids_to_stages() {
            Some(versions) if !versions.is_empty() => self.value(&name, None).await?,
            _ => None,
        };
        let value = match &existing {
            Some(v) => with_property(Some(&String::from_utf8_lossy(v.bytes())))?,
            None => with_property(None)?,
        };
        self.retag(&name, described.tags(), &meta).await?;
        if existing
            .as_ref()
            .is_some_and(|e| e.bytes() == value.as_slice())
        {
            return Ok(());
        }
        let mut request = self.client()?.put_secret_value().secret_id(&name);
        if existing.is_none() {
            request = request.client_request_token(INITIAL_VERSION);
        }
        request = if string {
            request.secret_string(text(value, &name)?)
        } else {
            request.secret_binary(Blob::new(value))
        };
        request
            .send()
            .await
            .map_err(|e| sdk_error(SERVICE, "PutSecretValue", e))?;
        Ok(())
    }

    async fn delete_secret(&self, remote: &PushRemoteRef) -> Result<()> {
        let name = self.name(&remote.remote_key);
        if self.value(&name, None).await?.is_none() {
            return Ok(());
        }
        let Some(described) = self.describe(&name).await? else {
            return Ok(());
        };
        let managed = described.tags().iter().any(|t| {
            t.key() == Some(push_metadata::MANAGED_BY.0)
                && t.value() == Some(push_metadata::MANAGED_BY.1)
        });
        // Not ours: as far as this PushSecret goes it is gone (ESO's rule).
        if !managed {
            return Ok(());
        }
        let deletion = self.spec.deletion;
        let mut request = self
            .client()?
            .delete_secret()
            .secret_id(described.arn().unwrap_or(&name));
        if deletion.force_without_recovery {
            request = request.force_delete_without_recovery(true);
        }
        if let Some(days) = deletion.recovery_window_in_days {
            request = request.recovery_window_in_days(days);
        }
        match request.send().await {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| not_found(s.code(), s.message())) =>
            {
                Ok(())
            }
            Err(e) => Err(sdk_error(SERVICE, "DeleteSecret", e)),
        }
    }

    async fn secret_exists(&self, remote: &PushRemoteRef) -> Result<bool> {
        Ok(self
            .value(&self.name(&remote.remote_key), None)
            .await?
            .is_some())
    }

    async fn validate(&self) -> Result<Validation> {
        validate(self.client.as_ref().map(|(_, c)| c)).await
    }

    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

/// ESO's check: credentials can be had (for a role, one AssumeRole, kept for the calls after).
pub(crate) async fn validate(config: Option<&SdkConfig>) -> Result<Validation> {
    let Some(config) = config else {
        return Ok(Validation::Unknown);
    };
    let provider = config
        .credentials_provider()
        .ok_or_else(|| Error::Backend("no credentials provider".into()))?;
    provider
        .provide_credentials()
        .await
        .map_err(|e| Error::Credentials {
            reference: "auth".into(),
            reason: aws_sdk_secretsmanager::error::DisplayErrorContext(e).to_string(),
        })?;
    Ok(Validation::Ready)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use aws_config::{BehaviorVersion, Region};
    use aws_credential_types::Credentials;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::calls::CallLabels;
    use crate::spec::{Deletion, Service};

    /// Answers each request on its own connection: `ThrottlingException` for the first
    /// `throttle` requests, then a secret. moto never throttles; AWS does.
    async fn throttling_endpoint(throttle: usize) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = seen.clone();
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let n = counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut request = vec![0; 65536];
                    let _ = socket.read(&mut request).await;
                    let (status, body) = if n < throttle {
                        (
                            "400 Bad Request\r\nx-amzn-ErrorType: ThrottlingException",
                            r#"{"__type":"ThrottlingException","message":"Rate exceeded"}"#,
                        )
                    } else {
                        ("200 OK", r#"{"Name":"s","SecretString":"after the storm"}"#)
                    };
                    let answer = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/x-amz-json-1.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(answer.as_bytes()).await;
                });
            }
        });
        (url, seen)
    }

    #[tokio::test]
    async fn throttled_calls_are_retried_with_backoff_and_counted() {
        let (url, seen) = throttling_endpoint(2).await;
        let config = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new("eu-central-1"))
            .endpoint_url(url)
            .credentials_provider(Credentials::new("a", "b", None, None, "test"))
            .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(5))
            .load()
            .await;
        let calls = Calls::default();
        let spec = Checked {
            service: Service::SecretsManager,
            prefix: String::new(),
            deletion: Deletion::default(),
        };
        let sm = SecretsManager::new(Some(&config), spec, calls.clone());
        let value = sm
            .get_secret(&RemoteRef {
                key: "s".into(),
                ..RemoteRef::default()
            })
            .await;
        assert_eq!(value.unwrap(), b"after the storm");
        assert_eq!(seen.load(Ordering::SeqCst), 3);
        let count = |status: &str| {
            calls
                .get_or_create(&CallLabels {
                    service: "Secrets Manager".into(),
                    call: "GetSecretValue".into(),
                    status: status.into(),
                })
                .get()
        };
        assert_eq!(
            (count("throttled"), count("success"), count("error")),
            (2, 1, 0)
        );
    }
}
