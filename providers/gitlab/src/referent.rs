//! Design 007's `ApplyReferent` for GitLab: which namespace the access-token Secret and the
//! caProvider object are read from.
//!
//! A SecretStore or namespaced provider object reads only its own namespace: an empty namespace
//! becomes that one, another is refused naming the field (ESO's `ValidateSecretSelector`). A
//! ClusterSecretStore or cluster provider keeps an explicit namespace, and an empty one means the
//! namespace of the ExternalSecret or PushSecret that uses it (referent authentication).

use provider::{Caller, CredentialKind, CredentialRef, Error, Result};
use serde_json::Value;

/// JSON pointer of the access token reference (ESO spells `SecretRef` with a capital letter).
pub(crate) const ACCESS_TOKEN: &str = "/auth/SecretRef/accessToken";
const CA_PROVIDER: &str = "/caProvider";
const REFERENCES: &[&str] = &[ACCESS_TOKEN, CA_PROVIDER];

/// The field name as a user reads it: `auth.SecretRef.accessToken`.
pub(crate) fn field(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}

pub(crate) fn apply(mut spec: Value, caller: Caller, namespace: &str) -> Result<Value> {
    for pointer in REFERENCES {
        let Some(Value::Object(reference)) = spec.pointer_mut(pointer) else {
            continue;
        };
        let written = reference
            .get("namespace")
            .and_then(Value::as_str)
            .filter(|ns| !ns.is_empty())
            .map(str::to_owned);
        match (caller.is_namespaced(), written) {
            (true, Some(ns)) if ns != namespace => {
                return Err(Error::InvalidSpec(format!(
                    "{}.namespace: {ns:?} is not allowed; a SecretStore or namespaced provider reads credentials only from its own namespace {namespace:?}",
                    field(pointer)
                )));
            }
            (_, Some(_)) => {}
            (_, None) if !namespace.is_empty() => {
                reference.insert("namespace".into(), namespace.into());
            }
            (_, None) => {}
        }
    }
    Ok(spec)
}

/// The objects a client built from `spec` (after [`apply`]) reads; references whose namespace is
/// not known yet (a referent cluster store validated on its own) are left out.
pub(crate) fn credential_refs(spec: &Value) -> Vec<CredentialRef> {
    REFERENCES
        .iter()
        .filter_map(|pointer| {
            let reference = spec.pointer(pointer)?;
            let name = reference.get("name")?.as_str()?.to_owned();
            let namespace = reference.get("namespace")?.as_str()?.to_owned();
            let kind = if *pointer == CA_PROVIDER
                && reference.get("type").and_then(Value::as_str) == Some("ConfigMap")
            {
                CredentialKind::ConfigMap
            } else {
                CredentialKind::Secret
            };
            (!name.is_empty() && !namespace.is_empty()).then_some(CredentialRef {
                kind,
                namespace,
                name,
            })
        })
        .collect()
}

/// Credential references whose namespace is still empty: a ClusterSecretStore validated on its
/// own, before any ExternalSecret gives it a namespace.
pub(crate) fn unresolved(spec: &Value) -> Vec<String> {
    REFERENCES
        .iter()
        .filter(|pointer| {
            spec.pointer(pointer).is_some_and(|r| {
                r.get("namespace")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
            })
        })
        .map(|pointer| field(pointer))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

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
        let err = apply(spec(), Caller::SecretStore, "team-a")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("caProvider.namespace: \"pki\" is not allowed"),
            "{err}"
        );

        let mut other = spec();
        other["auth"]["SecretRef"]["accessToken"]["namespace"] = json!("team-b");
        other["caProvider"]["namespace"] = json!("team-a");
        let err = apply(other, Caller::Provider, "team-a")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("auth.SecretRef.accessToken.namespace: \"team-b\" is not allowed"),
            "{err}"
        );

        let mut own = spec();
        own["caProvider"]["namespace"] = json!("team-a");
        let applied = apply(own, Caller::SecretStore, "team-a").unwrap();
        assert_eq!(
            applied["auth"]["SecretRef"]["accessToken"]["namespace"],
            "team-a"
        );
        assert_eq!(
            credential_refs(&applied),
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
        assert!(unresolved(&applied).is_empty());
    }

    #[test]
    fn a_cluster_store_keeps_an_explicit_namespace_or_uses_the_consumers() {
        let mut explicit = spec();
        explicit["auth"]["SecretRef"]["accessToken"]["namespace"] = json!("tokens");
        let applied = apply(explicit, Caller::ClusterSecretStore, "team-b").unwrap();
        assert_eq!(
            applied["auth"]["SecretRef"]["accessToken"]["namespace"],
            "tokens"
        );
        assert_eq!(applied["caProvider"]["namespace"], "pki");

        let referent = apply(spec(), Caller::ClusterProvider, "team-b").unwrap();
        assert_eq!(
            referent["auth"]["SecretRef"]["accessToken"]["namespace"],
            "team-b"
        );

        // Validated on its own, a referent store does not know whose token to read yet.
        let alone = apply(spec(), Caller::ClusterSecretStore, "").unwrap();
        assert_eq!(
            unresolved(&alone),
            vec!["auth.SecretRef.accessToken".to_owned()]
        );
        let refs = credential_refs(&alone);
        assert_eq!(refs.len(), 1, "{refs:?}");
        assert_eq!(refs[0].name, "ca");
    }
}
