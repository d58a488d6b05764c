//! Status writes: server-side apply of the status subresource, and the record of this
//! operator's last write of each object until its watch cache shows it, which spares a write
//! equal to what the cache shows only once the cache has seen it, and holds back a reconcile
//! that would act on a status older than its own last write.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The field manager of everything this operator writes that is not per-ExternalSecret.
pub const FIELD_MANAGER: &str = "external-secrets";

/// How soon a reconcile held back by [`StatusWriter::catching_up`] is tried again: status-only
/// watch events wake no reconcile, so the one held back has to come back by itself.
pub(crate) const CATCH_UP_RETRY: Duration = Duration::from_millis(500);

/// How long a reconcile waits for the watch cache to show this operator's last status write: a
/// watch that lags longer is stuck, and the object is better reconciled on what it shows than
/// not at all.
const CATCH_UP_LIMIT_SECS: u32 = 10;

/// A status this operator wrote: its digest, the object's resourceVersion the write made, and
/// when, in whole seconds since the writer started (so that a record takes no more room than
/// it did without it).
struct StatusWrite {
    digest: u64,
    resource_version: Option<NonZeroU64>,
    at: u32,
}

impl StatusWrite {
    /// Whether the watch cache, showing a status of digest `cached` at `cached_version`, has
    /// seen this write: it shows what was written, or a later version of the object (someone
    /// wrote after us; what they wrote is the status now). resourceVersions are etcd revisions,
    /// which only grow; one that does not parse as a number is never taken as later. The
    /// digest is asked for only when the versions do not settle it.
    fn seen(&self, cached: impl FnOnce() -> u64, cached_version: Option<&str>) -> bool {
        let later = match (
            cached_version.and_then(|v| v.parse::<u64>().ok()),
            self.resource_version,
        ) {
            (Some(cached), Some(written)) => cached >= written.get(),
            _ => false,
        };
        later || self.digest == cached()
    }
}

/// A digest of the status this operator last wrote of each object (by uid) until its watch cache
/// shows it: a status built on a cache that lags may equal the cached one and yet not be what the
/// object holds.
pub struct StatusWriter {
    writes: Mutex<HashMap<u128, StatusWrite>>,
    started: Instant,
}

impl Default for StatusWriter {
    fn default() -> Self {
        Self {
            writes: Mutex::default(),
            started: Instant::now(),
        }
    }
}

/// A hash, not the status: a record per object written since its last watch event is held,
/// which after a restart is every object.
fn digest<S: serde::Serialize>(status: &S) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    serde_json::to_vec(status)
        .expect("a status serializes")
        .hash(&mut h);
    h.finish()
}

/// A uid as the map's key: Kubernetes' uids are UUIDs, kept as their 128 bits rather than as a
/// 36-character string (a block of its own per object, 100k of them at 100k ExternalSecrets).
/// Anything else, by its hash.
fn uid_key(uid: &str) -> u128 {
    let mut bits = 0u128;
    let mut digits = 0;
    for c in uid.chars().filter(|c| *c != '-') {
        match c.to_digit(16) {
            Some(d) if digits < 32 => {
                bits = bits << 4 | u128::from(d);
                digits += 1;
            }
            _ => return hashed(uid),
        }
    }
    if digits == 32 { bits } else { hashed(uid) }
}

fn hashed(uid: &str) -> u128 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    uid.hash(&mut h);
    u128::from(h.finish())
}

impl StatusWriter {
    /// Server-side applies `new` as the status of the object `meta` describes, whose status in the
    /// watch cache is `cached`; skipped only when `new` is both what the cache shows and what
    /// this operator last wrote. Says whether it wrote.
    pub async fn update<K, S>(
        &self,
        api: &kube::Api<K>,
        dyntype: &K::DynamicType,
        meta: &kube::api::ObjectMeta,
        cached: &S,
        new: &S,
    ) -> Result<bool, kube::Error>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
        S: serde::Serialize,
    {
        let uid = uid_key(meta.uid.as_deref().unwrap_or_default());
        let (new_digest, cached_digest) = (digest(new), digest(cached));
        {
            let mut written = self.writes.lock().expect("status writes poisoned");
            if written
                .get(&uid)
                .is_some_and(|w| w.seen(|| cached_digest, meta.resource_version.as_deref()))
            {
                written.remove(&uid);
            }
            if new_digest == cached_digest && !written.contains_key(&uid) {
                return Ok(false);
            }
        }
        let name = meta.name.as_deref().unwrap_or_default();
        let resource_version = apply_status(api, dyntype, name, new).await?;
        self.writes.lock().expect("status writes poisoned").insert(
            uid,
            StatusWrite {
                digest: new_digest,
                resource_version: resource_version.and_then(|v| v.parse().ok()),
                at: self.now(),
            },
        );
        Ok(true)
    }

