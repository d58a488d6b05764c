//! Pure desired-state code: from an ExternalSecret, what was fetched and the Secret that exists,
//! to the Secret we want, and whether a refresh is due. Nothing here talks to the API server.

use std::collections::BTreeMap;
use std::time::Duration;

use api::external_secret::{CreationPolicy, DeletionPolicy, ExternalSecret, RefreshPolicy};
use base64::Engine;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::hash;
pub use crate::keys::{
    Decoding, check_nul, convert_key, convert_keys, decode, secret_data, valid_key,
};
use crate::templating::Shaped;

pub use api::external_secret::{
    ANNOTATION_DATA_HASH as DATA_HASH_ANNOTATION, LABEL_CREATED_BY as CREATED_BY_LABEL,
    LABEL_MANAGED as MANAGED_LABEL,
};
const DEFAULT_REFRESH: Duration = Duration::from_secs(3600);

/// ESO's field manager for an ExternalSecret's target, so both operators own the same fields.
pub fn field_manager(es_name: &str) -> String {
    let name = format!("externalsecrets.external-secrets.io/{es_name}");
    if name.len() > 63 {
        use sha3::Digest;
        let digest = sha3::Sha3_224::digest(es_name.as_bytes());
        format!(
            "externalsecrets.external-secrets.io/sha3/{}",
            hex::encode(digest)
        )
    } else {
        name
    }
}

pub fn target_name(es: &ExternalSecret) -> String {
    es.spec
        .target
        .as_ref()
        .and_then(|t| t.name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| es.name_any())
}

pub fn creation_policy(es: &ExternalSecret) -> CreationPolicy {
    es.spec.creation_policy()
}

/// `status.syncedResourceVersion`: the generation plus a hash of labels and annotations.
pub fn synced_resource_version(es: &ExternalSecret) -> String {
    format!(
        "{}-{}",
        es.meta().generation.unwrap_or_default(),
        hash::meta_hash(es.labels(), es.annotations())
    )
}

pub fn refresh_interval(es: &ExternalSecret) -> Result<Duration, String> {
    match es.spec.refresh_interval.as_deref() {
        None | Some("") => Ok(DEFAULT_REFRESH),
        Some(s) => crate::duration::parse(s).map_err(|e| format!("spec.refreshInterval: {e}")),
    }
}

/// ESO's refresh decision (reference §3.2).
pub fn should_refresh(es: &ExternalSecret, now: Timestamp) -> bool {
    let status = es.status.as_ref();
    let synced = status.and_then(|s| s.synced_resource_version.as_deref());
    let refreshed = status.and_then(|s| s.refresh_time.as_ref()).map(|t| t.0);
    let (Some(synced), Some(refreshed)) = (synced, refreshed) else {
        return true;
    };
    // ESO waits for the next interval after a failed sync; retrying (with the controller's
    // backoff) lets a fixed store or provider heal the ExternalSecret without an hour's wait.
    let failed = status
        .and_then(|s| api::conditions::find(&s.conditions, api::conditions::READY))
        .is_some_and(|c| {
            matches!(
                c.reason.as_deref(),
                Some(super::reason::SYNC_ERROR | super::reason::RESOURCE_SYNCED_ERROR)
            )
        });
    let changed = synced != synced_resource_version(es);
    if failed {
        return changed || !periodic(es) || windows_allow(es, now);
    }
    match es.spec.refresh_policy {
        Some(RefreshPolicy::CreatedOnce) => false,
        Some(RefreshPolicy::OnChange) => changed,
        _ => {
            if changed || refreshed > now {
                return true;
            }
            match refresh_interval(es) {
                Ok(i) if i.is_zero() => false,
                Ok(i) => refreshed + i <= now && windows_allow(es, now),
                Err(_) => true,
            }
        }
    }
}

/// Whether a change of the store or provider object refreshes the ExternalSecret at once (our
/// addition to ESO): only a periodic one, since CreatedOnce asks never to refresh and OnChange
/// to refresh only when the ExternalSecret itself changes, and not while its sync windows hold
/// periodic refreshes back.
pub fn follows_store_changes(es: &ExternalSecret, now: Timestamp) -> bool {
    periodic(es) && windows_allow(es, now)
}

fn periodic(es: &ExternalSecret) -> bool {
    !matches!(
        es.spec.refresh_policy,
        Some(RefreshPolicy::CreatedOnce | RefreshPolicy::OnChange)
    )
}

/// Time until the next periodic refresh; `None` when the ExternalSecret never refreshes.
pub fn requeue_after(es: &ExternalSecret, now: Timestamp) -> Option<Duration> {
    if !periodic(es) {
        return None;
    }
    let interval = refresh_interval(es).ok().filter(|i| !i.is_zero())?;
    let refreshed = es
        .status
        .as_ref()
        .and_then(|s| s.refresh_time.as_ref())
        .map(|t| t.0)
        .unwrap_or(now);
    let elapsed = now.duration_since(refreshed).unsigned_abs();
    let remaining = interval.saturating_sub(elapsed);
    if remaining.is_zero()
        && let Some(windows) = super::windows::parse(es)
        && !windows.allow(now)
    {
        return Some(windows.wait(now));
    }
    Some(remaining.max(Duration::from_secs(1)))
}

