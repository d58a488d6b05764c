//! The PushSecret reconciler: read the source Secret, push its values through each store's
//! client, delete what is no longer pushed (deletionPolicy Delete), report status.

mod plan;
pub(crate) mod triggers;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use api::conditions::{Condition, ConditionStatus, set_condition};
use api::external_secret::SecretStoreKind;
use api::push_secret::{
    FINALIZER, PushSecret, PushSecretData, PushSecretDeletionPolicy, PushSecretStatus,
    PushSecretStoreRef, PushSecretUpdatePolicy, reason,
};
use api::store::{ClusterSecretStore, SecretStore};
use clientmanager::{StoreKind, StoreRef};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, Patch, PatchParams};
use kube::core::Selector;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::instrument;

use crate::context::{Context, apply_status};
use crate::events::EventType;

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

type Synced = BTreeMap<String, BTreeMap<String, PushSecretData>>;

#[instrument(skip_all, fields(namespace = ps.namespace(), name = ps.name_any()))]
pub async fn reconcile(ps: Arc<PushSecret>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let result = sync(&ps, &ctx).await;
    let labels = crate::metrics::labels(&ps.name_any(), &ps.namespace().unwrap_or_default());
    ctx.metrics
        .ps_reconcile_duration
        .get_or_create(&labels)
        .set(started.elapsed().as_nanos() as i64);
    result
}

async fn sync(ps: &PushSecret, ctx: &Context) -> Result<Action, Error> {
    // Before anything is written, finalizers included: another operator's PushSecret (all its
    // stores of another controller class) is not ours to touch.
    // The stores are resolved once: a label selector costs a list request.
    let targets = targets(ps, ctx).await?;
    if !any_store_ours(&targets, ps, ctx).await {
        return Ok(Action::await_change());
    }
    let api: Api<PushSecret> =
        Api::namespaced(ctx.client.clone(), &ps.namespace().unwrap_or_default());
    let delete_policy = ps.spec.deletion_policy == Some(PushSecretDeletionPolicy::Delete);
    let has_finalizer = ps.finalizers().iter().any(|f| f == FINALIZER);
    if ps.meta().deletion_timestamp.is_some() {
        if has_finalizer {
            let previous = synced_before(ps);
            delete_entries(ps, ctx, plan::stale(&previous, &Synced::new())).await?;
            set_finalizers(
                &api,
                ps,
                ps.finalizers()
                    .iter()
                    .filter(|f| *f != FINALIZER)
                    .cloned()
                    .collect(),
            )
            .await?;
        }
        return Ok(Action::await_change());
    }
    if delete_policy && !has_finalizer {
        let mut finalizers = ps.finalizers().to_vec();
        finalizers.push(FINALIZER.to_owned());
        set_finalizers(&api, ps, finalizers).await?;
    }
    match push(ps, ctx, &targets).await {
        Ok(synced) => {
            if delete_policy {
                delete_entries(ps, ctx, plan::stale(&synced_before(ps), &synced)).await?;
            }
            write_status(
                &ctx.metrics,
                &api,
                ps,
                ConditionStatus::True,
                reason::SYNCED,
                "PushSecret synced successfully",
                Some(synced),
            )
            .await?;
            let interval = refresh_interval(ps).unwrap_or(DEFAULT_REFRESH);
            Ok(if interval.is_zero() {
                Action::await_change()
            } else {
                Action::requeue(interval)
            })
        }
        Err(e) => {
            let message = e.to_string();
            write_status(
                &ctx.metrics,
                &api,
                ps,
                ConditionStatus::False,
                reason::ERRORED,
                &message,
                None,
            )
            .await?;
            ctx.event(
                &ps.object_ref(&()),
                EventType::Warning,
                reason::ERRORED,
                message,
            )
            .await;
            match e {
                Error::Invalid { .. } => Ok(Action::await_change()),
                e => Err(e),
            }
        }
    }
}

fn refresh_interval(ps: &PushSecret) -> Option<Duration> {
    ps.spec
        .refresh_interval
        .as_deref()
        .and_then(|s| crate::duration::parse(s).ok())
}

fn synced_before(ps: &PushSecret) -> Synced {
    ps.status
        .as_ref()
        .and_then(|s| s.synced_push_secrets.clone())
        .unwrap_or_default()
}

