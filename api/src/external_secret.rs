//! PLACEHOLDER
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(group = "external-secrets.io", version = "v1", kind = "ExternalSecret", namespaced)]
pub struct ExternalSecretSpec {}
