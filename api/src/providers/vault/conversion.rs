//! Whole `Vault` objects between `v1alpha1` and `v1beta1`, in both groups, losing nothing
//! ([`crate::conversion`] does the converting; this module says how the specs map).
//!
//! Most fields only move (`path` ↔ `kv.mountPath`, `tls.certSecretRef` ↔ `tls.clientCert`, ...).
//! What v1beta1 cannot hold is v1alpha1's extra login methods (ESO uses the first of several;
//! v1beta1 holds exactly one) and a group left empty, such as `tls: {}`; it rides in the
//! leftover annotations.

use serde_json::Value;

use super::{VaultAuth, VaultClientTls, VaultKvVersion, VaultProvider, v1beta1};
use crate::conversion::{TwoVersions, Version, merge};

/// On a `v1beta1` object: what its `v1alpha1` original held that `v1beta1` cannot, as a merge
/// patch of the `v1alpha1` spec.
pub const V1ALPHA1_ONLY: &str = "conversion.external-secrets.io/vault-v1alpha1";
/// On a `v1alpha1` object: what its `v1beta1` original held that `v1alpha1` cannot, as a merge
/// patch of the `v1beta1` spec.
pub const V1BETA1_ONLY: &str = "conversion.external-secrets.io/vault-v1beta1";

/// The login methods in ESO's order of precedence: with several set, the first wins. Both
/// versions spell them alike.
const METHODS: [&str; 9] = [
    "tokenSecretRef",
    "appRole",
    "kubernetes",
    "ldap",
    "userPass",
    "jwt",
    "cert",
    "iam",
    "gcp",
];

/// The `Vault` kind's two versions.
pub struct Vault;

impl TwoVersions for Vault {
    const KIND: &'static str = super::DESCRIPTOR.kind;
    const V1ALPHA1_ONLY: &'static str = V1ALPHA1_ONLY;
    const V1BETA1_ONLY: &'static str = V1BETA1_ONLY;
    type V1alpha1 = VaultProvider;
    type V1beta1 = v1beta1::VaultProvider;

    /// The first login method only, groups made from the fields they hold.
    fn to_beta(alpha: &VaultProvider) -> v1beta1::VaultProvider {
        let kv = (alpha.path.is_some() || alpha.version.is_some()).then(|| v1beta1::VaultKv {
            mount_path: alpha.path.clone(),
            version: alpha.version.map(|v| match v {
                VaultKvVersion::V1 => v1beta1::KvVersion::V1,
                VaultKvVersion::V2 => v1beta1::KvVersion::V2,
            }),
        });
        let client = alpha.client_tls.clone().unwrap_or_default();
        let tls = (alpha.ca_bundle.is_some()
            || alpha.ca_provider.is_some()
            || alpha.client_tls.is_some())
        .then(|| v1beta1::VaultTls {
            ca_bundle: alpha.ca_bundle.clone(),
            ca_provider: alpha.ca_provider.clone(),
            client_cert: client.cert_secret_ref,
            client_key: client.key_secret_ref,
        });
        v1beta1::VaultProvider {
            auth: alpha.auth.as_ref().and_then(first_method),
            server: alpha.server.clone(),
            kv,
            namespace: alpha.namespace.clone(),
            tls,
            read_your_writes: alpha.read_your_writes,
            forward_inconsistent: alpha.forward_inconsistent,
            headers: alpha.headers.clone(),
            check_and_set: alpha.check_and_set.clone(),
        }
    }

    fn to_alpha(beta: &v1beta1::VaultProvider) -> VaultProvider {
        let kv = beta.kv.clone().unwrap_or_default();
        let tls = beta.tls.clone().unwrap_or_default();
        let client_tls =
            (tls.client_cert.is_some() || tls.client_key.is_some()).then_some(VaultClientTls {
                cert_secret_ref: tls.client_cert,
                key_secret_ref: tls.client_key,
            });
        VaultProvider {
            auth: beta.auth.as_ref().map(|auth| VaultAuth {
                namespace: auth.namespace.clone(),
                token_secret_ref: auth.token_secret_ref.clone(),
                app_role: auth.app_role.clone(),
                kubernetes: auth.kubernetes.clone(),
                ldap: auth.ldap.clone(),
                jwt: auth.jwt.clone(),
                cert: auth.cert.clone(),
                iam: auth.iam.clone(),
                user_pass: auth.user_pass.clone(),
                gcp: auth.gcp.clone(),
            }),
            server: beta.server.clone(),
            path: kv.mount_path,
            version: kv.version.map(|v| match v {
                v1beta1::KvVersion::V1 => VaultKvVersion::V1,
                v1beta1::KvVersion::V2 => VaultKvVersion::V2,
            }),
            namespace: beta.namespace.clone(),
            ca_bundle: tls.ca_bundle,
            client_tls,
            ca_provider: tls.ca_provider,
            read_your_writes: beta.read_your_writes,
            forward_inconsistent: beta.forward_inconsistent,
            headers: beta.headers.clone(),
            check_and_set: beta.check_and_set.clone(),
        }
    }

    /// A leftover written before the object was edited at the other version could change which
    /// method logs in, so it may only add methods that the spec's own method outranks (ESO
    /// ignores those), and it touches `auth` otherwise only where the spec has none.
    fn restore(_: Version, spec: &mut Value, mut leftover: Value) {
        if let Some(patch) = leftover.as_object_mut()
            && let Some(auth_patch) = patch.get_mut("auth")
        {
            let auth = spec.get("auth");
            let winner = auth.and_then(|auth| METHODS.iter().position(|m| auth.get(m).is_some()));
            let keep = match auth_patch.as_object_mut() {
                Some(auth_patch) => {
                    let before = auth_patch.len();
                    auth_patch.retain(|key, _| match METHODS.iter().position(|m| m == key) {
                        Some(method) => winner.is_some_and(|winner| method > winner),
                        None => auth.is_none(),
                    });
                    before == 0 || !auth_patch.is_empty()
                }
                None => false,
            };
            if !keep {
                patch.remove("auth");
            }
        }
        merge(spec, &leftover);
    }
}

/// The method ESO would log in with, alone; `None` when none is set.
fn first_method(auth: &VaultAuth) -> Option<v1beta1::VaultAuth> {
    let mut beta = v1beta1::VaultAuth {
        namespace: auth.namespace.clone(),
        ..v1beta1::VaultAuth::default()
    };
    if let Some(m) = &auth.token_secret_ref {
        beta.token_secret_ref = Some(m.clone());
    } else if let Some(m) = &auth.app_role {
        beta.app_role = Some(m.clone());
    } else if let Some(m) = &auth.kubernetes {
        beta.kubernetes = Some(m.clone());
    } else if let Some(m) = &auth.ldap {
        beta.ldap = Some(m.clone());
    } else if let Some(m) = &auth.user_pass {
        beta.user_pass = Some(m.clone());
    } else if let Some(m) = &auth.jwt {
        beta.jwt = Some(m.clone());
    } else if let Some(m) = &auth.cert {
        beta.cert = Some(m.clone());
    } else if let Some(m) = &auth.iam {
        beta.iam = Some(m.clone());
    } else if let Some(m) = &auth.gcp {
        beta.gcp = Some(m.clone());
    } else {
        return None;
    }
    Some(beta)
}
