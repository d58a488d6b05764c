//! The watch events of this operator's own writes and deletes of targets, which need no
//! reconcile: each write is recorded until its event comes back, and events that arrive while a
//! write is under way are held until it returns.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::channel::mpsc::UnboundedSender;

/// An object an ExternalSecret writes: its target Secret, or the object of a generic target.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TargetRef {
    /// "" for the core group.
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl TargetRef {
    pub fn secret(namespace: &str, name: &str) -> Self {
        Self {
            group: String::new(),
            kind: "Secret".into(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }
}

/// A target as a watch event showed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetChange {
    pub target: TargetRef,
    pub resource_version: Option<String>,
    /// Tells the event of our own delete, whose resourceVersion no answer gives.
    pub uid: Option<String>,
}

/// Every target being written, or written and not yet seen again.
pub struct OwnWriteLog {
    writes: Mutex<HashMap<TargetRef, OwnWrites>>,
    /// Where an event someone else's write caused, held while ours was under way, is delivered
    /// again once ours returned, succeeded or failed: a failed write must not take a foreign
    /// change down with it until the retry at the end of its backoff.
    released: UnboundedSender<TargetChange>,
}

impl OwnWriteLog {
    pub fn new(released: UnboundedSender<TargetChange>) -> Self {
        Self {
            writes: Mutex::default(),
            released,
        }
    }

    /// Marks `key` as being written: watch events for it are held until the write returns,
    /// since the event of the write itself can come before its answer.
    pub fn writing(&self, key: TargetRef) -> Writing<'_> {
        self.lock().entry(key.clone()).or_default().in_flight += 1;
        Writing {
            log: self,
            key,
            versions: Vec::new(),
            deleted: None,
            settled: false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TargetRef, OwnWrites>> {
        self.writes.lock().expect("own writes poisoned")
    }

    /// Whether a watch event needs no reconcile: it is one of our own writes or deletes (and is
    /// forgotten), or it came while we write the target and is judged when the write returns.
    pub fn own_write_seen(&self, seen: &TargetChange) -> bool {
        let Some(rv) = seen.resource_version.as_deref() else {
            return false;
        };
        let mut writes = self.lock();
        let Some(target) = writes.get_mut(&seen.target) else {
            return false;
        };
        if target.in_flight > 0 {
            target.held.push(seen.clone());
            return true;
        }
        if let Some(i) = target.ours.iter().position(|v| v == rv) {
            target.ours.remove(i);
        } else if target.deleted.is_some() && target.deleted == seen.uid {
            target.deleted = None;
        } else {
            return false;
        }
        if target.settled() {
            writes.remove(&seen.target);
        }
        true
    }
}

#[derive(Default)]
struct OwnWrites {
    /// Writes under way.
    in_flight: usize,
    /// resourceVersions of our last write whose watch events have not come yet.
    ours: Vec<String>,
    /// The uid of the object our last delete removed, until its event comes. A delete answers
    /// no resourceVersion, and its event carries a new one, so the object's uid tells it; any
    /// event of that object after our delete is moot, since the object is gone by our hand.
    deleted: Option<String>,
    /// Events that came while a write was under way.
    held: Vec<TargetChange>,
}

impl OwnWrites {
    /// Nothing under way and nothing awaited.
    fn settled(&self) -> bool {
        self.in_flight == 0 && self.ours.is_empty() && self.deleted.is_none()
    }
}

/// A write of a target under way (`OwnWriteLog::writing`). However it ends, finished or dropped
/// unfinished (the write failed), the events held meanwhile that it did not cause are delivered
/// again.
pub struct Writing<'a> {
    log: &'a OwnWriteLog,
    key: TargetRef,
    versions: Vec<String>,
    deleted: Option<String>,
    settled: bool,
}

impl Writing<'_> {
    /// The target as a request of this write left it.
    pub fn wrote(&mut self, resource_version: Option<String>) {
        self.versions.extend(resource_version);
    }

    /// This write deleted the object `uid` (the target as it was read).
    pub fn deleted(&mut self, uid: Option<String>) {
        self.deleted = uid;
    }

    /// The target's resourceVersion after the last request of this write.
    pub fn last(&self) -> Option<&str> {
        self.versions.last().map(String::as_str)
    }

    /// The write returned.
    pub fn finish(mut self) {
        self.settle();
    }

    /// Events held at our versions (or of the object we deleted) are dropped; the last of the
    /// others, someone else's write, is delivered again.
    fn settle(&mut self) {
        self.settled = true;
        let mut versions = std::mem::take(&mut self.versions);
        let mut deleted = self.deleted.take();
        let mut writes = self.log.lock();
        let Some(target) = writes.get_mut(&self.key) else {
            return;
        };
        target.in_flight -= 1;
        let mut foreign = None;
        for seen in std::mem::take(&mut target.held) {
            let rv = seen.resource_version.as_deref().unwrap_or_default();
            if let Some(i) = versions.iter().position(|v| v == rv) {
                versions.remove(i);
            } else if deleted.is_some() && seen.uid == deleted {
                deleted = None;
            } else if !target.ours.iter().any(|v| v == rv) {
                foreign = Some(seen);
            }
        }
        // Only this write's versions are awaited from now on, so a lost event costs one entry.
        target.ours = versions;
        target.deleted = deleted;
        if target.settled() {
            writes.remove(&self.key);
        }
        drop(writes);
        if let Some(seen) = foreign {
            let _ = self.log.released.unbounded_send(seen);
        }
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.settle();
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::channel::mpsc;

    use super::*;

    fn event(rv: &str, uid: &str) -> TargetChange {
        TargetChange {
            target: TargetRef::secret("n", "target"),
            resource_version: Some(rv.into()),
            uid: Some(uid.into()),
        }
    }

    /// A delete answers no resourceVersion and its event carries a new one: the object's uid
    /// tells our delete's event apart, before the answer or after; a Secret made again under the
    /// name by someone else is theirs.
    #[test]
    fn own_delete_is_told_by_uid() {
        let (released, mut again) = mpsc::unbounded();
        let log = OwnWriteLog::new(released);
        let key = TargetRef::secret("n", "target");

        let mut writing = log.writing(key.clone());
        assert!(
            log.own_write_seen(&event("11", "a")),
            "held during the delete"
        );
        writing.deleted(Some("a".into()));
        writing.finish();
        assert!(again.try_recv().is_err(), "our own delete delivered again");

        let mut writing = log.writing(key.clone());
        writing.deleted(Some("b".into()));
        writing.finish();
        assert!(
            log.own_write_seen(&event("12", "b")),
            "its event after the answer"
        );
        assert!(
            !log.own_write_seen(&event("13", "c")),
            "someone else's Secret under the name"
        );
        assert!(log.lock().is_empty(), "nothing left behind");
    }

    /// Someone else's event held during our write is delivered again however the write ends.
    #[test]
    fn held_foreign_events_are_released_by_a_failed_write() {
        let (released, mut again) = mpsc::unbounded();
        let log = OwnWriteLog::new(released);
        let writing = log.writing(TargetRef::secret("n", "target"));
        assert!(log.own_write_seen(&event("9", "a")));
        drop(writing);
        assert_eq!(again.try_recv().unwrap(), event("9", "a"));
        assert!(log.lock().is_empty());
    }
}
