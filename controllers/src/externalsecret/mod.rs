//! The ExternalSecret reconciler: fetch through the client manager, compute the Secret with the
//! pure code in `desired`, write it with server-side apply, report status.

pub mod desired;
mod fetch;
mod generate;
pub mod generic;
pub mod hash;
mod merge;
pub(crate) mod triggers;
pub mod versions;
mod windows;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use api::conditions::{Condition, ConditionStatus, set_condition};
use api::external_secret::{CreationPolicy, DeletionPolicy, ExternalSecret, ExternalSecretStatus};
use desired::Step;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, info, instrument, warn};

use crate::context::Context;
use crate::own_writes::{OwnWriteLog, TargetChange, TargetRef};
use futures::channel::mpsc::UnboundedSender;
use generic::targets::GenericTargets;
use versions::TargetVersions;

/// What the ExternalSecret reconciler works with: the handles every reconciler shares, and the
/// state only this one keeps.
pub struct ExternalSecretContext {
    pub shared: Arc<Context>,
    /// The resourceVersions of the Secrets this operator manages, from their metadata watch.
    pub target_versions: TargetVersions,
    /// The kinds ExternalSecrets write besides Secrets.
    pub generic_targets: GenericTargets,
    /// Targets this operator writes or wrote: the watch event of our own write needs no
    /// reconcile.
    pub own_writes: OwnWriteLog,
}

impl ExternalSecretContext {
    /// `target_changed` takes generic targets' watch events, and foreign events held during our
    /// own writes, to the ExternalSecrets' trigger.
    pub fn new(shared: Arc<Context>, target_changed: UnboundedSender<TargetChange>) -> Arc<Self> {
        let generic_targets = GenericTargets::new(
            shared.settings.allow_generic_targets,
            shared.settings.namespace.clone(),
            target_changed.clone(),
        );
        Arc::new(Self {
            shared,
            target_versions: Default::default(),
            generic_targets,
            own_writes: OwnWriteLog::new(target_changed),
        })
    }
}

