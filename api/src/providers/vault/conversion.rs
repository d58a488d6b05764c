//! Whole `Vault` objects between `v1alpha1` and `v1beta1`, in both groups, losing nothing.
//!
//! Most fields only move (`path` ↔ `kv.mountPath`, `tls.certSecretRef` ↔ `tls.clientCert`, ...).
//! What one version cannot hold travels in an annotation on the object at the other version: a
//! JSON merge patch (RFC 7386) that, applied to the plain conversion back, restores the original
//! spec, so every field that exists in only one version (now or later) round-trips the same way.
//! Today that is v1alpha1's extra login methods (ESO uses the first of several; v1beta1 holds
//! exactly one) and a group left empty, such as `tls: {}`.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{VaultAuth, VaultClientTls, VaultKvVersion, VaultProvider, v1beta1};
use crate::provider_kinds::{ConversionError, Scope};

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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Version {
    V1alpha1,
    V1beta1,
}

impl Version {
    fn parse(version: &str) -> Option<Self> {
        match version {
            "v1alpha1" => Some(Self::V1alpha1),
            "v1beta1" => Some(Self::V1beta1),
            _ => None,
        }
    }
}

/// The [`crate::provider_kinds::Conversion`] of the `Vault` kind.
pub fn convert(mut object: Value, to_api_version: &str) -> Result<Value, ConversionError> {
    let from_api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| ConversionError::new("apiVersion", "missing or not a string"))?
        .to_owned();
    let (from_group, from) = split_api_version(&from_api_version, "apiVersion")?;
    let (to_group, to) = split_api_version(to_api_version, "desiredAPIVersion")?;
    if Scope::of_group(from_group).is_none() {
        return Err(ConversionError::new(
            "apiVersion",
            format!("{from_group} is not a provider group"),
        ));
    }
    if to_group != from_group {
        return Err(ConversionError::new(
            "desiredAPIVersion",
            format!("{to_api_version} is in another group than the object's {from_api_version}"),
        ));
    }
    if let Some(kind) = object.get("kind").and_then(Value::as_str)
        && kind != super::DESCRIPTOR.kind
    {
        return Err(ConversionError::new(
            "kind",
            format!("{kind} objects are not converted by the Vault converter"),
        ));
    }
    let from = Version::parse(from).ok_or_else(|| unserved("apiVersion", from))?;
    let to = Version::parse(to).ok_or_else(|| unserved("desiredAPIVersion", to))?;
    if from == to {
        return Ok(object);
    }

    let Some(fields) = object.as_object_mut() else {
        return Err(ConversionError::new("object", "not a JSON object"));
    };
    let spec = fields
        .remove("spec")
        .ok_or_else(|| ConversionError::new("spec", "missing"))?;
    let mut annotations = take_annotations(fields)?;
    let spec = match from {
        Version::V1alpha1 => alpha_to_beta(parse("spec", spec)?, &mut annotations)?,
        Version::V1beta1 => beta_to_alpha(parse("spec", spec)?, &mut annotations)?,
    };
    fields.insert("spec".to_owned(), spec);
    fields.insert(
        "apiVersion".to_owned(),
        Value::String(to_api_version.to_owned()),
    );
    put_annotations(fields, annotations);
    Ok(object)
}

fn alpha_to_beta(alpha: VaultProvider, annotations: &mut Map<String, Value>) -> Result<Value> {
    let mut beta = to_beta(&alpha);
    if let Some(leftover) = take_leftover(annotations, V1BETA1_ONLY)? {
        let mut restored = json(&beta);
        restore(&mut restored, leftover);
        beta = parse(&annotation_field(V1BETA1_ONLY), restored)?;
    }
    set_leftover(
        annotations,
        V1ALPHA1_ONLY,
        &json(&alpha),
        &json(&to_alpha(&beta)),
    );
    Ok(json(&beta))
}

fn beta_to_alpha(
    beta: v1beta1::VaultProvider,
    annotations: &mut Map<String, Value>,
) -> Result<Value> {
    let mut alpha = to_alpha(&beta);
    if let Some(leftover) = take_leftover(annotations, V1ALPHA1_ONLY)? {
        let mut restored = json(&alpha);
        restore(&mut restored, leftover);
        alpha = parse(&annotation_field(V1ALPHA1_ONLY), restored)?;
    }
    set_leftover(
        annotations,
        V1BETA1_ONLY,
        &json(&beta),
        &json(&to_beta(&alpha)),
    );
    Ok(json(&alpha))
}

type Result<T, E = ConversionError> = std::result::Result<T, E>;

