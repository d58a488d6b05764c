//! SecretStore and ClusterSecretStore: apply design 007's `Convert` (the provider object an inline
//! `spec.provider` becomes), resolve the provider object, validate it, report status.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Instant;

use api::conditions::{Condition, READY, set_condition};
use api::store::{ClusterSecretStore, LABEL_CONVERTED_FROM, SecretStore, SecretStoreStatus};
use clientmanager::{Converted, Generated, LoadedStore, StoreKind, convert};
use futures::channel::mpsc::UnboundedSender;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use provider::Caller;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{info, instrument};

use crate::context::{Context, ReadyStore};
use crate::metrics::{ConditionGauge, Metrics, ObjectLabels, labels};
use crate::pushsecret::Known;
use crate::readiness::{self, Readiness, StatusError, Subject, reason};

/// What the store reconcilers work with: the handles every reconciler shares, where they tell
/// the ExternalSecrets and PushSecrets of a store's changes, and the PushSecrets that may hold a
/// store's finalizer.
pub struct StoreContext {
    pub shared: Arc<Context>,
    /// Announces a store that turned Ready to ExternalSecrets and PushSecrets.
    ready: crate::externalsecret::triggers::StoreReady,
    /// Where a store that turned Ready, or is being deleted, is announced to PushSecrets.
    pushsecret_wake: UnboundedSender<ReadyStore>,
    /// Every PushSecret, as the PushSecret controller's watch keeps them, read for the finalizer.
    pushsecrets: Known,
}

impl StoreContext {
    pub fn new(
        shared: Arc<Context>,
        ready: crate::externalsecret::triggers::StoreReady,
        pushsecret_wake: UnboundedSender<ReadyStore>,
        pushsecrets: Known,
    ) -> Arc<Self> {
        Arc::new(Self {
            shared,
            ready,
            pushsecret_wake,
            pushsecrets,
        })
    }

    /// Whether every PushSecret is known yet.
    pub(crate) fn pushsecrets_listing(&self) -> crate::watch::FirstList {
        self.pushsecrets.listed.clone()
    }

    /// Once, when every PushSecret is known: a store's finalizer waits for that.
    pub(crate) fn pushsecrets_listed(&self) -> impl futures::Stream<Item = ()> + use<> {
        crate::pushsecret::listed(self.pushsecrets.clone())
    }

    /// Wakes the ExternalSecrets and PushSecrets that use `store`.
    pub fn store_ready(&self, store: ReadyStore) {
        (self.ready)(store);
    }

    /// Wakes the PushSecrets that pushed to `store`, which is being deleted, so that they delete
    /// what they pushed there (deletionPolicy Delete) while it still exists.
    fn store_deleting(&self, store: ReadyStore) {
        let _ = self.pushsecret_wake.unbounded_send(store);
    }
}

/// Field manager of generated provider objects.
const CONVERT_MANAGER: &str = "external-secrets-store-convert";

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

