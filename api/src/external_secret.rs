//! ExternalSecret (`external-secrets.io/v1`), field for field as ESO serves it, so ESO manifests
//! apply unchanged and survive a read-modify-write through these types.
//!
//! Optional fields are `Option`s without serde defaults: a manifest comes back out exactly as it
//! went in, and the schema defaults (applied by the API server) are the only place defaults live.
//!
//! ESO enforces its admission rules in a validating webhook (`externalsecret_validator.go`); here
//! they are CEL rules in the CRD, so they hold without a webhook deployment.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_derive::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;
use crate::meta::{DATA_KEY_PATTERN, DNS_SUBDOMAIN_PATTERN};

/// Annotation on a managed Secret: hash of its data, so a hand edit is detected and reverted.
pub const ANNOTATION_DATA_HASH: &str = "reconcile.external-secrets.io/data-hash";
/// Annotation mirrored from a ClusterExternalSecret; any change forces a refresh.
pub const ANNOTATION_FORCE_SYNC: &str = "external-secrets.io/force-sync";
/// Label on every Secret an ExternalSecret manages (value `true`).
pub const LABEL_MANAGED: &str = "reconcile.external-secrets.io/managed";
/// Label on Secrets created with creationPolicy Owner, pointing back at the owner.
pub const LABEL_CREATED_BY: &str = "reconcile.external-secrets.io/created-by";
/// ESO's finalizer name, kept so an operator swap does not strand objects.
pub const FINALIZER: &str = "externalsecrets.external-secrets.io/externalsecret-cleanup";

/// Condition reasons ESO reports; dashboards and alerts match on them.
pub mod reason {
    pub const SECRET_SYNCED: &str = "SecretSynced";
    pub const SECRET_SYNCED_ERROR: &str = "SecretSyncedError";
    pub const SECRET_DELETED: &str = "SecretDeleted";
    pub const SECRET_MISSING: &str = "SecretMissing";
    /// The same four for a generic target (`spec.target.manifest`).
    pub const RESOURCE_SYNCED: &str = "ResourceSynced";
    pub const RESOURCE_SYNCED_ERROR: &str = "ResourceSyncedError";
    pub const RESOURCE_DELETED: &str = "ResourceDeleted";
    pub const RESOURCE_MISSING: &str = "ResourceMissing";
}

/// Condition type ESO sets when the target was deleted because every source disappeared.
pub const CONDITION_DELETED: &str = "Deleted";

/// Default `apiVersion` of a generator reference.
pub const GENERATORS_API_VERSION: &str = "generators.external-secrets.io/v1alpha1";

/// `spec` of an ExternalSecret.
///
/// ESO's `spec.syncWindows` is not served: the controller does not implement it, and a field that
/// is accepted but ignored would silently refresh inside a deny window. A manifest that sets it is
/// rejected as having an unknown field.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(crates(kube_core = "::kube_core"))]
#[x_kube(crates(kube_core = "::kube_core"))]
#[kube(
    group = "external-secrets.io",
    version = "v1",
    kind = "ExternalSecret",
    namespaced,
    status = "ExternalSecretStatus",
    shortname = "es",
    category = "external-secrets",
    printcolumn = r#"{"name":"StoreType","type":"string","jsonPath":".spec.secretStoreRef.kind"}"#,
    printcolumn = r#"{"name":"Store","type":"string","jsonPath":".spec.secretStoreRef.name"}"#,
    printcolumn = r#"{"name":"Refresh Interval","type":"string","jsonPath":".spec.refreshInterval"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Last Sync","type":"date","jsonPath":".status.refreshTime"}"#,
    selectable = ".spec.secretStoreRef.name",
    selectable = ".spec.secretStoreRef.kind",
    selectable = ".spec.target.name",
    selectable = ".spec.refreshInterval",
    derive = "Default",
    derive = "PartialEq"
)]
#[x_kube(
    validation = Rule::new("(has(self.data) && size(self.data) > 0) || (has(self.dataFrom) && size(self.dataFrom) > 0)")
        .message("either spec.data or spec.dataFrom must have at least one entry")
        .reason(Reason::FieldValueRequired)
        .field_path(".data"),
    // ESO allows repeated keys under Delete and Merge on purpose: a later entry then acts as a
    // fallback for a source that has disappeared. A pairwise comparison runs out of the API
    // server's per-call cost budget at about 450 entries; building a map is linear. CEL fails the
    // map construction on a duplicate key, which rejects the object with this message and the
    // key's name (and were that ever to overwrite instead, the size check would reject it).
    validation = Rule::new(
        "!has(self.data) || (has(self.target) && has(self.target.deletionPolicy) && self.target.deletionPolicy != 'Retain') \
         || size(self.data.transformMapEntry(i, d, {d.secretKey: i})) == size(self.data)"
    )
        .message("spec.data[].secretKey must be unique when spec.target.deletionPolicy is Retain")
        .field_path(".data"),
)]
#[serde(rename_all = "camelCase")]
pub struct ExternalSecretSpec {
    /// The store used by `data` and `dataFrom` entries that do not name their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_store_ref: Option<SecretStoreRef>,

