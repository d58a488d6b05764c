//! Design 007's `ApplyReferent` for Vault: where its credential references sit. The rule is
//! [`provider::referent`]'s, the same for every provider.

use provider::referent::{Reference, References};
use provider::{Caller, CredentialKind, CredentialRef, Result};
use serde_json::Value;

/// Where credential references sit in a Vault spec, and what they name.
const REFERENCES: References = References(&[
    (
        "/auth/tokenSecretRef",
        Reference::Fixed(CredentialKind::Secret),
    ),
    (
        "/auth/appRole/roleRef",
        Reference::Fixed(CredentialKind::Secret),
    ),
    (
        "/auth/appRole/secretRef",
        Reference::Fixed(CredentialKind::Secret),
    ),
    (
        "/auth/kubernetes/serviceAccountRef",
        Reference::Fixed(CredentialKind::ServiceAccountToken),
    ),
    (
        "/auth/kubernetes/secretRef",
        Reference::Fixed(CredentialKind::Secret),
    ),
    (
        "/auth/ldap/secretRef",
        Reference::Fixed(CredentialKind::Secret),
    ),
    (
        "/auth/userPass/secretRef",
        Reference::Fixed(CredentialKind::Secret),
    ),
    (
        "/auth/jwt/secretRef",
        Reference::Fixed(CredentialKind::Secret),
    ),
    (
        "/auth/jwt/kubernetesServiceAccountToken/serviceAccountRef",
        Reference::Fixed(CredentialKind::ServiceAccountToken),
    ),
    (
        "/auth/cert/clientCert",
        Reference::Fixed(CredentialKind::Secret),
    ),
    (
        "/auth/cert/secretRef",
        Reference::Fixed(CredentialKind::Secret),
    ),
    (
        "/tls/certSecretRef",
        Reference::Fixed(CredentialKind::Secret),
    ),
    (
        "/tls/keySecretRef",
        Reference::Fixed(CredentialKind::Secret),
    ),
    ("/caProvider", Reference::CaProvider),
]);

pub(crate) fn apply(spec: Value, caller: Caller, namespace: &str) -> Result<Value> {
    REFERENCES.apply(spec, caller, namespace)
}

pub(crate) fn credential_refs(spec: &Value) -> Vec<CredentialRef> {
    REFERENCES.credential_refs(spec)
}

pub(crate) fn unresolved(spec: &Value) -> Vec<String> {
    REFERENCES.unresolved(spec)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec() -> Value {
        json!({
            "server": "http://vault:8200",
            "auth": {"appRole": {"roleId": "r", "secretRef": {"name": "approle", "key": "secret-id"}}},
            "caProvider": {"type": "ConfigMap", "name": "ca", "key": "ca.crt", "namespace": "pki"},
        })
    }

    #[test]
    fn a_secret_store_reads_its_own_namespace_only() {
        let applied = apply(spec(), Caller::SecretStore, "team-a");
        let err = applied.unwrap_err().to_string();
        assert!(
            err.contains("caProvider.namespace: \"pki\" is not allowed"),
            "{err}"
        );

        let mut own = spec();
        own["caProvider"]["namespace"] = json!("team-a");
        let applied = apply(own, Caller::SecretStore, "team-a").unwrap();
        assert_eq!(
            applied["auth"]["appRole"]["secretRef"]["namespace"],
            "team-a"
        );
        assert_eq!(
            credential_refs(&applied),
            vec![
                CredentialRef {
                    kind: CredentialKind::Secret,
                    namespace: "team-a".into(),
                    name: "approle".into()
                },
                CredentialRef {
                    kind: CredentialKind::ConfigMap,
                    namespace: "team-a".into(),
                    name: "ca".into()
                },
            ]
        );
    }

    #[test]
    fn a_cluster_store_keeps_explicit_namespaces_and_fills_in_the_consumer() {
        let applied = apply(spec(), Caller::ClusterSecretStore, "team-b").unwrap();
        assert_eq!(applied["caProvider"]["namespace"], "pki");
        assert_eq!(
            applied["auth"]["appRole"]["secretRef"]["namespace"],
            "team-b"
        );

        // Validated on its own, a referent store does not know whose credentials to read yet.
        let alone = apply(spec(), Caller::ClusterSecretStore, "").unwrap();
        assert_eq!(
            unresolved(&alone),
            vec!["auth.appRole.secretRef".to_owned()]
        );
        let refs = credential_refs(&alone);
        assert_eq!(refs.len(), 1, "{refs:?}");
        assert_eq!(refs[0].name, "ca");
    }
}
