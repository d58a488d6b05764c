//! Design 007's `ApplyReferent` for Vault: where its credential references sit. The rule is
//! [`provider::referent`]'s, the same for every provider.

use provider::CredentialKind;
use provider::referent::{Reference, References};

/// Where credential references sit in a Vault spec, and what they name.
pub(crate) const REFERENCES: References = References(&[
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use provider::{Caller, CredentialRef};
    use serde_json::Value;

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
        let applied = REFERENCES.apply(spec(), Caller::SecretStore, "team-a");
        let err = applied.unwrap_err().to_string();
        assert!(
            err.contains("caProvider.namespace: \"pki\" is not allowed"),
            "{err}"
        );

        let mut own = spec();
        own["caProvider"]["namespace"] = json!("team-a");
        let applied = REFERENCES
            .apply(own, Caller::SecretStore, "team-a")
            .unwrap();
        assert_eq!(
            applied["auth"]["appRole"]["secretRef"]["namespace"],
            "team-a"
        );
        assert_eq!(
            REFERENCES.credential_refs(&applied),
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
        let applied = REFERENCES
            .apply(spec(), Caller::ClusterSecretStore, "team-b")
            .unwrap();
        assert_eq!(applied["caProvider"]["namespace"], "pki");
        assert_eq!(
            applied["auth"]["appRole"]["secretRef"]["namespace"],
            "team-b"
        );

        // Validated on its own, a referent store does not know whose credentials to read yet.
        let alone = REFERENCES
            .apply(spec(), Caller::ClusterSecretStore, "")
            .unwrap();
        assert_eq!(
            REFERENCES.unresolved(&alone),
            vec!["auth.appRole.secretRef".to_owned()]
        );
        let refs = REFERENCES.credential_refs(&alone);
        assert_eq!(refs.len(), 1, "{refs:?}");
        assert_eq!(refs[0].name, "ca");
    }
}
