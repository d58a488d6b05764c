//! Design 007's `ApplyReferent` for Vault: which namespace each credential reference reads from.
//!
//! A SecretStore or namespaced provider object reads only its own namespace: an empty namespace
//! becomes that one, another is refused naming the field. A ClusterSecretStore or cluster provider
//! keeps an explicit namespace, and an empty one means the namespace of the ExternalSecret or
//! PushSecret (referent authentication).

use provider::{Caller, CredentialKind, CredentialRef, Error, Result};
use serde_json::Value;

/// Where credential references sit in a Vault spec, and what they name.
const REFERENCES: &[(&str, Kind)] = &[
    ("/auth/tokenSecretRef", Kind::Fixed(CredentialKind::Secret)),
    ("/auth/appRole/roleRef", Kind::Fixed(CredentialKind::Secret)),
    (
        "/auth/appRole/secretRef",
        Kind::Fixed(CredentialKind::Secret),
    ),
    (
        "/auth/kubernetes/serviceAccountRef",
        Kind::Fixed(CredentialKind::ServiceAccountToken),
    ),
    (
        "/auth/kubernetes/secretRef",
        Kind::Fixed(CredentialKind::Secret),
    ),
    ("/auth/ldap/secretRef", Kind::Fixed(CredentialKind::Secret)),
    (
        "/auth/userPass/secretRef",
        Kind::Fixed(CredentialKind::Secret),
    ),
    ("/auth/jwt/secretRef", Kind::Fixed(CredentialKind::Secret)),
    (
        "/auth/jwt/kubernetesServiceAccountToken/serviceAccountRef",
        Kind::Fixed(CredentialKind::ServiceAccountToken),
    ),
    ("/auth/cert/clientCert", Kind::Fixed(CredentialKind::Secret)),
    ("/auth/cert/secretRef", Kind::Fixed(CredentialKind::Secret)),
    ("/tls/certSecretRef", Kind::Fixed(CredentialKind::Secret)),
    ("/tls/keySecretRef", Kind::Fixed(CredentialKind::Secret)),
    ("/caProvider", Kind::CaProvider),
];

#[derive(Clone, Copy)]
enum Kind {
    Fixed(CredentialKind),
    /// `type: Secret` or `type: ConfigMap`.
    CaProvider,
}

/// The field name as a user reads it: `auth.appRole.secretRef`.
pub(crate) fn field(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}

pub(crate) fn apply(mut spec: Value, caller: Caller, namespace: &str) -> Result<Value> {
    for (pointer, _) in REFERENCES {
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
        .filter_map(|(pointer, kind)| {
            let reference = spec.pointer(pointer)?;
            let name = reference.get("name")?.as_str()?.to_owned();
            let namespace = reference.get("namespace")?.as_str()?.to_owned();
            let kind = match kind {
                Kind::Fixed(kind) => *kind,
                Kind::CaProvider => match reference.get("type")?.as_str()? {
                    "ConfigMap" => CredentialKind::ConfigMap,
                    _ => CredentialKind::Secret,
                },
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
        .filter(|(pointer, _)| {
            spec.pointer(pointer).is_some_and(|r| {
                r.get("namespace")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
            })
        })
        .map(|(pointer, _)| field(pointer))
        .collect()
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
