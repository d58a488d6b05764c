//! The KV engine as ESO reads and writes it, without the network: where a key lives, what a
//! `property` selects, what a push writes.

use std::collections::BTreeMap;

use api::providers::vault::VaultKvVersion;
use provider::json_path;
use provider::{Error, Result};
use serde_json::{Map, Value};

/// The custom metadata (v2) or key (v1) that marks a secret as ours to overwrite and delete.
pub(crate) const MANAGED_BY: &str = "managed-by";
pub(crate) const MANAGED_BY_US: &str = "external-secrets";
/// Where KV v1 keeps that mark, inside the secret.
pub(crate) const V1_METADATA_KEY: &str = "custom_metadata";

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Kv {
    /// `spec.path`: the mount.
    pub(crate) mount: Option<String>,
    pub(crate) version: VaultKvVersion,
}

/// A key resolved to its mount and the path inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Location {
    pub(crate) mount: String,
    pub(crate) path: String,
}

impl Kv {
    /// ESO's path building: with a mount, a key that already starts with it (or, in v2, with
    /// `<mount>/data/`) is not doubled; without one, the key's first segment is the mount.
    pub(crate) fn locate(&self, key: &str) -> Result<Location> {
        let key = key.trim_start_matches('/');
        let (mount, path) = match self.mount.as_deref().map(|m| m.trim_matches('/')) {
            Some(mount) if !mount.is_empty() => {
                let mut path = key;
                if let Some(rest) = path.strip_prefix(mount).and_then(|r| r.strip_prefix('/')) {
                    path = rest;
                    if self.version == VaultKvVersion::V2 {
                        path = path.strip_prefix("data/").unwrap_or(path);
                    }
                }
                (mount.to_owned(), path.to_owned())
            }
            _ => {
                let (mount, rest) = key.split_once('/').ok_or_else(|| {
                    Error::InvalidSpec(format!(
                        "key {key:?} names no mount: set spec.provider.vault.path or write the key as <mount>/<path>"
                    ))
                })?;
                let rest = match self.version {
                    VaultKvVersion::V2 => rest.strip_prefix("data/").unwrap_or(rest),
                    VaultKvVersion::V1 => rest,
                };
                (mount.to_owned(), rest.to_owned())
            }
        };
        if path.is_empty() {
            return Err(Error::InvalidSpec(format!("key {key:?} names no secret")));
        }
        Ok(Location { mount, path })
    }
}

/// What `property` selects from a secret's data: the whole map as JSON without one, an exact
/// top-level key first, then a JSON path.
pub(crate) fn extract(data: &Map<String, Value>, property: Option<&str>) -> Result<Vec<u8>> {
    let Some(property) = property.filter(|p| !p.is_empty()) else {
        return Ok(Value::Object(data.clone()).to_string().into_bytes());
    };
    if let Some(value) = data.get(property) {
        return Ok(json_path::json_to_bytes(value.clone()));
    }
    let document = Value::Object(data.clone()).to_string();
    json_path::property(&document, property).ok_or(Error::NoSecret)
}

/// `get_secret_map`: every key of the data (or of the JSON object `property` selects) as bytes.
pub(crate) fn as_map(
    data: &Map<String, Value>,
    property: Option<&str>,
) -> Result<BTreeMap<String, Vec<u8>>> {
    let object = match property.filter(|p| !p.is_empty()) {
        None => data.clone(),
        Some(_) => json_path::object(&extract(data, property)?).map_err(|why| {
            Error::Backend(format!("property {property:?} is not a JSON object{why}"))
        })?,
    };
    Ok(object
        .into_iter()
        .map(|(k, v)| (k, json_path::json_to_bytes(v)))
        .collect())
}