#[instrument(skip_all, fields(kind = %S::KIND, namespace = store.namespace(), name = store.name_any()))]
pub async fn reconcile<S: StoreObject>(
    store: Arc<S>,
    store_ctx: Arc<StoreContext>,
) -> Result<Action, StatusError> {
    let ctx = store_ctx.shared.as_ref();
    let started = Instant::now();
    let loaded = store.loaded();
    if !ctx.owns_class(loaded.spec.controller.as_deref()) {
        return Ok(Action::await_change());
    }
    let held = crate::pushsecret::holding(&store_ctx.pushsecrets, &loaded);
    if store.meta().deletion_timestamp.is_some() {
        return finalize(store.as_ref(), &loaded, &store_ctx, held).await;
    }
    if let Some(held) = held {
        set_finalizer(store.as_ref(), &loaded, ctx, held).await?;
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
    let readiness = match loaded
        .spec
        .refresh_interval
        .as_ref()
        .map(crate::duration::int_or_string)
    {
        Some(Err(e)) => Readiness::failed(
            reason::INVALID_PROVIDER_CONFIG,
            format!("spec.refreshInterval: {e}"),
        ),
        _ => evaluate(&loaded, ctx).await,
    };
    let readiness = match loaded.spec.retry_settings {
        Some(_) => readiness.warn(RETRY_SETTINGS_UNUSED.to_owned()),
        None => readiness,
    };
    let requeue = readiness.requeue.unwrap_or(interval).min(interval);
    write_status(store.as_ref(), &loaded, &store_ctx, &readiness).await?;

    let (gauge, duration) = S::gauges(&ctx.metrics);
    let ns = loaded.namespace.as_deref().unwrap_or_default();
    gauge.set(&loaded.name, ns, READY, readiness.status);
    duration
        .get_or_create(&labels(&loaded.name, ns))
        .set(started.elapsed().as_nanos() as i64);
    Ok(Action::requeue(requeue))
}

/// ESO hands `retrySettings` to some providers' SDKs, whose calls then retry in place (Vault's
/// client, twice by default). Here a provider that cannot be reached is paced by its client's
/// breaker and each object's own backoff, which hold no worker while they wait; a store that
/// sets the field is told it has no effect rather than left to believe it does.
const RETRY_SETTINGS_UNUSED: &str = "spec.retrySettings is not used: calls to a provider that cannot be reached are retried by each ExternalSecret's backoff, and paced by the store's client (one call per wait, from 1 s doubling to a minute)";

async fn evaluate(loaded: &LoadedStore, ctx: &Context) -> Readiness {
    let converted = match convert(ctx.manager.registry(), loaded) {
        Ok(c) => c,
        Err(e) => return Readiness::from_manager(e),
    };
    if let Err(failed) = apply_converted(loaded, &converted, ctx).await {
        return failed;
    }
    let (caller, namespace) = match loaded.kind {
        StoreKind::SecretStore => (
            Caller::SecretStore,
            loaded.namespace.clone().unwrap_or_default(),
        ),
        // A ClusterSecretStore has no namespace of its own: referent credentials cannot be
        // resolved here, and providers answer Unknown for them.
        StoreKind::ClusterSecretStore => (Caller::ClusterSecretStore, String::new()),
    };
    let class = match ctx.manager.class_of(loaded, &converted.reference.kind) {
        Ok(c) => c,
        Err(e) => return Readiness::from_manager(e),
    };
    // A kind this operator does not compile in: its own server knows it (out of tree).
    if let Some(class) = &class
        && ctx.manager.is_foreign(&converted.reference)
    {
        let at = (caller, namespace.as_str());
        return readiness::check_foreign(ctx, loaded, &converted.reference, at, class).await;
    }
    let object = match ctx
        .manager
        .provider_object(&converted.reference, loaded.namespace.as_deref())
        .await
    {
        Ok(o) => o,
        Err(e) => return Readiness::from_manager(e),
    };
    readiness::check(ctx, Subject::Store, object, (caller, &namespace), class).await
}

/// Keeps the provider object converted from an inline `spec.provider` equal to it, and removes
/// the ones this store no longer converts to (a switch to `providerRef` or to another kind).
async fn apply_converted(
    loaded: &LoadedStore,
    converted: &Converted,
    ctx: &Context,
) -> Result<(), Readiness> {
    let keep = converted
        .generated
        .as_ref()
        .map(|g| g.resource.kind.as_str());
    ctx.manager.providers_settled().await;
    let mut cached = None;
    for (resource, stale) in ctx.manager.converted_from(loaded) {
        if Some(resource.kind.as_str()) == keep && stale.name_any() == loaded.name {
            cached = Some(stale);
            continue;
        }
        // The object the store now references is kept: `migrate stores` switches a store to
        // its converted object before releasing it.
        let referenced = resource.kind == converted.reference.kind
            && stale.name_any() == converted.reference.name;
        if Some(resource.kind.as_str()) != keep && !referenced {
            info!(
                kind = resource.kind,
                "deleting provider object converted from the former spec.provider"
            );
            let api = provider_api(ctx, &resource, loaded.namespace.as_deref());
            let _ = api
                .delete(&stale.name_any(), &DeleteParams::default())
                .await;
        }
    }
    match &converted.generated {
        // What the cache holds is enough to tell it unchanged: a hand edit the cache does not
        // show yet is put back when its event comes (`put_back_converted`).
        Some(generated) if cached.is_some_and(|c| in_sync(loaded, generated, &c)) => Ok(()),
        Some(generated) => write_generated(loaded, generated, ctx).await,
        None => Ok(()),
    }
}

/// Whether `existing` is `loaded`'s converted object and holds what it converts to now.
fn in_sync(loaded: &LoadedStore, generated: &Generated, existing: &DynamicObject) -> bool {
    ours(loaded, existing)
        && existing.labels().get(LABEL_CONVERTED_FROM) == Some(&loaded.name)
        && existing.data.get("spec") == Some(generated.spec())
}

/// Whether `loaded` is the controller owner of `existing`.
fn ours(loaded: &LoadedStore, existing: &DynamicObject) -> bool {
    existing
        .owner_references()
        .iter()
        .any(|o| Some(&o.uid) == loaded.uid.as_ref() && o.controller == Some(true))
}

/// Puts back the provider object converted from `loaded`'s inline provider after a hand edit,
/// at once: the store's own reconcile, which would do it too, may wait for a worker behind
/// other stores' validations.
pub(crate) async fn put_back_converted(loaded: &LoadedStore, ctx: &Context) {
    let Ok(Converted {
        generated: Some(generated),
        ..
    }) = convert(ctx.manager.registry(), loaded)
    else {
        return;
    };
    if let Err(failed) = write_generated(loaded, &generated, ctx).await {
        // The store's own reconcile, nudged too, says so in its status.
        tracing::debug!(
            reason = failed.reason,
            "could not put back the converted provider object"
        );
    }
}

async fn write_generated(
    loaded: &LoadedStore,
    generated: &Generated,
    ctx: &Context,
) -> Result<(), Readiness> {
    let resource = &generated.resource;
    let api = provider_api(ctx, resource, loaded.namespace.as_deref());
    // A GET, not the provider watch cache: called on a hand edit of the object, which the cache
    // may not hold yet, and when the cache shows it changed or missing.
    let existing = match api.get_opt(&loaded.name).await {
        Ok(o) => o,
        Err(kube::Error::Api(s)) if s.code == 404 => return Err(not_installed(generated)),
        Err(e) => {
            return Err(Readiness::failed(
                reason::INVALID_PROVIDER_CONFIG,
                format!("could not read {}: {e}", resource.kind),
            ));
        }
    };
    if let Some(existing) = existing {
        if !ours(loaded, &existing) {
            return Err(Readiness::failed(
                reason::INVALID_PROVIDER_CONFIG,
                format!(
                    "{} {:?} already exists and is not owned by this store; rename the store or use spec.providerRef",
                    resource.kind, loaded.name
                ),
            ));
        }
        if in_sync(loaded, generated, &existing) {
            // Already what the store says: revalidation need not write it again.
            return Ok(());
        }
    }
    let failed = |e: kube::Error| match e {
        kube::Error::Api(s) if s.code == 404 => not_installed(generated),
        e => Readiness::failed(
            reason::INVALID_PROVIDER_CONFIG,
            format!(
                "could not write {} {:?}: {}",
                resource.kind,
                loaded.name,
                crate::api_error::ApiError::from(e)
            ),
        ),
    };
    let params = PatchParams::apply(CONVERT_MANAGER).force();
    let applied = api
        .patch(&loaded.name, &params, &Patch::Apply(&generated.object))
        .await
        .map_err(failed)?;
    // Fields someone else set in the spec (a hand edit adding one the store does not set) are
    // not ours under server-side apply and stay: the object must hold the store's spec alone.
    if !in_sync(loaded, generated, &applied) && spec_set_by_others(&applied) {
        let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
            {"op": "add", "path": "/spec", "value": generated.spec()},
        ]))
        .expect("well-formed JSON patch");
        let params = PatchParams {
            field_manager: Some(CONVERT_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        api.patch(&loaded.name, &params, &Patch::<()>::Json(patch))
            .await
            .map_err(failed)?;
    }
    Ok(())
}

