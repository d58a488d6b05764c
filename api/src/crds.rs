//! Every CRD this project serves, generated from the types above.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{external_secret, provider_kinds as pk, push_secret, store};

/// All CRDs, core kinds first.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        external_secret::ExternalSecret::crd(),
        store::SecretStore::crd(),
        store::ClusterSecretStore::crd(),
        push_secret::PushSecret::crd(),
        pk::fake::Fake::crd(),
        pk::fake::Cluster::crd(),
        pk::kubernetes::Kubernetes::crd(),
        pk::kubernetes::Cluster::crd(),
        pk::vault::Vault::crd(),
        pk::vault::Cluster::crd(),
        pk::gitlab::Gitlab::crd(),
        pk::gitlab::Cluster::crd(),
    ]
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
