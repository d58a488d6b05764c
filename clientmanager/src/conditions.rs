//! ClusterSecretStore `spec.conditions`: which namespaces may use the store.

use std::collections::BTreeMap;

use api::store::{ClusterSecretStoreCondition, SecretStoreSpec};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::core::{Selector, SelectorExt};

use crate::{Error, Result};

pub(crate) async fn check(
    kube: &kube::Client,
    watched: &crate::cache::Caches,
    store: &str,
    spec: &SecretStoreSpec,
    namespace: &str,
) -> Result<()> {
    let conditions = spec.conditions.as_deref().unwrap_or_default();
    if conditions.is_empty() {
        return Ok(());
    }
    let labels = match watched.namespace_labels(namespace) {
        Some(labels) => labels,
        None => Api::<Namespace>::all(kube.clone())
            .get_metadata(namespace)
            .await
            .map_err(|e| Error::Conditions {
                name: store.to_owned(),
                reason: e.to_string(),
            })?
            .metadata
            .labels
            .unwrap_or_default(),
    };
    if namespace_allowed(conditions, namespace, &labels).map_err(|reason| Error::Conditions {
        name: store.to_owned(),
        reason,
    })? {
        Ok(())
    } else {
        Err(Error::Denied {
            name: store.to_owned(),
            namespace: namespace.to_owned(),
        })
    }
}

/// ESO's rule: any condition may allow; within a condition, the label selector, the name list
/// and the regexes each allow on their own.
pub fn namespace_allowed(
    conditions: &[ClusterSecretStoreCondition],
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    if conditions.is_empty() {
        return Ok(true);
    }
    for condition in conditions {
        if let Some(selector) = &condition.namespace_selector {
            let selector = Selector::try_from(selector.clone())
                .map_err(|e| format!("spec.conditions[].namespaceSelector: {e}"))?;
            if selector.matches(labels) {
                return Ok(true);
            }
        }
        if condition
            .namespaces
            .iter()
            .flatten()
            .any(|n| n == namespace)
        {
            return Ok(true);
        }
        for pattern in condition.namespace_regexes.iter().flatten() {
            let re = regex::Regex::new(pattern)
                .map_err(|e| format!("spec.conditions[].namespaceRegexes {pattern:?}: {e}"))?;
            if re.is_match(namespace) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn each_clause_allows_on_its_own() {
        let conds = vec![
            ClusterSecretStoreCondition {
                namespace_selector: Some(LabelSelector {
                    match_labels: Some(labels(&[("team", "a")])),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ClusterSecretStoreCondition {
                namespaces: Some(vec!["exact".into()]),
                namespace_regexes: Some(vec!["^prod-.*".into()]),
                ..Default::default()
            },
        ];
        assert!(namespace_allowed(&conds, "x", &labels(&[("team", "a")])).unwrap());
        assert!(namespace_allowed(&conds, "exact", &labels(&[])).unwrap());
        assert!(namespace_allowed(&conds, "prod-1", &labels(&[])).unwrap());
        assert!(!namespace_allowed(&conds, "dev-1", &labels(&[("team", "b")])).unwrap());
        assert!(namespace_allowed(&[], "anything", &labels(&[])).unwrap());
    }

    #[test]
    fn a_bad_regex_is_an_error_naming_the_field() {
        let conds = vec![ClusterSecretStoreCondition {
            namespace_regexes: Some(vec!["(".into()]),
            ..Default::default()
        }];
        let err = namespace_allowed(&conds, "x", &labels(&[])).unwrap_err();
        assert!(err.contains("namespaceRegexes"), "{err}");
    }
}
