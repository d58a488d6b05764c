//! ESO's Kubernetes provider without the network: what a read returns from a Secret, which
//! Secrets a `find` keeps, the Secret a push leaves behind and what a deletion does.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use provider::{Error, FindRequest, PushRequest, RemoteRef, Result, json_path};
use serde_json::{Map, Value};

use crate::metadata::PushMetadata;

const LABELS: &str = "labels";
const ANNOTATIONS: &str = "annotations";

/// A Secret's data as ESO's Kubernetes provider writes it for a read without `property`, for a
/// `find` and for a whole-Secret push: a JSON object of strings (bytes that are not UTF-8 are
/// replaced, as Go's JSON encoder does).
pub(crate) fn data_json(data: &BTreeMap<String, ByteString>) -> Vec<u8> {
    let object: Map<String, Value> = data
        .iter()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned().into()))
        .collect();
    Value::Object(object).to_string().into_bytes()
}

fn data(secret: &Secret) -> BTreeMap<String, ByteString> {
    secret.data.clone().unwrap_or_default()
}

fn string_map(map: Option<&BTreeMap<String, String>>) -> Value {
    Value::Object(
        map.into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect(),
    )
}

/// `metadataPolicy: Fetch`: the labels and the annotations, each a JSON object.
fn metadata(secret: &Secret) -> BTreeMap<&'static str, Value> {
    BTreeMap::from([
        (LABELS, string_map(secret.metadata.labels.as_ref())),
        (
            ANNOTATIONS,
            string_map(secret.metadata.annotations.as_ref()),
        ),
    ])
}

/// `get_secret`: without `property` the whole data (or, fetching metadata, the labels and
/// annotations) as one JSON object; with one, a data key (a key with dots first, then the part
/// before the first dot as the key and the rest as a JSON path into its value), or
/// `labels[.name[.path]]` / `annotations[...]` when fetching metadata. Anything absent does not
/// exist.
pub(crate) fn value(secret: &Secret, remote: &RemoteRef) -> Result<Vec<u8>> {
    let property = remote.property.as_deref().filter(|p| !p.is_empty());
    if remote.fetch_metadata {
        let metadata = metadata(secret);
        let Some(property) = property else {
            return Ok(serde_json::to_vec(&metadata).expect("string maps serialize"));
        };
        let (head, rest) = match property.split_once('.') {
            Some((head, rest)) => (head, Some(rest)),
            None => (property, None),
        };
        let map = metadata.get(head).ok_or(Error::NoSecret)?;
        let Some(rest) = rest else {
            return Ok(map.to_string().into_bytes());
        };
        let (name, path) = match rest.split_once('.') {
            Some((name, path)) => (name, Some(path)),
            None => (rest, None),
        };
        let text = map
            .get(name)
            .and_then(Value::as_str)
            .ok_or(Error::NoSecret)?;
        return match path {
            None => Ok(text.as_bytes().to_vec()),
            Some(path) => json_path::property(text, path).ok_or(Error::NoSecret),
        };
    }
    let data = data(secret);
    let Some(property) = property else {
        return Ok(data_json(&data));
    };
    from_data(&data, property).ok_or(Error::NoSecret)
}

fn from_data(data: &BTreeMap<String, ByteString>, property: &str) -> Option<Vec<u8>> {
    if let Some(v) = data.get(property) {
        return Some(v.0.clone());
    }
    let (key, path) = property.split_once('.')?;
    if key.is_empty() || path.is_empty() {
        return None;
    }
    let text = std::str::from_utf8(&data.get(key)?.0).ok()?;
    json_path::property(text, path)
}

/// `get_secret_map`: every data key (fetching metadata: `labels` and `annotations`, each as
/// JSON), or, with `property`, the keys of the JSON object that property selects.
pub(crate) fn map(secret: &Secret, remote: &RemoteRef) -> Result<BTreeMap<String, Vec<u8>>> {
    let property = remote.property.as_deref().filter(|p| !p.is_empty());
    let Some(property) = property else {
        return Ok(if remote.fetch_metadata {
            metadata(secret)
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_string().into_bytes()))
                .collect()
        } else {
            data(secret).into_iter().map(|(k, v)| (k, v.0)).collect()
        });
    };
    let selected = value(secret, remote)?;
    let object = json_path::object(&selected).map_err(|why| {
        Error::Backend(format!(
            "property {property:?} of Secret {:?} is not a JSON object{why}",
            remote.key
        ))
    })?;
    Ok(object
        .into_iter()
        .map(|(k, v)| (k, json_path::json_to_bytes(v)))
        .collect())
}

