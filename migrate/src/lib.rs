//! `external-secrets migrate stores`: moves stores from ESO's inline `spec.provider` to design
//! 007's `spec.providerRef` (and back) without a Secret being rewritten.
//!
//! To providerRef, a store is switched to the provider object the operator already converted
//! from it (the store reconciler keeps the object a store references), then that object is
//! released (owner reference and label removed) so it outlives the store. Back to inline, the
//! object is adopted first, then the store switched. Either way the provider object and its
//! spec stay the same, so clients and Secrets do too. Each step is idempotent, so an interrupted
//! run is finished by running it again.
//!
//! `external-secrets migrate storage` ([`storage`]) is the other migration: objects of a kind
//! rewritten at its CRD's storage version, then `status.storedVersions` trimmed.

mod plan;
pub mod storage;

use std::fmt::Write as _;

use api::store::{ClusterSecretStore, SecretStore};
use clientmanager::{LoadedStore, StoreKind};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use provider::ProviderRegistry;
use serde_json::Value;

pub use plan::{Direction, Plan, plan};

/// Field manager of the changes `migrate` makes.
pub const FIELD_MANAGER: &str = "external-secrets-migrate";

#[derive(Clone, Debug)]
pub enum Namespaces {
    /// SecretStores of one namespace.
    One(String),
    /// SecretStores of every namespace and every ClusterSecretStore.
    All,
}

/// What to do with the planned changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Apply,
    /// Print what would change, change nothing.
    DryRun,
    /// Print the new manifests (stores and provider objects), change nothing.
    Yaml,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub direction: Direction,
    pub namespaces: Namespaces,
    pub selector: Option<String>,
    pub mode: Mode,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("could not list {kind}s: {source}")]
    List {
        kind: StoreKind,
        source: kube::Error,
    },
    #[error("could not {action} {what}: {source}")]
    Write {
        action: &'static str,
        what: String,
        source: kube::Error,
    },
    #[error("could not read {what}: {source}")]
    Read { what: String, source: kube::Error },
}

/// Counts for the summary line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub changed: usize,
    pub unchanged: usize,
    pub refused: usize,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} changed, {} unchanged, {} refused",
            self.changed, self.unchanged, self.refused
        )
    }
}

/// A store as listed: what the planner needs and the manifest for output.
struct Listed {
    loaded: LoadedStore,
    manifest: Value,
}

/// Runs the migration; `out` receives one line per store (or the manifests) and a summary.
pub async fn migrate(
    client: &kube::Client,
    registry: &ProviderRegistry,
    options: &Options,
    out: &mut String,
) -> Result<Summary, Error> {
    let mut summary = Summary::default();
    for store in list(client, options).await? {
        let object = provider_object(client, registry, &store.loaded).await?;
        let what = describe(&store.loaded);
        match plan(registry, &store.loaded, object.as_ref(), options.direction) {
            Plan::Unchanged(why) => {
                summary.unchanged += 1;
                if options.mode != Mode::Yaml {
                    let _ = writeln!(out, "{what}: unchanged ({why})");
                }
            }
            Plan::Refused(why) => {
                summary.refused += 1;
                let _ = writeln!(out, "{what}: refused: {why}");
            }
            Plan::Change(change) => {
                summary.changed += 1;
                match options.mode {
                    Mode::Apply => {
                        apply(client, &store, &change, options.direction).await?;
                        let _ = writeln!(out, "{what}: {}", change.summary);
                    }
                    Mode::DryRun => {
                        let _ = writeln!(out, "{what}: would {}", change.summary);
                        out.push_str(&plan::diff(&store.manifest, &change.store_patch));
                    }
                    Mode::Yaml => {
                        out.push_str(&plan::manifests(&store.manifest, &change, object.as_ref()));
                    }
                }
            }
        }
    }
    if options.mode != Mode::Yaml {
        let _ = writeln!(out, "{summary}");
    }
    Ok(summary)
}

fn describe(store: &LoadedStore) -> String {
    match &store.namespace {
        Some(ns) => format!("{} {ns}/{}", store.kind, store.name),
        None => format!("{} {}", store.kind, store.name),
    }
}

