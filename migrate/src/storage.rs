//! `external-secrets migrate storage`: after a provider's CRD switched its storage version
//! (say `v1alpha1` to `v1beta1`), etcd still holds every older object at the old version, and
//! the CRD's `status.storedVersions` lists both; the old version cannot be removed from the CRD
//! until it is gone from that list. This rewrites every object so etcd holds it at the storage
//! version, then trims `storedVersions` to that version alone.
//!
//! Why a plain update is enough: the API server compares the bytes it would write with the
//! bytes in etcd and skips the write only when they are equal (`GuaranteedUpdate` in the etcd3
//! store). An object read at the storage version and put back unchanged encodes to different
//! bytes while etcd holds it at another version (the stored `apiVersion` differs), so it is
//! written, at the storage version; once etcd holds it at the storage version the same update
//! writes nothing and its `resourceVersion` stays. So an unchanged write does re-encode, exactly
//! when it is needed. Measured against kube-apiserver 1.36 and etcd (the tests read etcd's raw
//! value): an unchanged update, an empty merge patch and an empty apply all moved an object
//! from v1 to v2; a second unchanged update changed nothing, and an update that changes no field
//! adds no `managedFields` entry. We update (PUT) with the `resourceVersion` as read, so that a
//! concurrent change is refused rather than overwritten. Spec and `metadata.generation` stay as
//! they were: only the encoding changes.
//!
//! Resumable and idempotent: `storedVersions` is trimmed only after every object was
//! rewritten, so an interrupted run leaves it as it was and the next run rewrites again,
//! objects already moved costing one no-op update each. A CRD at `[storage]` is not touched.

mod plan;

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use api::provider_kinds::Scope;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, DynamicObject, ListParams, ObjectList, Patch, PatchParams, PostParams, TypeMeta,
};
use kube::{Client, ResourceExt};

pub use plan::{Plan, Target, plan, storage_version_hash};

use crate::FIELD_MANAGER;

/// Objects per list request.
const PAGE: u32 = 500;
/// Attempts at one object's update when others keep changing it.
const CONFLICT_ATTEMPTS: usize = 5;
/// Whole runs over a CRD that changed under the migration (another storage flip).
const CRD_ATTEMPTS: usize = 3;
/// Restarts of the listing when its continue token expired.
const LIST_RESTARTS: usize = 3;
/// How long to wait for the API server to encode at a storage version it was just given.
const SWITCH_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("unknown provider kind {kind:?} (known: {known})")]
    UnknownKind { kind: String, known: String },
    #[error("could not read CRD {crd}: {source}")]
    ReadCrd { crd: String, source: kube::Error },
    #[error("{0}")]
    InvalidCrd(String),
    #[error(
        "the API server did not switch {crd} to storage version {version} within {waited:?} (discovery's storageVersionHash is {seen:?}, expected {expected:?}); nothing was trimmed"
    )]
    NotSwitched {
        crd: String,
        version: String,
        waited: Duration,
        seen: Option<String>,
        expected: String,
    },
    #[error("could not read discovery of {api_version}: {source}")]
    Discovery {
        api_version: String,
        source: kube::Error,
    },
    #[error("could not list {resource}: {source}")]
    List {
        resource: String,
        source: kube::Error,
    },
    #[error("could not rewrite {what}: {source}")]
    Rewrite { what: String, source: kube::Error },
    #[error("could not rewrite {what}: it changed on every one of {CONFLICT_ATTEMPTS} attempts")]
    KeepsChanging { what: String },
    #[error("could not update status.storedVersions of CRD {crd}: {source}")]
    Trim { crd: String, source: kube::Error },
    #[error(
        "CRD {crd} changed during each of {CRD_ATTEMPTS} runs; storedVersions left as it was, run again"
    )]
    CrdKeepsChanging { crd: String },
}

/// What happened to one CRD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The CRD is not installed.
    NotInstalled,
    /// `storedVersions` was already the storage version alone; nothing was read or written.
    UpToDate,
    /// Every object rewritten and `storedVersions` trimmed.
    Migrated(Counts),
    /// Dry run: this many objects would be rewritten.
    WouldMigrate(usize),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Written again, now at the storage version.
    pub rewritten: usize,
    /// Already at the storage version: the update wrote nothing.
    pub unchanged: usize,
    /// Deleted between listing and rewriting.
    pub gone: usize,
}

