//! SecretStore and ClusterSecretStore: turn an inline `spec.provider` into a provider object
//! (design 007's `Convert`), resolve the provider object, validate it, report status.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::conditions::{Condition, ConditionStatus, READY, set_condition};
use api::providers::Capabilities;
use api::store::{ClusterSecretStore, SecretStore, SecretStoreStatus};
use api::{CLUSTER_PROVIDERS_GROUP, PROVIDERS_GROUP};
use clientmanager::{
    LoadedStore, StoreKind, derived_provider_ref, inline_provider, provider_resource,
};
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use provider::{Caller, Validation};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::{info, instrument};

use crate::context::{Context, apply_status};
use crate::metrics::{ConditionGauge, Metrics, ObjectLabels, labels};

/// ESO's reasons for a store's Ready condition, plus ProviderNotInstalled.
pub mod reason {
    pub const VALID: &str = "Valid";
    pub const INVALID_PROVIDER_CONFIG: &str = "InvalidProviderConfig";
    pub const VALIDATION_FAILED: &str = "ValidationFailed";
    pub const VALIDATION_UNKNOWN: &str = "ValidationUnknown";
    pub const PROVIDER_NOT_INSTALLED: &str = "ProviderNotInstalled";
}

/// Label on a generated provider object naming the store it was converted from.
pub const STORE_LABEL: &str = "external-secrets.io/store";
/// Field manager of generated provider objects.
const CONVERT_MANAGER: &str = "external-secrets-store-convert";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("could not write status of {kind} {name:?}: {source}")]
    Status {
        kind: StoreKind,
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

/// What the two store kinds share for reconciling.
pub trait StoreObject:
    Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    const KIND: StoreKind;
    fn loaded(&self) -> LoadedStore;
    fn store_status(&self) -> Option<&SecretStoreStatus>;
    fn gauges(m: &Metrics) -> (&ConditionGauge, &Family<ObjectLabels, Gauge>);
    fn api(client: kube::Client, namespace: Option<&str>) -> Api<Self>;
}

impl StoreObject for SecretStore {
    const KIND: StoreKind = StoreKind::SecretStore;
    fn loaded(&self) -> LoadedStore {
        LoadedStore::from_secret_store(self)
    }
    fn store_status(&self) -> Option<&SecretStoreStatus> {
        self.status.as_ref()
    }
    fn gauges(m: &Metrics) -> (&ConditionGauge, &Family<ObjectLabels, Gauge>) {
        (&m.ss_condition, &m.ss_reconcile_duration)
    }
    fn api(client: kube::Client, namespace: Option<&str>) -> Api<Self> {
        Api::namespaced(client, namespace.unwrap_or_default())
    }
}

impl StoreObject for ClusterSecretStore {
    const KIND: StoreKind = StoreKind::ClusterSecretStore;
    fn loaded(&self) -> LoadedStore {
        LoadedStore::from_cluster_secret_store(self)
    }
    fn store_status(&self) -> Option<&SecretStoreStatus> {
        self.status.as_ref()
    }
    fn gauges(m: &Metrics) -> (&ConditionGauge, &Family<ObjectLabels, Gauge>) {
        (&m.css_condition, &m.css_reconcile_duration)
    }
    fn api(client: kube::Client, _namespace: Option<&str>) -> Api<Self> {
        Api::all(client)
    }
}

/// The result of checking a store, before it is written to status.
struct Outcome {
    status: ConditionStatus,
    reason: &'static str,
    message: String,
    capabilities: Option<Capabilities>,
    requeue: Option<Duration>,
}

impl Outcome {
    fn failed(reason: &'static str, message: String) -> Self {
        Self {
            status: ConditionStatus::False,
            reason,
            message,
            capabilities: None,
            requeue: None,
        }
    }
}

#[instrument(skip_all, fields(kind = %S::KIND, namespace = store.namespace(), name = store.name_any()))]
pub async fn reconcile<S: StoreObject>(store: Arc<S>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let loaded = store.loaded();
    if !ctx.owns_class(loaded.spec.controller.as_deref()) {
        return Ok(Action::await_change());
    }
    let interval = match loaded
        .spec
        .refresh_interval
        .as_ref()
        .map(crate::duration::int_or_string)
    {
        Some(Ok(d)) if !d.is_zero() => d,
        _ => ctx.settings.store_requeue_interval,
    };
    let outcome = match loaded
        .spec
        .refresh_interval
        .as_ref()
        .map(crate::duration::int_or_string)
    {
        Some(Err(e)) => Outcome::failed(
            reason::INVALID_PROVIDER_CONFIG,
            format!("spec.refreshInterval: {e}"),
        ),
        _ => evaluate(store.as_ref(), &loaded, &ctx).await,
    };
    let requeue = outcome.requeue.unwrap_or(interval).min(interval);
    write_status(store.as_ref(), &loaded, &ctx, &outcome).await?;

    let (gauge, duration) = S::gauges(&ctx.metrics);
    let ns = loaded.namespace.as_deref().unwrap_or_default();
    gauge.set(&loaded.name, ns, READY, outcome.status);
    duration
        .get_or_create(&labels(&loaded.name, ns))
        .set(started.elapsed().as_nanos() as i64);
    Ok(Action::requeue(requeue))
}