    /// The Secret to write and how to own it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {"creationPolicy": "Owner", "deletionPolicy": "Retain"}))]
    pub target: Option<ExternalSecretTarget>,

    /// When to refresh; unset behaves as Periodic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_policy: Option<RefreshPolicy>,

    /// Go duration between refreshes (`0` fetches once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::DURATION_PATTERN), extend("default" = "1h"))]
    pub refresh_interval: Option<String>,

    /// When periodic refreshes may run, evaluated in UTC; a refresh that a change of the
    /// ExternalSecret asks for is never held back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_windows: Option<SyncWindows>,

    /// One Secret key per entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Vec<ExternalSecretData>>,

    /// Whole maps of keys; later entries win on conflicts, and `data` wins over all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_from: Option<Vec<ExternalSecretDataFrom>>,
}

/// Which store to read from.
///
/// ESO's schema leaves `name` optional, and objects written by Go clients can hold an empty
/// `secretStoreRef: {}`. Such an object still deserializes here (empty name); new ones are
/// rejected by the schema, which requires the name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["name"]))]
pub struct SecretStoreRef {
    /// Name of the SecretStore or ClusterSecretStore.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub name: String,
    /// Unset means SecretStore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<SecretStoreKind>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum SecretStoreKind {
    #[default]
    SecretStore,
    ClusterSecretStore,
}

impl SecretStoreKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SecretStore => crate::store::SECRET_STORE_KIND,
            Self::ClusterSecretStore => crate::store::CLUSTER_SECRET_STORE_KIND,
        }
    }
}

/// Cron windows that gate periodic refreshes. Every window in the list shares the kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncWindows {
    pub kind: SyncWindowKind,
    #[schemars(length(min = 1))]
    pub windows: Vec<SyncWindow>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SyncWindowKind {
    /// Periodic refreshes run only while at least one window is open.
    Allow,
    /// Periodic refreshes wait while any window is open.
    Deny,
}

/// A window opens at each firing of `schedule` and stays open for `duration`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncWindow {
    /// A five-field cron expression (minute hour day-of-month month day-of-week), or a
    /// descriptor: `@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`,
    /// `@hourly`, `@every <duration>`.
    #[schemars(length(min = 1), regex(pattern = SCHEDULE_PATTERN))]
    pub schedule: String,
    /// Go duration the window stays open after each firing, such as `8h`.
    #[schemars(regex(pattern = crate::DURATION_PATTERN))]
    pub duration: String,
}

/// ESO's admission pattern for a window's schedule.
const SCHEDULE_PATTERN: &str = r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly)|@every [^\s]+.*|[^\s]+( [^\s]+){4})$";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RefreshPolicy {
    /// Create the Secret once, never update it.
    CreatedOnce,
    /// Refresh every `refreshInterval` (ESO's behaviour when unset).
    #[default]
    Periodic,
    /// Refresh only when the ExternalSecret itself changes.
    OnChange,
}