/// The label selector a `find` by tags lists with.
pub(crate) fn label_selector(tags: &BTreeMap<String, String>) -> String {
    tags.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `get_all_secrets`: each listed Secret whose name matches `find.name.regexp` and whose labels
/// carry every tag, by name, as [`data_json`]. ESO uses either the tags or the name; both,
/// when both are given, is what the manifest says.
pub(crate) fn found(secrets: &[Secret], find: &FindRequest) -> Result<BTreeMap<String, Vec<u8>>> {
    let pattern = find
        .name_regexp
        .as_deref()
        .map(regex::Regex::new)
        .transpose()
        .map_err(|e| Error::InvalidSpec(format!("find.name.regexp: {e}")))?;
    Ok(secrets
        .iter()
        .filter_map(|s| {
            let name = s.metadata.name.as_deref()?;
            let labels = s.metadata.labels.as_ref();
            let tagged = find
                .tags
                .iter()
                .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
            (tagged && pattern.as_ref().is_none_or(|p| p.is_match(name)))
                .then(|| (name.to_owned(), data_json(&data(s))))
        })
        .collect())
}

/// The Secret a push leaves at `namespace/name`, from what is there (`None`: nothing) and the
/// push, as ESO builds it: the source's type (`Opaque` when it has none); labels and
/// annotations merged by the entry's policies; the whole data replaced when no property is
/// named, else that one key set. Only what the push decides is filled in.
pub(crate) fn desired(
    existing: Option<&Secret>,
    namespace: &str,
    push: &PushRequest,
    metadata: Option<&PushMetadata>,
) -> Result<Secret> {
    let property = push.remote.property.as_deref().filter(|p| !p.is_empty());
    if property.is_none() && push.secret_key.is_some() {
        return Err(Error::InvalidSpec(
            "remoteRef.property is required to push one key of a Secret (without it the whole Secret is pushed)".into(),
        ));
    }
    let source = crate::metadata::source(&push.source, metadata)?;
    let current = existing.map(|s| &s.metadata);
    let (labels, annotations) = crate::metadata::target(
        current.and_then(|m| m.labels.as_ref()),
        current.and_then(|m| m.annotations.as_ref()),
        source,
        metadata,
    );
    let data = match property {
        None => provider::whole_secret_entries(&push.value)
            .into_iter()
            .map(|(k, v)| (k, ByteString(v)))
            .collect(),
        Some(property) => {
            let mut data = existing.map(data).unwrap_or_default();
            data.insert(property.to_owned(), ByteString(push.value.clone()));
            data
        }
    };
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(push.remote.remote_key.clone()),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        type_: Some(
            push.source
                .type_
                .clone()
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| "Opaque".to_owned()),
        ),
        data: Some(data),
        ..Secret::default()
    })
}

/// Whether `existing` already is what [`desired`] says (so nothing is written).
pub(crate) fn unchanged(existing: &Secret, desired: &Secret) -> bool {
    let or_empty = |m: Option<&BTreeMap<String, String>>| m.cloned().unwrap_or_default();
    existing.type_.as_deref().unwrap_or("Opaque") == desired.type_.as_deref().unwrap_or("Opaque")
        && data(existing) == data(desired)
        && or_empty(existing.metadata.labels.as_ref()) == or_empty(desired.metadata.labels.as_ref())
        && or_empty(existing.metadata.annotations.as_ref())
            == or_empty(desired.metadata.annotations.as_ref())
}

/// What deleting a pushed entry does to the remote Secret.
#[derive(Debug, PartialEq)]
pub(crate) enum Deletion {
    /// The property is not there: nothing of ours to remove.
    Nothing,
    /// Other keys stay: the Secret without the property.
    Update(BTreeMap<String, ByteString>),
    /// No property named, or it was the last key.
    Delete,
}

pub(crate) fn deletion(existing: &Secret, property: Option<&str>) -> Deletion {
    let Some(property) = property.filter(|p| !p.is_empty()) else {
        return Deletion::Delete;
    };
    let mut data = data(existing);
    if data.remove(property).is_none() {
        return Deletion::Nothing;
    }
    if data.is_empty() {
        Deletion::Delete
    } else {
        Deletion::Update(data)
    }
}

/// `secret_exists`: the Secret, and the property when one is named.
pub(crate) fn exists(existing: Option<&Secret>, property: Option<&str>) -> bool {
    existing.is_some_and(|s| {
        property
            .filter(|p| !p.is_empty())
            .is_none_or(|p| data(s).contains_key(p))
    })
}
