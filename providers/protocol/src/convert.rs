//! Request and response values between the provider contract and the wire. Each pair is the
//! inverse of the other for every value the contract can hold (tested below), so a call reaches a
//! provider out of process exactly as it would in process.

use std::collections::{BTreeMap, HashMap};

use api::provider_kinds::Capabilities;
use provider::{FindRequest, PushRemoteRef, PushRequest, PushSource, RemoteRef};

use crate::v1;

const METADATA_FETCH: &str = "Fetch";

fn none_if_empty(s: String) -> Option<String> {
    Some(s).filter(|s| !s.is_empty())
}

pub fn remote_to_wire(remote: &RemoteRef) -> v1::ExternalSecretDataRemoteRef {
    v1::ExternalSecretDataRemoteRef {
        key: remote.key.clone(),
        version: remote.version.clone().unwrap_or_default(),
        property: remote.property.clone().unwrap_or_default(),
        // Decoding is applied by the core after the provider answers, as ESO's core does.
        decoding_strategy: String::new(),
        metadata_policy: if remote.fetch_metadata {
            METADATA_FETCH.into()
        } else {
            String::new()
        },
    }
}

pub fn remote_from_wire(remote: v1::ExternalSecretDataRemoteRef) -> RemoteRef {
    RemoteRef {
        fetch_metadata: remote.metadata_policy == METADATA_FETCH,
        key: remote.key,
        property: none_if_empty(remote.property),
        version: none_if_empty(remote.version),
    }
}

pub fn find_to_wire(find: &FindRequest) -> v1::ExternalSecretFind {
    v1::ExternalSecretFind {
        path: find.path.clone().unwrap_or_default(),
        name: find
            .name_regexp
            .clone()
            .map(|regexp| v1::FindName { regexp }),
        tags: find.tags.clone().into_iter().collect(),
        conversion_strategy: String::new(),
        decoding_strategy: String::new(),
    }
}

pub fn find_from_wire(find: v1::ExternalSecretFind) -> FindRequest {
    FindRequest {
        path: none_if_empty(find.path),
        name_regexp: find.name.map(|n| n.regexp).and_then(none_if_empty),
        tags: find.tags.into_iter().collect(),
    }
}

pub fn push_remote_to_wire(remote: &PushRemoteRef) -> v1::PushSecretRemoteRef {
    v1::PushSecretRemoteRef {
        remote_key: remote.remote_key.clone(),
        property: remote.property.clone().unwrap_or_default(),
    }
}

pub fn push_remote_from_wire(remote: v1::PushSecretRemoteRef) -> PushRemoteRef {
    PushRemoteRef {
        remote_key: remote.remote_key,
        property: none_if_empty(remote.property),
    }
}

/// A push on the wire, without the provider reference and source namespace the caller adds: ESO
/// sends the Secret's data and says which key is pushed; a push of the whole Secret (no key)
/// sends every key, where the contract holds them as one JSON object.
pub fn push_to_wire(push: &PushRequest) -> v1::PushSecretRequest {
    let secret_data = match &push.secret_key {
        Some(key) => HashMap::from([(key.clone(), push.value.clone())]),
        None => provider::whole_secret_entries(&push.value),
    };
    let data = v1::PushSecretData {
        metadata: push
            .metadata
            .as_ref()
            .map(|m| m.to_string().into_bytes())
            .unwrap_or_default(),
        secret_key: push.secret_key.clone().unwrap_or_default(),
        remote_key: push.remote.remote_key.clone(),
        property: push.remote.property.clone().unwrap_or_default(),
    };
    v1::PushSecretRequest {
        secret_data,
        push_secret_data: Some(data),
        secret_type: push.source.type_.clone().unwrap_or_default(),
        secret_labels: push.source.labels.clone().into_iter().collect(),
        secret_annotations: push.source.annotations.clone().into_iter().collect(),
        ..Default::default()
    }
}

/// The contract's push from the wire. Errors name the field that could not be read.
pub fn push_from_wire(request: v1::PushSecretRequest) -> Result<PushRequest, String> {
    let data = request
        .push_secret_data
        .ok_or("push_secret_data is required")?;
    let secret_data = request.secret_data;
    let metadata = if data.metadata.is_empty() {
        None
    } else {
        Some(
            serde_json::from_slice(&data.metadata)
                .map_err(|e| format!("push_secret_data.metadata is not JSON: {e}"))?,
        )
    };
    let secret_key = none_if_empty(data.secret_key);
    let value = match &secret_key {
        Some(key) => secret_data.get(key).cloned().ok_or_else(|| {
            format!("secret_data has no key {key:?}, which push_secret_data.secret_key names")
        })?,
        None => {
            let sorted: BTreeMap<_, _> = secret_data.into_iter().collect();
            provider::whole_secret_json(sorted.iter().map(|(k, v)| (k, v.as_slice()))).map_err(|key| {
                format!("secret_data key {key:?} is not UTF-8, so it cannot be pushed in a JSON object; push it by key")
            })?
        }
    };
    Ok(PushRequest {
        remote: PushRemoteRef {
            remote_key: data.remote_key,
            property: none_if_empty(data.property),
        },
        secret_key,
        value,
        metadata,
        source: PushSource {
            type_: none_if_empty(request.secret_type),
            labels: request.secret_labels.into_iter().collect(),
            annotations: request.secret_annotations.into_iter().collect(),
        },
    })
}

pub fn capabilities_to_wire(c: Capabilities) -> v1::SecretStoreCapabilities {
    match c {
        Capabilities::ReadOnly => v1::SecretStoreCapabilities::ReadOnly,
        Capabilities::WriteOnly => v1::SecretStoreCapabilities::WriteOnly,
        Capabilities::ReadWrite => v1::SecretStoreCapabilities::ReadWrite,
    }
}

/// An unknown value (a newer server's) reads as read-only, the one that promises least.
pub fn capabilities_from_wire(value: i32) -> Capabilities {
    match v1::SecretStoreCapabilities::try_from(value) {
        Ok(v1::SecretStoreCapabilities::WriteOnly) => Capabilities::WriteOnly,
        Ok(v1::SecretStoreCapabilities::ReadWrite) => Capabilities::ReadWrite,
        _ => Capabilities::ReadOnly,
    }
}

#[cfg(test)]
mod tests;