async fn evaluate<S: StoreObject>(store: &S, loaded: &LoadedStore, ctx: &Context) -> Outcome {
    if let Err(outcome) = sync_generated_provider(store, loaded, ctx).await {
        return outcome;
    }
    let object = match ctx.manager.provider_object(loaded).await {
        Ok(o) => o,
        Err(e) => return from_manager_error(e),
    };
    let provider = object.provider.clone();
    let warnings = match provider.validate_spec(&object.spec) {
        Ok(report) => report.warnings,
        Err(e) => return Outcome::failed(reason::INVALID_PROVIDER_CONFIG, e.to_string()),
    };
    let (caller, namespace) = match S::KIND {
        StoreKind::SecretStore => (
            Caller::SecretStore,
            loaded.namespace.clone().unwrap_or_default(),
        ),
        // A ClusterSecretStore has no namespace of its own: referent credentials cannot be
        // resolved here, and providers answer Unknown for them.
        StoreKind::ClusterSecretStore => (Caller::ClusterSecretStore, String::new()),
    };
    let handle = match ctx.manager.client(object, caller, &namespace).await {
        Ok(h) => h,
        Err(e) => {
            return Outcome::failed(
                reason::INVALID_PROVIDER_CONFIG,
                format!("unable to create client: {e}"),
            );
        }
    };
    let capabilities = Some(provider.capabilities());
    let validated = handle.client.validate().await;
    ctx.metrics
        .provider_call(provider.kind(), "Validate", validated.is_ok());
    match validated {
        Ok(Validation::Ready) => Outcome {
            status: ConditionStatus::True,
            reason: reason::VALID,
            message: valid_message("store validated", &warnings),
            capabilities,
            requeue: None,
        },
        Ok(Validation::Unknown) => Outcome {
            status: ConditionStatus::True,
            reason: reason::VALIDATION_UNKNOWN,
            message: "store validation could not be completed; the store is usable".into(),
            capabilities,
            requeue: None,
        },
        Err(e) => Outcome {
            capabilities,
            ..Outcome::failed(
                reason::VALIDATION_FAILED,
                format!("unable to validate store: {e}"),
            )
        },
    }
}

/// The Valid message, carrying the provider's warnings so they are seen without an admission
/// webhook.
pub(crate) fn valid_message(message: &str, warnings: &[String]) -> String {
    if warnings.is_empty() {
        message.to_owned()
    } else {
        format!("{message}; warnings: {}", warnings.join("; "))
    }
}

fn from_manager_error(e: clientmanager::Error) -> Outcome {
    match e {
        clientmanager::Error::ProviderNotInstalled { .. } => Outcome {
            // Retry soon: installing the CRD also triggers a resync, this is the fallback.
            requeue: Some(Duration::from_secs(30)),
            ..Outcome::failed(reason::PROVIDER_NOT_INSTALLED, e.to_string())
        },
        e => Outcome::failed(reason::INVALID_PROVIDER_CONFIG, e.to_string()),
    }
}

/// Keeps the provider object generated from an inline `spec.provider` equal to it, and removes
/// it once the store no longer has one.
async fn sync_generated_provider<S: StoreObject>(
    store: &S,
    loaded: &LoadedStore,
    ctx: &Context,
) -> Result<(), Outcome> {
    let registry = ctx.manager.registry();
    let owner = store.controller_owner_ref(&()).ok_or_else(|| {
        Outcome::failed(
            reason::INVALID_PROVIDER_CONFIG,
            "store has no uid yet".into(),
        )
    })?;
    let Some(_) = &loaded.spec.provider else {
        delete_generated(store, loaded, ctx, None).await;
        return Ok(());
    };
    let (provider, inline) = inline_provider(registry, S::KIND, &loaded.name, &loaded.spec)
        .map_err(from_manager_error)?;
    let spec = provider.convert(&inline).map_err(|e| {
        Outcome::failed(
            reason::INVALID_PROVIDER_CONFIG,
            format!("spec.provider.{}: {e}", provider.store_key()),
        )
    })?;
    let reference = derived_provider_ref(registry, S::KIND, &loaded.name, &loaded.spec)
        .map_err(from_manager_error)?;
    let (_, resource) = provider_resource(registry, &reference).map_err(from_manager_error)?;
    let api = provider_api(ctx, &resource, loaded.namespace.as_deref());
    let existing = match api.get_opt(&loaded.name).await {
        Ok(o) => o,
        Err(kube::Error::Api(s)) if s.code == 404 => return Err(not_installed(&resource)),
        Err(e) => {
            return Err(Outcome::failed(
                reason::INVALID_PROVIDER_CONFIG,
                format!("could not read {}: {e}", resource.kind),
            ));
        }
    };
    if let Some(existing) = existing {
        let ours = existing
            .owner_references()
            .iter()
            .any(|o| o.uid == owner.uid && o.controller == Some(true));
        if !ours {
            return Err(Outcome::failed(
                reason::INVALID_PROVIDER_CONFIG,
                format!(
                    "{} {:?} already exists and is not owned by this store; rename the store or use spec.providerRef",
                    resource.kind, loaded.name
                ),
            ));
        }
        let labelled = existing.labels().get(STORE_LABEL) == Some(&loaded.name);
        if labelled && existing.data.get("spec") == Some(&spec) {
            // Already what the store says: revalidation need not write it again.
            delete_generated(store, loaded, ctx, Some(provider.kind())).await;
            return Ok(());
        }
    }
    let mut metadata = json!({
        "name": loaded.name,
        "labels": {STORE_LABEL: loaded.name},
        "ownerReferences": [owner],
    });
    if let Some(ns) = &loaded.namespace {
        metadata["namespace"] = json!(ns);
    }
    let desired = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": metadata,
        "spec": spec,
    });
    let params = PatchParams::apply(CONVERT_MANAGER).force();
    match api
        .patch(&loaded.name, &params, &Patch::Apply(&desired))
        .await
    {
        Ok(_) => {
            // The inline provider may have changed kind; the old kind's object goes.
            delete_generated(store, loaded, ctx, Some(provider.kind())).await;
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Err(not_installed(&resource)),
        Err(e) => Err(Outcome::failed(
            reason::INVALID_PROVIDER_CONFIG,
            format!("could not write {} {:?}: {e}", resource.kind, loaded.name),
        )),
    }
}

