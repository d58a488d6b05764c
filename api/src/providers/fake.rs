//! ESO's Fake provider: static data for tests and demos.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FakeProvider {
    pub data: Vec<FakeProviderData>,
    /// Forces the outcome of store validation: 0 Ready, 1 Unknown, 2 Error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2))]
    pub validation_result: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FakeProviderData {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

crate::provider_kinds::provider_kind! {
    kind: "Fake",
    plural: "fakes",
    store_key: "fake",
    version: "v1alpha1",
    spec: FakeProvider,
}
