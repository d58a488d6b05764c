//! Provider objects (design 007's provider reconcilers): one controller per installed provider
//! kind in each group, started when its CRD becomes Established, so a provider installed while
//! the operator runs is picked up without a restart. A provider object that changes or turns
//! Ready wakes the stores that read through it.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::conditions::{Condition, ConditionStatus, READY, set_condition};
use api::provider_kinds::{ProviderStatus, Scope};
use api::store::{ClusterSecretStore, SecretStore};
use clientmanager::{LoadedStore, ProviderObject, StoreKind};
use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use provider::{Caller, ProviderIdentity};
use tracing::{info, instrument, warn};

use crate::context::Context;
use crate::generations::Generations;
use crate::readiness::{self, StatusError, Subject};

/// What the provider reconcilers of every kind work with: the handles every reconciler shares,
/// the generations seen of provider objects, and where a changed one is announced.
pub struct ProviderObjectContext {
    pub shared: Arc<Context>,
    /// Spec changes of provider objects, as opposed to first sights after a start.
    pub generations: Arc<Generations>,
    /// Provider objects whose spec changed: the ExternalSecrets reading through them resync.
    provider_changed: UnboundedSender<ProviderIdentity>,
}

impl ProviderObjectContext {
    pub fn new(
        shared: Arc<Context>,
        provider_changed: UnboundedSender<ProviderIdentity>,
    ) -> Arc<Self> {
        Arc::new(Self {
            shared,
            generations: Default::default(),
            provider_changed,
        })
    }
}

/// Where a provider reconciler sends the stores that read through an object it saw change.
#[derive(Clone)]
pub struct StoreNudges {
    pub secret_stores: UnboundedSender<ObjectRef<SecretStore>>,
    pub cluster_secret_stores: UnboundedSender<ObjectRef<ClusterSecretStore>>,
    /// Tells store controllers that a provider CRD appeared.
    pub installed: Vec<UnboundedSender<()>>,
}

impl StoreNudges {
    /// Has `stores` revalidated now rather than at their interval.
    pub fn send(&self, stores: Vec<LoadedStore>) {
        for store in stores {
            match (store.kind, store.namespace) {
                (StoreKind::SecretStore, Some(ns)) => {
                    let _ = self
                        .secret_stores
                        .unbounded_send(ObjectRef::new(&store.name).within(&ns));
                }
                (StoreKind::ClusterSecretStore, _) => {
                    let _ = self
                        .cluster_secret_stores
                        .unbounded_send(ObjectRef::new(&store.name));
                }
                (StoreKind::SecretStore, None) => {}
            }
        }
    }
}

struct KindContext {
    objects: Arc<ProviderObjectContext>,
    provider: Arc<dyn provider::Provider>,
    resource: ApiResource,
    cluster: bool,
    nudges: StoreNudges,
}

