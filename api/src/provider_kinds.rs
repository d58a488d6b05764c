//! Design 007's provider kinds. Each provider has a namespaced kind in
//! `providers.external-secrets.io` and a cluster-scoped twin with the same name in
//! `cluster.providers.external-secrets.io`. Both are generated from the provider's spec type by
//! one macro, which also emits the kind's [`Descriptor`]: the one place that says what the kind
//! is called, at which versions it is served, which one is stored, and how objects convert
//! between versions. CRD generation, the provider registry, CRD discovery, the conversion
//! webhook and the round-trip tests read the table of descriptors (`providers::ALL`), never a
//! copy: it lists every provider module, which stand on this one.
//!
//! Each provider kind is versioned on its own: a second version of one kind changes that kind's
//! CRDs only, and only a kind with several versions names the conversion webhook.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, ServiceReference, WebhookClientConfig,
    WebhookConversion,
};
use kube_core::ApiResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::conditions::Condition;
use crate::{CLUSTER_PROVIDERS_GROUP, PROVIDERS_GROUP};

/// Status of every provider object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
}

/// What a provider can do, reported in store and provider status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Capabilities {
    ReadOnly,
    WriteOnly,
    ReadWrite,
}

/// Which of the two provider groups: the namespaced one a SecretStore references, or the
/// cluster-scoped one a ClusterSecretStore references.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    Namespaced,
    Cluster,
}

impl Scope {
    pub fn group(self) -> &'static str {
        match self {
            Self::Namespaced => PROVIDERS_GROUP,
            Self::Cluster => CLUSTER_PROVIDERS_GROUP,
        }
    }

    /// The scope of a provider group, `None` for any other group.
    pub fn of_group(group: &str) -> Option<Self> {
        match group {
            PROVIDERS_GROUP => Some(Self::Namespaced),
            CLUSTER_PROVIDERS_GROUP => Some(Self::Cluster),
            _ => None,
        }
    }
}

/// One version of a provider kind as its CRDs declare it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    pub name: &'static str,
    /// The version objects are stored at; exactly one per kind.
    pub storage: bool,
}

/// How a kind with several versions converts whole objects between them; what the conversion
/// webhook calls.
#[derive(Clone, Copy)]
pub struct Conversion {
    /// A whole object (`apiVersion`, `kind`, `metadata`, `spec`, `status`) in, the same object
    /// out at `to_api_version` (`<group>/<version>`). Metadata is kept; annotations may carry
    /// what the target version cannot hold, so that a round trip through any version is lossless.
    pub convert: fn(object: Value, to_api_version: &str) -> Result<Value, ConversionError>,
}

impl std::fmt::Debug for Conversion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversion").finish_non_exhaustive()
    }
}

/// Why an object could not be converted: the field at fault (a path such as `spec.auth.jwt`,
/// or `apiVersion`, or `desiredAPIVersion` for the requested version) and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConversionError {
    pub field: String,
    pub message: String,
}

impl ConversionError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ConversionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for ConversionError {}

/// Everything the operator needs to know about a provider kind without its code.
pub struct Descriptor {
    /// The kind in both groups, for example `Fake`.
    pub kind: &'static str,
    /// The plural resource name, for example `fakes`.
    pub plural: &'static str,
    /// The key under a store's inline `spec.provider`, for example `fake`.
    pub store_key: &'static str,
    /// Every served version, exactly one of them the storage version.
    pub versions: &'static [Version],
    /// Set when the kind has several versions: the API server converts between them through
    /// the conversion webhook, which calls this.
    pub conversion: Option<Conversion>,
    pub(crate) crds: fn() -> [CustomResourceDefinition; 2],
    pub(crate) spec_schema: fn(&mut schemars::SchemaGenerator) -> schemars::Schema,
    pub(crate) roundtrip: fn(Scope, Value) -> serde_json::Result<Value>,
}

impl std::fmt::Debug for Descriptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Descriptor")
            .field("kind", &self.kind)
            .field("versions", &self.versions)
            .field("conversion", &self.conversion.is_some())
            .finish_non_exhaustive()
    }
}

