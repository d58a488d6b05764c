//! Design 007's `Convert` and `GetProviderRefFromStore` as one pure function: from a store to the
//! provider object it reads through and, for an inline `spec.provider`, the object the store
//! reconciler must write. No API calls, so the store reconciler, the triggers and the `migrate`
//! command compute the same answer from the same input.

use api::provider_kinds::Scope;
use api::store::{LABEL_CONVERTED_FROM, ProviderRef};
use kube::api::ApiResource;
use provider::ProviderRegistry;
use serde_json::{Value, json};

use crate::store::{LoadedStore, StoreKind};
use crate::{Error, Result};

/// What a store resolves to.
#[derive(Clone, Debug, PartialEq)]
pub struct Converted {
    pub reference: ProviderRef,
    /// `Some` for an inline `spec.provider`: the provider object converted from it.
    pub generated: Option<Generated>,
}

/// A provider object converted from a store's inline provider, ready to apply.
#[derive(Clone, Debug, PartialEq)]
pub struct Generated {
    /// At the kind's storage version, in the store's scope.
    pub resource: ApiResource,
    /// The CRD that must be installed for it.
    pub crd: String,
    /// The whole object: name, namespace, label, owner reference and spec.
    pub object: Value,
}

impl Generated {
    pub fn spec(&self) -> &Value {
        &self.object["spec"]
    }
}

impl StoreKind {
    /// The provider group a store of this kind references.
    pub fn provider_scope(self) -> Scope {
        match self {
            Self::SecretStore => Scope::Namespaced,
            Self::ClusterSecretStore => Scope::Cluster,
        }
    }
}

/// The provider object `store` reads through, and the one to generate for an inline provider:
/// named after the store, in the store's scope, owned by it.
pub fn convert(registry: &ProviderRegistry, store: &LoadedStore) -> Result<Converted> {
    if let Some(reference) = &store.spec.provider_ref {
        check_reference_scope(store, reference)?;
        check_reference_namespace(store, reference)?;
        return Ok(Converted {
            reference: reference.clone(),
            generated: None,
        });
    }
    let no_provider = || Error::NoProvider {
        kind: store.kind,
        name: store.name.clone(),
    };
    let (key, inline) = store
        .spec
        .provider
        .as_ref()
        .and_then(|p| p.single())
        .ok_or_else(no_provider)?;
    let provider = registry.by_store_key(key).ok_or_else(|| {
        crate::resolve::not_compiled_in(
            registry,
            api::providers::ALL
                .iter()
                .find(|d| d.store_key == key)
                .map(|d| d.kind),
            &format!("spec.provider.{key}"),
        )
    })?;
    let descriptor = provider.descriptor();
    let spec = provider.convert(inline).map_err(|e| Error::Convert {
        field: format!("spec.provider.{key}"),
        source: e,
    })?;
    let uid = store.uid.as_deref().ok_or_else(|| Error::Convert {
        field: "metadata.uid".into(),
        source: provider::Error::InvalidSpec("the store has no uid yet".into()),
    })?;
    let scope = store.kind.provider_scope();
    let resource = descriptor.storage_resource(scope);
    let mut metadata = json!({
        "name": store.name,
        "labels": {LABEL_CONVERTED_FROM: store.name},
        "ownerReferences": [{
            "apiVersion": format!("{}/v1", api::GROUP),
            "kind": store.kind.to_string(),
            "name": store.name,
            "uid": uid,
            "controller": true,
            "blockOwnerDeletion": true,
        }],
    });
    if let Some(ns) = &store.namespace {
        metadata["namespace"] = json!(ns);
    }
    let object = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": metadata,
        "spec": spec,
    });
    Ok(Converted {
        reference: ProviderRef {
            api_version: resource.api_version.clone(),
            kind: resource.kind.clone(),
            name: store.name.clone(),
            namespace: None,
        },
        generated: Some(Generated {
            resource,
            crd: descriptor.crd_name(scope),
            object,
        }),
    })
}

/// `spec.providerRef.apiVersion`: without a class, a store reads provider objects of its own
/// scope only. The CRDs' rules say so too, but a store written before them or with validation
/// off would otherwise have a SecretStore read a cluster-scoped object, configuration its
/// namespace was never given. A class's server applies its own rules.
fn check_reference_scope(store: &LoadedStore, reference: &ProviderRef) -> Result<()> {
    if store.spec.runtime_ref.is_some() {
        return Ok(());
    }
    let expected = store.kind.provider_scope();
    let written = reference.api_version.split_once('/').map(|(g, _)| g);
    match written.and_then(Scope::of_group) {
        Some(scope) if scope != expected => {
            let (what, class) = match expected {
                Scope::Namespaced => ("namespaced", "ProviderClass"),
                Scope::Cluster => ("cluster-scoped", "ClusterProviderClass"),
            };
            Err(Error::ProviderRefApiVersion {
                reason: format!(
                    "a {} references a {what} provider kind in {}, not {} (or names a {class} in spec.runtimeRef)",
                    store.kind,
                    expected.group(),
                    reference.api_version
                ),
            })
        }
        _ => Ok(()),
    }
}