/// Whether a field manager other than ours owns fields of `obj`'s spec. Not the API server's
/// defaults, which nobody owns: a spec that differs from the store's by a default alone is
/// left as it is.
fn spec_set_by_others(obj: &DynamicObject) -> bool {
    obj.managed_fields().iter().any(|m| {
        m.manager.as_deref() != Some(CONVERT_MANAGER)
            && m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.get("f:spec").is_some())
    })
}

fn not_installed(generated: &Generated) -> Readiness {
    Readiness::from_manager(clientmanager::Error::provider_not_installed(
        &generated.resource.kind,
        generated.crd.clone(),
    ))
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

/// A store being deleted keeps ESO's finalizer while PushSecrets with deletionPolicy Delete hold
/// it (`None`: not known yet). Those are woken to delete what they pushed there while the store
/// still exists; their changes bring the store back here. Nothing else of ours waits on it.
async fn finalize<S: StoreObject>(
    store: &S,
    loaded: &LoadedStore,
    store_ctx: &StoreContext,
    held: Option<bool>,
) -> Result<Action, StatusError> {
    match held {
        Some(false) => {
            set_finalizer(store, loaded, &store_ctx.shared, false).await?;
            Ok(Action::await_change())
        }
        Some(true) => {
            store_ctx.store_deleting(ReadyStore {
                kind: S::KIND,
                name: loaded.name.clone(),
                namespace: loaded.namespace.clone(),
                labels: loaded.labels.clone(),
            });
            Ok(Action::await_change())
        }
        None => Ok(Action::requeue(PUSHSECRETS_UNKNOWN_RETRY)),
    }
}

/// How soon a store asks again when the PushSecrets are not listed yet.
const PUSHSECRETS_UNKNOWN_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// Adds or removes ESO's `secretstore.externalsecrets.io/finalizer`, leaving any other.
async fn set_finalizer<S: StoreObject>(
    store: &S,
    loaded: &LoadedStore,
    ctx: &Context,
    present: bool,
) -> Result<(), StatusError> {
    let has = store
        .finalizers()
        .iter()
        .any(|f| f == api::store::FINALIZER);
    if has == present {
        return Ok(());
    }
    let mut finalizers: Vec<&str> = store
        .finalizers()
        .iter()
        .map(String::as_str)
        .filter(|f| *f != api::store::FINALIZER)
        .collect();
    if present {
        finalizers.push(api::store::FINALIZER);
    }
    info!(
        present,
        "PushSecrets with deletionPolicy Delete: store finalizer"
    );
    let patch = serde_json::json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": store.resource_version(),
    }});
    S::api(ctx.client.clone(), loaded.namespace.as_deref())
        .patch(&loaded.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|source| StatusError {
            part: "finalizers",
            kind: S::KIND.to_string(),
            name: loaded.name.clone(),
            source,
        })
}

