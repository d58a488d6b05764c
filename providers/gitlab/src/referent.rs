//! Design 007's `ApplyReferent` for GitLab: the access-token Secret and the caProvider object.
//! The rule is [`provider::referent`]'s, the same for every provider.

use provider::CredentialKind;
use provider::referent::{Reference, References};

/// ESO spells `SecretRef` with a capital letter.
pub(crate) const REFERENCES: References = References(&[
    (
        "/auth/SecretRef/accessToken",
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
            "projectID": "1234",
            "auth": {"SecretRef": {"accessToken": {"name": "gitlab-token", "key": "token"}}},
            "caProvider": {"type": "ConfigMap", "name": "ca", "key": "ca.crt", "namespace": "pki"},
        })
    }

    #[test]
    fn a_secret_store_reads_the_token_in_its_own_namespace_only() {
        let err = REFERENCES
            .apply(spec(), Caller::SecretStore, "team-a")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("caProvider.namespace: \"pki\" is not allowed"),
            "{err}"
        );

        let mut other = spec();
        other["auth"]["SecretRef"]["accessToken"]["namespace"] = json!("team-b");
        other["caProvider"]["namespace"] = json!("team-a");
        let err = REFERENCES
            .apply(other, Caller::Provider, "team-a")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("auth.SecretRef.accessToken.namespace: \"team-b\" is not allowed"),
            "{err}"
        );

        let mut own = spec();
        own["caProvider"]["namespace"] = json!("team-a");
        let applied = REFERENCES
            .apply(own, Caller::SecretStore, "team-a")
            .unwrap();
        assert_eq!(
            applied["auth"]["SecretRef"]["accessToken"]["namespace"],
            "team-a"
        );
        assert_eq!(
            REFERENCES.credential_refs(&applied),
            vec![
                CredentialRef {
                    kind: CredentialKind::Secret,
                    namespace: "team-a".into(),
                    name: "gitlab-token".into()
                },
                CredentialRef {
                    kind: CredentialKind::ConfigMap,
                    namespace: "team-a".into(),
                    name: "ca".into()
                },
            ]
        );
        assert!(REFERENCES.unresolved(&applied).is_empty());
    }

    #[test]
    fn a_cluster_store_keeps_an_explicit_namespace_or_uses_the_consumers() {
        let mut explicit = spec();
        explicit["auth"]["SecretRef"]["accessToken"]["namespace"] = json!("tokens");
        let applied = REFERENCES
            .apply(explicit, Caller::ClusterSecretStore, "team-b")
            .unwrap();
        assert_eq!(
            applied["auth"]["SecretRef"]["accessToken"]["namespace"],
            "tokens"
        );
        assert_eq!(applied["caProvider"]["namespace"], "pki");

        let referent = REFERENCES
            .apply(spec(), Caller::ClusterProvider, "team-b")
            .unwrap();
        assert_eq!(
            referent["auth"]["SecretRef"]["accessToken"]["namespace"],
            "team-b"
        );

        // Validated on its own, a referent store does not know whose token to read yet.
        let alone = REFERENCES
            .apply(spec(), Caller::ClusterSecretStore, "")
            .unwrap();
        assert_eq!(
            REFERENCES.unresolved(&alone),
            vec!["auth.SecretRef.accessToken".to_owned()]
        );
        let refs = REFERENCES.credential_refs(&alone);
        assert_eq!(refs.len(), 1, "{refs:?}");
        assert_eq!(refs[0].name, "ca");
    }
}
