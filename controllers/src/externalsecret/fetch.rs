//! Reading an ExternalSecret's data from its stores, in ESO's order: every `dataFrom` entry,
//! then every `data` entry, later values winning.

use std::collections::{BTreeMap, HashMap};

use api::external_secret::{
    ConversionStrategy, DeletionPolicy, ExternalSecret, MetadataPolicy, SecretStoreRef,
};
use clientmanager::{Handle, StoreKind, StoreRef};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use provider::{FindRequest, RemoteRef};

use super::desired::{check_nul, convert_keys, decode, valid_key};
use super::{Error, SyncStop};
use crate::context::Context;
use crate::rename::{Rename, RenameError};

struct Stores<'a> {
    ctx: &'a Context,
    namespace: String,
    default: Option<StoreRef>,
    handles: HashMap<StoreRef, Handle>,
}

impl Stores<'_> {
    async fn handle(
        &mut self,
        over: Option<&SecretStoreRef>,
        field: &str,
    ) -> Result<Handle, SyncStop> {
        let store = match over {
            Some(r) => to_store_ref(r),
            None => self.default.clone().ok_or_else(|| Error::Invalid {
                field: format!("{field}.sourceRef.storeRef"),
                message: "no store: set spec.secretStoreRef or a sourceRef.storeRef".into(),
            })?,
        };
        if let Some(h) = self.handles.get(&store) {
            return Ok(h.clone());
        }
        let handle = self.ctx.manager.get(&store, &self.namespace).await?;
        self.handles.insert(store, handle.clone());
        Ok(handle)
    }
}

pub(super) fn to_store_ref(r: &SecretStoreRef) -> StoreRef {
    StoreRef {
        kind: StoreKind::parse(r.kind.map(|k| k.as_str())),
        name: r.name.clone(),
    }
}

pub(super) async fn fetch(
    es: &ExternalSecret,
    ctx: &Context,
) -> Result<BTreeMap<String, Vec<u8>>, SyncStop> {
    let mut stores = Stores {
        ctx,
        namespace: es.namespace().unwrap_or_default(),
        default: es.spec.secret_store_ref.as_ref().map(to_store_ref),
        handles: HashMap::new(),
    };
    let retain = es.spec.deletion_policy() == DeletionPolicy::Retain;
    let mut out = BTreeMap::new();

    for (i, entry) in es.spec.data_from.iter().flatten().enumerate() {
        let field = format!("spec.dataFrom[{i}]");
        if let Some(generator) = entry
            .source_ref
            .as_ref()
            .and_then(|s| s.generator_ref.as_ref())
        {
            let map = super::generate::generated(ctx, &stores.namespace, generator, &field).await?;
            // Generated keys are named by the generator: a rewrite renames them, as in ESO.
            let map = if entry.rewrite.as_ref().is_some_and(|r| !r.is_empty()) {
                rewrite(entry, map, &field)?
            } else {
                map
            };
            insert_checked(&mut out, map, &field, None, None)?;
            continue;
        }
        let over = entry.source_ref.as_ref().and_then(|s| s.store_ref.as_ref());
        let handle = stores.handle(over, &field).await?;
        let kind = handle.identity.kind.as_str();
        let (result, (strategy, conversion, nul), call) = if let Some(extract) = &entry.extract {
            let remote = RemoteRef {
                key: extract.key.clone(),
                property: extract.property.clone(),
                version: extract.version.clone(),
                fetch_metadata: extract.metadata_policy == Some(MetadataPolicy::Fetch),
            };
            (
                handle.client.get_secret_map(&remote).await,
                (
                    extract.decoding_strategy,
                    extract.conversion_strategy,
                    extract.null_byte_policy,
                ),
                "GetSecretMap",
            )
        } else if let Some(find) = &entry.find {
            let request = FindRequest {
                path: find.path.clone(),
                name_regexp: find.name.as_ref().and_then(|n| n.regexp.clone()),
                tags: find.tags.clone().unwrap_or_default(),
            };
            (
                handle.client.get_all_secrets(&request).await,
                (
                    find.decoding_strategy,
                    find.conversion_strategy,
                    find.null_byte_policy,
                ),
                "GetAllSecrets",
            )
        } else {
            return Err(Error::Invalid {
                field,
                message: "generatorRef is not supported yet; use extract or find".into(),
            }
            .into());
        };
        ctx.metrics.provider_call(
            kind,
            call,
            result.is_ok() || matches!(result, Err(provider::Error::NoSecret)),
        );
        let map = match result {
            Ok(m) => m,
            Err(provider::Error::NoSecret) if !retain => {
                missing(es, ctx, &field).await;
                continue;
            }
            Err(source) => return Err(Error::Provider { field, source }.into()),
        };
        // ESO: a rewrite names the keys; without one, the conversion strategy makes them valid.
        let map = if entry.rewrite.as_ref().is_some_and(|r| !r.is_empty()) {
            rewrite(entry, map, &field)?
        } else {
            let unicode = conversion == Some(ConversionStrategy::Unicode);
            let source = if entry.extract.is_some() {
                "extract"
            } else {
                "find"
            };
            convert_keys(map, unicode).map_err(|message| Error::Invalid {
                field: format!("{field}.{source}.conversionStrategy"),
                message,
            })?
        };
        insert_checked(&mut out, map, &field, strategy, nul)?;
    }

    for (i, entry) in es.spec.data.iter().flatten().enumerate() {
        let field = format!("spec.data[{i}]");
        let over = entry.source_ref.as_ref().and_then(|s| s.store_ref.as_ref());
        let handle = stores.handle(over, &field).await?;
        let remote = RemoteRef {
            key: entry.remote_ref.key.clone(),
            property: entry.remote_ref.property.clone(),
            version: entry.remote_ref.version.clone(),
            fetch_metadata: entry.remote_ref.metadata_policy == Some(MetadataPolicy::Fetch),
        };
        let result = handle.client.get_secret(&remote).await;
        ctx.metrics.provider_call(
            &handle.identity.kind,
            "GetSecret",
            result.is_ok() || matches!(result, Err(provider::Error::NoSecret)),
        );
        let value = match result {
            Ok(v) => v,
            Err(provider::Error::NoSecret) if !retain => {
                missing(es, ctx, &field).await;
                continue;
            }
            Err(source) => {
                return Err(Error::Provider {
                    field: format!("{field}.remoteRef (key {:?})", remote.key),
                    source,
                }
                .into());
            }
        };
        let value =
            decode(value, entry.remote_ref.decoding_strategy.into()).map_err(|message| {
                Error::Invalid {
                    field: format!("{field}.remoteRef.decodingStrategy"),
                    message,
                }
            })?;
        check_nul(&value, entry.remote_ref.null_byte_policy).map_err(|message| Error::Invalid {
            field: format!("{field}.remoteRef.nullBytePolicy"),
            message,
        })?;
        out.insert(entry.secret_key.clone(), value);
    }
    Ok(out)
}

