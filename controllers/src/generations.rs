//! Telling a spec change from the first sight of an object after a restart: the watches start
//! with every object, and treating each as changed would refresh every ExternalSecret at once.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use kube::Resource;

pub struct Generations {
    started: jiff::Timestamp,
    /// By object uid.
    seen: Mutex<HashMap<String, i64>>,
}

impl Default for Generations {
    fn default() -> Self {
        Self {
            started: jiff::Timestamp::now(),
            seen: Mutex::default(),
        }
    }
}

impl Generations {
    /// Whether `obj` is news: a generation other than the one seen last, or an object first
    /// seen that was created while this operator runs. An object that existed before the start
    /// is not news when first seen.
    pub fn changed<K: Resource>(&self, obj: &K) -> bool {
        let meta = obj.meta();
        let generation = meta.generation.unwrap_or_default();
        let key = meta.uid.clone().unwrap_or_default();
        let previous = self
            .seen
            .lock()
            .expect("seen generations poisoned")
            .insert(key, generation);
        match previous {
            Some(previous) => previous != generation,
            None => meta
                .creation_timestamp
                .as_ref()
                .is_none_or(|created| created.0 >= self.started),
        }
    }

    /// Forgets the objects whose uid is not in `live` (the watch caches): deleted ones would
    /// stay for ever. An empty `live` is caches not filled yet, not every object gone.
    pub fn retain(&self, live: &HashSet<String>) {
        if live.is_empty() {
            return;
        }
        self.seen
            .lock()
            .expect("seen generations poisoned")
            .retain(|uid, _| live.contains(uid));
    }
}

#[cfg(test)]
mod tests {
    use api::store::SecretStore;
    use serde_json::json;

    use super::*;

    fn store(uid: &str, generation: i64, created: &str) -> SecretStore {
        serde_json::from_value(json!({
            "apiVersion": "external-secrets.io/v1", "kind": "SecretStore",
            "metadata": {"name": "s", "namespace": "n", "uid": uid, "generation": generation,
                         "creationTimestamp": created},
            "spec": {"provider": {"fake": {"data": []}}},
        }))
        .unwrap()
    }

    #[test]
    fn a_restart_is_not_a_change_but_a_new_generation_or_object_is() {
        let generations = Generations::default();
        let long_ago = "2020-01-01T00:00:00Z";
        assert!(
            !generations.changed(&store("a", 3, long_ago)),
            "first sight after a restart"
        );
        assert!(
            !generations.changed(&store("a", 3, long_ago)),
            "same generation"
        );
        assert!(
            generations.changed(&store("a", 4, long_ago)),
            "a spec change"
        );
        let now = jiff::Timestamp::now().to_string();
        assert!(
            generations.changed(&store("b", 1, &now)),
            "created while running"
        );
    }

    #[test]
    fn deleted_objects_are_forgotten() {
        let generations = Generations::default();
        let long_ago = "2020-01-01T00:00:00Z";
        for uid in ["live", "deleted"] {
            generations.changed(&store(uid, 1, long_ago));
        }
        generations.retain(&HashSet::new());
        assert_eq!(
            generations.seen.lock().unwrap().len(),
            2,
            "caches not filled"
        );
        generations.retain(&["live".to_owned()].into());
        assert_eq!(
            generations.seen.lock().unwrap().keys().collect::<Vec<_>>(),
            ["live"]
        );
        assert!(
            generations.changed(&store("live", 2, long_ago)),
            "what is kept still tells a change"
        );
    }
}
