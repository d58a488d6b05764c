//! The examples are applied in any order (a directory listing, `kubectl apply -f examples/`): no
//! provider object in them may take the name of one a store's inline provider converts to, or
//! whichever comes second fails. Checked with the operator's own Convert, without a cluster.

use std::collections::BTreeMap;
use std::path::Path;

use api::store::{ClusterSecretStore, SecretStore};
use external_secrets_clientmanager::{LoadedStore, convert};
use serde_json::Value;

/// (apiVersion group, kind, namespace, name) of a provider object.
type Place = (String, String, Option<String>, String);

#[test]
fn no_example_provider_object_collides_with_a_converted_one() {
    let registry = providers::registry();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut written: BTreeMap<Place, String> = BTreeMap::new();
    let mut converted: BTreeMap<Place, String> = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        // Folders hold examples of their own (a server of your own, say), not manifests here.
        if path.is_dir() {
            continue;
        }
        let origin = path.file_name().unwrap().to_string_lossy().into_owned();
        let yaml = std::fs::read_to_string(&path).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&yaml) {
            let mut doc: Value = serde::Deserialize::deserialize(doc).unwrap();
            if doc.is_null() {
                continue;
            }
            doc["metadata"]["uid"] = "example".into();
            let api_version = doc["apiVersion"].as_str().unwrap_or_default().to_owned();
            let store = match doc["kind"].as_str().unwrap_or_default() {
                "SecretStore" => LoadedStore::from_secret_store(
                    &serde_json::from_value::<SecretStore>(doc.clone()).unwrap(),
                ),
                "ClusterSecretStore" => LoadedStore::from_cluster_secret_store(
                    &serde_json::from_value::<ClusterSecretStore>(doc.clone()).unwrap(),
                ),
                kind if api_version.contains("providers.external-secrets.io/") => {
                    let place = (
                        api_version.split('/').next().unwrap().to_owned(),
                        kind.to_owned(),
                        doc["metadata"]["namespace"].as_str().map(str::to_owned),
                        doc["metadata"]["name"].as_str().unwrap().to_owned(),
                    );
                    if let Some(other) = written.insert(place.clone(), origin.clone()) {
                        panic!("{place:?} is written by both {other} and {origin}");
                    }
                    continue;
                }
                _ => continue,
            };
            let Some(generated) = convert(&registry, &store).unwrap().generated else {
                continue;
            };
            let place = (
                generated.resource.group.clone(),
                generated.resource.kind.clone(),
                store.namespace.clone(),
                store.name.clone(),
            );
            if let Some(other) = converted.insert(place.clone(), origin.clone()) {
                panic!("{place:?} is converted from stores in both {other} and {origin}");
            }
        }
    }
    assert!(
        !written.is_empty() && !converted.is_empty(),
        "the examples should show both forms"
    );
    for (place, origin) in &converted {
        if let Some(other) = written.get(place) {
            panic!(
                "{place:?}: the store in {origin} converts to the object {other} also writes; rename one"
            );
        }
    }
}