/// ESO's reasons, under the names this module uses.
pub mod reason {
    pub use api::external_secret::reason::{
        RESOURCE_DELETED, RESOURCE_MISSING, RESOURCE_SYNCED, RESOURCE_SYNCED_ERROR,
        SECRET_DELETED as DELETED, SECRET_MISSING as MISSING, SECRET_SYNCED as SYNCED,
        SECRET_SYNCED_ERROR as SYNC_ERROR,
    };
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] clientmanager::Error),
    #[error("{field}: {source}")]
    Provider {
        field: String,
        source: provider::Error,
    },
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// Not terminal: the generator may be created later.
    #[error("could not read generator {kind} {name:?}: {reason}")]
    ReadGenerator {
        kind: String,
        name: String,
        reason: String,
    },
    /// Not terminal: a template can fail on data that a later refresh fixes.
    #[error(transparent)]
    Template(#[from] crate::templating::TemplateError),
    #[error(transparent)]
    TemplateSource(#[from] crate::templating::SourceError),
    #[error("could not read target Secret {name:?}: {source}")]
    ReadSecret { name: String, source: kube::Error },
    #[error("could not write target Secret {name:?}: {source}")]
    WriteSecret {
        name: String,
        source: crate::api_error::ApiError,
    },
    #[error("could not read target {kind} {name:?}: {source}")]
    ReadTarget {
        kind: String,
        name: String,
        source: kube::Error,
    },
    #[error("could not write target {kind} {name:?}: {source}")]
    WriteTarget {
        kind: String,
        name: String,
        source: crate::api_error::ApiError,
    },
    /// Not terminal: the CRD may be installed later.
    #[error("spec.target.manifest: {kind} in {api_version} is not served: {message}")]
    TargetKind {
        api_version: String,
        kind: String,
        message: String,
    },
    /// An apply meant to create the target found one: read it and go on as for any target.
    #[error("the target exists already")]
    TargetExists,
    #[error("target Secret {name:?} is immutable and its data would change")]
    Immutable { name: String },
    #[error("could not write status: {0}")]
    Status(#[source] kube::Error),
    #[error("could not remove ESO's finalizer: {0}")]
    Finalizer(#[source] kube::Error),
}

impl crate::outcome::ErrorKind for Error {
    fn kind(&self) -> &'static str {
        match self {
            Self::Store(e) => e.kind(),
            Self::Provider { .. } => "Provider",
            Self::Invalid { .. } => "Invalid",
            Self::ReadGenerator { .. } => "ReadGenerator",
            Self::Template(_) => "Template",
            Self::TemplateSource(_) => "TemplateSource",
            Self::ReadSecret { .. } => "ReadSecret",
            Self::WriteSecret { .. } => "WriteSecret",
            Self::ReadTarget { .. } => "ReadTarget",
            Self::WriteTarget { .. } => "WriteTarget",
            Self::TargetKind { .. } => "TargetKind",
            Self::TargetExists => "TargetExists",
            Self::Immutable { .. } => "Immutable",
            Self::Status(_) => "Status",
            Self::Finalizer(_) => "Finalizer",
        }
    }
}

impl Error {
    /// Errors that retrying cannot fix: wait for the user to change something.
    fn is_terminal(&self) -> bool {
        matches!(self, Self::Immutable { .. } | Self::Invalid { .. })
    }
}

/// What a successful sync did to the Secret.
enum Written {
    Created,
    Updated,
    Unchanged,
    Deleted,
    /// deletionPolicy Delete with no data and no Secret to delete.
    Absent,
    Retained,
    MissingForMerge,
}

/// `force`: whether a store change marked the ExternalSecret to refresh; asked only by a
/// reconcile that goes on, so that the mark outlives one held back.
#[instrument(skip_all, fields(namespace = es.namespace(), name = es.name_any()))]
pub async fn reconcile(
    es: Arc<ExternalSecret>,
    es_ctx: Arc<ExternalSecretContext>,
    force: impl FnOnce() -> bool,
) -> Result<Action, Error> {
    let ctx = es_ctx.shared.as_ref();
    if let Some(wait) = ctx
        .status
        .catching_up(es.meta(), || es.status.clone().unwrap_or_default())
    {
        debug!("the watch cache does not show our last status write yet");
        return Ok(Action::requeue(wait));
    }
    let started = Instant::now();
    let name = es.name_any();
    let namespace = es.namespace().unwrap_or_default();
    let result = sync(&es, &es_ctx, force()).await;
    let failed = matches!(result, Err(Failed(_)));
    ctx.metrics
        .es
        .reconciled(&name, &namespace, started.elapsed(), failed);
    match result {
        Ok(action) => Ok(action),
        Err(Skip) => Ok(Action::await_change()),
        Err(Failed(e)) => {
            let message = e.to_string();
            let failed = if generic::manifest(&es).is_some() {
                reason::RESOURCE_SYNCED_ERROR
            } else {
                reason::SYNC_ERROR
            };
            // Each retry of the same failure would be another request to the API server (a
            // series update); a provider that is down for long would make that a storm.
            let repeat = es.status.as_ref().is_some_and(|s| {
                api::conditions::holds(
                    &s.conditions,
                    &Condition::ready(ConditionStatus::False, failed, message.as_str()),
                )
            });
            write_status(&es, ctx, ConditionStatus::False, failed, &message, None).await?;
            if !repeat {
                ctx.event(
                    &es.object_ref(&()),
                    EventType::Warning,
                    "UpdateFailed",
                    message,
                );
            }
            if e.is_terminal() {
                Ok(Action::await_change())
            } else {
                Err(e)
            }
        }
    }
}

/// Why a sync ended early: nothing to do here (another controller class), or an error.
enum SyncStop {
    Skip,
    Failed(Error),
}
use SyncStop::{Failed, Skip};

impl From<Error> for SyncStop {
    fn from(e: Error) -> Self {
        Failed(e)
    }
}

impl From<clientmanager::Error> for SyncStop {
    fn from(e: clientmanager::Error) -> Self {
        match e {
            clientmanager::Error::OtherController { .. } => Skip,
            e => Failed(Error::Store(e)),
        }
    }
}

async fn sync(
    es: &ExternalSecret,
    es_ctx: &ExternalSecretContext,
    force: bool,
) -> Result<Action, SyncStop> {
    if let Some(manifest) = generic::manifest(es) {
        return generic::sync(es, es_ctx, force, manifest).await;
    }
    let ctx = es_ctx.shared.as_ref();
    let now = Timestamp::now();
    let namespace = es.namespace().unwrap_or_default();
    let target = desired::target_name(es);
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let forced = force && desired::follows_store_changes(es, now);
    let refresh = forced || desired::should_refresh(es, now);
    if es.meta().deletion_timestamp.is_none()
        && !refresh
        && let Some(synced) = es
            .status
            .as_ref()
            .and_then(|s| s.target_resource_version.as_deref())
    {
        let versions = &es_ctx.target_versions;
        match versions.unchanged_since((&namespace, &es.name_any()), &namespace, &target, synced) {
            Some(true) => {
                debug!("nothing to refresh, and the target is as last synced");
                return Ok(requeue(es, now));
            }
            // Woken when the first list of Secrets is in, rather than holding a worker for it.
            None => return Ok(Action::await_change()),
            Some(false) => {}
        }
    }
    // A target the watch of managed Secrets does not know is most likely not there yet (a new
    // ExternalSecret): it is not read, but created by an apply that fails if it exists after all,
    // and read then. Merge needs the target as it is; None writes nothing.
    let mut unread = es.meta().deletion_timestamp.is_none()
        && refresh
        && matches!(
            desired::creation_policy(es),
            CreationPolicy::Owner | CreationPolicy::Orphan
        )
        && es_ctx.target_versions.unknown(&namespace, &target);
    let mut existing = if unread {
        None
    } else {
        read_secret(&secrets, &target).await?
    };
    if es.meta().deletion_timestamp.is_some() {
        let ours = |s: &&Secret| desired::controlled_by(es, s.owner_references());
        return release(es, ctx, || async {
            match existing.as_ref().filter(ours) {
                Some(secret) if es.spec.deletion_policy() == DeletionPolicy::Delete => {
                    delete_owned(es, &es_ctx.own_writes, &secrets, secret).await
                }
                _ => Ok(()),
            }
        })
        .await;
    }
    validate(es)?;
    if !forced
        && !desired::should_refresh(es, now)
        && desired::secret_is_valid(es, existing.as_ref())
    {
        debug!("nothing to refresh");
        if let Some(version) = existing.as_ref().and_then(|s| s.resource_version()) {
            es_ctx
                .target_versions
                .confirm(&namespace, &target, &version);
        }
        return Ok(requeue(es, now));
    }

    let fetched = fetch::fetch(es, ctx).await?;
    let fetched_nothing = fetched.is_empty();
    let plan = |existing: Option<&Secret>| {
        let owners = existing.map(|s| s.owner_references());
        desired::plan(es, fetched_nothing, owners, "Secret", &target)
            .map_err(|(field, message)| Error::Invalid { field, message })
    };
    let mut step = plan(existing.as_ref());
    if unread && !matches!(step, Ok(Step::Write)) {
        // Only a write learns whether the target exists; any other step needs to know first.
        unread = false;
        existing = read_secret(&secrets, &target).await?;
        step = plan(existing.as_ref());
    }
    let step = step?;
    let notes = WriteNotes::default();
    let own = &es_ctx.own_writes;
    let written = if step == Step::Write {
        let shaped = shape(es, ctx, &namespace, fetched).await?;
        let secrets = &secrets;
        match write_secret(es, own, secrets, existing.as_ref(), &shaped, &notes, unread).await {
            // Someone else's Secret by that name: as for any target that exists.
            Err(Error::TargetExists) => {
                existing = read_secret(secrets, &target).await?;
                let delete = delete_target(es, own, secrets, existing.as_ref());
                let write =
                    write_secret(es, own, secrets, existing.as_ref(), &shaped, &notes, false);
                carry_out(plan(existing.as_ref())?, delete, write).await?
            }
            written => written?,
        }
    } else {
        carry_out_unwritten(step, delete_target(es, own, &secrets, existing.as_ref())).await?
    };
    let version = match written {
        Written::Created | Written::Updated => notes.version.lock().expect("poisoned").take(),
        Written::Unchanged => existing
            .as_ref()
            .filter(|s| desired::secret_is_valid(es, Some(s)))
            .and_then(|s| s.resource_version()),
        _ => None,
    };
    report(es, ctx, &written, &Target::SECRET, version).await?;
    Ok(requeue(es, now))
}

async fn read_secret(secrets: &Api<Secret>, target: &str) -> Result<Option<Secret>, Error> {
    secrets
        .get_opt(target)
        .await
        .map_err(|source| Error::ReadSecret {
            name: target.to_owned(),
            source,
        })
}

async fn delete_target(
    es: &ExternalSecret,
    own_writes: &OwnWriteLog,
    secrets: &Api<Secret>,
    existing: Option<&Secret>,
) -> Result<(), Error> {
    match existing {
        Some(secret) => delete_owned(es, own_writes, secrets, secret).await,
        None => Ok(()),
    }
}

/// The Secret's data, labels and annotations from the fetched data and the template.
async fn shape(
    es: &ExternalSecret,
    ctx: &Context,
    namespace: &str,
    fetched: BTreeMap<String, Vec<u8>>,
) -> Result<crate::templating::Shaped, Error> {
    let template = es.spec.target.as_ref().and_then(|t| t.template.clone());
    let sources =
        crate::templating::read_sources(&ctx.client, namespace, template.as_deref()).await?;
    let (labels, annotations) = (es.labels().clone(), es.annotations().clone());
    Ok(crate::templating::off_async(template.is_some(), move || {
        crate::templating::shape(
            "spec.target.template",
            template.as_deref(),
            fetched,
            &sources,
            &labels,
            &annotations,
        )
    })
    .await?)
}

/// Does what `step` says: `delete` and `write` run only for their step.
async fn carry_out(
    step: Step,
    delete: impl std::future::Future<Output = Result<(), Error>>,
    write: impl std::future::Future<Output = Result<Written, Error>>,
) -> Result<Written, Error> {
    match step {
        Step::Write => write.await,
        step => carry_out_unwritten(step, delete).await,
    }
}

/// Does what a step other than Write says: `delete` runs only for Delete.
async fn carry_out_unwritten(
    step: Step,
    delete: impl std::future::Future<Output = Result<(), Error>>,
) -> Result<Written, Error> {
    Ok(match step {
        Step::Delete => {
            delete.await?;
            Written::Deleted
        }
        Step::Absent => Written::Absent,
        Step::Retain => Written::Retained,
        Step::WaitForTarget => Written::MissingForMerge,
        Step::Nothing => Written::Unchanged,
        Step::Write => unreachable!("a write is carried out by carry_out"),
    })
}

/// What is wrong with the spec before anything is fetched.
fn validate(es: &ExternalSecret) -> Result<(), Error> {
    desired::refresh_interval(es).map_err(|message| Error::Invalid {
        field: "spec.refreshInterval".into(),
        message,
    })?;
    desired::unsupported(es).map_err(|(field, message)| Error::Invalid { field, message })?;
    Ok(())
}

/// How the status and events speak of the target.
struct Target<'a> {
    /// "secret", or the kind and name of a generic target.
    what: Cow<'a, str>,
    kind: &'a str,
    generic: bool,
}

impl Target<'static> {
    const SECRET: Target<'static> = Target {
        what: Cow::Borrowed("secret"),
        kind: "Secret",
        generic: false,
    };
}

