//! Parameter Store as ESO reads and writes it (`providers/v1/aws/parameterstore`).

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_ssm::Client;
use aws_sdk_ssm::error::ProvideErrorMetadata;
use aws_sdk_ssm::types::{
    ParameterStringFilter, ParameterTier, ParameterType, ResourceTypeForTagging, Tag,
};
use base64::Engine;
use provider::json_path;
use provider::{
    Error, FindRequest, PushRemoteRef, PushRequest, RemoteRef, Result, SecretsClient, Validation,
};
use regex::Regex;

use crate::auth::eso_endpoint;
use crate::calls::{Calls, CountCalls};
use crate::errors::sdk_error;
use crate::push_metadata::{self, ParameterStoreSpec};
use crate::secrets_manager::{name_matcher, validate};
use crate::spec::Checked;

const SERVICE: &str = "SSM";
const DEFAULT_KMS_KEY: &str = "alias/aws/ssm";

pub(crate) struct ParameterStore {
    /// `None` for a referent cluster store checked on its own.
    client: Option<(Client, SdkConfig)>,
    spec: Checked,
}

fn not_found(code: Option<&str>) -> bool {
    matches!(
        code,
        Some("ParameterNotFound" | "ParameterVersionNotFound" | "ResourceNotFoundException")
    )
}