/// The Secret an ExternalSecret writes.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(
    // ESO's check names the policies under which the operator does not own the Secret, so
    // Orphan (created by the operator, merely not garbage-collected) passes, as it does in ESO.
    validation = Rule::new(
        "!has(self.deletionPolicy) || self.deletionPolicy != 'Delete' || !has(self.creationPolicy) \
         || !(self.creationPolicy in ['Merge', 'None', 'CreateOrMerge'])"
    )
        .message("spec.target.deletionPolicy Delete must not be used when the operator does not own the Secret; set spec.target.creationPolicy to Owner")
        .reason(Reason::FieldValueForbidden)
        .field_path(".deletionPolicy"),
    validation = Rule::new(
        "!has(self.deletionPolicy) || self.deletionPolicy != 'Merge' || !has(self.creationPolicy) || self.creationPolicy != 'None'"
    )
        .message("spec.target.deletionPolicy Merge must not be used with spec.target.creationPolicy None: there is no Secret to merge into")
        .reason(Reason::FieldValueForbidden)
        .field_path(".deletionPolicy"),
    // Any other templateFrom target is a path into the rendered object; on a Secret that would
    // reach privileged fields such as `type` or `metadata.ownerReferences`.
    validation = Rule::new(
        "(has(self.manifest) && !(self.manifest.apiVersion == 'v1' && self.manifest.kind == 'Secret')) \
         || !has(self.template) || !has(self.template.templateFrom) \
         || self.template.templateFrom.all(t, !has(t.target) || t.target.lowerAscii() in ['', 'data', 'annotations', 'labels'])"
    )
        .message("spec.target.template.templateFrom[].target must be Data, Annotations or Labels when the target is a Secret")
        .reason(Reason::FieldValueForbidden)
        .field_path(".template.templateFrom"),
)]
#[serde(rename_all = "camelCase")]
pub struct ExternalSecretTarget {
    /// Name of the Secret; defaults to the ExternalSecret's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub name: Option<String>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Owner"))]
    pub creation_policy: Option<CreationPolicy>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Retain"))]
    pub deletion_policy: Option<DeletionPolicy>,

    /// Blueprint of the Secret. These rules hold only for an ExternalSecret; PushSecret shares
    /// the type but never creates a Kubernetes Secret from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(
        validation = Rule::new("!has(self.type) || self.type != 'bootstrap.kubernetes.io/token'")
            .message("spec.target.template.type bootstrap.kubernetes.io/token is not allowed")
            .reason(Reason::FieldValueForbidden)
            .field_path(".type"),
        // Either would let the token controller mint a long-lived token for any ServiceAccount.
        validation = Rule::new(
            "!has(self.type) || self.type != 'kubernetes.io/service-account-token' \
             || ((!has(self.metadata) || !has(self.metadata.annotations) \
                  || !('kubernetes.io/service-account.name' in self.metadata.annotations)) \
                 && (!has(self.templateFrom) || !self.templateFrom.exists(t, has(t.target) && t.target.lowerAscii() == 'annotations')))"
        )
            .message("spec.target.template.type kubernetes.io/service-account-token must not set the kubernetes.io/service-account.name annotation or use a templateFrom target Annotations")
            .reason(Reason::FieldValueForbidden)
            .field_path(".type"),
    )]
    // Boxed, as is `manifest`: every cached ExternalSecret carried their 224 bytes inline,
    // most of them `None`.
    pub template: Option<Box<Template>>,

    /// Writes another kind (a ConfigMap, any custom resource) instead of a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<Box<ManifestReference>>,

    /// Sets `immutable` on the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub immutable: Option<bool>,
}

/// Who owns the target Secret.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum CreationPolicy {
    /// Create it with an owner reference to the ExternalSecret.
    #[default]
    Owner,
    /// Create it without an owner reference; it outlives the ExternalSecret.
    Orphan,
    /// Never create it; merge keys into an existing Secret.
    Merge,
    /// Write nothing.
    None,
    /// Create it if missing (no owner reference), else merge into it.
    CreateOrMerge,
}

/// What happens to the Secret when the provider no longer has the data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum DeletionPolicy {
    /// Delete the Secret once every source is gone.
    Delete,
    /// Remove the vanished keys, keep the Secret.
    Merge,
    /// Keep the Secret and report an error.
    #[default]
    Retain,
}

/// Blueprint of the written Secret, shared with PushSecret.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Template {
    /// Secret type; unset keeps the existing type (Opaque for a new Secret).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "v2"))]
    pub engine_version: Option<TemplateEngineVersion>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Replace"))]
    pub merge_policy: Option<TemplateMergePolicy>,

    /// Secret key to template; rendered last, so it wins over everything else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<BTreeMap<String, String>>,

    /// Templates kept in ConfigMaps or Secrets, or given literally. The bound (ESO has none) and
    /// the one on `target` keep the CEL rules that scan this list within the cost budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub template_from: Option<Vec<TemplateFrom>>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TemplateEngineVersion {
    #[default]
    #[serde(rename = "v2")]
    V2,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TemplateMergePolicy {
    /// The rendered keys are the Secret's only keys.
    #[default]
    Replace,
    /// The rendered keys are added to the fetched keys.
    Merge,
}