/// The provider CRDs to migrate, both groups each: every provider kind, or the one named
/// `kind` (compared without case).
pub fn provider_crds(kind: Option<&str>) -> Result<Vec<String>, StorageError> {
    let kinds: Vec<_> = api::providers::ALL
        .iter()
        .filter(|d| kind.is_none_or(|k| d.kind.eq_ignore_ascii_case(k)))
        .collect();
    if let (Some(kind), true) = (kind, kinds.is_empty()) {
        return Err(StorageError::UnknownKind {
            kind: kind.to_owned(),
            known: api::providers::ALL
                .iter()
                .map(|d| d.kind)
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    Ok(kinds
        .iter()
        .flat_map(|d| [Scope::Namespaced, Scope::Cluster].map(|s| d.crd_name(s)))
        .collect())
}

/// Migrates the objects of CRD `crd` to its storage version; `out` receives one line per
/// object and a summary line. With `dry_run`, lists what would be rewritten and changes
/// nothing.
pub async fn migrate_storage(
    client: &Client,
    crd: &str,
    dry_run: bool,
    out: &mut String,
) -> Result<Outcome, StorageError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for _ in 0..CRD_ATTEMPTS {
        let Some(definition) = crds
            .get_opt(crd)
            .await
            .map_err(|source| StorageError::ReadCrd {
                crd: crd.to_owned(),
                source,
            })?
        else {
            let _ = writeln!(out, "{crd}: not installed");
            return Ok(Outcome::NotInstalled);
        };
        let target = match plan(&definition).map_err(StorageError::InvalidCrd)? {
            Plan::UpToDate { storage } => {
                let _ = writeln!(out, "{crd}: storedVersions [{storage}], nothing to do");
                return Ok(Outcome::UpToDate);
            }
            Plan::Migrate(target) => target,
        };
        // Read-only, so the dry run waits too: until then the storage version may not even
        // be served (a list at it answers 404 for a moment after the CRD update).
        wait_for_switch(client, &target).await?;
        if dry_run {
            return dry_run_report(client, &target, out).await;
        }
        let counts = rewrite_all(client, &target, out).await?;
        match crds
            .patch_status(
                crd,
                &PatchParams::default(),
                &Patch::Merge(target.trim_patch()),
            )
            .await
        {
            Ok(_) => {
                let _ = writeln!(
                    out,
                    "{crd}: {} ({} rewritten, {} already at {}, {} deleted meanwhile)",
                    target.change(),
                    counts.rewritten,
                    counts.unchanged,
                    target.storage(),
                    counts.gone
                );
                return Ok(Outcome::Migrated(counts));
            }
            // The storage version may have moved again while objects were rewritten, and
            // some then written at the other one: start over from the CRD as it is now.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let _ = writeln!(out, "{crd}: changed during the run; starting over");
            }
            Err(source) => {
                return Err(StorageError::Trim {
                    crd: crd.to_owned(),
                    source,
                });
            }
        }
    }
    Err(StorageError::CrdKeepsChanging {
        crd: crd.to_owned(),
    })
}

async fn dry_run_report(
    client: &Client,
    target: &Target,
    out: &mut String,
) -> Result<Outcome, StorageError> {
    let mut count = 0;
    for_each_object(client, target, async |object| {
        count += 1;
        let _ = writeln!(
            out,
            "{}: would rewrite at {}",
            describe(target, &object),
            target.storage()
        );
        Ok(())
    })
    .await?;
    let _ = writeln!(
        out,
        "{}: would rewrite {count} object(s) at {}, then {}",
        target.crd,
        target.storage(),
        target.change()
    );
    Ok(Outcome::WouldMigrate(count))
}

/// Waits until discovery reports the storage version's hash. The API server rebuilds a CRD's
/// storage (and its discovery) from its informer a moment after the CRD update returns (in
/// the tests a list at the new version answered 404 right after the update); rewriting before
/// that would write the old encoding again and the trim would then lie. With several API
/// servers this sees only the one that answered, as the upstream storage-version migrator
/// does.
async fn wait_for_switch(client: &Client, target: &Target) -> Result<(), StorageError> {
    let expected = target.storage_version_hash();
    let started = Instant::now();
    loop {
        let seen = discovered_hash(client, target).await?;
        if seen.as_deref() == Some(expected.as_str()) {
            return Ok(());
        }
        if started.elapsed() > SWITCH_TIMEOUT {
            return Err(StorageError::NotSwitched {
                crd: target.crd.clone(),
                version: target.storage().to_owned(),
                waited: SWITCH_TIMEOUT,
                seen,
                expected,
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The `storageVersionHash` discovery reports for the kind at the storage version; `None`
/// while the version is not served yet.
async fn discovered_hash(client: &Client, target: &Target) -> Result<Option<String>, StorageError> {
    let api_version = &target.resource.api_version;
    match client.list_api_group_resources(api_version).await {
        Ok(list) => Ok(list
            .resources
            .into_iter()
            .find(|r| r.name == target.resource.plural)
            .and_then(|r| r.storage_version_hash)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(source) => Err(StorageError::Discovery {
            api_version: api_version.clone(),
            source,
        }),
    }
}

async fn rewrite_all(
    client: &Client,
    target: &Target,
    out: &mut String,
) -> Result<Counts, StorageError> {
    let mut counts = Counts::default();
    for_each_object(client, target, async |object| {
        let what = describe(target, &object);
        let line = match rewrite(client, target, object, &what).await? {
            Rewrite::Written => {
                counts.rewritten += 1;
                format!("rewritten at {}", target.storage())
            }
            Rewrite::Unchanged => {
                counts.unchanged += 1;
                format!("already at {}", target.storage())
            }
            Rewrite::Gone => {
                counts.gone += 1;
                "deleted meanwhile".to_owned()
            }
        };
        let _ = writeln!(out, "{what}: {line}");
        Ok(())
    })
    .await?;
    Ok(counts)
}

/// Calls `each` for every object of the kind (every namespace), a page at a time.
async fn for_each_object(
    client: &Client,
    target: &Target,
    mut each: impl AsyncFnMut(DynamicObject) -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &target.resource);
    let mut restarts = 0;
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().limit(PAGE);
        if let Some(token) = &token {
            params = params.continue_token(token);
        }
        let page: ObjectList<DynamicObject> = match api.list(&params).await {
            Ok(page) => page,
            // The continue token expired (etcd compacted under a long run): list again from
            // the start; objects already rewritten cost a no-op update.
            Err(kube::Error::Api(s)) if s.code == 410 && restarts < LIST_RESTARTS => {
                restarts += 1;
                token = None;
                continue;
            }
            Err(source) => {
                return Err(StorageError::List {
                    resource: format!("{}.{}", target.resource.plural, target.resource.group),
                    source,
                });
            }
        };
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        for object in page.items {
            each(object).await?;
        }
        if token.is_none() {
            return Ok(());
        }
    }
}

enum Rewrite {
    Written,
    Unchanged,
    Gone,
}

/// Puts `object` back as read, with its `resourceVersion`, so that a concurrent change is
/// refused (409) rather than overwritten; on conflict, reads it again and retries.
async fn rewrite(
    client: &Client,
    target: &Target,
    mut object: DynamicObject,
    what: &str,
) -> Result<Rewrite, StorageError> {
    let name = object.name_any();
    let api: Api<DynamicObject> = match object.namespace() {
        Some(ns) => Api::namespaced_with(client.clone(), &ns, &target.resource),
        None => Api::all_with(client.clone(), &target.resource),
    };
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    let error = |source| StorageError::Rewrite {
        what: what.to_owned(),
        source,
    };
    for _ in 0..CONFLICT_ATTEMPTS {
        // List items may come without apiVersion and kind; an update needs both.
        object.types = Some(TypeMeta {
            api_version: target.resource.api_version.clone(),
            kind: target.resource.kind.clone(),
        });
        let before = object.resource_version();
        match api.replace(&name, &params, &object).await {
            Ok(written) if written.resource_version() == before => return Ok(Rewrite::Unchanged),
            Ok(_) => return Ok(Rewrite::Written),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Rewrite::Gone),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                match api.get_opt(&name).await.map_err(error)? {
                    Some(fresh) => object = fresh,
                    None => return Ok(Rewrite::Gone),
                }
            }
            Err(source) => return Err(error(source)),
        }
    }
    Err(StorageError::KeepsChanging {
        what: what.to_owned(),
    })
}

fn describe(target: &Target, object: &DynamicObject) -> String {
    match object.namespace() {
        Some(ns) => format!("{} {ns}/{}", target.resource.kind, object.name_any()),
        None => format!("{} {}", target.resource.kind, object.name_any()),
    }
}