fn not_installed(resource: &ApiResource) -> Outcome {
    from_manager_error(clientmanager::Error::ProviderNotInstalled {
        kind: resource.kind.clone(),
        crd: clientmanager::provider_crd_name(resource),
    })
}

fn provider_api(
    ctx: &Context,
    resource: &ApiResource,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(ctx.client.clone(), ns, resource),
        None => Api::all_with(ctx.client.clone(), resource),
    }
}

/// After a switch to `providerRef` or to another provider kind, the object converted from the old
/// inline provider is ours to remove. Only objects this store controls are touched.
async fn delete_generated<S: StoreObject>(
    store: &S,
    loaded: &LoadedStore,
    ctx: &Context,
    keep_kind: Option<&str>,
) {
    let Some(uid) = store.uid() else { return };
    let group = match S::KIND {
        StoreKind::SecretStore => PROVIDERS_GROUP,
        StoreKind::ClusterSecretStore => CLUSTER_PROVIDERS_GROUP,
    };
    for provider in ctx
        .manager
        .registry()
        .iter()
        .filter(|p| Some(p.kind()) != keep_kind)
    {
        let resource = ApiResource {
            group: group.into(),
            version: api::provider_kinds::VERSION.into(),
            api_version: format!("{group}/{}", api::provider_kinds::VERSION),
            kind: provider.kind().into(),
            plural: provider.plural().into(),
        };
        let api = provider_api(ctx, &resource, loaded.namespace.as_deref());
        let Ok(Some(obj)) = api.get_opt(&loaded.name).await else {
            continue;
        };
        if obj
            .owner_references()
            .iter()
            .any(|o| o.uid == uid && o.controller == Some(true))
        {
            info!(
                kind = resource.kind,
                "deleting provider object converted from the former spec.provider"
            );
            let _ = api.delete(&loaded.name, &DeleteParams::default()).await;
        }
    }
}

async fn write_status<S: StoreObject>(
    store: &S,
    loaded: &LoadedStore,
    ctx: &Context,
    outcome: &Outcome,
) -> Result<(), Error> {
    let previous = store.store_status().cloned().unwrap_or_default();
    let mut conditions = previous.conditions.clone();
    let condition = Condition::ready(outcome.status, outcome.reason, outcome.message.clone());
    set_condition(&mut conditions, condition, jiff::Timestamp::now());
    let status = SecretStoreStatus {
        conditions,
        capabilities: outcome.capabilities,
        observed_generation: store.meta().generation,
    };
    if status == previous {
        return Ok(());
    }
    let old = api::conditions::find(&previous.conditions, READY);
    let changed = old.is_none_or(|c| {
        c.reason.as_deref() != Some(outcome.reason)
            || c.message.as_deref() != Some(&outcome.message)
    });
    let api = S::api(ctx.client.clone(), loaded.namespace.as_deref());
    apply_status(&api, &(), &loaded.name, &status)
        .await
        .map_err(|source| Error::Status {
            kind: S::KIND,
            name: loaded.name.clone(),
            source,
        })?;
    if changed {
        let type_ = if outcome.status == ConditionStatus::False {
            EventType::Warning
        } else {
            EventType::Normal
        };
        ctx.event(
            &store.object_ref(&()),
            type_,
            outcome.reason,
            outcome.message.clone(),
        )
        .await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn warnings_reach_the_valid_message() {
        assert_eq!(
            super::valid_message("store validated", &[]),
            "store validated"
        );
        assert_eq!(
            super::valid_message("store validated", &["a".into(), "b".into()]),
            "store validated; warnings: a; b"
        );
    }
}