/// Namespace of the Service that serves the conversion webhook, as written into the CRDs.
pub const WEBHOOK_SERVICE_NAMESPACE: &str = "external-secrets";
/// Name of that Service.
pub const WEBHOOK_SERVICE_NAME: &str = "external-secrets-webhook";
/// The path the webhook serves ConversionReviews on.
pub const WEBHOOK_PATH: &str = "/convert";
/// The port of the Service.
pub const WEBHOOK_SERVICE_PORT: i32 = 443;

impl Descriptor {
    pub fn storage_version(&self) -> &'static str {
        self.versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name)
            .expect("every provider kind has a storage version")
    }

    pub fn serves(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v.name == version)
    }

    /// The API resource of this kind in `scope` at `version`.
    pub fn resource(&self, scope: Scope, version: &str) -> ApiResource {
        let group = scope.group();
        ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version: format!("{group}/{version}"),
            kind: self.kind.to_owned(),
            plural: self.plural.to_owned(),
        }
    }

    /// The API resource at the storage version, the one generated objects are written at.
    pub fn storage_resource(&self, scope: Scope) -> ApiResource {
        self.resource(scope, self.storage_version())
    }

    /// `<plural>.<group>`, the name of the CRD that must be installed for `scope`.
    pub fn crd_name(&self, scope: Scope) -> String {
        format!("{}.{}", self.plural, scope.group())
    }

    /// The namespaced CRD, then the cluster-scoped one, each with every version. A kind with a
    /// conversion names the webhook Service; whoever installs the CRDs may point it elsewhere
    /// and injects the CA bundle.
    pub fn crds(&self) -> [CustomResourceDefinition; 2] {
        let mut crds = (self.crds)();
        if self.conversion.is_some() {
            for crd in &mut crds {
                crd.spec.conversion = Some(webhook_conversion());
            }
        }
        crds
    }

    /// The schema of a store's inline `spec.provider.<store_key>`: ESO's shape, whichever
    /// versions the kind has.
    pub fn spec_schema(&self, generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        (self.spec_schema)(generator)
    }

    /// A whole object of this kind through the Rust type of its own `apiVersion` and back: what
    /// the operator would write back after reading it. A version the kind does not serve is an
    /// error.
    pub fn roundtrip(&self, scope: Scope, object: Value) -> serde_json::Result<Value> {
        (self.roundtrip)(scope, object)
    }

    /// Converts a whole object to `to_api_version`. A kind without a conversion has one version,
    /// so only an object already at `to_api_version` passes, unchanged.
    pub fn convert(&self, object: Value, to_api_version: &str) -> Result<Value, ConversionError> {
        match self.conversion {
            Some(conversion) => (conversion.convert)(object, to_api_version),
            None if object.get("apiVersion").and_then(Value::as_str) == Some(to_api_version) => {
                Ok(object)
            }
            None => Err(ConversionError::new(
                "desiredAPIVersion",
                format!(
                    "{} has the single version {}; cannot convert to {to_api_version}",
                    self.kind,
                    self.storage_version()
                ),
            )),
        }
    }
}

fn webhook_conversion() -> CustomResourceConversion {
    CustomResourceConversion {
        strategy: "Webhook".to_owned(),
        webhook: Some(WebhookConversion {
            conversion_review_versions: vec!["v1".to_owned()],
            client_config: Some(WebhookClientConfig {
                service: Some(ServiceReference {
                    namespace: WEBHOOK_SERVICE_NAMESPACE.to_owned(),
                    name: WEBHOOK_SERVICE_NAME.to_owned(),
                    path: Some(WEBHOOK_PATH.to_owned()),
                    port: Some(WEBHOOK_SERVICE_PORT),
                }),
                ..WebhookClientConfig::default()
            }),
        }),
    }
}

/// The version of a provider object, from its `apiVersion`; for the generated `roundtrip`.
#[doc(hidden)]
pub fn version_of(object: &Value) -> serde_json::Result<&str> {
    use serde::de::Error as _;
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| serde_json::Error::custom("apiVersion: missing or not a string"))?;
    api_version
        .split_once('/')
        .map(|(_, version)| version)
        .ok_or_else(|| {
            serde_json::Error::custom(format!(
                "apiVersion: {api_version:?} is not <group>/<version>"
            ))
        })
}

