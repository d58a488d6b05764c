//! Design 007's provider kinds. Each provider has a namespaced kind in
//! `providers.external-secrets.io` and a cluster-scoped twin with the same name in
//! `cluster.providers.external-secrets.io`. Both are generated from the provider's spec type by
//! one macro, which also emits the kind's [`Descriptor`]: the one place that says what the kind
//! is called and at which versions it is served. CRD generation, the provider registry, CRD
//! discovery and the round-trip tests read [`crate::providers::ALL`], never a copy.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::ApiResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::conditions::Condition;
use crate::providers::Capabilities;
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

/// Everything the operator needs to know about a provider kind without its code.
pub struct Descriptor {
    /// The kind in both groups, for example `Fake`.
    pub kind: &'static str,
    /// The plural resource name, for example `fakes`.
    pub plural: &'static str,
    /// The key under a store's inline `spec.provider`, for example `fake`.
    pub store_key: &'static str,
    /// Every served version.
    pub versions: &'static [Version],
    pub(crate) crds: fn() -> [CustomResourceDefinition; 2],
    pub(crate) spec_schema: fn(&mut schemars::SchemaGenerator) -> schemars::Schema,
    pub(crate) roundtrip: fn(Scope, Value) -> serde_json::Result<Value>,
}

impl std::fmt::Debug for Descriptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Descriptor")
            .field("kind", &self.kind)
            .field("versions", &self.versions)
            .finish_non_exhaustive()
    }
}

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

    /// The namespaced CRD, then the cluster-scoped one.
    pub fn crds(&self) -> [CustomResourceDefinition; 2] {
        (self.crds)()
    }

    /// The schema of the spec, which is also the schema of `spec.provider.<store_key>`.
    pub fn spec_schema(&self, generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        (self.spec_schema)(generator)
    }

    /// A whole object of this kind through its Rust type and back: what the operator would
    /// write back after reading it.
    pub fn roundtrip(&self, scope: Scope, object: Value) -> serde_json::Result<Value> {
        (self.roundtrip)(scope, object)
    }
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
            kube::CustomResource,
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

/// Defines a provider's two kinds (`Namespaced` and `Cluster`) and its `DESCRIPTOR`, in the
/// module that defines the provider's spec type. Both kinds' spec is exactly what the store's
/// `spec.provider.<store_key>` holds.
macro_rules! provider_kind {
    (kind: $kind:literal, plural: $plural:literal, store_key: $key:literal, version: $version:literal, spec: $spec:ty $(,)?) => {
        $crate::provider_kinds::provider_root!(
            "Spec of the namespaced kind: exactly what the store's `spec.provider` holds.",
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
            "Spec of the cluster-scoped twin.",
            "cluster.providers.external-secrets.io",
            "Cluster",
            ClusterSpec,
            $kind,
            $plural,
            $version,
            $spec
        );

        pub static DESCRIPTOR: $crate::provider_kinds::Descriptor =
            $crate::provider_kinds::Descriptor {
                kind: $kind,
                plural: $plural,
                store_key: $key,
                versions: &[$crate::provider_kinds::Version {
                    name: $version,
                    storage: true,
                }],
                crds: || {
                    use kube::CustomResourceExt;
                    [
                        $crate::provider_kinds::titled(Namespaced::crd()),
                        $crate::provider_kinds::titled(Cluster::crd()),
                    ]
                },
                spec_schema: |generator| generator.subschema_for::<$spec>(),
                roundtrip: |scope, object| match scope {
                    $crate::provider_kinds::Scope::Namespaced => {
                        serde_json::to_value(serde_json::from_value::<Namespaced>(object)?)
                    }
                    $crate::provider_kinds::Scope::Cluster => {
                        serde_json::to_value(serde_json::from_value::<Cluster>(object)?)
                    }
                },
            };
    };
}

pub(crate) use provider_kind;