/// The stores of kind `S` that the PushSecrets described by `uses` name, select or pushed to:
/// their finalizer may have to change.
pub(crate) fn used_by<S: StoreObject>(
    uses: &[crate::pushsecret::plan::Uses],
    stores: &kube::runtime::reflector::Store<S>,
) -> Vec<kube::runtime::reflector::ObjectRef<S>> {
    stores
        .state()
        .iter()
        .filter(|s| {
            let name = s.name_any();
            let this = crate::pushsecret::plan::Store {
                kind: S::KIND,
                name: &name,
                labels: s.labels(),
            };
            let namespace = s.namespace();
            uses.iter().any(|u| {
                u.references(this, namespace.as_deref()) || u.pushed_to(this, namespace.as_deref())
            })
        })
        .map(|s| kube::runtime::reflector::ObjectRef::from(s.as_ref()))
        .collect()
}

async fn write_status<S: StoreObject>(
    store: &S,
    loaded: &LoadedStore,
    store_ctx: &StoreContext,
    readiness: &Readiness,
) -> Result<(), StatusError> {
    let ctx = store_ctx.shared.as_ref();
    let previous = store.store_status().cloned().unwrap_or_default();
    let mut conditions = previous.conditions.clone();
    let condition = Condition::ready(
        readiness.status,
        readiness.reason,
        readiness.message.clone(),
    );
    set_condition(&mut conditions, condition, jiff::Timestamp::now());
    let status = SecretStoreStatus {
        conditions,
        capabilities: readiness.capabilities,
        observed_generation: store.meta().generation,
    };
    let old = api::conditions::find(&previous.conditions, READY);
    let changed = old.is_none_or(|c| {
        c.reason.as_deref() != Some(readiness.reason)
            || c.message.as_deref() != Some(&readiness.message)
    });
    let api = S::api(ctx.client.clone(), loaded.namespace.as_deref());
    let written = ctx
        .status
        .update(&api, &(), store.meta(), &previous, &status)
        .await
        .map_err(|source| StatusError {
            part: "status",
            kind: S::KIND.to_string(),
            name: loaded.name.clone(),
            source,
        })?;
    if !written {
        return Ok(());
    }
    if changed {
        for (type_, reason, note) in readiness.events() {
            ctx.event(&store.object_ref(&()), type_, reason, note);
        }
    }
    Ok(())
}