/// The error of the generated `roundtrip` for a version the kind does not serve.
#[doc(hidden)]
pub fn unserved(kind: &str, version: &str) -> serde_json::Error {
    use serde::de::Error as _;
    serde_json::Error::custom(format!("apiVersion: {kind} is not served at {version}"))
}

/// One CRD with every version of a kind, from the single-version CRDs kube-derive makes;
/// `storage` marks the storage version.
#[doc(hidden)]
pub fn merged(
    versions: impl IntoIterator<Item = CustomResourceDefinition>,
    storage: &str,
) -> CustomResourceDefinition {
    let mut versions = versions.into_iter();
    let mut crd = versions.next().unwrap_or_default();
    crd.spec
        .versions
        .extend(versions.flat_map(|other| other.spec.versions));
    for version in &mut crd.spec.versions {
        version.storage = version.name == storage;
    }
    crd
}

/// kube-derive titles a schema after the Rust type (`Namespaced`, `Cluster`); the kind is what
/// users see.
#[doc(hidden)]
pub fn titled(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let kind = crd.spec.names.kind.clone();
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            schema.title = Some(kind.clone());
        }
    }
    crd
}

/// One root of a provider kind: the spec struct `$spec_struct` and the kube-derived `$root`.
/// `namespaced` or not is the only difference between the two groups.
macro_rules! provider_root {
    ($doc:literal, $group:literal, $root:literal, $spec_struct:ident, $kind:literal, $plural:literal, $version:literal, $spec:ty $(, $namespaced:ident)?) => {
        #[doc = $doc]
        #[derive(
            kube_derive::CustomResource,
            Clone,
            Debug,
            Default,
            PartialEq,
            serde::Serialize,
            serde::Deserialize,
            schemars::JsonSchema,
        )]
        #[kube(
            group = $group,
            version = $version,
            kind = $kind,
            plural = $plural,
            root = $root,
            crates(kube_core = "::kube_core"),
            $($namespaced,)?
            status = "crate::provider_kinds::ProviderStatus",
            category = "external-secrets-providers",
            printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
            printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
            printcolumn = r#"{"name":"Capabilities","type":"string","jsonPath":".status.capabilities"}"#,
            printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
            derive = "Default",
            derive = "PartialEq"
        )]
        pub struct $spec_struct {
            #[serde(flatten)]
            pub provider: $spec,
        }
    };
}

pub(crate) use provider_root;

/// One version of a provider kind: its two roots `Namespaced` and `Cluster` (with
/// `NamespacedSpec` and `ClusterSpec`) in the calling module, each holding `spec`.
macro_rules! provider_roots {
    (kind: $kind:literal, plural: $plural:literal, version: $version:literal, spec: $spec:ty, namespaced_doc: $ndoc:literal, cluster_doc: $cdoc:literal $(,)?) => {
        $crate::provider_kinds::provider_root!(
            $ndoc,
            "providers.external-secrets.io",
            "Namespaced",
            NamespacedSpec,
            $kind,
            $plural,
            $version,
            $spec,
            namespaced
        );
        $crate::provider_kinds::provider_root!(
            $cdoc,
            "cluster.providers.external-secrets.io",
            "Cluster",
            ClusterSpec,
            $kind,
            $plural,
            $version,
            $spec
        );
    };
}

pub(crate) use provider_roots;

/// Whether exactly one of a kind's versions is marked as storage; checked at compile time.
#[doc(hidden)]
pub const fn one_storage(storage: &[bool]) -> bool {
    let mut count = 0;
    let mut i = 0;
    while i < storage.len() {
        if storage[i] {
            count += 1;
        }
        i += 1;
    }
    count == 1
}

