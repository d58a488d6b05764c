//! Provider objects (design 007's provider reconcilers): one controller per installed provider
//! kind in each group, started when its CRD becomes Established, so a provider installed while
//! the operator runs is picked up without a restart.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::conditions::{Condition, ConditionStatus, READY, set_condition};
use api::provider_kinds::ProviderStatus;
use api::store::{ClusterSecretStore, SecretStore};
use api::{CLUSTER_PROVIDERS_GROUP, PROVIDERS_GROUP};
use clientmanager::ProviderObject;
use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use provider::{Caller, Validation};
use tracing::{info, instrument, warn};

use crate::context::{Context, apply_status};
use crate::secretstore::reason;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("could not write status of {kind} {name:?}: {source}")]
    Status {
        kind: String,
        name: String,
        source: kube::Error,
    },
}

impl Error {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Status { .. } => "Status",
        }
    }
}

/// Where a provider reconciler sends the stores whose generated provider object it saw change.
#[derive(Clone)]
pub struct StoreNudges {
    pub secret_stores: UnboundedSender<ObjectRef<SecretStore>>,
    pub cluster_secret_stores: UnboundedSender<ObjectRef<ClusterSecretStore>>,
    /// Tells store controllers that a provider CRD appeared.
    pub installed: Vec<UnboundedSender<()>>,
}

struct KindContext {
    ctx: Arc<Context>,
    /// Last generation seen per object uid, to tell spec changes from periodic revalidation.
    seen: std::sync::Mutex<std::collections::HashMap<String, i64>>,
    provider: Arc<dyn provider::Provider>,
    resource: ApiResource,
    cluster: bool,
    nudges: StoreNudges,
}

/// Watches CRDs and starts a controller for each provider kind this operator knows, once.
pub async fn discover(ctx: Arc<Context>, nudges: StoreNudges) {
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
        let group = crd.spec.group.as_str();
        let cluster = match group {
            PROVIDERS_GROUP => false,
            CLUSTER_PROVIDERS_GROUP if ctx.settings.namespace.is_none() => true,
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
        let Some(version) = crd
            .spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.clone())
        else {
            continue;
        };
        info!(
            crd = crd.name_any(),
            "provider CRD is installed; starting its controller"
        );
        let resource = ApiResource {
            group: group.to_owned(),
            version: version.clone(),
            api_version: format!("{group}/{version}"),
            kind: crd.spec.names.kind.clone(),
            plural: crd.spec.names.plural.clone(),
        };
        let kind_ctx = Arc::new(KindContext {
            ctx: ctx.clone(),
            seen: Default::default(),
            provider,
            resource,
            cluster,
            nudges: nudges.clone(),
        });
        tokio::spawn(run_kind(kind_ctx));
        for tx in &nudges.installed {
            let _ = tx.unbounded_send(());
        }
    }
}

async fn run_kind(kctx: Arc<KindContext>) {
    let api: Api<DynamicObject> = match (&kctx.ctx.settings.namespace, kctx.cluster) {
        (Some(ns), false) => Api::namespaced_with(kctx.ctx.client.clone(), ns, &kctx.resource),
        _ => Api::all_with(kctx.ctx.client.clone(), &kctx.resource),
    };
    let controller = Controller::new_with(api, watcher::Config::default(), kctx.resource.clone());
    kctx.ctx
        .manager
        .use_provider_cache(kctx.resource.clone(), controller.store());
    controller
        .with_config(
            kube::runtime::controller::Config::default().concurrency(kctx.ctx.settings.concurrency),
        )
        .run(reconcile, error_policy, kctx.clone())
        .for_each(crate::run::outcome(kctx.ctx.clone()))
        .await;
}

fn error_policy(obj: Arc<DynamicObject>, error: &Error, kctx: Arc<KindContext>) -> Action {
    let object = ObjectRef::from_obj_with(obj.as_ref(), kctx.resource.clone());
    kctx.ctx
        .failed("provider", error.kind(), &object.to_string())
}