/// Whether `spec.syncWindows` lets a periodic refresh run at `now`.
fn windows_allow(es: &ExternalSecret, now: Timestamp) -> bool {
    super::windows::parse(es).is_none_or(|w| w.allow(now))
}

/// Whether the existing Secret still holds what we last wrote. A missing Secret, a missing
/// managed label or a data hash that does not match (a hand edit) force a refresh.
pub fn secret_is_valid(es: &ExternalSecret, secret: Option<&Secret>) -> bool {
    if creation_policy(es) == CreationPolicy::Orphan {
        return true;
    }
    let Some(secret) = secret else { return false };
    if secret.labels().get(MANAGED_LABEL).map(String::as_str) != Some("true") {
        return false;
    }
    let data = secret_data(secret);
    secret.annotations().get(DATA_HASH_ANNOTATION) == Some(&hash::data_hash(&data))
}

/// Features of the API this operator does not implement yet. Refusing them with a condition that
/// names the field beats writing a Secret that silently lacks what the user asked for.
pub fn unsupported(es: &ExternalSecret) -> Result<(), (String, String)> {
    let spec = &es.spec;
    // ESO accepts a generator under spec.data but never runs it; silently reading from the
    // default store instead would be worse than saying so.
    for (i, d) in spec.data().iter().enumerate() {
        if d.source_ref
            .as_ref()
            .is_some_and(|s| s.generator_ref.is_some())
        {
            return Err((
                format!("spec.data[{i}].sourceRef.generatorRef"),
                "generators are not supported in spec.data; use spec.dataFrom".into(),
            ));
        }
    }
    Ok(())
}

/// The Secret's data once our write is done: exactly ours with Owner and Orphan; with Merge and
/// CreateOrMerge, the keys others wrote stay beside ours.
pub fn final_data(
    es: &ExternalSecret,
    existing: Option<&Secret>,
    data: &BTreeMap<String, Vec<u8>>,
) -> BTreeMap<String, Vec<u8>> {
    match (creation_policy(es), existing) {
        (CreationPolicy::Merge | CreationPolicy::CreateOrMerge, Some(existing)) => {
            let mut merged = secret_data(existing);
            merged.extend(data.iter().map(|(k, v)| (k.clone(), v.clone())));
            merged
        }
        _ => data.clone(),
    }
}

/// The Secret we want, as a server-side apply body, from the shaped (templated) result and the
/// Secret as it is. `None` when nothing is to be written.
pub fn desired_secret(
    es: &ExternalSecret,
    shaped: &Shaped,
    existing: Option<&Secret>,
) -> Option<Value> {
    let policy = creation_policy(es);
    if policy == CreationPolicy::None {
        return None;
    }
    let namespace = es.namespace().unwrap_or_default();
    let data = &shaped.data;
    let mut labels = shaped.labels.clone();
    let mut annotations = shaped.annotations.clone();
    labels.insert(MANAGED_LABEL.to_owned(), "true".to_owned());
    // ESO hashes the data the Secret ends up with, other writers' keys included, and compares
    // that with the Secret as it is; a hash of ours alone would never match a merged Secret.
    annotations.insert(
        DATA_HASH_ANNOTATION.to_owned(),
        hash::data_hash(&final_data(es, existing, data)),
    );
    let mut metadata = json!({
        "name": target_name(es),
        "namespace": namespace,
    });
    if policy == CreationPolicy::Owner {
        labels.insert(
            CREATED_BY_LABEL.to_owned(),
            hash::created_by(&namespace, &es.name_any()),
        );
        let owner: Option<OwnerReference> = es.controller_owner_ref(&());
        metadata["ownerReferences"] = json!(owner.into_iter().collect::<Vec<_>>());
    }
    metadata["labels"] = json!(labels);
    if !shaped.finalizers.is_empty() {
        metadata["finalizers"] = json!(shaped.finalizers);
    }
    metadata["annotations"] = json!(annotations);
    let encoded: BTreeMap<&String, String> = data
        .iter()
        .map(|(k, v)| (k, base64::engine::general_purpose::STANDARD.encode(v)))
        .collect();
    let mut secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "data": encoded,
    });
    if let Some(type_) = shaped.type_.as_ref().filter(|t| !t.is_empty()) {
        secret["type"] = json!(type_);
    }
    if es.spec.target.as_ref().and_then(|t| t.immutable) == Some(true) {
        secret["immutable"] = json!(true);
    }
    Some(secret)
}

/// The controller owner reference of an existing target that forbids writing it, whatever the
/// creationPolicy (as ESO): another ExternalSecret's, since two ExternalSecrets writing one Secret
/// would overwrite each other on every refresh (Merge and CreateOrMerge included); and with Owner,
/// any other object's, since the API server allows one controller only.
pub fn ownership_conflict<'a>(
    es: &ExternalSecret,
    owners: &'a [OwnerReference],
) -> Option<&'a OwnerReference> {
    let policy = creation_policy(es);
    if policy == CreationPolicy::None {
        return None;
    }
    let uid = es.uid();
    owners.iter().find(|o| {
        o.controller == Some(true)
            && Some(&o.uid) != uid.as_ref()
            && (policy == CreationPolicy::Owner || is_external_secret(o))
    })
}

