//! The Fake provider. Like ESO's, it keeps an in-memory store per provider object: building a
//! client reloads the spec's entries, while values pushed through the client survive.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use api::provider_kinds::Descriptor;
use api::providers::fake::{DESCRIPTOR, FakeProvider};
use async_trait::async_trait;
use provider::{
    Caller, Capabilities, ClientRequest, CredentialsReader, Error, FindRequest, ProviderIdentity,
    ProviderRuntime, ProviderSchema, PushRemoteRef, PushRequest, RemoteRef, Result, SecretsClient,
    SpecReport, Validation, parse_spec,
};
use serde_json::Value;

/// Entries keyed by (key, version); pushed entries have no version.
type Entries = BTreeMap<(String, String), Entry>;

#[derive(Clone, Debug)]
struct Entry {
    value: String,
    from_spec: bool,
}

#[derive(Default)]
pub struct Fake {
    stores: Mutex<HashMap<ProviderIdentity, Arc<Mutex<Entries>>>>,
}

impl ProviderSchema for Fake {
    fn descriptor(&self) -> &'static Descriptor {
        &DESCRIPTOR
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ReadWrite
    }

    fn apply_referent(&self, spec: Value, _caller: Caller, _namespace: &str) -> Result<Value> {
        // Static data references nothing in any namespace.
        Ok(spec)
    }

    fn validate_spec(&self, spec: &Value) -> Result<SpecReport> {
        let spec: FakeProvider = parse_spec(spec)?;
        for (i, entry) in spec.data.iter().enumerate() {
            if entry.key.is_empty() {
                return Err(Error::InvalidSpec(format!(
                    "data[{i}].key must not be empty"
                )));
            }
            if entry.value.is_none() {
                return Err(Error::InvalidSpec(format!("data[{i}].value is required")));
            }
        }
        Ok(SpecReport::default())
    }
}

#[async_trait]
impl ProviderRuntime for Fake {
    async fn new_client(
        &self,
        request: ClientRequest,
        _credentials: Arc<dyn CredentialsReader>,
    ) -> Result<Box<dyn SecretsClient>> {
        Ok(Box::new(self.client(request)?))
    }
}

impl Fake {
    fn client(&self, request: ClientRequest) -> Result<FakeClient> {
        let spec: FakeProvider = parse_spec(&request.spec)?;
        let entries = {
            let mut stores = self.stores.lock().expect("fake store lock poisoned");
            stores.entry(request.provider).or_default().clone()
        };
        {
            let mut entries = entries.lock().expect("fake entries lock poisoned");
            entries.retain(|_, e| !e.from_spec);
            for d in &spec.data {
                entries.insert(
                    (d.key.clone(), d.version.clone().unwrap_or_default()),
                    Entry {
                        value: d.value.clone().unwrap_or_default(),
                        from_spec: true,
                    },
                );
            }
        }
        Ok(FakeClient {
            entries,
            validation_result: spec.validation_result,
        })
    }
}

struct FakeClient {
    entries: Arc<Mutex<Entries>>,
    validation_result: Option<i32>,
}

impl FakeClient {
    fn lookup(&self, key: &str, version: &str) -> Option<String> {
        let entries = self.entries.lock().expect("fake entries lock poisoned");
        entries
            .get(&(key.to_owned(), version.to_owned()))
            .map(|e| e.value.clone())
    }
}

#[async_trait]
impl SecretsClient for FakeClient {
    async fn get_secret(&self, remote: &RemoteRef) -> Result<Vec<u8>> {
        if remote.fetch_metadata {
            return Err(Error::Unsupported {
                provider: DESCRIPTOR.kind.to_owned(),
                operation: "metadataPolicy Fetch".to_owned(),
            });
        }
        let value = self
            .lookup(&remote.key, remote.version.as_deref().unwrap_or_default())
            .ok_or(Error::NoSecret)?;
        match &remote.property {
            None => Ok(value.into_bytes()),
            Some(property) => {
                provider::json_path::property(&value, property).ok_or(Error::NoSecret)
            }
        }
    }

    async fn get_secret_map(&self, remote: &RemoteRef) -> Result<BTreeMap<String, Vec<u8>>> {
        let raw = self.get_secret(remote).await?;
        let map = provider::json_path::object(&raw).map_err(|why| {
            Error::Backend(format!(
                "value of key {:?} is not a JSON object{why}",
                remote.key
            ))
        })?;
        Ok(map
            .into_iter()
            .map(|(k, v)| (k, provider::json_path::json_to_bytes(v)))
            .collect())
    }

    async fn get_all_secrets(&self, find: &FindRequest) -> Result<BTreeMap<String, Vec<u8>>> {
        let Some(pattern) = &find.name_regexp else {
            return Err(Error::Unsupported {
                provider: DESCRIPTOR.kind.to_owned(),
                operation: "find without name.regexp".to_owned(),
            });
        };
        let re = regex::Regex::new(pattern)
            .map_err(|e| Error::Backend(format!("find.name.regexp: {e}")))?;
        let entries = self.entries.lock().expect("fake entries lock poisoned");
        // The highest version of each key wins, compared as strings as ESO does.
        let mut newest: BTreeMap<String, (&str, &str)> = BTreeMap::new();
        for ((key, version), entry) in entries.iter() {
            if !re.is_match(key) {
                continue;
            }
            let slot = newest.entry(key.clone()).or_insert((version, &entry.value));
            if version.as_str() >= slot.0 {
                *slot = (version, &entry.value);
            }
        }
        Ok(newest
            .into_iter()
            .map(|(k, (_, v))| (k, v.as_bytes().to_vec()))
            .collect())
    }

    async fn push_secret(&self, push: &PushRequest) -> Result<()> {
        let mut entries = self.entries.lock().expect("fake entries lock poisoned");
        let slot = (push.remote.remote_key.clone(), String::new());
        if entries.get(&slot).is_some_and(|e| e.from_spec) {
            return Err(Error::Backend(format!(
                "key {:?} already exists in the spec",
                push.remote.remote_key
            )));
        }
        let value = String::from_utf8(push.value.clone())
            .map_err(|_| Error::Backend("the Fake provider stores UTF-8 values only".into()))?;
        entries.insert(
            slot,
            Entry {
                value,
                from_spec: false,
            },
        );
        Ok(())
    }

    async fn delete_secret(&self, remote: &PushRemoteRef) -> Result<()> {
        let mut entries = self.entries.lock().expect("fake entries lock poisoned");
        let slot = (remote.remote_key.clone(), String::new());
        if entries.get(&slot).is_some_and(|e| !e.from_spec) {
            entries.remove(&slot);
        }
        Ok(())
    }

    async fn secret_exists(&self, remote: &PushRemoteRef) -> Result<bool> {
        let entries = self.entries.lock().expect("fake entries lock poisoned");
        Ok(entries.keys().any(|(k, _)| *k == remote.remote_key))
    }

    async fn validate(&self) -> Result<Validation> {
        match self.validation_result {
            None | Some(0) => Ok(Validation::Ready),
            Some(1) => Ok(Validation::Unknown),
            Some(_) => Err(Error::Backend(
                "validation failed: spec.validationResult is Error".into(),
            )),
        }
    }

    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
