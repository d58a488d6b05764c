//! What a PushSecret pushed that a failed status write left off its record, kept until a status
//! write records it, so that the next reconcile neither pushes it again nor forgets to delete it.

use std::collections::HashMap;
use std::sync::Mutex;

use super::plan::Synced;

/// By PushSecret uid.
#[derive(Default)]
pub struct UnrecordedPushes {
    pushes: Mutex<HashMap<String, Synced>>,
}

impl UnrecordedPushes {
    /// What the PushSecret `uid` pushed that its status does not record yet.
    pub fn get(&self, uid: Option<&str>) -> Option<Synced> {
        let unrecorded = self.pushes.lock().expect("unrecorded pushes poisoned");
        unrecorded.get(uid?).cloned()
    }

    pub fn keep(&self, uid: Option<&str>, synced: Synced) {
        if let Some(uid) = uid {
            self.pushes
                .lock()
                .expect("unrecorded pushes poisoned")
                .insert(uid.to_owned(), synced);
        }
    }

    /// Once recorded in status, or when the PushSecret is gone.
    pub fn forget(&self, uid: Option<&str>) {
        if let Some(uid) = uid {
            self.pushes
                .lock()
                .expect("unrecorded pushes poisoned")
                .remove(uid);
        }
    }
}