/// The Ready condition and the event for what a sync did, in ESO's reasons.
async fn report(
    es: &ExternalSecret,
    ctx: &Context,
    written: &Written,
    target: &Target<'_>,
    target_version: Option<String>,
) -> Result<(), Error> {
    let what = &target.what;
    let pick = |secret: &'static str, resource: &'static str| {
        if target.generic { resource } else { secret }
    };
    let (status, reason, message) = match written {
        Written::Deleted | Written::Absent => (
            ConditionStatus::True,
            pick(reason::DELETED, reason::RESOURCE_DELETED),
            format!("{what} deleted: the provider returned no data"),
        ),
        Written::Retained => (
            ConditionStatus::True,
            pick(reason::SYNCED, reason::RESOURCE_SYNCED),
            format!("{what} retained: the provider returned no data"),
        ),
        Written::MissingForMerge => (
            ConditionStatus::False,
            pick(reason::MISSING, reason::RESOURCE_MISSING),
            format!(
                "{what} will not be created: creationPolicy is Merge and the {} does not exist",
                target.kind
            ),
        ),
        _ => (
            ConditionStatus::True,
            pick(reason::SYNCED, reason::RESOURCE_SYNCED),
            format!("{what} synced"),
        ),
    };
    write_status(es, ctx, status, reason, &message, Some(target_version)).await?;
    // ESO only logs these, at debug level; a user has to see why a window never applies. Told
    // when the ExternalSecret is new or changed, not at every refresh.
    let changed = es
        .status
        .as_ref()
        .and_then(|s| s.synced_resource_version.as_deref())
        != Some(desired::synced_resource_version(es).as_str());
    let ignored = windows::parse(es)
        .map(|w| w.ignored)
        .filter(|_| changed)
        .unwrap_or_default();
    for (field, why) in ignored {
        ctx.event(
            &es.object_ref(&()),
            EventType::Warning,
            "InvalidSyncWindow",
            format!("{field}: {why}; the window is ignored"),
        );
    }
    let event = match written {
        Written::Created => Some(("Created", "created")),
        Written::Updated => Some(("Updated", "updated")),
        Written::Deleted => Some(("Deleted", "deleted")),
        _ => None,
    };
    if let Some((reason, done)) = event {
        ctx.event(
            &es.object_ref(&()),
            EventType::Normal,
            reason,
            format!("{what} {done}"),
        );
    }
    Ok(())
}