impl ParameterStore {
    pub(crate) fn new(config: Option<&SdkConfig>, spec: Checked, calls: Calls) -> Self {
        let client = config.map(|config| {
            let mut builder =
                aws_sdk_ssm::config::Builder::from(config).interceptor(CountCalls::new(calls));
            if let Some(url) = eso_endpoint("AWS_SSM_ENDPOINT") {
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

    /// The decrypted value of `name` (`name:version` for a version), `None` when absent.
    async fn value(&self, name: &str) -> Result<Option<String>> {
        match self
            .client()?
            .get_parameter()
            .name(name)
            .with_decryption(true)
            .send()
            .await
        {
            Ok(out) => Ok(out.parameter().and_then(|p| p.value()).map(str::to_owned)),
            Err(e) if e.as_service_error().is_some_and(|s| not_found(s.code())) => Ok(None),
            Err(e) => Err(sdk_error(SERVICE, "GetParameter", e)),
        }
    }

    async fn tags(&self, name: &str) -> Result<BTreeMap<String, String>> {
        let out = self
            .client()?
            .list_tags_for_resource()
            .resource_type(ResourceTypeForTagging::Parameter)
            .resource_id(name)
            .send()
            .await;
        match out {
            Ok(out) => Ok(out
                .tag_list()
                .iter()
                .map(|t| (t.key().to_owned(), t.value().to_owned()))
                .collect()),
            Err(e) if e.as_service_error().is_some_and(|s| not_found(s.code())) => {
                Err(Error::NoSecret)
            }
            Err(e) => Err(sdk_error(SERVICE, "ListTagsForResource", e)),
        }
    }

    /// Every parameter under `path` whose name `matcher` accepts, values decrypted.
    async fn by_path(&self, path: &str, matcher: &Regex) -> Result<BTreeMap<String, Vec<u8>>> {
        let mut found = BTreeMap::new();
        let mut next = None;
        loop {
            let page = self
                .client()?
                .get_parameters_by_path()
                .path(path)
                .recursive(true)
                .with_decryption(true)
                .set_next_token(next)
                .send()
                .await;
            let page = match page {
                Ok(page) => page,
                // ESO's fallback for a role allowed DescribeParameters only.
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|s| s.code() == Some("AccessDeniedException")) =>
                {
                    return self
                        .described(vec![path_filter(path)?], Some(matcher))
                        .await;
                }
                Err(e) => return Err(sdk_error(SERVICE, "GetParametersByPath", e)),
            };
            for p in page.parameters() {
                if let (Some(name), Some(value)) = (p.name(), p.value())
                    && matcher.is_match(name)
                {
                    found.insert(name.to_owned(), value.as_bytes().to_vec());
                }
            }
            next = page.next_token().map(str::to_owned);
            if next.is_none() {
                return Ok(found);
            }
        }
    }

    /// Every parameter the filters describe (and `matcher` accepts), each read on its own.
    async fn described(
        &self,
        filters: Vec<ParameterStringFilter>,
        matcher: Option<&Regex>,
    ) -> Result<BTreeMap<String, Vec<u8>>> {
        let mut found = BTreeMap::new();
        let mut next = None;
        loop {
            let page = self
                .client()?
                .describe_parameters()
                .set_parameter_filters(Some(filters.clone()))
                .set_next_token(next)
                .send()
                .await
                .map_err(|e| sdk_error(SERVICE, "DescribeParameters", e))?;
            for p in page.parameters() {
                let Some(name) = p.name() else { continue };
                if matcher.is_some_and(|m| !m.is_match(name)) {
                    continue;
                }
                if let Some(value) = self.value(name).await? {
                    found.insert(name.to_owned(), value.into_bytes());
                }
            }
            next = page.next_token().map(str::to_owned);
            if next.is_none() {
                return Ok(found);
            }
        }
    }

    async fn sync_tags(&self, name: &str, wanted: &BTreeMap<String, String>) -> Result<()> {
        let current = self.tags(name).await?;
        let (remove, set) = push_metadata::tag_changes(&current, wanted);
        if !remove.is_empty() {
            self.client()?
                .remove_tags_from_resource()
                .resource_type(ResourceTypeForTagging::Parameter)
                .resource_id(name)
                .set_tag_keys(Some(remove))
                .send()
                .await
                .map_err(|e| sdk_error(SERVICE, "RemoveTagsFromResource", e))?;
        }
        if let Some(set) = set {
            self.client()?
                .add_tags_to_resource()
                .resource_type(ResourceTypeForTagging::Parameter)
                .resource_id(name)
                .set_tags(Some(ssm_tags(&set)?))
                .send()
                .await
                .map_err(|e| sdk_error(SERVICE, "AddTagsToResource", e))?;
        }
        Ok(())
    }
}

fn ssm_tags(tags: &BTreeMap<String, String>) -> Result<Vec<Tag>> {
    tags.iter()
        .map(|(k, v)| {
            Tag::builder()
                .key(k)
                .value(v)
                .build()
                .map_err(|e| Error::InvalidSpec(format!("metadata.spec.tags: {e}")))
        })
        .collect()
}

fn string_filter(key: String, option: &str, value: &str) -> Result<ParameterStringFilter> {
    ParameterStringFilter::builder()
        .key(key)
        .option(option)
        .values(value)
        .build()
        .map_err(|e| Error::InvalidSpec(format!("find: {e}")))
}

fn path_filter(path: &str) -> Result<ParameterStringFilter> {
    string_filter("Path".into(), "Recursive", path)
}

/// The value a push writes: one key's bytes as text, or the whole Secret as a JSON object whose
/// values are base64 (ESO's default) or, with `encodeAsDecoded`, the text itself.
fn pushed_value(push: &PushRequest, meta: &ParameterStoreSpec) -> Result<String> {
    let value = if push.secret_key.is_none() && !meta.encode_as_decoded {
        let entries: serde_json::Map<String, serde_json::Value> =
            provider::whole_secret_entries(&push.value)
                .into_iter()
                .map(|(k, v)| {
                    let encoded = base64::engine::general_purpose::STANDARD.encode(v);
                    (k, serde_json::Value::String(encoded))
                })
                .collect();
        serde_json::Value::Object(entries).to_string().into_bytes()
    } else {
        push.value.clone()
    };
    String::from_utf8(value).map_err(|_| {
        Error::InvalidSpec(format!(
            "Parameter Store holds text, and the value pushed to {} is not UTF-8",
            push.remote.remote_key
        ))
    })
}

/// PutParameter's settings from the metadata, with ESO's defaults.
struct Settings {
    type_: ParameterType,
    kms_key_id: Option<String>,
    tier: Option<(ParameterTier, Option<String>)>,
    description: String,
    tags: BTreeMap<String, String>,
}

fn settings(meta: &ParameterStoreSpec) -> Result<Settings> {
    let type_ = match meta.secret_type.as_deref() {
        None | Some("" | "String") => ParameterType::String,
        Some("StringList") => ParameterType::StringList,
        Some("SecureString") => ParameterType::SecureString,
        Some(other) => {
            return Err(Error::InvalidSpec(format!(
                "metadata.spec.secretType: {other:?} is not String, StringList or SecureString"
            )));
        }
    };
    let kms_key_id = (type_ == ParameterType::SecureString).then(|| {
        meta.kms_key_id
            .clone()
            .filter(|k| !k.is_empty())
            .unwrap_or_else(|| DEFAULT_KMS_KEY.to_owned())
    });
    let tier = match meta.tier.as_ref().and_then(|t| t.type_.as_deref()) {
        None | Some("" | "Standard") => None,
        Some("Advanced") => {
            let policies = meta
                .tier
                .as_ref()
                .and_then(|t| t.policies.as_ref())
                .map(serde_json::Value::to_string);
            Some((ParameterTier::Advanced, policies))
        }
        Some("Intelligent-Tiering") => Some((ParameterTier::IntelligentTiering, None)),
        Some(other) => {
            return Err(Error::InvalidSpec(format!(
                "metadata.spec.tier.type: {other:?} is not Standard, Advanced or Intelligent-Tiering"
            )));
        }
    };
    Ok(Settings {
        type_,
        kms_key_id,
        tier,
        description: push_metadata::description(meta.description.as_deref()),
        tags: push_metadata::tags_with_marker(&meta.tags)?,
    })
}

#[async_trait]
impl SecretsClient for ParameterStore {
    async fn get_secret(&self, remote: &RemoteRef) -> Result<Vec<u8>> {
        let name = self.name(&remote.key);
        let document = if remote.fetch_metadata {
            serde_json::to_string(&self.tags(&name).await?).expect("strings serialize")
        } else {
            let versioned = match remote.version.as_deref().filter(|v| !v.is_empty()) {
                Some(v) => format!("{name}:{v}"),
                None => name,
            };
            self.value(&versioned).await?.ok_or(Error::NoSecret)?
        };
        let Some(property) = remote.property.as_deref().filter(|p| !p.is_empty()) else {
            return Ok(document.into_bytes());
        };
        json_path::key_or_property(&document, property).ok_or_else(|| {
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
        if let Some(matcher) = name_matcher(find)? {
            return self
                .by_path(find.path.as_deref().unwrap_or("/"), &matcher)
                .await;
        }
        if find.tags.is_empty() {
            return Err(Error::InvalidSpec(
                "find needs name or tags for Parameter Store".into(),
            ));
        }
        let mut filters = find
            .tags
            .iter()
            .map(|(k, v)| string_filter(format!("tag:{k}"), "Equals", v))
            .collect::<Result<Vec<_>>>()?;
        if let Some(path) = &find.path {
            filters.push(path_filter(path)?);
        }
        self.described(filters, None).await
    }

    async fn push_secret(&self, push: &PushRequest) -> Result<()> {
        if let Some(property) = push.remote.property.as_deref().filter(|p| !p.is_empty()) {
            return Err(Error::InvalidSpec(format!(
                "remoteRef.property {property:?}: Parameter Store pushes whole values, as ESO does"
            )));
        }
        let meta: ParameterStoreSpec = push_metadata::parse(push.metadata.as_ref())?;
        let settings = settings(&meta)?;
        let value = pushed_value(push, &meta)?;
        let name = self.name(&push.remote.remote_key);
        let existing = self.value(&name).await?;
        let mut request = self
            .client()?
            .put_parameter()
            .name(&name)
            .value(&value)
            .r#type(settings.type_.clone())
            .description(&settings.description)
            .set_key_id(settings.kms_key_id.clone());
        if let Some((tier, policies)) = &settings.tier {
            request = request.tier(tier.clone()).set_policies(policies.clone());
        }
        let Some(existing) = existing else {
            request
                .overwrite(false)
                .set_tags(Some(ssm_tags(&settings.tags)?))
                .send()
                .await
                .map_err(|e| sdk_error(SERVICE, "PutParameter", e))?;
            return Ok(());
        };
        if !push_metadata::is_managed(&self.tags(&name).await?) {
            return Err(Error::Conflict(format!(
                "parameter {name} is not managed by external-secrets (it has no managed-by: external-secrets tag)"
            )));
        }
        if existing != value {
            request
                .overwrite(true)
                .send()
                .await
                .map_err(|e| sdk_error(SERVICE, "PutParameter", e))?;
        }
        self.sync_tags(&name, &settings.tags).await
    }

    async fn delete_secret(&self, remote: &PushRemoteRef) -> Result<()> {
        let name = self.name(&remote.remote_key);
        if self.value(&name).await?.is_none() {
            return Ok(());
        }
        // Not ours: as far as this PushSecret goes it is gone (ESO's rule).
        match self.tags(&name).await {
            Ok(tags) if push_metadata::is_managed(&tags) => {}
            Ok(_) | Err(Error::NoSecret) => return Ok(()),
            Err(e) => return Err(e),
        }
        match self.client()?.delete_parameter().name(&name).send().await {
            Ok(_) => Ok(()),
            Err(e) if e.as_service_error().is_some_and(|s| not_found(s.code())) => Ok(()),
            Err(e) => Err(sdk_error(SERVICE, "DeleteParameter", e)),
        }
    }

    async fn secret_exists(&self, remote: &PushRemoteRef) -> Result<bool> {
        Ok(self.value(&self.name(&remote.remote_key)).await?.is_some())
    }

    async fn validate(&self) -> Result<Validation> {
        validate(self.client.as_ref().map(|(_, c)| c)).await
    }

    async fn close(&self) -> Result<()> {
        Ok(())
    }
}