/// Watches CRDs and starts a controller for each provider kind this operator knows, once.
pub async fn discover(objects_ctx: Arc<ProviderObjectContext>, nudges: StoreNudges) {
    let ctx = objects_ctx.shared.clone();
    let crds: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    let mut started = HashSet::new();
    let mut events = watcher(crds, watcher::Config::default())
        .applied_objects()
        .boxed();
    while let Some(event) = events.next().await {
        let crd = match event {
            Ok(crd) => crd,
            Err(e) => {
                warn!(error = %e, "watching CRDs failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let cluster = match Scope::of_group(&crd.spec.group) {
            Some(Scope::Namespaced) => false,
            Some(Scope::Cluster) if ctx.settings.namespace.is_none() => true,
            _ => continue,
        };
        let Some(provider) = ctx
            .manager
            .registry()
            .by_kind(&crd.spec.names.kind)
            .cloned()
        else {
            continue;
        };
        let established = crd
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        if !established || !started.insert(crd.name_any()) {
            continue;
        }
        // Watched at the version the cluster stores, which this build must also serve.
        let Some(version) = crd.spec.versions.iter().find(|v| v.storage) else {
            continue;
        };
        let descriptor = provider.descriptor();
        if !descriptor.serves(&version.name) {
            warn!(
                crd = crd.name_any(),
                version = version.name,
                "provider CRD stores a version this build does not serve; not watching it"
            );
            continue;
        }
        info!(
            crd = crd.name_any(),
            "provider CRD is installed; starting its controller"
        );
        let scope = if cluster {
            Scope::Cluster
        } else {
            Scope::Namespaced
        };
        let resource = descriptor.resource(scope, &version.name);
        let kind_ctx = Arc::new(KindContext {
            objects: objects_ctx.clone(),
            provider,
            resource,
            cluster,
            nudges: nudges.clone(),
        });
        tokio::spawn(run_kind(kind_ctx));
    }
}

/// Until the operator may list and watch `kctx`'s kind. A Helm upgrade that enables a provider
/// applies its CRD before the ClusterRole that grants it, and a watch started in between would
/// only be refused and retried.
async fn wait_for_permission(kctx: &KindContext) {
    let ctx = kctx.objects.shared.as_ref();
    let namespace = match (&ctx.settings.namespace, kctx.cluster) {
        (Some(ns), false) => Some(ns.clone()),
        _ => None,
    };
    let allowed = |verb: &'static str| {
        let attributes = access_review::ResourceAttributes {
            group: Some(kctx.resource.group.clone()),
            resource: Some(kctx.resource.plural.clone()),
            verb: Some(verb.to_owned()),
            namespace: namespace.clone(),
            ..Default::default()
        };
        async move {
            access_review::allowed(&ctx.client, attributes)
                .await
                // Cannot ask: start, and let the watch report what it meets.
                .unwrap_or_else(|e| {
                    warn!(error = %e, "could not check the permission to watch a provider kind");
                    true
                })
        }
    };
    let mut told = false;
    while !(allowed("list").await && allowed("watch").await) {
        if !told {
            info!(
                group = kctx.resource.group,
                resource = kctx.resource.plural,
                "waiting for permission to list and watch this provider kind"
            );
            told = true;
        }
        tokio::time::sleep(PERMISSION_POLL).await;
    }
}

const PERMISSION_POLL: Duration = Duration::from_secs(2);

async fn run_kind(kctx: Arc<KindContext>) {
    wait_for_permission(&kctx).await;
    let ctx = kctx.objects.shared.clone();
    let api: Api<DynamicObject> = match (&ctx.settings.namespace, kctx.cluster) {
        (Some(ns), false) => Api::namespaced_with(ctx.client.clone(), ns, &kctx.resource),
        _ => Api::all_with(ctx.client.clone(), &kctx.resource),
    };
    let writer = kube::runtime::reflector::store::Writer::new(kctx.resource.clone());
    let store = writer.as_reader();
    let queue = ctx.workqueue(format!("{}.{}", kctx.resource.plural, kctx.resource.group));
    let departed = {
        let (ctx, kind) = (ctx.clone(), kctx.provider.descriptor().kind);
        move |object: ObjectRef<DynamicObject>| {
            // Its clients (an inline store's, deleted with the store) are closed now, not
            // after the idle eviction's quarter of an hour.
            let (ctx, identity) = (
                ctx.clone(),
                provider::ProviderIdentity {
                    kind: kind.to_owned(),
                    namespace: object.namespace,
                    name: object.name,
                },
            );
            tokio::spawn(async move { ctx.manager.forget(&identity).await });
        }
    };
    let objects = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer);
    let controller = queue.controller(objects, store.clone(), kctx.resource.clone(), departed);
    let reconcile = queue.reconciler(reconcile);
    ctx.manager.use_provider_cache(kctx.resource.clone(), store);
    // Stores waiting for this kind resolve it now.
    for tx in &kctx.nudges.installed {
        let _ = tx.unbounded_send(());
    }
    controller
        .run(reconcile, queue.error_policy(error_policy), kctx.clone())
        .for_each(crate::outcome::after_reconcile(ctx.clone(), queue))
        .await;
}

fn error_policy(obj: Arc<DynamicObject>, error: &StatusError, kctx: Arc<KindContext>) -> Action {
    use crate::outcome::ErrorKind;
    let object = ObjectRef::from_obj_with(obj.as_ref(), kctx.resource.clone());
    kctx.objects
        .shared
        .failed("provider", error.kind(), &object.to_string())
}

/// Whether a change of `obj` is announced to the ExternalSecrets reading through it: when it is
/// news (a new generation, or created while this operator runs), except a store's converted
/// object just written, which holds the store's own spec: its ExternalSecrets already read
/// through it (and a store change wakes them itself). Announcing it would refetch every
/// ExternalSecret of every inline store when an operator takes over from Go ESO, which made
/// none.
fn announced(generations: &Generations, obj: &DynamicObject) -> bool {
    let converted_just_now = obj.labels().contains_key(api::store::LABEL_CONVERTED_FROM)
        && obj.metadata.generation == Some(1);
    generations.changed(obj) && !converted_just_now
}

