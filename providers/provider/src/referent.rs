//! Design 007's `ApplyReferent`, shared by every provider: which namespace each credential
//! reference of a spec reads from. A provider lists where its references sit ([`References`]);
//! the rule is the same for all of them.
//!
//! A SecretStore or namespaced provider object reads only its own namespace: an empty namespace
//! becomes that one, another is refused naming the field (ESO's `ValidateSecretSelector`). A
//! ClusterSecretStore or cluster provider keeps an explicit namespace, and an empty one means the
//! namespace of the ExternalSecret or PushSecret that uses it (referent authentication).

use std::collections::BTreeSet;

use serde_json::Value;

use crate::{Caller, CredentialKind, CredentialRef, Error, Result};

/// What a reference names.
#[derive(Clone, Copy, Debug)]
pub enum Reference {
    Fixed(CredentialKind),
    /// ESO's `caProvider`: `type: Secret` (the default) or `type: ConfigMap`.
    CaProvider,
}

/// A provider's credential references: JSON pointers into its spec, and what each names.
#[derive(Clone, Copy, Debug)]
pub struct References(pub &'static [(&'static str, Reference)]);

/// The field name as a user reads it: `/auth/appRole/secretRef` is `auth.appRole.secretRef`.
pub fn field(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}

impl References {
    /// `spec` with every reference's namespace resolved for `caller` in `namespace` (empty for
    /// a cluster store validated on its own), or the reference that leaves its namespace.
    pub fn apply(&self, mut spec: Value, caller: Caller, namespace: &str) -> Result<Value> {
        for (pointer, _) in self.0 {
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

    /// Every kind these references can name.
    pub fn kinds(&self) -> BTreeSet<CredentialKind> {
        self.0
            .iter()
            .flat_map(|(_, what)| match what {
                Reference::Fixed(kind) => vec![*kind],
                Reference::CaProvider => vec![CredentialKind::Secret, CredentialKind::ConfigMap],
            })
            .collect()
    }

    /// The objects a client built from `spec` (after [`References::apply`]) reads; references
    /// whose namespace is not known yet (a referent cluster store validated on its own) are left
    /// out.
    pub fn credential_refs(&self, spec: &Value) -> Vec<CredentialRef> {
        self.0
            .iter()
            .filter_map(|(pointer, what)| {
                let reference = spec.pointer(pointer)?;
                let name = reference.get("name")?.as_str()?.to_owned();
                let namespace = reference.get("namespace")?.as_str()?.to_owned();
                let kind = match what {
                    Reference::Fixed(kind) => *kind,
                    Reference::CaProvider => match reference.get("type").and_then(Value::as_str) {
                        Some("ConfigMap") => CredentialKind::ConfigMap,
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

    /// Fields whose namespace is still empty: a ClusterSecretStore validated on its own, before
    /// any ExternalSecret gives it a namespace.
    pub fn unresolved(&self, spec: &Value) -> Vec<String> {
        self.0
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
}