/// The plain conversion, without leftovers: the first login method only, groups made from the
/// fields they hold.
pub fn to_beta(alpha: &VaultProvider) -> v1beta1::VaultProvider {
    let kv = (alpha.path.is_some() || alpha.version.is_some()).then(|| v1beta1::VaultKv {
        mount_path: alpha.path.clone(),
        version: alpha.version.map(|v| match v {
            VaultKvVersion::V1 => v1beta1::KvVersion::V1,
            VaultKvVersion::V2 => v1beta1::KvVersion::V2,
        }),
    });
    let client = alpha.client_tls.clone().unwrap_or_default();
    let tls =
        (alpha.ca_bundle.is_some() || alpha.ca_provider.is_some() || alpha.client_tls.is_some())
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

/// The plain conversion back, without leftovers.
pub fn to_alpha(beta: &v1beta1::VaultProvider) -> VaultProvider {
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

/// Applies a leftover to the plainly converted spec. A leftover written before the object was
/// edited at the other version could change which method logs in, so it may only add methods
/// that the spec's own method outranks (ESO ignores those), and it touches `auth` otherwise only
/// where the spec has none.
fn restore(spec: &mut Value, mut leftover: Value) {
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

/// Records on the converted object what `original` holds that the plain conversion back
/// (`plain_back`) lacks; removes a stale record when nothing is missing.
fn set_leftover(
    annotations: &mut Map<String, Value>,
    key: &str,
    original: &Value,
    plain_back: &Value,
) {
    match diff(plain_back, original) {
        Some(patch) => {
            annotations.insert(key.to_owned(), Value::String(patch.to_string()));
        }
        None => {
            annotations.remove(key);
        }
    }
}

fn take_leftover(annotations: &mut Map<String, Value>, key: &str) -> Result<Option<Value>> {
    let Some(value) = annotations.remove(key) else {
        return Ok(None);
    };
    let field = annotation_field(key);
    let text = value
        .as_str()
        .ok_or_else(|| ConversionError::new(&field, "not a string"))?;
    let patch: Value = serde_json::from_str(text)
        .map_err(|e| ConversionError::new(&field, format!("not JSON: {e}")))?;
    if !patch.is_object() {
        return Err(ConversionError::new(&field, "not a JSON object"));
    }
    Ok(Some(patch))
}

fn annotation_field(key: &str) -> String {
    format!("metadata.annotations[{key}]")
}

fn take_annotations(fields: &mut Map<String, Value>) -> Result<Map<String, Value>> {
    let Some(metadata) = fields.get_mut("metadata") else {
        return Ok(Map::new());
    };
    let metadata = metadata
        .as_object_mut()
        .ok_or_else(|| ConversionError::new("metadata", "not an object"))?;
    match metadata.remove("annotations") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(annotations)) => Ok(annotations),
        Some(_) => Err(ConversionError::new(
            "metadata.annotations",
            "not an object",
        )),
    }
}

/// Puts the annotations back; an empty map is left out, as the API server does.
fn put_annotations(fields: &mut Map<String, Value>, annotations: Map<String, Value>) {
    if annotations.is_empty() {
        return;
    }
    let metadata = fields
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(metadata) = metadata.as_object_mut() {
        metadata.insert("annotations".to_owned(), Value::Object(annotations));
    }
}

fn split_api_version<'a>(api_version: &'a str, field: &str) -> Result<(&'a str, &'a str)> {
    api_version.split_once('/').ok_or_else(|| {
        ConversionError::new(field, format!("{api_version:?} is not <group>/<version>"))
    })
}

fn unserved(field: &str, version: &str) -> ConversionError {
    ConversionError::new(
        field,
        format!("Vault is not served at {version}; it is served at v1alpha1 and v1beta1"),
    )
}

/// Deserializes `value`, naming the path of the first field at fault under `field`.
fn parse<T: DeserializeOwned>(field: &str, value: Value) -> Result<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." {
            field.to_owned()
        } else {
            format!("{field}.{path}")
        };
        ConversionError::new(at, e.into_inner().to_string())
    })
}

fn json<T: serde::Serialize>(value: &T) -> Value {
    // The spec types are plain data: maps with string keys, no custom serializers that fail.
    serde_json::to_value(value).unwrap_or_default()
}

/// The JSON merge patch that turns `from` into `to`; `None` when they are equal. `to` holds no
/// `null`s (the spec types skip unset fields), so every value it holds can be expressed.
fn diff(from: &Value, to: &Value) -> Option<Value> {
    match (from, to) {
        (Value::Object(from), Value::Object(to)) => {
            let mut patch = Map::new();
            for (key, value) in to {
                let change = match from.get(key) {
                    Some(old) => diff(old, value),
                    None => Some(value.clone()),
                };
                if let Some(change) = change {
                    patch.insert(key.clone(), change);
                }
            }
            for key in from.keys().filter(|k| !to.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if from == to => None,
        _ => Some(to.clone()),
    }
}

/// Applies a JSON merge patch (RFC 7386).
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target) = target {
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                merge(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn diff_then_merge_restores_every_shape() {
        let cases = [
            (json!({}), json!({"a": {}})),
            (json!({"a": {"b": 1}}), json!({"a": {}})),
            (json!({"a": 1}), json!({"a": {"b": [1, 2]}})),
            (json!({"a": {"b": 1}}), json!({"a": 2})),
            (json!({"a": 1, "b": 2}), json!({"b": 3})),
            (
                json!({"a": {"b": {"c": 1}}}),
                json!({"a": {"b": {"c": 1, "d": {}}}}),
            ),
        ];
        for (from, to) in cases {
            let mut restored = from.clone();
            if let Some(patch) = diff(&from, &to) {
                merge(&mut restored, &patch);
            }
            assert_eq!(restored, to, "from {from}");
        }
        assert_eq!(diff(&json!({"a": [1]}), &json!({"a": [1]})), None);
    }
}
