//! PLACEHOLDER
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(group = "external-secrets.io", version = "v1alpha1", kind = "PushSecret", namespaced)]
pub struct PushSecretSpec {}
