//! What migrating one CRD's storage means, decided from the CRD alone: whether anything is
//! stored at a version other than the storage version, and if so the resource to rewrite at,
//! the discovery hash that shows the API server encodes at it, and the status patch that
//! records it.

use base64::Engine as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::ApiResource;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// `status.storedVersions` is exactly the storage version.
    UpToDate {
        storage: String,
    },
    Migrate(Target),
}

/// A CRD whose objects may be stored at a version other than its storage version.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub crd: String,
    /// The kind at the storage version: objects are read and written back at it.
    pub resource: ApiResource,
    pub namespaced: bool,
    pub stored_versions: Vec<String>,
    /// The CRD as read; trimming `storedVersions` is conditional on it, so that a CRD changed
    /// during the run (another storage flip) is not declared migrated.
    pub resource_version: Option<String>,
}

impl Target {
    pub fn storage(&self) -> &str {
        &self.resource.version
    }

    /// The `storageVersionHash` discovery reports once the API server encodes new writes at
    /// the storage version.
    pub fn storage_version_hash(&self) -> String {
        storage_version_hash(
            &self.resource.group,
            &self.resource.version,
            &self.resource.kind,
        )
    }

    /// Merge patch of the CRD's `/status`: `storedVersions` becomes the storage version alone.
    /// The `resourceVersion` makes the API server refuse it (409) if the CRD changed since it
    /// was read.
    pub fn trim_patch(&self) -> Value {
        json!({
            "metadata": {"resourceVersion": self.resource_version},
            "status": {"storedVersions": [self.storage()]},
        })
    }

    /// `storedVersions [v1, v2] → [v2]`.
    pub fn change(&self) -> String {
        format!(
            "storedVersions [{}] → [{}]",
            self.stored_versions.join(", "),
            self.storage()
        )
    }
}

pub fn plan(crd: &CustomResourceDefinition) -> Result<Plan, String> {
    let name = crd.name_any();
    let mut storage = crd.spec.versions.iter().filter(|v| v.storage);
    let version = match (storage.next(), storage.next()) {
        // Objects are read and put back through the API at the storage version.
        (Some(v), None) if !v.served => {
            return Err(format!(
                "CRD {name}: storage version {} is not served; serve it to migrate",
                v.name
            ));
        }
        (Some(v), None) => v.name.clone(),
        _ => {
            return Err(format!(
                "CRD {name}: spec.versions must have exactly one version with storage: true"
            ));
        }
    };
    let stored_versions = crd
        .status
        .as_ref()
        .and_then(|s| s.stored_versions.clone())
        .unwrap_or_default();
    if stored_versions == [version.as_str()] {
        return Ok(Plan::UpToDate { storage: version });
    }
    let group = crd.spec.group.clone();
    let resource = ApiResource {
        api_version: format!("{group}/{version}"),
        group,
        version,
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    };
    Ok(Plan::Migrate(Target {
        crd: name,
        resource,
        namespaced: crd.spec.scope == "Namespaced",
        stored_versions,
        resource_version: crd.resource_version(),
    }))
}

/// Kubernetes' `discovery.StorageVersionHash`: the first 8 bytes of SHA-256 of
/// `group/version/kind`, base64.
pub fn storage_version_hash(group: &str, version: &str, kind: &str) -> String {
    let digest = Sha256::digest(format!("{group}/{version}/{kind}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(&digest[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(storage: &str, stored: &[&str]) -> CustomResourceDefinition {
        serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "vaults.providers.external-secrets.io", "resourceVersion": "42"},
            "spec": {
                "group": "providers.external-secrets.io",
                "names": {"kind": "Vault", "plural": "vaults"},
                "scope": "Namespaced",
                "versions": [
                    {"name": "v1alpha1", "served": true, "storage": storage == "v1alpha1"},
                    {"name": "v1beta1", "served": true, "storage": storage == "v1beta1"},
                ],
            },
            "status": {"storedVersions": stored},
        }))
        .unwrap()
    }

    #[test]
    fn nothing_to_do_when_only_the_storage_version_is_stored() {
        assert_eq!(
            plan(&crd("v1beta1", &["v1beta1"])),
            Ok(Plan::UpToDate {
                storage: "v1beta1".into()
            })
        );
    }

    #[test]
    fn a_storage_flip_rewrites_at_the_new_storage_version() {
        let Ok(Plan::Migrate(target)) = plan(&crd("v1beta1", &["v1alpha1", "v1beta1"])) else {
            panic!("expected a migration");
        };
        assert_eq!(
            target.resource.api_version,
            "providers.external-secrets.io/v1beta1"
        );
        assert_eq!(target.resource.plural, "vaults");
        assert!(target.namespaced);
        assert_eq!(
            target.change(),
            "storedVersions [v1alpha1, v1beta1] → [v1beta1]"
        );
        assert_eq!(
            target.trim_patch(),
            json!({"metadata": {"resourceVersion": "42"}, "status": {"storedVersions": ["v1beta1"]}})
        );
    }

    #[test]
    fn a_storage_version_not_yet_in_stored_versions_is_still_migrated() {
        // The API server adds the new storage version on the CRD update; a CRD read from
        // elsewhere (a backup) may lack it. Rewriting is what makes it true.
        let Ok(Plan::Migrate(target)) = plan(&crd("v1beta1", &["v1alpha1"])) else {
            panic!("expected a migration");
        };
        assert_eq!(target.change(), "storedVersions [v1alpha1] → [v1beta1]");
    }

    #[test]
    fn a_crd_without_a_single_storage_version_is_refused() {
        let mut two = crd("v1beta1", &["v1beta1"]);
        two.spec.versions[0].storage = true;
        assert!(plan(&two).unwrap_err().contains("exactly one version"));
        let mut none = two;
        none.spec
            .versions
            .iter_mut()
            .for_each(|v| v.storage = false);
        assert!(plan(&none).unwrap_err().contains("storage: true"));
    }

    #[test]
    fn storage_version_hash_matches_kubernetes() {
        // Values the API server reports for Pods and Deployments in discovery.
        assert_eq!(storage_version_hash("", "v1", "Pod"), "xPOwRZ+Yhw8=");
        assert_eq!(
            storage_version_hash("apps", "v1", "Deployment"),
            "8aSe+NMegvE="
        );
    }
}
