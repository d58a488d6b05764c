//! Provider configuration: what `spec.provider.<name>` of a store holds, and also the `spec` of
//! that provider's own kinds. One type serves both places, so converting a store's inline
//! provider into a provider object cannot lose a field. Each module defines one provider's spec
//! type and, through `provider_kind!`, its kinds and descriptor.

pub mod aws;
pub mod fake;
pub mod gitlab;
pub mod kubernetes;
pub mod vault;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::provider_kinds::Descriptor;

/// Every provider kind this API defines: the table CRD generation, the registry and the tests
/// read.
pub static ALL: &[&Descriptor] = &[
    &fake::DESCRIPTOR,
    &kubernetes::DESCRIPTOR,
    &vault::DESCRIPTOR,
    &gitlab::DESCRIPTOR,
    &aws::DESCRIPTOR,
];

/// `spec.provider` of a store: exactly one key, a provider's store key, holding that provider's
/// spec. Kept as JSON so the core does not depend on any provider's type; the schema (built from
/// [`ALL`]) and the provider's `validate_spec` check the contents.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SecretStoreProvider(pub BTreeMap<String, Value>);

impl SecretStoreProvider {
    /// The one `(store key, spec)` pair, or `None` when there are none or several.
    pub fn single(&self) -> Option<(&str, &Value)> {
        let mut entries = self.0.iter();
        match (entries.next(), entries.next()) {
            (Some((key, spec)), None) => Some((key.as_str(), spec)),
            _ => None,
        }
    }
}

impl JsonSchema for SecretStoreProvider {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SecretStoreProvider".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let properties: serde_json::Map<String, Value> = ALL
            .iter()
            .map(|d| (d.store_key.to_owned(), d.spec_schema(generator).into()))
            .collect();
        schemars::json_schema!({
            "type": "object",
            "properties": properties,
            "minProperties": 1,
            "maxProperties": 1,
        })
    }
}
