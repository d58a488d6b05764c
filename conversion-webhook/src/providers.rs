//! The converters of the provider kinds this build knows: `api::providers::ALL`, whose
//! descriptors say which kinds have several versions and how to convert between them.

use api::provider_kinds::Scope;

use crate::Converters;

/// Every provider kind's descriptor, in both provider groups.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProviderConverters;

impl Converters for ProviderConverters {
    fn convert(
        &self,
        group: &str,
        kind: &str,
        object: serde_json::Value,
        to_api_version: &str,
    ) -> Result<serde_json::Value, String> {
        if Scope::of_group(group).is_none() {
            return Err(format!("group {group:?} is not a provider group"));
        }
        let descriptor = api::providers::ALL
            .iter()
            .find(|d| d.kind == kind)
            .ok_or_else(|| format!("kind {kind:?} is not a provider kind of this build"))?;
        descriptor
            .convert(object, to_api_version)
            .map_err(|e| e.to_string())
    }

    fn needs_conversion(&self, crd_name: &str) -> bool {
        api::providers::ALL.iter().any(|d| {
            d.conversion.is_some()
                && [Scope::Namespaced, Scope::Cluster]
                    .into_iter()
                    .any(|scope| d.crd_name(scope) == crd_name)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_crds_of_kinds_with_two_versions_need_the_webhook() {
        let c = ProviderConverters;
        for plural in ["vaults", "gitlabs"] {
            assert!(c.needs_conversion(&format!("{plural}.providers.external-secrets.io")));
            assert!(c.needs_conversion(&format!("{plural}.cluster.providers.external-secrets.io")));
        }
        assert!(!c.needs_conversion("fakes.providers.external-secrets.io"));
        assert!(!c.needs_conversion("kubernetes.providers.external-secrets.io"));
        assert!(!c.needs_conversion("externalsecrets.external-secrets.io"));
        let err = c
            .convert(
                "external-secrets.io",
                "Vault",
                serde_json::json!({}),
                "x/v1",
            )
            .unwrap_err();
        assert!(err.contains("not a provider group"), "{err}");
    }

    /// Each object goes to the converter of its own kind.
    #[test]
    fn objects_go_to_their_kinds_converter() {
        let group = "cluster.providers.external-secrets.io";
        let gitlab = serde_json::json!({
            "apiVersion": format!("{group}/v1beta1"),
            "kind": "Gitlab",
            "metadata": {"name": "gitlab"},
            "spec": {"auth": {"secretRef": {}}, "project": "acme/app"},
        });
        let alpha = ProviderConverters
            .convert(group, "Gitlab", gitlab, &format!("{group}/v1alpha1"))
            .unwrap();
        assert_eq!(alpha["spec"]["projectID"], "acme/app");
        assert_eq!(alpha["spec"]["auth"]["SecretRef"], serde_json::json!({}));
    }
}