/// Defines a provider kind's `DESCRIPTOR`, in the module that defines the provider's spec type.
///
/// A kind with one version also gets its two roots (`Namespaced` and `Cluster`), whose spec is
/// exactly what the store's `spec.provider.<store_key>` holds:
///
/// ```ignore
/// provider_kind! { kind: "Fake", plural: "fakes", store_key: "fake", version: "v1alpha1", spec: FakeProvider }
/// ```
///
/// A kind with several versions defines each version's roots with `provider_roots!` in a module
/// of its own (`self` for the calling module), names the store's inline spec type (ESO's shape,
/// whatever the versions) and the converter between whole objects:
///
/// ```ignore
/// provider_kind! {
///     kind: "Vault", plural: "vaults", store_key: "vault", store_spec: VaultProvider,
///     versions: [
///         { name: "v1alpha1", module: self, storage: true },
///         { name: "v1beta1", module: v1beta1, storage: false },
///     ],
///     conversion: crate::conversion::convert::<conversion::Vault>,
/// }
/// ```
macro_rules! provider_kind {
    (kind: $kind:literal, plural: $plural:literal, store_key: $key:literal, version: $version:literal, spec: $spec:ty $(,)?) => {
        $crate::provider_kinds::provider_roots! {
            kind: $kind,
            plural: $plural,
            version: $version,
            spec: $spec,
            namespaced_doc: "Spec of the namespaced kind: exactly what the store's `spec.provider` holds.",
            cluster_doc: "Spec of the cluster-scoped twin.",
        }
        $crate::provider_kinds::provider_kind! {
            @descriptor
            kind: $kind,
            plural: $plural,
            store_key: $key,
            store_spec: $spec,
            versions: [{ name: $version, module: self, storage: true }],
            conversion: None,
        }
    };
    (kind: $kind:literal, plural: $plural:literal, store_key: $key:literal, store_spec: $spec:ty, versions: [$({ name: $version:literal, module: $module:tt, storage: $storage:literal }),+ $(,)?], conversion: $convert:path $(,)?) => {
        $crate::provider_kinds::provider_kind! {
            @descriptor
            kind: $kind,
            plural: $plural,
            store_key: $key,
            store_spec: $spec,
            versions: [$({ name: $version, module: $module, storage: $storage }),+],
            conversion: Some($crate::provider_kinds::Conversion { convert: $convert }),
        }
    };
    (@descriptor kind: $kind:literal, plural: $plural:literal, store_key: $key:literal, store_spec: $spec:ty, versions: [$({ name: $version:literal, module: $module:tt, storage: $storage:literal }),+], conversion: $conversion:expr,) => {
        const _: () = assert!(
            $crate::provider_kinds::one_storage(&[$($storage),+]),
            "exactly one version of a provider kind is the storage version"
        );

        pub static DESCRIPTOR: $crate::provider_kinds::Descriptor =
            $crate::provider_kinds::Descriptor {
                kind: $kind,
                plural: $plural,
                store_key: $key,
                versions: &[$($crate::provider_kinds::Version {
                    name: $version,
                    storage: $storage,
                }),+],
                conversion: $conversion,
                crds: || {
                    use kube_core::CustomResourceExt;
                    [
                        $crate::provider_kinds::merged(
                            [$($crate::provider_kinds::titled($module::Namespaced::crd())),+],
                            DESCRIPTOR.storage_version(),
                        ),
                        $crate::provider_kinds::merged(
                            [$($crate::provider_kinds::titled($module::Cluster::crd())),+],
                            DESCRIPTOR.storage_version(),
                        ),
                    ]
                },
                spec_schema: |generator| generator.subschema_for::<$spec>(),
                roundtrip: |scope, object| {
                    let version = $crate::provider_kinds::version_of(&object)?.to_owned();
                    match (scope, version.as_str()) {
                        $(
                            ($crate::provider_kinds::Scope::Namespaced, $version) => serde_json::to_value(
                                serde_json::from_value::<$module::Namespaced>(object)?,
                            ),
                            ($crate::provider_kinds::Scope::Cluster, $version) => serde_json::to_value(
                                serde_json::from_value::<$module::Cluster>(object)?,
                            ),
                        )+
                        (_, version) => Err($crate::provider_kinds::unserved($kind, version)),
                    }
                },
            };
    };
}

pub(crate) use provider_kind;