#[instrument(skip_all, fields(kind = %kctx.resource.kind, group = %kctx.resource.group, namespace = obj.namespace(), name = obj.name_any()))]
async fn reconcile(obj: Arc<DynamicObject>, kctx: Arc<KindContext>) -> Result<Action, StatusError> {
    let ctx = kctx.objects.shared.as_ref();
    let started = Instant::now();
    let object = ProviderObject::from_dynamic(kctx.provider.clone(), &obj);
    let identity = object.identity.clone();
    let changed = announced(&kctx.objects.generations, &obj);
    if changed {
        let _ = kctx
            .objects
            .provider_changed
            .unbounded_send(identity.clone());
    }
    // A hand edit of a converted object is put back before it is validated, whatever
    // generations were seen (the edit may be the first this operator sees of the object).
    let drifted = if obj.labels().contains_key(api::store::LABEL_CONVERTED_FROM) {
        let spec = obj.data.get("spec").unwrap_or(&serde_json::Value::Null);
        ctx.manager.stores_drifted_from(&identity, spec)
    } else {
        Vec::new()
    };
    for store in &drifted {
        crate::secretstore::put_back_converted(store, ctx).await;
    }
    let (caller, namespace) = match &identity.namespace {
        Some(ns) => (Caller::Provider, ns.clone()),
        None => (Caller::ClusterProvider, String::new()),
    };
    let readiness = readiness::check(
        ctx,
        Subject::Provider,
        object,
        (caller, &namespace),
        ctx.manager.class_of_kind(&identity.kind),
    )
    .await;
    let (status, reason, message) = (readiness.status, readiness.reason, readiness.message);
    let previous: ProviderStatus = obj
        .data
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .unwrap_or_default();
    let mut conditions = previous.conditions.clone();
    set_condition(
        &mut conditions,
        Condition::ready(status, reason, message.clone()),
        jiff::Timestamp::now(),
    );
    let new = ProviderStatus {
        conditions,
        observed_generation: obj.metadata.generation,
        capabilities: readiness.capabilities,
    };
    let was_ready = api::conditions::find(&previous.conditions, READY)
        .is_some_and(|c| c.status == ConditionStatus::True);
    if changed || (status == ConditionStatus::True && !was_ready) {
        // The stores reading through it revalidate now rather than at their interval.
        kctx.nudges.send(ctx.manager.stores_using(&identity));
    } else {
        kctx.nudges.send(drifted);
    }
    let api: Api<DynamicObject> = match obj.namespace() {
        Some(ns) => Api::namespaced_with(ctx.client.clone(), &ns, &kctx.resource),
        None => Api::all_with(ctx.client.clone(), &kctx.resource),
    };
    let written = ctx
        .status
        .update(&api, &kctx.resource, &obj.metadata, &previous, &new)
        .await
        .map_err(|source| StatusError {
            part: "status",
            kind: kctx.resource.kind.clone(),
            name: obj.name_any(),
            source,
        })?;
    if written {
        let was = api::conditions::find(&previous.conditions, READY);
        if was.is_none_or(|c| c.reason.as_deref() != Some(reason)) {
            let type_ = if status == ConditionStatus::False {
                EventType::Warning
            } else {
                EventType::Normal
            };
            ctx.event(&obj.object_ref(&kctx.resource), type_, reason, message);
        }
    }
    tracing::debug!(elapsed = ?started.elapsed(), "provider reconciled");
    Ok(Action::requeue(ctx.settings.store_requeue_interval))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fake(
        name: &str,
        generation: i64,
        converted: bool,
        created: jiff::Timestamp,
    ) -> DynamicObject {
        let labels = if converted {
            json!({api::store::LABEL_CONVERTED_FROM: "store"})
        } else {
            json!({})
        };
        serde_json::from_value(json!({
            "apiVersion": "providers.external-secrets.io/v1alpha1", "kind": "Fake",
            "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}"),
                         "generation": generation, "labels": labels,
                         "creationTimestamp": created.to_string()},
            "spec": {"data": []},
        }))
        .unwrap()
    }

    /// The decision `an_inline_store_s_converted_object_forces_its_users` (externalsecret
    /// tests) takes as given: which provider object changes reach the ExternalSecrets.
    #[test]
    fn a_converted_object_is_announced_from_its_second_generation_a_hand_made_one_at_once() {
        let before = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60);
        let generations = Generations::default();
        let now = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(1);
        // In order: each sight is recorded, as the watch shows them one after another.
        let sights = [
            (
                "converted",
                1,
                true,
                now,
                false,
                "a converted object just written holds its store's spec",
            ),
            ("converted", 2, true, now, true, "a store edit rewrote it"),
            (
                "converted",
                2,
                true,
                now,
                false,
                "the same generation again (a status write)",
            ),
            (
                "by-hand",
                1,
                false,
                now,
                true,
                "a provider object made while the operator runs",
            ),
            (
                "older",
                3,
                false,
                before,
                false,
                "an object first seen after a start is no news",
            ),
        ];
        for (name, generation, converted, created, expected, why) in sights {
            let obj = fake(name, generation, converted, created);
            assert_eq!(announced(&generations, &obj), expected, "{why}");
        }
    }
}
