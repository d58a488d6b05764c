//! The kinds generic targets use, discovered and watched once each: the part of generic targets
//! the shared context holds.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use api::external_secret::ManifestReference;
use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::core::PartialObjectMeta;
use kube::discovery::Scope;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use crate::externalsecret::desired::MANAGED_LABEL;
use crate::own_writes::{TargetChange, TargetRef};

/// Why a manifest's kind cannot hold a target.
#[derive(Debug)]
pub(super) enum KindError {
    NotServed {
        api_version: String,
        kind: String,
        message: String,
    },
    ClusterScoped(String),
}

/// The kinds generic targets use: found once through discovery, and watched once any target of
/// the kind is written, so that a hand edit is reverted at once (ESO's drift detection).
pub struct GenericTargets {
    pub(super) enabled: bool,
    namespace: Option<String>,
    resources: Mutex<HashMap<GroupVersionKind, ApiResource>>,
    watched: Mutex<HashSet<GroupVersionKind>>,
    changes: UnboundedSender<TargetChange>,
}

impl GenericTargets {
    pub fn new(
        enabled: bool,
        namespace: Option<String>,
        changes: UnboundedSender<TargetChange>,
    ) -> Self {
        Self {
            enabled,
            namespace,
            resources: Mutex::default(),
            watched: Mutex::default(),
            changes,
        }
    }

    /// The served resource of `manifest`'s kind; only namespaced kinds can be targets.
    pub(super) async fn resource(
        &self,
        client: &kube::Client,
        manifest: &ManifestReference,
    ) -> Result<ApiResource, KindError> {
        let (group, version) = match manifest.api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", manifest.api_version.as_str()),
        };
        let gvk = GroupVersionKind::gvk(group, version, &manifest.kind);
        if let Some(found) = self.lock_resources().get(&gvk) {
            return Ok(found.clone());
        }
        let (resource, capabilities) =
            kube::discovery::pinned_kind(client, &gvk)
                .await
                .map_err(|e| KindError::NotServed {
                    api_version: manifest.api_version.clone(),
                    kind: manifest.kind.clone(),
                    message: e.to_string(),
                })?;
        if capabilities.scope != Scope::Namespaced {
            return Err(KindError::ClusterScoped(manifest.kind.clone()));
        }
        self.lock_resources().insert(gvk, resource.clone());
        Ok(resource)
    }

    fn lock_resources(&self) -> std::sync::MutexGuard<'_, HashMap<GroupVersionKind, ApiResource>> {
        self.resources
            .lock()
            .expect("generic target kinds poisoned")
    }

    /// Starts watching the managed objects of `resource`'s kind, once.
    pub(super) fn watch(&self, client: &kube::Client, resource: &ApiResource) {
        let gvk = GroupVersionKind::gvk(&resource.group, &resource.version, &resource.kind);
        if !self
            .watched
            .lock()
            .expect("watched generic kinds poisoned")
            .insert(gvk)
        {
            return;
        }
        let api: Api<PartialObjectMeta<DynamicObject>> = match &self.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
            None => Api::all_with(client.clone(), resource),
        };
        let changes = self.changes.clone();
        let (group, kind) = (resource.group.clone(), resource.kind.clone());
        tokio::spawn(async move {
            watcher(
                api,
                watcher::Config::default().labels(&format!("{MANAGED_LABEL}=true")),
            )
            .default_backoff()
            .touched_objects()
            .for_each(|object: Result<PartialObjectMeta<DynamicObject>, _>| {
                if let Ok(object) = object {
                    let _ = changes.unbounded_send(TargetChange {
                        target: TargetRef {
                            group: group.clone(),
                            kind: kind.clone(),
                            namespace: object.namespace().unwrap_or_default(),
                            name: object.name_any(),
                        },
                        resource_version: object.resource_version(),
                        uid: object.uid(),
                    });
                }
                futures::future::ready(())
            })
            .await;
        });
    }
}