/// `spec.providerRef.namespace`: a SecretStore reads only provider objects of its own namespace,
/// and a cluster-scoped kind has none. The object is never loaded from elsewhere, so naming
/// another namespace would otherwise be ignored without a word.
fn check_reference_namespace(store: &LoadedStore, reference: &ProviderRef) -> Result<()> {
    let Some(written) = reference.namespace.as_deref() else {
        return Ok(());
    };
    let refused = |reason: String| Err(Error::ProviderRefNamespace { reason });
    if let (StoreKind::SecretStore, Some(own)) = (store.kind, store.namespace.as_deref())
        && written != own
    {
        return refused(format!(
            "a SecretStore reads only provider objects of its own namespace {own:?}, not {written:?}"
        ));
    }
    let group = reference.api_version.split_once('/').map(|(g, _)| g);
    if group.and_then(Scope::of_group) == Some(Scope::Cluster) {
        return refused(format!(
            "{} {} is cluster-scoped and has no namespace",
            reference.api_version, reference.kind
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use api::store::SecretStoreSpec;
    use serde_json::json;

    use super::*;

    fn store(kind: StoreKind, spec: Value) -> LoadedStore {
        LoadedStore {
            kind,
            namespace: (kind == StoreKind::SecretStore).then(|| "team-a".to_owned()),
            name: "db".into(),
            uid: Some("uid-1".into()),
            spec: serde_json::from_value::<SecretStoreSpec>(spec).unwrap(),
            unready: None,
            labels: Default::default(),
            deleting: false,
        }
    }

    /// A provider that only has a schema half worth the name: Convert needs nothing else.
    fn registry() -> ProviderRegistry {
        let mut registry = ProviderRegistry::default();
        registry.register(Arc::new(Inline));
        registry
    }

    struct Inline;

    impl provider::ProviderSchema for Inline {
        fn descriptor(&self) -> &'static provider::Descriptor {
            &api::providers::fake::DESCRIPTOR
        }
        fn capabilities(&self) -> provider::Capabilities {
            provider::Capabilities::ReadOnly
        }
        fn apply_referent(
            &self,
            spec: Value,
            _: provider::Caller,
            _: &str,
        ) -> provider::Result<Value> {
            Ok(spec)
        }
        fn validate_spec(&self, spec: &Value) -> provider::Result<provider::SpecReport> {
            match spec.get("data") {
                Some(Value::Array(_)) => Ok(provider::SpecReport::default()),
                _ => Err(provider::Error::InvalidSpec("data is required".into())),
            }
        }
    }

    #[async_trait::async_trait]
    impl provider::ProviderRuntime for Inline {
        async fn new_client(
            &self,
            _: provider::ClientRequest,
            _: std::sync::Arc<dyn provider::CredentialsReader>,
        ) -> provider::Result<Box<dyn provider::SecretsClient>> {
            Err(provider::Error::Backend("not needed here".into()))
        }
    }

    #[test]
    fn an_inline_provider_becomes_an_owned_object_named_after_the_store() {
        let spec = json!({"data": [{"key": "k", "value": "v"}]});
        let converted = convert(
            &registry(),
            &store(StoreKind::SecretStore, json!({"provider": {"fake": spec}})),
        )
        .unwrap();
        assert_eq!(
            converted.reference,
            ProviderRef {
                api_version: "providers.external-secrets.io/v1alpha1".into(),
                kind: "Fake".into(),
                name: "db".into(),
                namespace: None,
            }
        );
        let generated = converted.generated.unwrap();
        assert_eq!(generated.spec(), &spec);
        assert_eq!(
            generated.object["metadata"],
            json!({
                "name": "db",
                "namespace": "team-a",
                "labels": {"external-secrets.io/store": "db"},
                "ownerReferences": [{
                    "apiVersion": "external-secrets.io/v1",
                    "kind": "SecretStore",
                    "name": "db",
                    "uid": "uid-1",
                    "controller": true,
                    "blockOwnerDeletion": true,
                }],
            })
        );

        let cluster = convert(
            &registry(),
            &store(
                StoreKind::ClusterSecretStore,
                json!({"provider": {"fake": spec}}),
            ),
        )
        .unwrap();
        assert_eq!(
            cluster.reference.api_version,
            "cluster.providers.external-secrets.io/v1alpha1"
        );
        let object = cluster.generated.unwrap().object;
        assert!(object["metadata"].get("namespace").is_none());
        assert_eq!(
            object["metadata"]["ownerReferences"][0]["kind"],
            "ClusterSecretStore"
        );
    }

    #[test]
    fn a_provider_ref_is_passed_through_and_generates_nothing() {
        let reference = json!({"apiVersion": "providers.external-secrets.io/v1alpha1", "kind": "Vault", "name": "shared"});
        let converted = convert(
            &registry(),
            &store(StoreKind::SecretStore, json!({"providerRef": reference})),
        )
        .unwrap();
        assert_eq!(converted.reference.kind, "Vault");
        assert_eq!(converted.generated, None);
    }

    #[test]
    fn a_provider_ref_namespace_is_the_stores_own_or_refused_by_field() {
        let converted = |kind, reference: Value| {
            convert(&registry(), &store(kind, json!({"providerRef": reference})))
                .map(|c| c.reference.namespace)
                .map_err(|e| e.to_string())
        };
        let namespaced = |ns: &str| json!({"apiVersion": "providers.external-secrets.io/v1alpha1", "kind": "Fake", "name": "shared", "namespace": ns});
        assert_eq!(
            converted(StoreKind::SecretStore, namespaced("team-a")),
            Ok(Some("team-a".into()))
        );
        assert_eq!(
            converted(StoreKind::SecretStore, namespaced("kube-system")),
            Err(r#"spec.providerRef.namespace: a SecretStore reads only provider objects of its own namespace "team-a", not "kube-system""#.into())
        );
        // A foreign kind (served through a runtimeRef) is held to the same rule.
        assert!(
            converted(
                StoreKind::SecretStore,
                json!({"apiVersion": "secrets.acme.example/v1", "kind": "SqliteStore", "name": "db", "namespace": "team-b"})
            )
            .is_err()
        );
        // A ClusterSecretStore names the namespace of a namespaced object served out of process.
        assert_eq!(
            convert(
                &registry(),
                &store(
                    StoreKind::ClusterSecretStore,
                    json!({"providerRef": namespaced("team-b"), "runtimeRef": {"kind": "ClusterProviderClass", "name": "fake"}})
                )
            )
            .map(|c| c.reference.namespace)
            .map_err(|e| e.to_string()),
            Ok(Some("team-b".into()))
        );
        assert_eq!(
            converted(
                StoreKind::ClusterSecretStore,
                json!({"apiVersion": "cluster.providers.external-secrets.io/v1alpha1", "kind": "Fake", "name": "shared", "namespace": "team-b"})
            ),
            Err("spec.providerRef.namespace: cluster.providers.external-secrets.io/v1alpha1 Fake is cluster-scoped and has no namespace".into())
        );
    }

    /// The CRDs' rules say the same, but a store written before them, or past them, must not
    /// read a provider object of the other scope: a SecretStore reading a cluster-scoped one
    /// would use configuration its namespace was never given.
    #[test]
    fn a_provider_ref_names_a_kind_of_the_stores_scope_unless_a_class_serves_it() {
        let converted = |kind, spec: Value| {
            convert(&registry(), &store(kind, spec))
                .map(|c| c.reference.api_version)
                .map_err(|e| e.to_string())
        };
        let cluster = json!({"apiVersion": "cluster.providers.external-secrets.io/v1alpha1", "kind": "Fake", "name": "shared"});
        let namespaced = json!({"apiVersion": "providers.external-secrets.io/v1alpha1", "kind": "Fake", "name": "shared"});
        assert_eq!(
            converted(StoreKind::SecretStore, json!({"providerRef": cluster})),
            Err("spec.providerRef.apiVersion: a SecretStore references a namespaced provider kind in providers.external-secrets.io, not cluster.providers.external-secrets.io/v1alpha1 (or names a ProviderClass in spec.runtimeRef)".into())
        );
        assert_eq!(
            converted(
                StoreKind::ClusterSecretStore,
                json!({"providerRef": namespaced})
            ),
            Err("spec.providerRef.apiVersion: a ClusterSecretStore references a cluster-scoped provider kind in cluster.providers.external-secrets.io, not providers.external-secrets.io/v1alpha1 (or names a ClusterProviderClass in spec.runtimeRef)".into())
        );
        // With a class its server decides what it reads (the CRDs' rules allow any group).
        assert!(
            converted(
                StoreKind::SecretStore,
                json!({"providerRef": cluster, "runtimeRef": {"name": "fake"}})
            )
            .is_ok()
        );
    }

    #[test]
    fn bad_inline_providers_are_named() {
        let message = |spec: Value| {
            convert(&registry(), &store(StoreKind::SecretStore, spec))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            message(json!({"provider": {"fake": {}}})),
            "spec.provider.fake: invalid provider configuration: data is required"
        );
        assert_eq!(
            message(json!({"provider": {"vault": {"server": "https://vault"}}})),
            "provider Vault is not compiled into this build of the operator (compiled in: Fake)"
        );
        assert_eq!(
            message(json!({"provider": {"acme": {}}})),
            "spec.provider.acme is not a provider kind"
        );
        assert_eq!(
            message(json!({"provider": {}})),
            r#"spec.provider of SecretStore "db" must set exactly one provider"#
        );
    }
}