    /// How long to wait before reconciling the object `meta` describes, whose status in the
    /// watch cache is `cached`, because the cache has not shown this operator's last status
    /// write of it yet: a reconcile acting on the older status decides on what is no longer so
    /// (a refresh made again for want of the `refreshTime` just written, a refused push put
    /// back on record by a retry that reads the record written ahead of it). `None` once the
    /// cache shows the write, and when it has not for [`CATCH_UP_LIMIT_SECS`].
    pub fn catching_up<S: serde::Serialize>(
        &self,
        meta: &kube::api::ObjectMeta,
        cached: impl FnOnce() -> S,
    ) -> Option<Duration> {
        let uid = uid_key(meta.uid.as_deref()?);
        let mut written = self.writes.lock().expect("status writes poisoned");
        let write = written.get(&uid)?;
        if write.seen(|| digest(&cached()), meta.resource_version.as_deref()) {
            written.remove(&uid);
            return None;
        }
        (self.now().saturating_sub(write.at) < CATCH_UP_LIMIT_SECS).then_some(CATCH_UP_RETRY)
    }

    fn now(&self) -> u32 {
        u32::try_from(self.started.elapsed().as_secs()).unwrap_or(u32::MAX)
    }

    /// Forgets the status last written of a deleted object.
    pub fn forget(&self, uid: Option<&str>) {
        if let Some(uid) = uid {
            self.writes
                .lock()
                .expect("status writes poisoned")
                .remove(&uid_key(uid));
        }
    }
}

/// Server-side applies `status` to the status subresource of `name`, as this operator's field
/// manager; forced, since no one else owns our status fields.
pub async fn apply_status<K>(
    api: &kube::Api<K>,
    dyntype: &K::DynamicType,
    name: &str,
    status: &impl serde::Serialize,
) -> Result<Option<String>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(dyntype),
        "kind": K::kind(dyntype),
        "status": status,
    });
    api.patch_status(
        name,
        &kube::api::PatchParams::apply(FIELD_MANAGER).force(),
        &kube::api::Patch::Apply(&patch),
    )
    .await
    .map(|written| written.meta().resource_version.clone())
}

#[cfg(test)]
mod tests {
    use super::{StatusWrite, uid_key};

    #[test]
    fn a_status_write_is_seen_at_its_digest_or_at_a_later_version() {
        let ours = StatusWrite {
            digest: 7,
            resource_version: std::num::NonZeroU64::new(100),
            at: 0,
        };
        assert!(ours.seen(|| 7, Some("100")), "the cache shows our write");
        assert!(ours.seen(|| 7, Some("99")), "the cache shows what we wrote");
        assert!(
            !ours.seen(|| 3, Some("99")),
            "the cache lags behind our write: write again if it differs"
        );
        assert!(
            ours.seen(|| 3, Some("101")),
            "someone wrote after us: the cache's status is the status now"
        );
        assert!(!ours.seen(|| 3, Some("not-a-number")));
        assert!(!ours.seen(|| 3, None));
    }

    #[test]
    fn uids_are_kept_as_their_bits() {
        let a = "0b6a1c52-9d1e-4c4f-8f39-5b2f3c7d9e01";
        assert_eq!(uid_key(a), 0x0b6a1c529d1e4c4f8f395b2f3c7d9e01);
        assert_ne!(uid_key(a), uid_key("0b6a1c52-9d1e-4c4f-8f39-5b2f3c7d9e02"));
        assert_eq!(uid_key("store-uid"), uid_key("store-uid"));
        assert_ne!(uid_key("store-uid"), uid_key("es-uid"));
    }
}