async fn push(ps: &PushSecret, ctx: &Context, targets: &[StoreRef]) -> Result<Synced, Error> {
    plan::unsupported(ps).map_err(|(field, message)| Error::Invalid { field, message })?;
    let namespace = ps.namespace().unwrap_or_default();
    let source_name = ps
        .spec
        .selector
        .secret
        .as_ref()
        .and_then(|s| s.name.clone())
        .ok_or_else(|| Error::Invalid {
            field: "spec.selector.secret.name".into(),
            message: "a source Secret is required".into(),
        })?;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let source = secrets
        .get_opt(&source_name)
        .await
        .map_err(|source| Error::Read {
            what: format!("Secret {source_name:?}"),
            source,
        })?
        .ok_or_else(|| Error::Invalid {
            field: "spec.selector.secret.name".into(),
            message: format!("Secret {source_name:?} does not exist"),
        })?;
    let data = crate::externalsecret::desired::secret_data(&source);
    // ESO pushes the templated Secret, not the source as it is.
    let template = ps.spec.template.as_ref();
    let sources = crate::templating::read_sources(&ctx.client, &namespace, template).await?;
    let data = crate::templating::shape(
        "spec.template",
        template,
        data,
        &sources,
        source.labels(),
        source.annotations(),
    )?
    .data;
    let pushes =
        plan::pushes(ps, &data).map_err(|(field, message)| Error::Invalid { field, message })?;
    let only_new = ps.spec.update_policy == Some(PushSecretUpdatePolicy::IfNotExists);

    let mut synced = Synced::new();
    let previous = synced_before(ps);
    for store in targets {
        let handle = match ctx.manager.get(store, &namespace).await {
            Ok(h) => h,
            Err(clientmanager::Error::OtherController { .. }) => {
                // What the other operator pushed there stays on record.
                let key = format!("{}/{}", store.kind, store.name);
                if let Some(entries) = previous.get(&key) {
                    synced.insert(key, entries.clone());
                }
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let kind = handle.provider.descriptor().kind;
        let entries = synced
            .entry(format!("{}/{}", store.kind, store.name))
            .or_default();
        for (j, p) in pushes.iter().enumerate() {
            let field = format!("spec.data[{j}] to {} {:?}", store.kind, store.name);
            if only_new {
                let exists = handle.client.secret_exists(&p.request.remote).await;
                ctx.metrics
                    .provider_call(kind, "SecretExists", exists.is_ok());
                if exists.map_err(|source| Error::Provider {
                    field: field.clone(),
                    source,
                })? {
                    entries.insert(plan::status_key(&p.entry), p.entry.clone());
                    continue;
                }
            }
            let pushed = handle.client.push_secret(&p.request).await;
            ctx.metrics
                .provider_call(kind, "PushSecret", pushed.is_ok());
            pushed.map_err(|source| Error::Provider { field, source })?;
            entries.insert(plan::status_key(&p.entry), p.entry.clone());
        }
    }
    Ok(synced)
}

/// Every store the PushSecret's `secretStoreRefs` name.
async fn targets(ps: &PushSecret, ctx: &Context) -> Result<Vec<StoreRef>, Error> {
    let namespace = ps.namespace().unwrap_or_default();
    let mut all = Vec::new();
    for (i, store_ref) in ps.spec.secret_store_refs.iter().enumerate() {
        all.extend(stores(ctx, store_ref, &namespace, i).await?);
    }
    Ok(all)
}

/// Whether any of `targets` belongs to this operator's controller class. A PushSecret naming no
/// store that can be found is ours to report on.
async fn any_store_ours(targets: &[StoreRef], ps: &PushSecret, ctx: &Context) -> bool {
    let namespace = ps.namespace().unwrap_or_default();
    for store in targets {
        if !matches!(
            ctx.manager.get(store, &namespace).await,
            Err(clientmanager::Error::OtherController { .. })
        ) {
            return true;
        }
    }
    targets.is_empty()
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

/// Removes pushed entries at their stores; a store that is gone or not ready fails the
/// reconcile, so nothing is forgotten while it still exists at the provider.
async fn delete_entries(
    ps: &PushSecret,
    ctx: &Context,
    entries: Vec<(String, PushSecretData)>,
) -> Result<(), Error> {
    let namespace = ps.namespace().unwrap_or_default();
    for (store_key, entry) in entries {
        let (kind, name) = store_key
            .split_once('/')
            .unwrap_or(("SecretStore", &store_key));
        let store = StoreRef {
            kind: StoreKind::parse(Some(kind)),
            name: name.to_owned(),
        };
        let handle = ctx.manager.get(&store, &namespace).await?;
        let remote = provider::PushRemoteRef {
            remote_key: entry.match_.remote_ref.remote_key.clone(),
            property: entry.match_.remote_ref.property.clone(),
        };
        let deleted = handle.client.delete_secret(&remote).await;
        ctx.metrics.provider_call(
            handle.provider.descriptor().kind,
            "DeleteSecret",
            deleted.is_ok(),
        );
        deleted.map_err(|source| Error::Provider {
            field: format!("deleting {:?} from {store_key}", remote.remote_key),
            source,
        })?;
    }
    Ok(())
}

async fn set_finalizers(
    api: &Api<PushSecret>,
    ps: &PushSecret,
    finalizers: Vec<String>,
) -> Result<(), Error> {
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

async fn write_status(
    metrics: &crate::metrics::Metrics,
    api: &Api<PushSecret>,
    ps: &PushSecret,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    synced: Option<Synced>,
) -> Result<(), Error> {
    let previous = ps.status.clone().unwrap_or_default();
    let mut conditions = previous.conditions.clone();
    set_condition(
        &mut conditions,
        Condition::ready(status, reason, message),
        Timestamp::now(),
    );
    let (name, namespace) = (ps.name_any(), ps.namespace().unwrap_or_default());
    metrics
        .ps_condition
        .set(&name, &namespace, api::conditions::READY, status);
    let mut new = PushSecretStatus {
        conditions,
        observed_generation: ps.meta().generation,
        ..previous.clone()
    };
    if let Some(synced) = synced {
        new.refresh_time = Some(Time(Timestamp::now()));
        new.synced_resource_version = Some(format!("{}", ps.meta().generation.unwrap_or_default()));
        new.synced_push_secrets = Some(synced);
    }
    if new == previous {
        return Ok(());
    }
    apply_status(api, &(), &ps.name_any(), &new)
        .await
        .map_err(|source| Error::Write {
            what: "status".into(),
            source,
        })
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
