//! ESO's v2 provider protocol in the API: ProviderClass and ClusterProviderClass, a store's
//! `spec.runtimeRef` and `spec.providerRef.namespace`, and the rules that go with them.

use external_secrets_api::crds;
use external_secrets_api::provider_class::{
    CLUSTER_PROVIDER_CLASS_KIND, ClusterProviderClass, PROVIDER_CLASS_KIND, ProviderClass,
    ProviderClassSpec, TlsSecretRef,
};
use external_secrets_api::store::{ClusterSecretStore, RuntimeRef, SecretStore};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// `yaml` read as `K` and written back is the same document; the typed value is returned.
fn roundtrip<K: Serialize + DeserializeOwned>(yaml: &str) -> K {
    let input: Value = serde_yaml::from_str(yaml).unwrap();
    let typed: K = serde_json::from_value(input.clone()).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), input);
    typed
}

fn crd(name: &str) -> CustomResourceDefinition {
    crds::all()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no CRD {name}"))
}

/// The root schema of the CRD's only version, as JSON.
fn schema(name: &str) -> Value {
    let crd = crd(name);
    assert_eq!(crd.spec.versions.len(), 1, "{name}");
    serde_json::to_value(
        &crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema,
    )
    .unwrap()
}

/// The root rules of a CRD as `(rule, message, fieldPath)`.
fn rules(name: &str) -> Vec<(String, String, String)> {
    let schema = schema(name);
    schema["x-kubernetes-validations"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
            (s("rule"), s("message"), s("fieldPath"))
        })
        .collect()
}

#[test]
fn a_provider_class_round_trips() {
    let class: ProviderClass = roundtrip(
        r#"
apiVersion: external-secrets.io/v1alpha1
kind: ProviderClass
metadata: {name: fake, namespace: team-a}
spec:
  address: provider-fake.team-a.svc:8080
  tlsSecretRef: {name: fake-tls}
status:
  conditions:
  - {type: Ready, status: "True", reason: Healthy, message: serving}
  methods: [GetSecret, GetSecretMap, Validate]
  observedGeneration: 2
"#,
    );
    assert_eq!(class.spec.address, "provider-fake.team-a.svc:8080");
    assert_eq!(
        class.spec.tls_secret_ref,
        Some(TlsSecretRef {
            name: "fake-tls".into(),
            namespace: None
        })
    );
    assert_eq!(class.status.unwrap().methods.len(), 3);
}

#[test]
fn a_cluster_provider_class_round_trips_with_the_same_spec() {
    let class: ClusterProviderClass = roundtrip(
        r#"
apiVersion: external-secrets.io/v1alpha1
kind: ClusterProviderClass
metadata: {name: fake}
spec:
  address: "[::1]:8080"
  tlsSecretRef: {name: external-secrets-provider-tls, namespace: providers}
"#,
    );
    let spec: &ProviderClassSpec = &class.spec;
    assert_eq!(spec.address, "[::1]:8080");
    assert_eq!(
        spec.tls_secret_ref.as_ref().unwrap().namespace.as_deref(),
        Some("providers")
    );
    // An empty status writes nothing back.
    let json = serde_json::to_value(ClusterProviderClass::new("x", spec.clone().into())).unwrap();
    assert_eq!(
        json["spec"],
        json!({"address": "[::1]:8080", "tlsSecretRef": {"name": "external-secrets-provider-tls", "namespace": "providers"}})
    );
}

#[test]
fn a_store_with_a_runtime_ref_and_a_namespaced_provider_ref_round_trips() {
    let store: SecretStore = roundtrip(
        r"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: fake, namespace: team-a}
spec:
  providerRef:
    apiVersion: provider.external-secrets.io/v2alpha1
    kind: Fake
    name: fake
    namespace: team-a
  runtimeRef: {name: fake}
",
    );
    let runtime = store.spec.runtime_ref.as_ref().unwrap();
    assert_eq!(runtime.kind, None);
    assert_eq!(runtime.kind_or_default(), PROVIDER_CLASS_KIND);
    assert_eq!(
        store
            .spec
            .provider_ref
            .as_ref()
            .unwrap()
            .namespace
            .as_deref(),
        Some("team-a")
    );

    let cluster: ClusterSecretStore = roundtrip(
        r"
apiVersion: external-secrets.io/v1
kind: ClusterSecretStore
metadata: {name: fake}
spec:
  providerRef:
    apiVersion: provider.external-secrets.io/v2alpha1
    kind: Fake
    name: fake
    namespace: providers
  runtimeRef: {kind: ClusterProviderClass, name: fake}
",
    );
    assert_eq!(
        cluster
            .spec
            .store
            .runtime_ref
            .as_ref()
            .map(RuntimeRef::kind_or_default),
        Some(CLUSTER_PROVIDER_CLASS_KIND)
    );
}

