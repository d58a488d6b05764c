//! The PushSecret reconciler: read the source Secrets (by name or by label), push their values
//! (`data` and `dataTo`) through each store's client, delete what is no longer pushed
//! (deletionPolicy Delete, also when the source Secret or a store goes), report status.

pub(crate) mod plan;
pub(crate) mod triggers;

use std::sync::Arc;
use std::time::Duration;

use api::conditions::{Condition, ConditionStatus, set_condition};
use api::external_secret::SecretStoreKind;
use api::push_secret::{
    FINALIZER, PushSecret, PushSecretDeletionPolicy, PushSecretStatus, PushSecretStoreRef,
    PushSecretUpdatePolicy, reason,
};
use api::store::{ClusterSecretStore, SecretStore};
use clientmanager::{LoadedStore, StoreKind, StoreRef};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, Patch, PatchParams};
use kube::core::Selector;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::instrument;

use crate::context::Context;
use crate::events::EventType;
use crate::watch::Cached;
use plan::Synced;

const DEFAULT_REFRESH: Duration = Duration::from_secs(3600);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error(transparent)]
    Store(#[from] clientmanager::Error),
    #[error("{field}: {source}")]
    Provider {
        field: String,
        source: provider::Error,
    },
    #[error("could not read {what}: {source}")]
    Read { what: String, source: kube::Error },
    #[error(transparent)]
    Template(#[from] crate::templating::TemplateError),
    #[error(transparent)]
    TemplateSource(#[from] crate::templating::SourceError),
    #[error("could not write {what}: {source}")]
    Write { what: String, source: kube::Error },
}

impl crate::outcome::ErrorKind for Error {
    fn kind(&self) -> &'static str {
        match self {
            Self::Invalid { .. } => "Invalid",
            Self::Store(e) => e.kind(),
            Self::Provider { .. } => "Provider",
            Self::Read { .. } => "Read",
            Self::Template(_) => "Template",
            Self::TemplateSource(_) => "TemplateSource",
            Self::Write { .. } => "Write",
        }
    }
}

/// A PushSecret as watched: one that does not fit our types must not stall the watch for all
/// others; it gets a status condition instead.
pub(crate) type Watched = kube::core::DeserializeGuard<PushSecret>;

/// Every PushSecret, as the PushSecret controller's watch sees it; the stores read it for their
/// finalizer.
pub type PushSecretCache = kube::runtime::reflector::Store<Watched>;

/// Every PushSecret as the PushSecret controller's watch keeps them, and whether its first list
/// is in.
pub type Known = Cached<Watched>;
#[instrument(skip_all, fields(namespace = ps.namespace(), name = ps.name_any()))]
pub async fn reconcile(ps: Arc<PushSecret>, ctx: Arc<Context>) -> Result<Action, Error> {
    // What is on record decides what is written ahead and deleted: never the record of a
    // status older than our own last write.
    if let Some(wait) = ctx
        .status
        .catching_up(ps.meta(), || ps.status.clone().unwrap_or_default())
    {
        return Ok(Action::requeue(wait));
    }
    let started = std::time::Instant::now();
    let result = sync(&ps, &ctx).await;
    let labels = crate::metrics::labels(&ps.name_any(), &ps.namespace().unwrap_or_default());
    ctx.metrics
        .ps_reconcile_duration
        .get_or_create(&labels)
        .set(started.elapsed().as_nanos() as i64);
    result
}

/// A store of `secretStoreRefs`, or why it could not be read.
struct Target {
    store: StoreRef,
    loaded: Result<LoadedStore, clientmanager::Error>,
}

impl Target {
    /// Another operator instance's store (`spec.controller`).
    fn theirs(&self, ctx: &Context) -> bool {
        self.loaded
            .as_ref()
            .is_ok_and(|l| !ctx.owns_class(l.spec.controller.as_deref()))
    }
}

async fn sync(ps: &PushSecret, ctx: &Context) -> Result<Action, Error> {
    // Before anything is written, finalizers included: another operator's PushSecret (all its
    // stores of another controller class) is not ours to touch. A PushSecret naming no store
    // that can be found is ours to report on.
    // The stores are resolved once: a label selector costs a list request.
    let targets = targets(ps, ctx).await?;
    if !targets.is_empty() && targets.iter().all(|t| t.theirs(ctx)) {
        return Ok(Action::await_change());
    }
    let api: Api<PushSecret> =
        Api::namespaced(ctx.client.clone(), &ps.namespace().unwrap_or_default());
    let delete_policy = ps.spec.deletion_policy() == PushSecretDeletionPolicy::Delete;
    let has_finalizer = ps.finalizers().iter().any(|f| f == FINALIZER);
    let previous = synced_before(ps);
    if ps.meta().deletion_timestamp.is_some() {
        if has_finalizer {
            let mut recorded = previous.clone();
            if let Err(e) = delete_entries(ps, ctx, &mut recorded, &Synced::new()).await {
                return failed(ctx, &api, ps, e, Some(recorded)).await;
            }
            set_finalizers(&api, ps, false).await?;
        }
        return Ok(Action::await_change());
    }
    // As ESO: the finalizer is there exactly while deletionPolicy is Delete.
    if delete_policy != has_finalizer {
        set_finalizers(&api, ps, delete_policy).await?;
    }
    if let Err((field, message)) = plan::unsupported(ps) {
        return failed(ctx, &api, ps, Error::Invalid { field, message }, None).await;
    }
    let sources = match read_sources(ps, ctx).await {
        Ok(Some(sources)) => sources,
        Ok(None) => return source_gone(ps, ctx, &api, previous, delete_policy).await,
        Err(e) => return failed(ctx, &api, ps, e, None).await,
    };
    let mut now = Synced::new();
    let plans = match plan_pushes(ps, ctx, targets, &sources, &previous, &mut now).await {
        Ok(plans) => plans,
        Err(e) => return failed(ctx, &api, ps, e, Some(plan::merged(&now, &previous))).await,
    };
    record_ahead(ctx, &api, ps, &plans, &previous).await?;
    if let Err(e) = push(
        ps,
        ctx,
        &ps.namespace().unwrap_or_default(),
        plans,
        &mut now,
    )
    .await
    {
        // What did get pushed is on record beside what was before, so a later deletion
        // removes it too.
        return failed(ctx, &api, ps, e, Some(plan::merged(&now, &previous))).await;
    }
    let mut recorded = now.clone();
    if delete_policy {
        recorded = plan::merged(&now, &previous);
        if let Err(e) = delete_entries(ps, ctx, &mut recorded, &now).await {
            return failed(ctx, &api, ps, e, Some(recorded)).await;
        }
    }
    let mut message = "PushSecret synced successfully".to_owned();
    if ps.spec.update_policy() == PushSecretUpdatePolicy::IfNotExists {
        message.push_str(". Existing secrets in providers unchanged.");
    }
    let report = Report {
        status: ConditionStatus::True,
        refreshed: true,
        ..Report::not_ready(reason::SYNCED, message, Some(recorded))
    };
    write_status(ctx, &api, ps, report).await?;
    let interval = refresh_interval(ps).unwrap_or(DEFAULT_REFRESH);
    Ok(if interval.is_zero() {
        Action::await_change()
    } else {
        Action::requeue(interval)
    })
}

/// Puts what `plans` push on record before it is pushed: a push is recorded nowhere else, so a
/// status write that fails after it, followed by a restart of the operator (or a stop between
/// the two), would otherwise leave at the provider what no record names, and deletionPolicy
/// Delete would never remove it. An ESO user expects what the PushSecret pushed to go with it;
/// an entry on record that was not pushed after all costs a delete of nothing at the provider.
/// Only a push that adds entries costs this write: a refresh of what is on record, the usual
/// reconcile, goes without. The Ready condition stays as it is until the push is done.
async fn record_ahead(
    ctx: &Context,
    api: &Api<PushSecret>,
    ps: &PushSecret,
    plans: &[StorePlan],
    previous: &Synced,
) -> Result<(), Error> {
    let mut ahead = previous.clone();
    for (_, key, pushes) in plans {
        let entries = ahead.entry(key.clone()).or_default();
        for p in pushes {
            entries
                .entry(plan::status_key(&p.entry))
                .or_insert_with(|| p.entry.clone());
        }
    }
    if on_record(ahead.clone()) == on_record(previous.clone()) {
        return Ok(());
    }
    let cached = ps.status.clone().unwrap_or_default();
    let new = PushSecretStatus {
        synced_push_secrets: on_record(ahead),
        ..cached.clone()
    };
    update_status(ctx, api, ps, &cached, &new).await
}

/// Ready=False with `e`, a Warning event, and what is on record if that changed. Bad input
/// waits for a change; anything else is retried.
async fn failed(
    ctx: &Context,
    api: &Api<PushSecret>,
    ps: &PushSecret,
    e: Error,
    synced: Option<Synced>,
) -> Result<Action, Error> {
    let message = e.to_string();
    // A failure repeated on every retry is one event, not one request per retry.
    let repeat = ps.status.as_ref().is_some_and(|s| {
        api::conditions::holds(
            &s.conditions,
            &api::conditions::Condition::ready(
                api::conditions::ConditionStatus::False,
                reason::ERRORED,
                message.as_str(),
            ),
        )
    });
    let report = Report::not_ready(reason::ERRORED, message.clone(), synced);
    write_status(ctx, api, ps, report).await?;
    if !repeat {
        ctx.event(
            &ps.object_ref(&()),
            EventType::Warning,
            reason::ERRORED,
            message,
        );
    }
    match e {
        Error::Invalid { .. } => Ok(Action::await_change()),
        e => Err(e),
    }
}

/// The named source Secret is gone. As ESO: with deletionPolicy Delete, what was pushed is
/// deleted and the PushSecret reports SourceDeleted; otherwise it is an error naming the field.
/// The source watch brings the PushSecret back when the Secret returns.
async fn source_gone(
    ps: &PushSecret,
    ctx: &Context,
    api: &Api<PushSecret>,
    previous: Synced,
    delete_policy: bool,
) -> Result<Action, Error> {
    let name = ps
        .spec
        .selector
        .secret
        .as_ref()
        .and_then(|s| s.name.clone())
        .unwrap_or_default();
    let already_reported = ps
        .status
        .as_ref()
        .and_then(|s| api::conditions::find(&s.conditions, api::conditions::READY))
        .is_some_and(|c| c.reason.as_deref() == Some(reason::SOURCE_DELETED));
    if !delete_policy || (previous.is_empty() && !already_reported) {
        let missing = Error::Invalid {
            field: "spec.selector.secret.name".into(),
            message: format!("Secret {name:?} does not exist"),
        };
        return failed(ctx, api, ps, missing, None).await;
    }
    let mut recorded = previous;
    if let Err(e) = delete_entries(ps, ctx, &mut recorded, &Synced::new()).await {
        return failed(ctx, api, ps, e, Some(recorded)).await;
    }
    let message = "source secret deleted; provider secrets cleaned up";
    if !already_reported {
        ctx.event(
            &ps.object_ref(&()),
            EventType::Normal,
            reason::SOURCE_DELETED,
            message.into(),
        );
    }
    let report = Report::not_ready(reason::SOURCE_DELETED, message.into(), Some(Synced::new()));
    write_status(ctx, api, ps, report).await?;
    Ok(Action::await_change())
}

fn refresh_interval(ps: &PushSecret) -> Option<Duration> {
    ps.spec
        .refresh_interval
        .as_deref()
        .and_then(|s| crate::duration::parse(s).ok())
}

/// What is on record in status: everything pushed ([`record_ahead`]).
fn synced_before(ps: &PushSecret) -> Synced {
    ps.status
        .as_ref()
        .and_then(|s| s.synced_push_secrets.clone())
        .unwrap_or_default()
}

/// The source Secrets, sorted by name: the one named, or every one the label selector matches.
/// `None` when the named one does not exist.
async fn read_sources(ps: &PushSecret, ctx: &Context) -> Result<Option<Vec<Secret>>, Error> {
    let namespace = ps.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let selector = ps.spec.selector.secret.as_ref();
    if let Some(name) = selector
        .and_then(|s| s.name.as_ref())
        .filter(|n| !n.is_empty())
    {
        let found = secrets.get_opt(name).await.map_err(|source| Error::Read {
            what: format!("Secret {name:?}"),
            source,
        })?;
        return Ok(found.map(|s| vec![s]));
    }
    let field = "spec.selector.secret.selector";
    let labels = selector
        .and_then(|s| s.selector.clone())
        .ok_or_else(|| Error::Invalid {
            field: "spec.selector.secret".into(),
            message: "set name or selector".into(),
        })?;
    let labels = Selector::try_from(labels).map_err(|e| Error::Invalid {
        field: field.into(),
        message: e.to_string(),
    })?;
    let mut found = secrets
        .list(&ListParams::default().labels_from(&labels))
        .await
        .map_err(|source| Error::Read {
            what: format!("the Secrets {field} selects"),
            source,
        })?
        .items;
    found.sort_by_key(|s| s.name_any());
    Ok(Some(found))
}

/// What to push to one store: the store, its key in status and the values.
type StorePlan = (StoreRef, String, Vec<plan::Push>);

/// Plans every source Secret (templated first, as ESO pushes them) for every store of ours;
/// what another operator's stores hold stays on record in `now`. Everything is planned before
/// the first push, so bad input pushes nothing.
async fn plan_pushes(
    ps: &PushSecret,
    ctx: &Context,
    targets: Vec<Target>,
    sources: &[Secret],
    previous: &Synced,
    now: &mut Synced,
) -> Result<Vec<StorePlan>, Error> {
    let namespace = ps.namespace().unwrap_or_default();
    let template = ps.spec.template.as_ref();
    let template_sources =
        crate::templating::read_sources(&ctx.client, &namespace, template).await?;
    let inputs: Vec<_> = sources
        .iter()
        .map(|source| {
            (
                source.name_any(),
                crate::keys::secret_data(source),
                source.labels().clone(),
                source.annotations().clone(),
                source.type_.clone(),
            )
        })
        .collect();
    let template = template.cloned();
    let shaped = crate::templating::off_async(template.is_some(), move || {
        inputs
            .into_iter()
            .map(|(name, data, labels, annotations, type_)| {
                crate::templating::shape(
                    "spec.template",
                    template.as_ref(),
                    data,
                    &template_sources,
                    &labels,
                    &annotations,
                )
                .map(|shaped| {
                    let source = provider::PushSource {
                        type_: shaped.type_.or(type_),
                        labels: shaped.labels,
                        annotations: shaped.annotations,
                    };
                    (name, shaped.data, source)
                })
            })
            .collect::<Result<Vec<_>, _>>()
    })
    .await?;
    let mut loaded = Vec::new();
    for target in targets {
        loaded.push((target.store, target.loaded?));
    }
    let all: Vec<plan::Store<'_>> = loaded.iter().map(|(_, l)| plan::Store::of(l)).collect();
    plan::check_data_to_stores(&ps.spec, &all).map_err(invalid)?;

    let mut plans = Vec::new();
    for (store, l) in &loaded {
        let key = plan::Store::of(l).status_key();
        if !ctx.owns_class(l.spec.controller.as_deref()) {
            // What the other operator pushed there stays on record.
            if let Some(entries) = previous.get(&key) {
                now.insert(key, entries.clone());
            }
            continue;
        }
        if l.deleting {
            // Nothing more goes to a store being deleted; what it holds is no longer pushed,
            // so deletionPolicy Delete removes it while the store still exists.
            continue;
        }
        let mut pushes = Vec::new();
        for (name, data, meta) in &shaped {
            let source = plan::Source { name, data };
            let planned = plan::pushes(&ps.spec, plan::Store::of(l), &source).map_err(invalid)?;
            pushes.extend(planned.into_iter().map(|mut p| {
                p.request.source = meta.clone();
                p
            }));
        }
        plans.push((store.clone(), key, plan::last_wins(pushes)));
    }
    Ok(plans)
}

/// Pushes what `plans` say, recording each entry in `now` as soon as it is pushed.
async fn push(
    ps: &PushSecret,
    ctx: &Context,
    namespace: &str,
    plans: Vec<StorePlan>,
    now: &mut Synced,
) -> Result<(), Error> {
    let only_new = ps.spec.update_policy() == PushSecretUpdatePolicy::IfNotExists;
    for (store, key, pushes) in plans {
        now.entry(key.clone()).or_default();
        let handle = ctx.manager.get_ungated(&store, namespace).await?;
        let kind = handle.identity.kind.as_str();
        for p in pushes {
            let field = format!(
                "{} (remote key {:?}) to {key}",
                p.origin,
                plan::status_key(&p.entry)
            );
            let exists = if only_new {
                let exists = handle.client.secret_exists(&p.request.remote).await;
                ctx.metrics
                    .provider_call(kind, "SecretExists", exists.is_ok());
                exists.map_err(|source| Error::Provider {
                    field: field.clone(),
                    source,
                })?
            } else {
                false
            };
            if !exists {
                let pushed = handle.client.push_secret(&p.request).await;
                ctx.metrics
                    .provider_call(kind, "PushSecret", pushed.is_ok());
                pushed.map_err(|source| Error::Provider { field, source })?;
            }
            now.entry(key.clone())
                .or_default()
                .insert(plan::status_key(&p.entry), p.entry);
        }
    }
    Ok(())
}

fn invalid((field, message): plan::Invalid) -> Error {
    Error::Invalid { field, message }
}

/// Every store the PushSecret's `secretStoreRefs` name or select.
async fn targets(ps: &PushSecret, ctx: &Context) -> Result<Vec<Target>, Error> {
    let namespace = ps.namespace().unwrap_or_default();
    let mut all = Vec::new();
    for (i, store_ref) in ps.spec.secret_store_refs.iter().enumerate() {
        for store in stores(ctx, store_ref, &namespace, i).await? {
            let loaded = ctx.manager.load(&store, &namespace).await;
            all.push(Target { store, loaded });
        }
    }
    Ok(all)
}

/// The stores one `secretStoreRefs` entry names: by name, or every store matching its labels.
async fn stores(
    ctx: &Context,
    r: &PushSecretStoreRef,
    namespace: &str,
    i: usize,
) -> Result<Vec<StoreRef>, Error> {
    let kind = StoreKind::parse(r.kind.map(SecretStoreKind::as_str));
    if let Some(name) = r.name.as_ref().filter(|n| !n.is_empty()) {
        return Ok(vec![StoreRef {
            kind,
            name: name.clone(),
        }]);
    }
    let field = format!("spec.secretStoreRefs[{i}]");
    let selector = r.label_selector.clone().ok_or_else(|| Error::Invalid {
        field: field.clone(),
        message: "set name or labelSelector".into(),
    })?;
    let selector = Selector::try_from(selector).map_err(|e| Error::Invalid {
        field: format!("{field}.labelSelector"),
        message: e.to_string(),
    })?;
    let params = ListParams::default().labels_from(&selector);
    let read = |source| Error::Read {
        what: format!("stores for {field}"),
        source,
    };
    let names: Vec<String> = match kind {
        StoreKind::SecretStore => Api::<SecretStore>::namespaced(ctx.client.clone(), namespace)
            .list_metadata(&params)
            .await
            .map_err(read)?
            .items
            .iter()
            .map(|s| s.name_any())
            .collect(),
        StoreKind::ClusterSecretStore => Api::<ClusterSecretStore>::all(ctx.client.clone())
            .list_metadata(&params)
            .await
            .map_err(read)?
            .items
            .iter()
            .map(|s| s.name_any())
            .collect(),
    };
    Ok(names
        .into_iter()
        .map(|name| StoreRef { kind, name })
        .collect())
}

/// Deletes at their stores the entries of `recorded` that `keep` does not hold, taking each off
/// `recorded` once it is gone: after a failure, `recorded` is exactly what is still there. A
/// store that is gone fails the reconcile, so nothing is forgotten while it may still exist at
/// the provider; a store not Ready is tried all the same (no flood gate on PushSecrets); one of
/// another controller class is left to its operator.
async fn delete_entries(
    ps: &PushSecret,
    ctx: &Context,
    recorded: &mut Synced,
    keep: &Synced,
) -> Result<(), Error> {
    let namespace = ps.namespace().unwrap_or_default();
    for (store_key, entry) in plan::stale(recorded, keep) {
        let (kind, name) = store_key
            .split_once('/')
            .unwrap_or(("SecretStore", &store_key));
        let store = StoreRef {
            kind: StoreKind::parse(Some(kind)),
            name: name.to_owned(),
        };
        let handle = match ctx.manager.get_ungated(&store, &namespace).await {
            Ok(handle) => handle,
            // The other operator deletes what it pushed; its entries stay on record for it.
            Err(clientmanager::Error::OtherController { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        let remote = provider::PushRemoteRef {
            remote_key: entry.match_.remote_ref.remote_key.clone(),
            property: entry.match_.remote_ref.property.clone(),
        };
        let deleted = handle.client.delete_secret(&remote).await;
        ctx.metrics
            .provider_call(&handle.identity.kind, "DeleteSecret", deleted.is_ok());
        deleted.map_err(|source| Error::Provider {
            field: format!("deleting {:?} from {store_key}", remote.remote_key),
            source,
        })?;
        if let Some(entries) = recorded.get_mut(&store_key) {
            entries.remove(&plan::status_key(&entry));
        }
    }
    Ok(())
}

/// Adds or removes our finalizer, leaving any other.
async fn set_finalizers(api: &Api<PushSecret>, ps: &PushSecret, ours: bool) -> Result<(), Error> {
    let mut finalizers: Vec<&String> = ps.finalizers().iter().filter(|f| *f != FINALIZER).collect();
    let finalizer = FINALIZER.to_owned();
    if ours {
        finalizers.push(&finalizer);
    }
    // A merge patch of metadata only: an update would take ownership of the whole spec.
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": ps.resource_version()}});
    api.patch(
        &ps.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(|_| ())
    .map_err(|source| Error::Write {
        what: "finalizers".into(),
        source,
    })
}

/// What a reconcile reports: the Ready condition and, when it changed, what is on record.
struct Report {
    status: ConditionStatus,
    reason: &'static str,
    message: String,
    synced: Option<Synced>,
    /// A push completed: `refreshTime` and `syncedResourceVersion` move on.
    refreshed: bool,
}

impl Report {
    fn not_ready(reason: &'static str, message: String, synced: Option<Synced>) -> Self {
        Self {
            status: ConditionStatus::False,
            reason,
            message,
            synced,
            refreshed: false,
        }
    }
}

async fn write_status(
    ctx: &Context,
    api: &Api<PushSecret>,
    ps: &PushSecret,
    report: Report,
) -> Result<(), Error> {
    let previous = ps.status.clone().unwrap_or_default();
    let mut conditions = previous.conditions.clone();
    set_condition(
        &mut conditions,
        Condition::ready(report.status, report.reason, report.message),
        Timestamp::now(),
    );
    let (name, namespace) = (ps.name_any(), ps.namespace().unwrap_or_default());
    ctx.metrics
        .ps_condition
        .set(&name, &namespace, api::conditions::READY, report.status);
    let mut new = PushSecretStatus {
        conditions,
        observed_generation: ps.meta().generation,
        ..previous.clone()
    };
    if report.refreshed {
        new.refresh_time = Some(Time(Timestamp::now()));
        new.synced_resource_version = Some(format!("{}", ps.meta().generation.unwrap_or_default()));
    }
    if let Some(synced) = report.synced {
        new.synced_push_secrets = on_record(synced);
    }
    // A failure loses nothing: what was pushed went on record before the push.
    update_status(ctx, api, ps, &previous, &new).await
}

/// Writes `new` as the status of `ps`, whose status in the watch cache is `cached`.
async fn update_status(
    ctx: &Context,
    api: &Api<PushSecret>,
    ps: &PushSecret,
    cached: &PushSecretStatus,
    new: &PushSecretStatus,
) -> Result<(), Error> {
    ctx.status
        .update(api, &(), ps.meta(), cached, new)
        .await
        .map(drop)
        .map_err(|source| Error::Write {
            what: "status".into(),
            source,
        })
}

/// `status.syncedPushSecrets` for `synced`. Server-side apply turns a map emptied of our entries
/// into null, which the schema refuses: a store with nothing on record is left out, and so is
/// an empty record.
fn on_record(mut synced: Synced) -> Option<Synced> {
    synced.retain(|_, entries| !entries.is_empty());
    Some(synced).filter(|s| !s.is_empty())
}

/// Whether PushSecrets with deletionPolicy Delete hold `store` (ESO's rule, `plan::Uses::holds`);
/// `None` until every PushSecret is known, so that a store's finalizer is never removed on the
/// strength of a cache still filling at start-up. Answered at once rather than awaited, so that
/// a slow first list holds no store worker; the store controller reconciles every store again
/// when it is in ([`listed`]).
pub(crate) fn holding(pushsecrets: &Known, store: &LoadedStore) -> Option<bool> {
    if !pushsecrets.listed.is_in() {
        return None;
    }
    let this = plan::Store::of(store);
    let namespace = store.namespace.as_deref();
    Some(
        pushsecrets
            .cache
            .state()
            .iter()
            .filter_map(|ps| ps.0.as_ref().ok())
            .any(|ps| plan::Uses::of(ps).holds(this, namespace)),
    )
}

/// Once, when every PushSecret is known (see [`holding`]).
pub(crate) fn listed(pushsecrets: Known) -> impl futures::Stream<Item = ()> {
    futures::stream::once(async move { pushsecrets.listed.wait().await })
}

/// A PushSecret that does not fit our types gets a condition instead of a push.
pub async fn report_invalid(
    ctx: &Context,
    invalid: kube::core::error_boundary::InvalidObject,
) -> Result<Action, Error> {
    crate::context::report_unreadable::<PushSecret>(ctx, &invalid, reason::ERRORED)
        .await
        .map_err(|source| Error::Write {
            what: "status".into(),
            source,
        })?;
    let (name, namespace) = (
        invalid.metadata.name.unwrap_or_default(),
        invalid.metadata.namespace.unwrap_or_default(),
    );
    ctx.metrics.ps_condition.set(
        &name,
        &namespace,
        api::conditions::READY,
        ConditionStatus::False,
    );
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests;