#[instrument(skip_all, fields(kind = %kctx.resource.kind, group = %kctx.resource.group, namespace = obj.namespace(), name = obj.name_any()))]
async fn reconcile(obj: Arc<DynamicObject>, kctx: Arc<KindContext>) -> Result<Action, Error> {
    let started = Instant::now();
    nudge_owner(&obj, &kctx);
    let object = ProviderObject::from_dynamic(kctx.provider.clone(), &obj);
    let generation = obj.metadata.generation.unwrap_or_default();
    let changed = kctx
        .seen
        .lock()
        .expect("seen generations poisoned")
        .insert(obj.uid().unwrap_or_default(), generation)
        != Some(generation);
    if changed {
        let _ = kctx
            .ctx
            .provider_changed
            .unbounded_send(object.identity.clone());
    }
    let (status, reason, message, capabilities) = validate(object, &kctx).await;
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
        capabilities,
    };
    if new != previous {
        let api: Api<DynamicObject> = match obj.namespace() {
            Some(ns) => Api::namespaced_with(kctx.ctx.client.clone(), &ns, &kctx.resource),
            None => Api::all_with(kctx.ctx.client.clone(), &kctx.resource),
        };
        apply_status(&api, &kctx.resource, &obj.name_any(), &new)
            .await
            .map_err(|source| Error::Status {
                kind: kctx.resource.kind.clone(),
                name: obj.name_any(),
                source,
            })?;
        let was = api::conditions::find(&previous.conditions, READY);
        if was.is_none_or(|c| c.reason.as_deref() != Some(reason)) {
            let type_ = if status == ConditionStatus::False {
                EventType::Warning
            } else {
                EventType::Normal
            };
            kctx.ctx
                .event(&obj.object_ref(&kctx.resource), type_, reason, message)
                .await;
        }
    }
    tracing::debug!(elapsed = ?started.elapsed(), "provider reconciled");
    Ok(Action::requeue(kctx.ctx.settings.store_requeue_interval))
}

async fn validate(
    object: ProviderObject,
    kctx: &KindContext,
) -> (
    ConditionStatus,
    &'static str,
    String,
    Option<api::providers::Capabilities>,
) {
    let provider = object.provider.clone();
    let warnings = match provider.validate_spec(&object.spec) {
        Ok(report) => report.warnings,
        Err(e) => {
            return (
                ConditionStatus::False,
                reason::INVALID_PROVIDER_CONFIG,
                format!("spec: {e}"),
                None,
            );
        }
    };
    let (caller, namespace) = match &object.identity.namespace {
        Some(ns) => (Caller::Provider, ns.clone()),
        None => (Caller::ClusterProvider, String::new()),
    };
    let capabilities = Some(provider.capabilities());
    let handle = match kctx.ctx.manager.client(object, caller, &namespace).await {
        Ok(h) => h,
        Err(e) => {
            return (
                ConditionStatus::False,
                reason::INVALID_PROVIDER_CONFIG,
                format!("unable to create client: {e}"),
                capabilities,
            );
        }
    };
    match handle.client.validate().await {
        Ok(Validation::Ready) => (
            ConditionStatus::True,
            reason::VALID,
            crate::secretstore::valid_message("provider validated", &warnings),
            capabilities,
        ),
        Ok(Validation::Unknown) => (
            ConditionStatus::True,
            reason::VALIDATION_UNKNOWN,
            "provider validation could not be completed".into(),
            capabilities,
        ),
        Err(e) => (
            ConditionStatus::False,
            reason::VALIDATION_FAILED,
            format!("unable to validate provider: {e}"),
            capabilities,
        ),
    }
}

/// A provider object generated from a store's inline provider: let the store put back any hand
/// edit.
fn nudge_owner(obj: &DynamicObject, kctx: &KindContext) {
    for owner in obj
        .owner_references()
        .iter()
        .filter(|o| o.controller == Some(true))
    {
        if owner.api_version != format!("{}/v1", api::GROUP) {
            continue;
        }
        match (owner.kind.as_str(), obj.namespace()) {
            ("SecretStore", Some(ns)) => {
                let _ = kctx
                    .nudges
                    .secret_stores
                    .unbounded_send(ObjectRef::new(&owner.name).within(&ns));
            }
            ("ClusterSecretStore", None) => {
                let _ = kctx
                    .nudges
                    .cluster_secret_stores
                    .unbounded_send(ObjectRef::new(&owner.name));
            }
            _ => {}
        }
    }
}