#[test]
fn only_a_cluster_provider_class_serves_a_cluster_secret_store() {
    let rule = (
        "!has(self.spec.runtimeRef) || (has(self.spec.runtimeRef.kind) && self.spec.runtimeRef.kind == 'ClusterProviderClass')".to_owned(),
        "spec.runtimeRef.kind: a ClusterSecretStore may only use a ClusterProviderClass".to_owned(),
        ".spec.runtimeRef.kind".to_owned(),
    );
    assert!(rules("clustersecretstores.external-secrets.io").contains(&rule));
    assert!(!rules("secretstores.external-secrets.io").contains(&rule));
}

/// Without a runtimeRef a store still names only its own group; with one, any group.
#[test]
fn the_provider_ref_group_is_free_only_with_a_runtime_ref() {
    for (crd, group) in [
        ("secretstores.external-secrets.io", "providers"),
        (
            "clustersecretstores.external-secrets.io",
            "cluster.providers",
        ),
    ] {
        let expected = format!(
            "!has(self.spec.providerRef) || has(self.spec.runtimeRef) || self.spec.providerRef.apiVersion.startsWith('{group}.external-secrets.io/')"
        );
        let (_, message, field) = rules(crd)
            .into_iter()
            .find(|(r, _, _)| *r == expected)
            .unwrap_or_else(|| panic!("{crd} lacks {expected}"));
        assert!(
            message.starts_with("spec.providerRef.apiVersion: "),
            "{crd}"
        );
        assert_eq!(field, ".spec.providerRef.apiVersion", "{crd}");
    }
    let schema = schema("secretstores.external-secrets.io");
    let provider_ref = &schema["properties"]["spec"]["properties"]["providerRef"];
    assert_eq!(
        provider_ref["properties"]["apiVersion"]["pattern"],
        r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/v[0-9]+((alpha|beta)[0-9]+)?$"
    );
    let runtime_ref = &schema["properties"]["spec"]["properties"]["runtimeRef"];
    assert_eq!(
        runtime_ref["properties"]["kind"]["enum"],
        json!(["ProviderClass", "ClusterProviderClass"])
    );
    assert_eq!(runtime_ref["required"], json!(["name"]));
}

#[test]
fn the_class_crds_are_core_kinds_with_eso_names() {
    for (name, scope, short) in [
        ("providerclasses.external-secrets.io", "Namespaced", "pc"),
        (
            "clusterproviderclasses.external-secrets.io",
            "Cluster",
            "cpc",
        ),
    ] {
        let crd = crd(name);
        assert_eq!(crd.spec.scope, scope, "{name}");
        assert_eq!(crd.spec.names.short_names, Some(vec![short.to_owned()]));
        assert_eq!(
            crd.spec.names.categories,
            Some(vec!["external-secrets".to_owned()])
        );
        assert_eq!(crd.spec.versions[0].name, "v1alpha1");
        let schema = schema(name);
        let spec = &schema["properties"]["spec"];
        assert_eq!(spec["required"], json!(["address"]), "{name}");
        assert_eq!(spec["properties"]["address"]["minLength"], 1, "{name}");
        assert!(spec["properties"]["address"]["pattern"].is_string());
        assert_eq!(
            spec["properties"]["tlsSecretRef"]["required"],
            json!(["name"])
        );
        let columns: Vec<_> = crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns, ["Age", "Address", "Status", "Ready"], "{name}");
    }
    // Right after the other core kinds, before the first provider kind.
    let names: Vec<String> = crds::all()
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(
        names[3..8],
        [
            "pushsecrets.external-secrets.io",
            "clusterexternalsecrets.external-secrets.io",
            "clusterpushsecrets.external-secrets.io",
            "providerclasses.external-secrets.io",
            "clusterproviderclasses.external-secrets.io",
        ]
    );
}
