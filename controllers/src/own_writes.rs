//! The watch events of this operator's own writes of targets, which need no reconcile: each
//! write is recorded until its event comes back, and events that arrive while a write is under
//! way are held until it returns.

use std::collections::HashMap;
use std::sync::Mutex;

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

/// Every target being written, or written and not yet seen again.
#[derive(Default)]
pub struct OwnWriteLog {
    writes: Mutex<HashMap<TargetRef, OwnWrites>>,
}

impl OwnWriteLog {
    /// Marks `key` as being written: watch events for it are held until the write returns,
    /// since the event of the write itself can come before its answer.
    pub fn writing(&self, key: TargetRef) -> Writing<'_> {
        self.lock().entry(key.clone()).or_default().in_flight += 1;
        Writing {
            log: self,
            key,
            versions: Vec::new(),
            settled: false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TargetRef, OwnWrites>> {
        self.writes.lock().expect("own writes poisoned")
    }

    /// Whether a watch event at `resource_version` needs no reconcile: it is one of our own
    /// writes (and is forgotten), or it came while we write the target and is judged when the
    /// write returns.
    pub fn own_write_seen(&self, key: &TargetRef, resource_version: Option<&str>) -> bool {
        let Some(rv) = resource_version else {
            return false;
        };
        let mut writes = self.lock();
        let Some(target) = writes.get_mut(key) else {
            return false;
        };
        if target.in_flight > 0 {
            target.held.push(rv.to_owned());
            return true;
        }
        let Some(i) = target.ours.iter().position(|v| v == rv) else {
            return false;
        };
        target.ours.remove(i);
        if target.ours.is_empty() {
            writes.remove(key);
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
    /// resourceVersions of events that came while a write was under way.
    held: Vec<String>,
}

/// A write of a target under way (`OwnWriteLog::writing`); dropped unfinished (the write failed), the
/// events held meanwhile are let go, since the failed reconcile is retried anyway.
pub struct Writing<'a> {
    log: &'a OwnWriteLog,
    key: TargetRef,
    versions: Vec<String>,
    settled: bool,
}

impl Writing<'_> {
    /// The target as a request of this write left it.
    pub fn wrote(&mut self, resource_version: Option<String>) {
        self.versions.extend(resource_version);
    }

    /// The target's resourceVersion after the last request of this write.
    pub fn last(&self) -> Option<&str> {
        self.versions.last().map(String::as_str)
    }

    /// The write returned: events held at our versions are dropped, the others were someone
    /// else's write, which the caller must reconcile (true).
    pub fn finish(mut self) -> bool {
        self.settle()
    }

    fn settle(&mut self) -> bool {
        self.settled = true;
        let mut versions = std::mem::take(&mut self.versions);
        let mut writes = self.log.lock();
        let Some(target) = writes.get_mut(&self.key) else {
            return false;
        };
        target.in_flight -= 1;
        let mut foreign = false;
        for rv in std::mem::take(&mut target.held) {
            match versions.iter().position(|v| *v == rv) {
                Some(i) => {
                    versions.remove(i);
                }
                None => foreign |= !target.ours.contains(&rv),
            }
        }
        // Only this write's versions are awaited from now on, so a lost event costs one entry.
        target.ours = versions;
        if target.in_flight == 0 && target.ours.is_empty() {
            writes.remove(&self.key);
        }
        foreign
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.settle();
        }
    }
}