/// What a sync does with its target, decided from the two policies, whether the provider
/// returned any data, and the target's owners (`None`: it does not exist). Shared by Secrets
/// and generic targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Create or update the target.
    Write,
    /// Nothing fetched and deletionPolicy Delete: remove the target we control.
    Delete,
    /// As Delete, with no target to remove.
    Absent,
    /// Nothing fetched and deletionPolicy Retain: keep the target as it is.
    Retain,
    /// creationPolicy Merge and no target: wait for someone to create it.
    WaitForTarget,
    /// creationPolicy None: write nothing.
    Nothing,
}

/// `kind` and `name` only word the refusal: `(field, message)`.
pub fn plan(
    es: &ExternalSecret,
    fetched_nothing: bool,
    existing: Option<&[OwnerReference]>,
    kind: &str,
    name: &str,
) -> Result<Step, (String, String)> {
    let policy = creation_policy(es);
    if fetched_nothing {
        match es.spec.deletion_policy() {
            DeletionPolicy::Retain => return Ok(Step::Retain),
            // As ESO: only a target of creationPolicy Owner is ever deleted; a stricter check of
            // ours: only one this ExternalSecret controls (an adopted one becomes so on its
            // first write).
            DeletionPolicy::Delete => {
                let refused = |why: &str| {
                    Err((
                        "spec.target.deletionPolicy".to_owned(),
                        format!("Delete only removes a {kind} this ExternalSecret owns: {why}"),
                    ))
                };
                return match existing {
                    _ if policy != CreationPolicy::Owner => refused("creationPolicy must be Owner"),
                    None => Ok(Step::Absent),
                    Some(owners) if controlled_by(es, owners) => Ok(Step::Delete),
                    Some(_) => refused(&format!("{kind} {name:?} is not controlled by it")),
                };
            }
            // The target keeps what others wrote and loses ours.
            DeletionPolicy::Merge => {}
        }
    }
    match (policy, existing) {
        (CreationPolicy::None, _) => Ok(Step::Nothing),
        (CreationPolicy::Merge, None) => Ok(Step::WaitForTarget),
        (_, None) => Ok(Step::Write),
        (_, Some(owners)) => match ownership_conflict(es, owners) {
            None => Ok(Step::Write),
            Some(owner) => {
                let advice = if owner.kind == "ExternalSecret" {
                    format!(
                        "pick another target name: two ExternalSecrets writing one {kind} would overwrite each other"
                    )
                } else {
                    "pick another target name, or creationPolicy Merge to add keys to it".to_owned()
                };
                Err((
                    "spec.target.name".to_owned(),
                    format!(
                        "{kind} {name:?} is controlled by {} {:?}; {advice}",
                        owner.kind, owner.name
                    ),
                ))
            }
        },
    }
}

/// Whether this ExternalSecret is the controller among `owners`.
pub fn controlled_by(es: &ExternalSecret, owners: &[OwnerReference]) -> bool {
    es.uid().is_some_and(|uid| {
        owners
            .iter()
            .any(|o| o.uid == uid && o.controller == Some(true))
    })
}

fn is_external_secret(owner: &OwnerReference) -> bool {
    owner.kind == "ExternalSecret" && owner.api_version.split('/').next() == Some(api::GROUP)
}

/// Keys of `existing` this ExternalSecret must remove: with Owner and Orphan the Secret holds
/// exactly the fetched data; with Merge and CreateOrMerge, as ESO, the keys this ExternalSecret
/// wrote before (its field manager's, whether it applied them or Go ESO updated them) and no
/// longer has, while other writers' keys stay.
pub fn stale_keys(
    es: &ExternalSecret,
    existing: &Secret,
    data: &BTreeMap<String, Vec<u8>>,
) -> Vec<String> {
    let candidates: Vec<String> = match creation_policy(es) {
        CreationPolicy::Owner | CreationPolicy::Orphan => {
            secret_data(existing).into_keys().collect()
        }
        _ => owned_keys(existing, &field_manager(&es.name_any())),
    };
    candidates
        .into_iter()
        .filter(|k| !data.contains_key(k))
        .collect()
}

/// The data keys `manager` owns in `existing`'s managedFields (`f:data` → `f:<key>`).
fn owned_keys(existing: &Secret, manager: &str) -> Vec<String> {
    let present = secret_data(existing);
    let mut keys: Vec<String> = existing
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| entry.manager.as_deref() == Some(manager))
        .filter_map(|entry| entry.fields_v1.as_ref())
        .filter_map(|fields| fields.0.get("f:data")?.as_object().cloned())
        .flat_map(|data| data.into_iter().map(|(k, _)| k))
        .filter_map(|k| k.strip_prefix("f:").map(str::to_owned))
        .filter(|k| present.contains_key(k))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests;