/// Labels and annotations are templated like data.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalizers: Option<Vec<String>>,
}

/// One source of templates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateFrom {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<TemplateRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<TemplateRef>,
    /// Where the result goes: `Data`, `Annotations`, `Labels`, or a dotted path into a custom
    /// resource target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), extend("default" = "Data"))]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub literal: Option<String>,
    /// Decoding applied to the rendered values; unset means None.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values_decoding_strategy: Option<DecodingStrategy>,
}

/// A ConfigMap or Secret holding templates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateRef {
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub name: String,
    pub items: Vec<TemplateRefItem>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateRefItem {
    #[schemars(length(min = 1, max = 253), regex(pattern = DATA_KEY_PATTERN))]
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Values"))]
    pub template_as: Option<TemplateScope>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TemplateScope {
    /// Only the values are templates.
    #[default]
    Values,
    /// Keys are templates too.
    KeysAndValues,
}

/// The kind written instead of a Secret.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestReference {
    #[schemars(length(min = 1))]
    pub api_version: String,
    #[schemars(length(min = 1))]
    pub kind: String,
}

/// One key of the Secret from one remote value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalSecretData {
    /// Key in the Secret.
    #[schemars(length(min = 1, max = 253), regex(pattern = DATA_KEY_PATTERN))]
    pub secret_key: String,
    pub remote_ref: RemoteRef,
    /// Reads this entry from another store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_ref: Option<SourceRef>,
}

/// Where a value lives in the provider (ESO's `ExternalSecretDataRemoteRef`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemoteRef {
    /// The provider's name for the secret.
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_policy: Option<MetadataPolicy>,
    /// A property inside a structured value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub property: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversion_strategy: Option<ConversionStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoding_strategy: Option<DecodingStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub null_byte_policy: Option<NullBytePolicy>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MetadataPolicy {
    #[default]
    None,
    /// Read the secret's metadata (tags, labels) instead of its value.
    Fetch,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConversionStrategy {
    #[default]
    Default,
    /// Unescape `_Uxxxx_` sequences in key names.
    Unicode,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum DecodingStrategy {
    /// Base64 or base64url if the value decodes as either, else the value unchanged.
    Auto,
    Base64,
    Base64URL,
    #[default]
    None,
}

/// What to do with a fetched value that contains NUL bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum NullBytePolicy {
    #[default]
    Ignore,
    Fail,
}

/// A map of keys from one source (ESO's `ExternalSecretDataFromRemoteRef`).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(
    validation = Rule::new(
        "(has(self.extract) ? 1 : 0) + (has(self.find) ? 1 : 0) + (has(self.sourceRef) && has(self.sourceRef.generatorRef) ? 1 : 0) == 1"
    )
        .message("each spec.dataFrom entry must set exactly one of extract, find and sourceRef.generatorRef"),
)]
#[serde(rename_all = "camelCase")]
pub struct ExternalSecretDataFrom {
    /// Every property of one secret whose value is a JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extract: Option<RemoteRef>,
    /// Every secret whose name or tags match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub find: Option<ExternalSecretFind>,
    /// Key rewrites, applied in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<Vec<Rewrite>>,
    /// Another store for extract/find, or a generator instead of a store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_ref: Option<SourceRef>,
}

/// Selects secrets by path, name or tags.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalSecretFind {
    /// Root path to search under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<FindName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversion_strategy: Option<ConversionStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoding_strategy: Option<DecodingStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub null_byte_policy: Option<NullBytePolicy>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FindName {
    /// Regular expression on secret names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regexp: Option<String>,
}

/// One rewrite step over the fetched keys (ESO's `ExternalSecretRewrite`).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(
    validation = Rule::new("(has(self.regexp) ? 1 : 0) + (has(self.transform) ? 1 : 0) + (has(self.merge) ? 1 : 0) == 1")
        .message("each spec.dataFrom[].rewrite entry must set exactly one of regexp, transform and merge"),
)]
#[serde(rename_all = "camelCase")]
pub struct Rewrite {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<RewriteMerge>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regexp: Option<RewriteRegexp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transform: Option<RewriteTransform>,
}