async fn list(client: &kube::Client, options: &Options) -> Result<Vec<Listed>, Error> {
    let mut params = ListParams::default();
    if let Some(selector) = &options.selector {
        params = params.labels(selector);
    }
    let namespaced: Api<SecretStore> = match &options.namespaces {
        Namespaces::One(ns) => Api::namespaced(client.clone(), ns),
        Namespaces::All => Api::all(client.clone()),
    };
    let mut stores: Vec<Listed> = namespaced
        .list(&params)
        .await
        .map_err(|source| Error::List {
            kind: StoreKind::SecretStore,
            source,
        })?
        .items
        .into_iter()
        .map(|s| Listed {
            loaded: LoadedStore::from_secret_store(&s),
            manifest: serde_json::to_value(&s).unwrap_or_default(),
        })
        .collect();
    if let Namespaces::All = options.namespaces {
        let cluster: Api<ClusterSecretStore> = Api::all(client.clone());
        stores.extend(
            cluster
                .list(&params)
                .await
                .map_err(|source| Error::List {
                    kind: StoreKind::ClusterSecretStore,
                    source,
                })?
                .items
                .into_iter()
                .map(|s| Listed {
                    loaded: LoadedStore::from_cluster_secret_store(&s),
                    manifest: serde_json::to_value(&s).unwrap_or_default(),
                }),
        );
    }
    Ok(stores)
}

/// The provider object the store is converted to (to providerRef) or references (to inline);
/// `None` when there is none to read.
async fn provider_object(
    client: &kube::Client,
    registry: &ProviderRegistry,
    store: &LoadedStore,
) -> Result<Option<(ApiResource, DynamicObject)>, Error> {
    let Some(resource) = plan::object_resource(registry, store) else {
        return Ok(None);
    };
    let api = dynamic(client, &resource, store.namespace.as_deref());
    let name = plan::object_name(store);
    api.get_opt(&name)
        .await
        .map(|o| o.map(|o| (resource.clone(), o)))
        .or_else(|e| match e {
            // The kind is not installed: nothing to migrate to or from.
            kube::Error::Api(s) if s.code == 404 => Ok(None),
            source => Err(Error::Read {
                what: format!("{} {name:?}", resource.kind),
                source,
            }),
        })
}

fn dynamic(
    client: &kube::Client,
    resource: &ApiResource,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

/// Writes a change in the order that keeps the object referenced or owned at every moment.
async fn apply(
    client: &kube::Client,
    store: &Listed,
    change: &plan::Change,
    direction: Direction,
) -> Result<(), Error> {
    let loaded = &store.loaded;
    let params = PatchParams::apply(FIELD_MANAGER);
    let patch_store = || async {
        let Some(patch) = &change.store_patch else {
            return Ok(());
        };
        let result = match loaded.kind {
            StoreKind::SecretStore => {
                let api: Api<SecretStore> = Api::namespaced(
                    client.clone(),
                    loaded.namespace.as_deref().unwrap_or_default(),
                );
                api.patch(&loaded.name, &params, &Patch::Merge(patch))
                    .await
                    .map(|_| ())
            }
            StoreKind::ClusterSecretStore => {
                let api: Api<ClusterSecretStore> = Api::all(client.clone());
                api.patch(&loaded.name, &params, &Patch::Merge(patch))
                    .await
                    .map(|_| ())
            }
        };
        result.map_err(|source| Error::Write {
            action: "update",
            what: describe(loaded),
            source,
        })
    };
    let patch_object = || async {
        let Some((resource, patch)) = &change.object_patch else {
            return Ok(());
        };
        let api = dynamic(client, resource, loaded.namespace.as_deref());
        let name = plan::object_name(loaded);
        api.patch(&name, &params, &Patch::Merge(patch))
            .await
            .map(|_| ())
            .map_err(|source| Error::Write {
                action: "update",
                what: format!("{} {}", resource.kind, name),
                source,
            })
    };
    match direction {
        Direction::ProviderRef => {
            patch_store().await?;
            patch_object().await
        }
        Direction::Inline => {
            patch_object().await?;
            patch_store().await
        }
    }
}
