//! PLACEHOLDER: replaced with ESO's full Gitlab provider spec.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitlabProvider {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placeholder: Option<String>,
}
