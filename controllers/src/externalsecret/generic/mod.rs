//! Generic targets (`spec.target.manifest`): an ExternalSecret that writes a ConfigMap or any
//! namespaced custom resource instead of a Secret. Off unless the operator runs with
//! `--unsafe-allow-generic-targets`, as in ESO: such objects are not encrypted at rest.

pub mod desired;
pub mod targets;

use api::external_secret::{CreationPolicy, DeletionPolicy, ExternalSecret, ManifestReference};
use jiff::Timestamp;
use kube::api::{DeleteParams, DynamicObject, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use tracing::{debug, warn};

pub use desired::manifest;
use targets::KindError;

use super::desired::{creation_policy, field_manager, target_name};
use super::{Error, SyncStop, Target, TargetRef, Written, carry_out, report, requeue, validate};
use crate::own_writes::OwnWriteLog;

impl From<KindError> for Error {
    fn from(e: KindError) -> Self {
        match e {
            KindError::NotServed {
                api_version,
                kind,
                message,
            } => Error::TargetKind {
                api_version,
                kind,
                message,
            },
            KindError::ClusterScoped(kind) => Error::Invalid {
                field: "spec.target.manifest".into(),
                message: format!(
                    "{kind} is cluster-scoped; a target lives in the ExternalSecret's namespace"
                ),
            },
        }
    }
}

/// ESO's reconcile of a generic target, on the same refresh rules as a Secret.
pub(super) async fn sync(
    es: &ExternalSecret,
    es_ctx: &super::ExternalSecretContext,
    force: bool,
    manifest: &ManifestReference,
) -> Result<Action, SyncStop> {
    let now = Timestamp::now();
    let (ctx, targets) = (es_ctx.shared.as_ref(), &es_ctx.generic_targets);
    let deleting = es.meta().deletion_timestamp.is_some();
    if !targets.enabled {
        // As ESO: nothing to clean up then, and ESO's finalizer must not keep it.
        if deleting {
            return super::release(es, ctx, || async { Ok(()) }).await;
        }
        return Err(Error::Invalid {
            field: "spec.target.manifest".into(),
            message: "generic targets are disabled; start the operator with --unsafe-allow-generic-targets (chart value genericTargets.enabled)".into(),
        }
        .into());
    }
    let namespace = es.namespace().unwrap_or_default();
    let name = target_name(es);
    let resource = match targets.resource(&ctx.client, manifest).await {
        Ok(resource) => resource,
        // A kind that is not served holds no target to clean up.
        Err(_) if deleting => return super::release(es, ctx, || async { Ok(()) }).await,
        Err(e) => return Err(Error::from(e).into()),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &resource);
    let existing = api
        .get_opt(&name)
        .await
        .map_err(|source| Error::ReadTarget {
            kind: manifest.kind.clone(),
            name: name.clone(),
            source,
        })?;
    if deleting {
        return super::release(es, ctx, || async {
            match existing.as_ref().filter(|o| owned(es, o)) {
                Some(object) if es.spec.deletion_policy() == DeletionPolicy::Delete => {
                    delete(es, &es_ctx.own_writes, &api, &manifest.kind, object).await
                }
                _ => Ok(()),
            }
        })
        .await;
    }
    validate(es)?;
    let policy = creation_policy(es);
    if policy != CreationPolicy::None {
        targets.watch(&ctx.client, &resource);
    }
    let forced = force && super::desired::follows_store_changes(es, now);
    if !forced
        && !super::desired::should_refresh(es, now)
        && desired::is_valid(es, existing.as_ref())
    {
        debug!("nothing to refresh");
        return Ok(requeue(es, now));
    }
    let fetched = super::fetch::fetch(es, ctx).await?;
    let owners = existing.as_ref().map(|o| o.owner_references());
    let step = super::desired::plan(es, fetched.is_empty(), owners, &manifest.kind, &name)
        .map_err(|(field, message)| Error::Invalid { field, message })?;
    let write = async {
        let template = es.spec.target.as_ref().and_then(|t| t.template.as_deref());
        let sources = crate::templating::read_sources(&ctx.client, &namespace, template).await?;
        let object = {
            let (es, manifest, existing) = (es.clone(), manifest.clone(), existing.clone());
            crate::templating::off_async(template.is_some(), move || {
                desired::desired_object(&es, &manifest, fetched, &sources, existing.as_ref())
            })
            .await?
        };
        write(
            es,
            &es_ctx.own_writes,
            &api,
            manifest,
            existing.as_ref(),
            object,
        )
        .await
    };
    let delete = async {
        match &existing {
            Some(object) => delete(es, &es_ctx.own_writes, &api, &manifest.kind, object).await,
            None => Ok(()),
        }
    };
    let written = carry_out(step, delete, write).await?;
    let what = format!("{} {name:?}", manifest.kind);
    let target = Target {
        what: what.into(),
        kind: &manifest.kind,
        generic: true,
    };
    report(es, ctx, &written, &target, None).await?;
    Ok(requeue(es, now))
}

async fn write(
    es: &ExternalSecret,
    own_writes: &OwnWriteLog,
    api: &Api<DynamicObject>,
    manifest: &ManifestReference,
    existing: Option<&DynamicObject>,
    mut object: DynamicObject,
) -> Result<Written, Error> {
    let name = target_name(es);
    let params = PostParams {
        field_manager: Some(field_manager(&es.name_any())),
        ..PostParams::default()
    };
    let failed = |source: kube::Error| Error::WriteTarget {
        kind: manifest.kind.clone(),
        name: name.clone(),
        source: source.into(),
    };
    if existing.is_some_and(|existing| desired::unchanged(existing, &object)) {
        return Ok(Written::Unchanged);
    }
    let mut writing = own_writes.writing(TargetRef::of(es));
    let (written, done) = match existing {
        None => (api.create(&params, &object).await, Written::Created),
        Some(existing) => {
            // A replace, as ESO's update: the target holds exactly what was rendered (with Merge
            // and CreateOrMerge, rendered over the object as it was).
            object.metadata.resource_version = existing.resource_version();
            object.metadata.uid = existing.uid();
            (api.replace(&name, &params, &object).await, Written::Updated)
        }
    };
    writing.wrote(written.map_err(failed)?.resource_version());
    writing.finish();
    Ok(done)
}

fn owned(es: &ExternalSecret, object: &DynamicObject) -> bool {
    super::desired::controlled_by(es, object.owner_references())
}

/// Deletes the target `object`, as an own write: its watch event wakes nobody.
async fn delete(
    es: &ExternalSecret,
    own_writes: &OwnWriteLog,
    api: &Api<DynamicObject>,
    kind: &str,
    object: &DynamicObject,
) -> Result<(), Error> {
    let name = object.name_any();
    let mut writing = own_writes.writing(TargetRef::of(es));
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(answer) => {
            writing.wrote(answer.left().and_then(|o| o.resource_version()));
            writing.deleted(object.uid());
            writing.finish();
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => {
            warn!(kind, name = name.as_str(), error = %source, "could not delete the generic target");
            Err(Error::WriteTarget {
                kind: kind.to_owned(),
                name,
                source: source.into(),
            })
        }
    }
}