/// The data a push leaves at the remote key: one property merged into what is there, or the
/// whole value, which must be a JSON object.
pub(crate) fn pushed(
    existing: Option<&Map<String, Value>>,
    property: Option<&str>,
    value: &[u8],
) -> Result<Map<String, Value>> {
    match property.filter(|p| !p.is_empty()) {
        Some(property) => {
            let mut data = existing.cloned().unwrap_or_default();
            let text = String::from_utf8(value.to_vec()).map_err(|_| {
                Error::Backend(format!("the value for property {property:?} is not UTF-8"))
            })?;
            data.insert(property.to_owned(), Value::String(text));
            Ok(data)
        }
        None => match serde_json::from_slice(value) {
            Ok(Value::Object(map)) => Ok(map),
            _ => Err(Error::Backend(
                "without remoteRef.property the pushed value must be a JSON object".into(),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn kv(mount: Option<&str>, version: VaultKvVersion) -> Kv {
        Kv {
            mount: mount.map(Into::into),
            version,
        }
    }

    fn at(mount: &str, path: &str) -> Location {
        Location {
            mount: mount.into(),
            path: path.into(),
        }
    }

    #[test]
    fn paths_as_eso_builds_them() {
        let v2 = kv(Some("secret"), VaultKvVersion::V2);
        assert_eq!(v2.locate("app/db").unwrap(), at("secret", "app/db"));
        assert_eq!(v2.locate("secret/app/db").unwrap(), at("secret", "app/db"));
        assert_eq!(
            v2.locate("secret/data/app/db").unwrap(),
            at("secret", "app/db")
        );
        assert_eq!(v2.locate("/app").unwrap(), at("secret", "app"));

        let unset = kv(None, VaultKvVersion::V2);
        assert_eq!(unset.locate("kv/app").unwrap(), at("kv", "app"));
        assert_eq!(unset.locate("kv/data/app").unwrap(), at("kv", "app"));
        assert!(
            unset
                .locate("lonely")
                .unwrap_err()
                .to_string()
                .contains("names no mount")
        );

        let v1 = kv(Some("kv1"), VaultKvVersion::V1);
        assert_eq!(v1.locate("app").unwrap(), at("kv1", "app"));
        assert_eq!(
            kv(None, VaultKvVersion::V1).locate("kv1/data/x").unwrap(),
            at("kv1", "data/x")
        );
    }

    #[test]
    fn property_exact_key_first_then_json_path() {
        let data = json!({"a.b": "exact", "a": {"b": "nested"}, "n": 5, "list": ["x", "y"]});
        let data = data.as_object().unwrap();
        assert_eq!(extract(data, Some("a.b")).unwrap(), b"exact");
        assert_eq!(extract(data, Some("a\\.b")).unwrap(), b"exact");
        assert_eq!(extract(data, Some("list.1")).unwrap(), b"y");
        assert_eq!(extract(data, Some("n")).unwrap(), b"5");
        assert!(matches!(
            extract(data, Some("missing")),
            Err(Error::NoSecret)
        ));
        let whole: Value = serde_json::from_slice(&extract(data, None).unwrap()).unwrap();
        assert_eq!(&whole, &Value::Object(data.clone()));
        let map = as_map(data, None).unwrap();
        assert_eq!(map["a"], br#"{"b":"nested"}"#);
        assert_eq!(as_map(data, Some("a")).unwrap()["b"], b"nested");
        // A string holding JSON nested too deep to decode: the decoder says so.
        let deep = json!({"deep": format!("{}1{}", "[".repeat(3000), "]".repeat(3000))});
        let err = as_map(deep.as_object().unwrap(), Some("deep"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("is not a JSON object: recursion limit exceeded"),
            "{err}"
        );
    }

    #[test]
    fn a_property_push_merges_and_a_whole_push_replaces() {
        let existing = json!({"keep": "1", "token": "old"});
        let merged = pushed(existing.as_object(), Some("token"), b"new").unwrap();
        assert_eq!(Value::Object(merged), json!({"keep": "1", "token": "new"}));
        let whole = pushed(existing.as_object(), None, br#"{"only":"this"}"#).unwrap();
        assert_eq!(Value::Object(whole), json!({"only": "this"}));
        assert!(pushed(None, None, b"not json").is_err());
    }
}
