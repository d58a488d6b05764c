//! Which provider kinds have two versions, and what that means for their descriptors and CRDs:
//! both versions served, `v1alpha1` stored, the conversion webhook named, and the store's inline
//! spec still ESO's shape. Every other kind has one version and no webhook.

use external_secrets_api::provider_kinds::Descriptor;
use external_secrets_api::providers::{ALL, gitlab, vault};
use serde_json::{Value, json};

/// The kinds with two versions, each with a field only its v1alpha1 (ESO's shape, what a
/// store's inline spec holds) has and one only its v1beta1 has.
const TWO_VERSIONS: [(&Descriptor, &str, &str); 2] = [
    (&vault::DESCRIPTOR, "path", "kv"),
    (&gitlab::DESCRIPTOR, "projectID", "project"),
];

#[test]
fn two_version_kinds_declare_both_versions_and_the_webhook() {
    for (descriptor, alpha_only, beta_only) in TWO_VERSIONS {
        let kind = descriptor.kind;
        assert_eq!(descriptor.storage_version(), "v1alpha1", "{kind}");
        assert!(
            descriptor.serves("v1alpha1") && descriptor.serves("v1beta1"),
            "{kind}"
        );
        for crd in descriptor.crds() {
            let versions: Vec<_> = crd
                .spec
                .versions
                .iter()
                .map(|v| (v.name.as_str(), v.served, v.storage))
                .collect();
            assert_eq!(
                versions,
                [("v1alpha1", true, true), ("v1beta1", true, false)],
                "{kind}"
            );
            let conversion = crd.spec.conversion.as_ref().expect("a conversion block");
            assert_eq!(conversion.strategy, "Webhook", "{kind}");
            let webhook = conversion.webhook.as_ref().unwrap();
            assert_eq!(webhook.conversion_review_versions, ["v1"], "{kind}");
            let service = webhook
                .client_config
                .as_ref()
                .unwrap()
                .service
                .as_ref()
                .unwrap();
            assert_eq!(
                (
                    service.namespace.as_str(),
                    service.name.as_str(),
                    service.path.as_deref(),
                    service.port
                ),
                (
                    "external-secrets",
                    "external-secrets-webhook",
                    Some("/convert"),
                    Some(443)
                ),
                "{kind}"
            );
        }
        // The store's inline spec keeps ESO's shape.
        let mut generator = schemars::SchemaGenerator::default();
        let schema = serde_json::to_value(descriptor.spec_schema(&mut generator)).unwrap();
        let schema = match schema.get("$ref").and_then(Value::as_str) {
            Some(reference) => {
                let name = reference.rsplit('/').next().unwrap();
                serde_json::to_value(generator.definitions()[name].clone()).unwrap()
            }
            None => schema,
        };
        assert!(
            schema["properties"].get(alpha_only).is_some(),
            "{kind}: {schema}"
        );
        assert!(
            schema["properties"].get(beta_only).is_none(),
            "{kind}: {schema}"
        );
    }
}

#[test]
fn single_version_kinds_have_no_conversion() {
    let two_versions: Vec<_> = TWO_VERSIONS.iter().map(|(d, ..)| d.kind).collect();
    for descriptor in ALL.iter().filter(|d| !two_versions.contains(&d.kind)) {
        assert!(descriptor.conversion.is_none(), "{}", descriptor.kind);
        assert_eq!(descriptor.versions.len(), 1, "{}", descriptor.kind);
        for crd in descriptor.crds() {
            assert!(crd.spec.conversion.is_none(), "{}", descriptor.kind);
        }
        let object = json!({
            "apiVersion": "providers.external-secrets.io/v1alpha1",
            "kind": descriptor.kind,
            "metadata": {"name": "x"},
            "spec": {},
        });
        let e = descriptor
            .convert(object, "providers.external-secrets.io/v1beta1")
            .unwrap_err();
        assert_eq!(e.field, "desiredAPIVersion");
    }
}