/// Merges the values (JSON objects) of several keys into one map.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RewriteMerge {
    /// Key that receives the merged object; required with strategy JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = ""))]
    pub into: Option<String>,
    /// Keys that win conflicts, highest priority last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Strict"))]
    pub priority_policy: Option<MergePriorityPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Error"))]
    pub conflict_policy: Option<MergeConflictPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Extract"))]
    pub strategy: Option<MergeStrategy>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MergePriorityPolicy {
    IgnoreNotFound,
    #[default]
    Strict,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MergeConflictPolicy {
    Ignore,
    #[default]
    Error,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MergeStrategy {
    #[default]
    Extract,
    #[serde(rename = "JSON")]
    Json,
}

/// Renames keys with a regular expression (Go `ReplaceAll` semantics).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RewriteRegexp {
    pub source: String,
    pub target: String,
}

/// Renames keys with a template; `.value` is the old name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RewriteTransform {
    pub template: String,
}

/// Overrides the source of one entry (ESO's `StoreSourceRef` and `StoreGeneratorSourceRef`,
/// which have the same shape). `generatorRef` under `spec.data` is accepted, as ESO does, but
/// ESO never implemented it there.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(
    validation = Rule::new("has(self.storeRef) != has(self.generatorRef)")
        .message("sourceRef must set exactly one of storeRef and generatorRef"),
)]
#[serde(rename_all = "camelCase")]
pub struct SourceRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_ref: Option<SecretStoreRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator_ref: Option<GeneratorRef>,
}

/// A generator object that produces the values instead of a store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GeneratorRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = GENERATORS_API_VERSION))]
    pub api_version: Option<String>,
    pub kind: GeneratorKind,
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub name: String,
}

/// ESO's generator kinds, in ESO's order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum GeneratorKind {
    #[serde(rename = "ACRAccessToken")]
    AcrAccessToken,
    BeyondtrustWorkloadCredentialsDynamicSecret,
    ClusterGenerator,
    CloudsmithAccessToken,
    #[serde(rename = "ECRAuthorizationToken")]
    EcrAuthorizationToken,
    Fake,
    #[serde(rename = "GCRAccessToken")]
    GcrAccessToken,
    GithubAccessToken,
    GitlabDeployToken,
    QuayAccessToken,
    #[default]
    Password,
    #[serde(rename = "SSHKey")]
    SshKey,
    #[serde(rename = "STSSessionToken")]
    StsSessionToken,
    #[serde(rename = "UUID")]
    Uuid,
    VaultDynamicSecret,
    Webhook,
    Grafana,
    #[serde(rename = "MFA")]
    Mfa,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalSecretStatus {
    /// Start of the last successful sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_time: Option<Time>,
    /// `<generation>-<hash of labels and annotations>` at the last sync; a change forces a refresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synced_resource_version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// servicebinding.io "Provisioned Service" pointer to the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<SecretBinding>,
    /// Not in ESO: the generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Not in ESO: the target Secret's resourceVersion when this operator last wrote it or found
    /// it in sync. While the Secret still has it, nobody has changed it since, and a restarted
    /// operator need not read it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_resource_version: Option<String>,
}

/// A local object reference. ESO always writes it, so `binding: {}` must survive a round trip.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretBinding {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ExternalSecretSpec {
    /// `spec.data`, empty when unset.
    pub fn data(&self) -> &[ExternalSecretData] {
        self.data.as_deref().unwrap_or_default()
    }

    /// `spec.dataFrom`, empty when unset.
    pub fn data_from(&self) -> &[ExternalSecretDataFrom] {
        self.data_from.as_deref().unwrap_or_default()
    }

    /// The creation policy after ESO's default.
    pub fn creation_policy(&self) -> CreationPolicy {
        self.target
            .as_ref()
            .and_then(|t| t.creation_policy)
            .unwrap_or_default()
    }

    /// The deletion policy after ESO's default.
    pub fn deletion_policy(&self) -> DeletionPolicy {
        self.target
            .as_ref()
            .and_then(|t| t.deletion_policy)
            .unwrap_or_default()
    }
}