/// Adds one `dataFrom` entry's keys: each a valid Secret key, decoded and checked for NUL bytes
/// as the entry says. ESO drops keys that are empty (nothing upstream to name them) rather than
/// failing.
fn insert_checked(
    out: &mut BTreeMap<String, Vec<u8>>,
    map: BTreeMap<String, Vec<u8>>,
    field: &str,
    strategy: Option<api::external_secret::DecodingStrategy>,
    nul: Option<api::external_secret::NullBytePolicy>,
) -> Result<(), Error> {
    for (k, v) in map.into_iter().filter(|(k, _)| !k.is_empty()) {
        let invalid = |message: String| Error::Invalid {
            field: format!("{field} key {k:?}"),
            message,
        };
        if !valid_key(&k) {
            return Err(invalid(
                "not a valid Secret key (ASCII letters, digits, '-', '_' and '.' only); add a rewrite"
                    .into(),
            ));
        }
        let v = decode(v, strategy.into()).map_err(invalid)?;
        check_nul(&v, nul).map_err(invalid)?;
        out.insert(k, v);
    }
    Ok(())
}

async fn missing(es: &ExternalSecret, ctx: &Context, field: &str) {
    ctx.event(
        &es.object_ref(&()),
        EventType::Normal,
        "MissingProviderSecret",
        format!("{field}: the secret does not exist at the provider"),
    );
}

/// `dataFrom[].rewrite`: regexp and template rewrites of key names, in order. Two keys that
/// become one are an error naming both (ESO keeps whichever its map iteration gives last).
fn rewrite(
    entry: &api::external_secret::ExternalSecretDataFrom,
    map: BTreeMap<String, Vec<u8>>,
    field: &str,
) -> Result<BTreeMap<String, Vec<u8>>, Error> {
    let mut map = map;
    for (j, step) in entry.rewrite.iter().flatten().enumerate() {
        let step_field = format!("{field}.rewrite[{j}]");
        if let Some(op) = &step.merge {
            map = super::merge::merge(op, map).map_err(|message| Error::Invalid {
                field: format!("{step_field}.merge"),
                message,
            })?;
            continue;
        }
        // The CRD's rule requires exactly one of regexp, transform and merge.
        let Some(rename) = Rename::new(step.regexp.as_ref(), step.transform.as_ref(), &step_field)
            .map_err(|e| match e {
                RenameError::Invalid { field, message } => Error::Invalid { field, message },
                RenameError::Template(e) => Error::Template(e),
            })?
        else {
            continue;
        };
        let mut out = BTreeMap::new();
        let mut from: BTreeMap<String, String> = BTreeMap::new();
        for (k, v) in map {
            let renamed = rename.apply(&k)?;
            if let Some(earlier) = from.insert(renamed.clone(), k.clone()) {
                return Err(Error::Invalid {
                    field: step_field,
                    message: format!("keys {earlier:?} and {k:?} both become {renamed:?}"),
                });
            }
            out.insert(renamed, v);
        }
        map = out;
    }
    Ok(map)
}