fn requeue(es: &ExternalSecret, now: Timestamp) -> Action {
    match desired::requeue_after(es, now) {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    }
}

/// The resourceVersion of no object: see `write_secret`.
const NO_OBJECT_VERSION: &str = "1";

/// What a write of the target leaves behind besides its outcome.
#[derive(Default)]
struct WriteNotes {
    /// The target's resourceVersion after our last request.
    version: std::sync::Mutex<Option<String>>,
}

/// Applies the Secret `shaped` describes over `existing`; with `create_only`, the target was not
/// read and the apply fails with `TargetExists` rather than change a Secret that exists.
async fn write_secret(
    es: &ExternalSecret,
    own_writes: &OwnWriteLog,
    secrets: &Api<Secret>,
    existing: Option<&Secret>,
    shaped: &crate::templating::Shaped,
    notes: &WriteNotes,
    create_only: bool,
) -> Result<Written, Error> {
    let target = desired::target_name(es);
    let data = &shaped.data;
    let Some(mut body) = desired::desired_secret(es, shaped, existing) else {
        return Ok(Written::Unchanged);
    };
    if create_only {
        // A precondition no object meets: a Secret's resourceVersion is the etcd revision of
        // its last write, and revision 1 is etcd's empty start. An apply that creates the
        // object is not held to it.
        body["metadata"]["resourceVersion"] = json!(NO_OBJECT_VERSION);
    }
    if let Some(existing) = existing {
        let current = desired::secret_data(existing);
        let data_changes = !desired::stale_keys(es, existing, data).is_empty()
            || data.iter().any(|(k, v)| current.get(k) != Some(v));
        if existing.immutable == Some(true) && data_changes {
            return Err(Error::Immutable { name: target });
        }
        if !data_changes
            && desired::secret_is_valid(es, Some(existing))
            && metadata_matches(existing, &body)
        {
            return Ok(Written::Unchanged);
        }
    }
    let manager = desired::field_manager(&es.name_any());
    let mut writing = own_writes.writing(TargetRef::of(es));
    let written = secrets
        .patch(
            &target,
            &PatchParams::apply(&manager).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(|source| match source {
            kube::Error::Api(s) if create_only && s.code == 409 => Error::TargetExists,
            source => Error::WriteSecret {
                name: target.clone(),
                source: source.into(),
            },
        })?;
    writing.wrote(written.resource_version());
    if existing.is_some() {
        // From the Secret as applied: keys our own earlier apply owned are gone already.
        let stale = desired::stale_keys(es, &written, data);
        if !stale.is_empty() {
            // Keys written by someone else are not ours under server-side apply; with Owner and
            // Orphan the Secret must hold exactly the fetched data, so remove them explicitly.
            let ops: Vec<_> = stale
                .iter()
                .map(|k| json!({"op": "remove", "path": format!("/data/{}", k.replace('~', "~0").replace('/', "~1"))}))
                .collect();
            let patch: json_patch::Patch =
                serde_json::from_value(json!(ops)).expect("well-formed JSON patch");
            let trimmed = secrets
                .patch(&target, &PatchParams::default(), &Patch::<()>::Json(patch))
                .await
                .map_err(|source| Error::WriteSecret {
                    name: target.clone(),
                    source: source.into(),
                })?;
            writing.wrote(trimmed.resource_version());
        }
    }
    *notes.version.lock().expect("poisoned") = writing.last().map(str::to_owned);
    writing.finish();
    if existing.is_some() {
        return Ok(Written::Updated);
    }
    delete_renamed_targets(es, own_writes, secrets, &target).await?;
    Ok(Written::Created)
}

/// As ESO: with creationPolicy Owner, a Secret this ExternalSecret created under a former
/// `target.name` goes once the new one exists. Only after a spec change (generation above 1)
/// can the target have been renamed, so a new ExternalSecret costs no extra request.
async fn delete_renamed_targets(
    es: &ExternalSecret,
    own_writes: &OwnWriteLog,
    secrets: &Api<Secret>,
    target: &str,
) -> Result<(), Error> {
    if desired::creation_policy(es) != CreationPolicy::Owner
        || es.meta().generation.unwrap_or_default() <= 1
    {
        return Ok(());
    }
    let label = format!(
        "{}={}",
        desired::CREATED_BY_LABEL,
        hash::created_by(&es.namespace().unwrap_or_default(), &es.name_any())
    );
    let former = secrets
        .list_metadata(&ListParams::default().labels(&label))
        .await
        .map_err(|source| Error::ReadSecret {
            name: format!("Secrets labelled {label}"),
            source,
        })?;
    for old in former.items.iter().filter(|s| s.name_any() != target) {
        let old = Secret {
            metadata: old.metadata.clone(),
            ..Secret::default()
        };
        // delete_owned refuses a Secret another object controls, label or not.
        if let Err(e) = delete_owned(es, own_writes, secrets, &old).await {
            warn!(secret = old.name_any(), error = %e, "not deleting the former target");
        } else {
            info!(
                secret = old.name_any(),
                "deleted the Secret of a former target name"
            );
        }
    }
    Ok(())
}

/// Whether the labels, annotations and owner references we want are already on the Secret.
fn metadata_matches(existing: &Secret, body: &serde_json::Value) -> bool {
    let want = &body["metadata"];
    let has_all = |have: &BTreeMap<String, String>, want: &serde_json::Value| {
        want.as_object().is_none_or(|m| {
            m.iter()
                .all(|(k, v)| have.get(k).map(String::as_str) == v.as_str())
        })
    };
    let owners_ok = want["ownerReferences"].as_array().is_none_or(|owners| {
        owners.iter().all(|o| {
            existing
                .owner_references()
                .iter()
                .any(|e| Some(e.uid.as_str()) == o["uid"].as_str())
        })
    });
    has_all(existing.labels(), &want["labels"])
        && has_all(existing.annotations(), &want["annotations"])
        && owners_ok
}

/// An ExternalSecret being deleted that carries Go ESO's cleanup finalizer: clean up as ESO
/// would (`cleanup`: deletionPolicy Delete removes the target it manages), then let it go.
/// Without the finalizer there is nothing to do: an owned target goes with garbage collection.
async fn release<F, Fut>(es: &ExternalSecret, ctx: &Context, cleanup: F) -> Result<Action, SyncStop>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    if !es
        .finalizers()
        .iter()
        .any(|f| f == api::external_secret::FINALIZER)
    {
        return Ok(Action::await_change());
    }
    let namespace = es.namespace().unwrap_or_default();
    // Another operator's ExternalSecret keeps its finalizer until that operator removes it.
    if let Some(store) = es.spec.secret_store_ref.as_ref().map(fetch::to_store_ref)
        && let Err(clientmanager::Error::OtherController { .. }) =
            ctx.manager.get(&store, &namespace).await
    {
        return Err(Skip);
    }
    cleanup().await?;
    let remaining: Vec<String> = es
        .finalizers()
        .iter()
        .filter(|f| *f != api::external_secret::FINALIZER)
        .cloned()
        .collect();
    let api: Api<ExternalSecret> = Api::namespaced(ctx.client.clone(), &namespace);
    let patch = serde_json::json!({"metadata": {
        "finalizers": remaining,
        "resourceVersion": es.resource_version(),
    }});
    api.patch(
        &es.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(Error::Finalizer)?;
    Ok(Action::await_change())
}

/// Deletes a Secret this ExternalSecret controls, as an own write: its watch event wakes nobody.
async fn delete_owned(
    es: &ExternalSecret,
    own_writes: &OwnWriteLog,
    secrets: &Api<Secret>,
    secret: &Secret,
) -> Result<(), Error> {
    if !desired::controlled_by(es, secret.owner_references()) {
        return Err(Error::Invalid {
            field: "spec.target.deletionPolicy".into(),
            message: "Delete only removes a Secret this ExternalSecret owns (creationPolicy Owner)"
                .into(),
        });
    }
    let name = secret.name_any();
    let target = TargetRef::secret(&es.namespace().unwrap_or_default(), &name);
    let mut writing = own_writes.writing(target);
    match secrets.delete(&name, &DeleteParams::default()).await {
        // Held by a finalizer: the update that marked it is ours too.
        Ok(answer) => writing.wrote(answer.left().and_then(|s| s.resource_version())),
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(source) => {
            return Err(Error::WriteSecret {
                name,
                source: source.into(),
            });
        }
    }
    writing.deleted(secret.uid());
    writing.finish();
    Ok(())
}

async fn write_status(
    es: &ExternalSecret,
    ctx: &Context,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    // After a sync: the target's resourceVersion as synced, if it is a Secret of ours.
    synced: Option<Option<String>>,
) -> Result<(), Error> {
    let now = Timestamp::now();
    let previous = es.status.clone().unwrap_or_default();
    let mut conditions = previous.conditions.clone();
    set_condition(
        &mut conditions,
        Condition::ready(status, reason, message),
        now,
    );
    let mut new = ExternalSecretStatus {
        conditions,
        observed_generation: es.meta().generation,
        ..previous.clone()
    };
    if let Some(target_version) = synced {
        new.target_resource_version = target_version;
        new.refresh_time = Some(Time(now));
        new.synced_resource_version = Some(desired::synced_resource_version(es));
        new.binding = Some(api::external_secret::SecretBinding {
            name: Some(desired::target_name(es)),
        });
    }
    ctx.metrics
        .es
        .ready(&es.name_any(), &es.namespace().unwrap_or_default(), status);
    let api: Api<ExternalSecret> =
        Api::namespaced(ctx.client.clone(), &es.namespace().unwrap_or_default());
    ctx.status
        .update(&api, &(), es.meta(), &previous, &new)
        .await
        .map(|_| ())
        .map_err(Error::Status)
}

/// An ExternalSecret that does not fit our types gets a condition instead of a sync.
pub async fn report_invalid(
    ctx: &Context,
    invalid: kube::core::error_boundary::InvalidObject,
) -> Result<Action, Error> {
    crate::context::report_unreadable::<ExternalSecret>(ctx, &invalid, reason::SYNC_ERROR)
        .await
        .map_err(Error::Status)?;
    let (name, namespace) = (
        invalid.metadata.name.unwrap_or_default(),
        invalid.metadata.namespace.unwrap_or_default(),
    );
    ctx.metrics
        .es
        .ready(&name, &namespace, ConditionStatus::False);
    Ok(Action::await_change())
}

/// Here, beside the ExternalSecret it reads, rather than with the type below everything.
impl TargetRef {
    pub fn of(es: &ExternalSecret) -> Self {
        let (group, kind) = generic::manifest(es).map_or(("", "Secret"), |m| {
            let group = m.api_version.split_once('/').map_or("", |(g, _)| g);
            (group, m.kind.as_str())
        });
        Self {
            group: group.to_owned(),
            kind: kind.to_owned(),
            namespace: es.namespace().unwrap_or_default(),
            name: desired::target_name(es),
        }
    }
}

/// The stores `es` reads from, as it names them, directly or through a `sourceRef`.
pub(crate) fn store_refs(
    es: &ExternalSecret,
) -> impl Iterator<Item = &api::external_secret::SecretStoreRef> {
    let spec = &es.spec;
    let data = spec.data.iter().flatten().map(|d| d.source_ref.as_ref());
    let data_from = spec
        .data_from
        .iter()
        .flatten()
        .map(|d| d.source_ref.as_ref());
    spec.secret_store_ref.iter().chain(
        data.chain(data_from)
            .filter_map(|s| s.and_then(|s| s.store_ref.as_ref())),
    )
}

/// Forgets the metrics and the status last written of a deleted ExternalSecret.
pub fn forget(ctx: &Context, name: &str, namespace: &str, uid: Option<&str>) {
    ctx.status.forget(uid);
    ctx.metrics.es.forget(name, namespace);
}

#[cfg(test)]
mod tests;
