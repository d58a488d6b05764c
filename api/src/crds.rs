//! Every CRD this project serves, generated from the types above.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_core::CustomResourceExt;
use serde_json::Value;

use crate::{
    cluster_secrets, external_secret, generators, provider_class, providers, push_secret, store,
};

/// All CRDs, core kinds first (the provider classes last of them), then each provider's two
/// kinds in the order of [`providers::ALL`], then the generators.
pub fn all() -> Vec<CustomResourceDefinition> {
    [
        external_secret::ExternalSecret::crd(),
        store::SecretStore::crd(),
        store::ClusterSecretStore::crd(),
        push_secret::PushSecret::crd(),
        cluster_secrets::ClusterExternalSecret::crd(),
        cluster_secrets::ClusterPushSecret::crd(),
        provider_class::ProviderClass::crd(),
        provider_class::ClusterProviderClass::crd(),
    ]
    .into_iter()
    .chain(providers::ALL.iter().flat_map(|d| d.crds()))
    .chain([
        generators::Password::crd(),
        generators::UUID::crd(),
        generators::Fake::crd(),
        generators::MFA::crd(),
        generators::ClusterGenerator::crd(),
    ])
    .map(without_nullable)
    .collect()
}

/// kube-derive marks every `Option` field `nullable`, so an explicit `null` (an empty Helm value,
/// say) would be stored, or rejected by an enum. ESO's schemas are not nullable: the API server
/// drops such nulls and applies the default. Removing the marks gives ESO's behaviour.
fn without_nullable(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(map) => {
                if map.get("nullable") == Some(&Value::Bool(true)) {
                    map.remove("nullable");
                }
                if let Some(Value::Array(values)) = map.get_mut("enum") {
                    values.retain(|e| !e.is_null());
                }
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut value = serde_json::to_value(&crd).expect("a CRD serializes");
    strip(&mut value);
    serde_json::from_value(value).expect("stripping nullable keeps a valid CRD")
}

/// Each CRD as `(file name, YAML)`, the file named `<plural>.<group>.yaml`.
pub fn files() -> Result<Vec<(String, String)>, serde_yaml::Error> {
    all()
        .into_iter()
        .map(|crd| {
            let name = format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or_default());
            Ok((name, serde_yaml::to_string(&crd)?))
        })
        .collect()
}
