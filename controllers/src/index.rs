//! Objects of a watch by the keys other objects' events look them up by (a Secret's name → the
//! PushSecrets reading it), kept up to date from the watch's own events: an event elsewhere
//! costs the objects it concerns, not a scan of every object.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::object_name::ObjectName as Name;

pub(crate) struct Index<K: Resource, Key> {
    /// Each key once, shared with `keys` (10k ExternalSecrets of one store had 10k copies of
    /// its name).
    by_key: HashMap<Arc<Key>, Objects>,
    /// Each object as one shared namespace-and-name block (an `ObjectRef` is 96 bytes inline and
    /// was kept once per key and once more).
    keys: HashMap<Name, Box<[Arc<Key>]>>,
    /// During a re-list: the objects it held so far.
    relisted: Option<HashSet<Name>>,
    kind: PhantomData<fn() -> K>,
}

/// The objects under one key. Most keys have one (a target Secret, its ExternalSecret), which
/// needs no set of its own: a set of one took about 0.7 KiB per object (heap profile,
/// hack/README.md).
enum Objects {
    One(Name),
    Many(HashSet<Name>),
}

impl Objects {
    fn insert(&mut self, object: Name) {
        match self {
            Objects::One(one) if *one == object => {}
            Objects::One(one) => *self = Objects::Many(HashSet::from([one.clone(), object])),
            Objects::Many(many) => {
                many.insert(object);
            }
        }
    }

    /// Whether no object is left.
    fn remove(&mut self, object: &Name) -> bool {
        match self {
            Objects::One(one) => one == object,
            Objects::Many(many) => {
                many.remove(object);
                let last = (many.len() == 1).then(|| many.drain().next()).flatten();
                if let Some(last) = last {
                    *self = Objects::One(last);
                }
                matches!(self, Objects::Many(many) if many.is_empty())
            }
        }
    }

    fn to_vec<K: Resource>(&self) -> Vec<ObjectRef<K>>
    where
        K::DynamicType: Default + Clone,
    {
        match self {
            Objects::One(one) => vec![one.to_ref(&Default::default())],
            Objects::Many(many) => many.iter().map(|o| o.to_ref(&Default::default())).collect(),
        }
    }
}

impl<K: Resource, Key> Default for Index<K, Key> {
    fn default() -> Self {
        Self {
            by_key: HashMap::new(),
            keys: HashMap::new(),
            relisted: None,
            kind: PhantomData,
        }
    }
}

pub(crate) type SharedIndex<K, Key> = Arc<Mutex<Index<K, Key>>>;

impl<K, Key> Index<K, Key>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
    Key: Eq + Hash + Clone,
{
    /// The objects indexed under `key`.
    pub(crate) fn get(&self, key: &Key) -> Vec<ObjectRef<K>> {
        self.by_key
            .get(key)
            .map(Objects::to_vec)
            .unwrap_or_default()
    }

    /// How many objects are indexed.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    fn set(&mut self, object: Name, keys: Vec<Key>) {
        self.remove(&object);
        let keys: Box<[Arc<Key>]> = keys
            .into_iter()
            .map(|key| match self.by_key.get_key_value(&key) {
                Some((shared, _)) => {
                    let shared = shared.clone();
                    if let Some(objects) = self.by_key.get_mut(&key) {
                        objects.insert(object.clone());
                    }
                    shared
                }
                None => {
                    let shared = Arc::new(key);
                    self.by_key
                        .insert(shared.clone(), Objects::One(object.clone()));
                    shared
                }
            })
            .collect();
        if !keys.is_empty() {
            self.keys.insert(object, keys);
        }
    }

    fn remove(&mut self, object: &Name) {
        for key in self.keys.remove(object).into_iter().flatten() {
            if let Some(objects) = self.by_key.get_mut(&*key)
                && objects.remove(object)
            {
                self.by_key.remove(&*key);
            }
        }
    }

    /// Takes in one event of the watch; `keys_of` says what an object is looked up by. An
    /// object deleted while the watch was down (no Delete is sent for it) goes at the end of
    /// the re-list that no longer holds it.
    pub(crate) fn apply(&mut self, event: &watcher::Event<K>, keys_of: impl Fn(&K) -> Vec<Key>) {
        match event {
            watcher::Event::Apply(obj) => self.set(Name::of(obj), keys_of(obj)),
            watcher::Event::InitApply(obj) => {
                let object = Name::of(obj);
                if let Some(relisted) = &mut self.relisted {
                    relisted.insert(object.clone());
                }
                self.set(object, keys_of(obj));
            }
            watcher::Event::Delete(obj) => self.remove(&Name::of(obj)),
            watcher::Event::Init => self.relisted = Some(HashSet::new()),
            watcher::Event::InitDone => {
                let Some(relisted) = self.relisted.take() else {
                    return;
                };
                let gone: Vec<_> = self
                    .keys
                    .keys()
                    .filter(|o| !relisted.contains(*o))
                    .cloned()
                    .collect();
                for object in gone {
                    self.remove(&object);
                }
            }
        }
    }
}

/// Turns `needed` true once `index` holds any object (`inspect_ok` after [`kept`]): a watch
/// that looks keys up in it is of no use before ([`crate::watch::once_needed`]).
pub(crate) fn needed_once_filled<K, Key>(
    index: SharedIndex<K, Key>,
    needed: tokio::sync::watch::Sender<bool>,
) -> impl FnMut(&watcher::Event<K>)
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
    Key: Eq + Hash + Clone,
{
    move |_| {
        if !*needed.borrow() && !index.lock().expect("watch index poisoned").keys.is_empty() {
            needed.send_replace(true);
        }
    }
}

/// Keeps `index` from a watch's events (`inspect_ok` after its reflector).
pub(crate) fn kept<K, Key>(
    index: SharedIndex<K, Key>,
    keys_of: impl Fn(&K) -> Vec<Key>,
) -> impl FnMut(&watcher::Event<K>)
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
    Key: Eq + Hash + Clone,
{
    move |event| {
        index
            .lock()
            .expect("watch index poisoned")
            .apply(event, &keys_of)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    /// A ConfigMap indexed by the values of its data.
    fn cm(name: &str, reads: &[&str]) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("n".into());
        cm.data = Some(
            reads
                .iter()
                .enumerate()
                .map(|(i, r)| (i.to_string(), (*r).to_owned()))
                .collect(),
        );
        cm
    }

    fn reads(cm: &ConfigMap) -> Vec<String> {
        cm.data.iter().flatten().map(|(_, v)| v.clone()).collect()
    }

    fn names(mut refs: Vec<ObjectRef<ConfigMap>>) -> Vec<String> {
        refs.sort_by(|a, b| a.name.cmp(&b.name));
        refs.into_iter().map(|r| r.name).collect()
    }

    #[test]
    fn follows_changes_deletes_and_relists() {
        let mut index = Index::<ConfigMap, String>::default();
        index.apply(&watcher::Event::Init, reads);
        index.apply(&watcher::Event::InitApply(cm("a", &["x", "y"])), reads);
        index.apply(&watcher::Event::InitApply(cm("b", &["x"])), reads);
        index.apply(&watcher::Event::InitDone, reads);
        assert_eq!(names(index.get(&"x".into())), ["a", "b"]);
        assert_eq!(names(index.get(&"y".into())), ["a"]);
        let (x, _) = index.by_key.get_key_value(&String::from("x")).expect("x");
        assert_eq!(Arc::strong_count(x), 3, "one key, shared by both objects");

        index.apply(&watcher::Event::Apply(cm("a", &["z"])), reads);
        assert_eq!(names(index.get(&"x".into())), ["b"]);
        assert!(
            matches!(index.by_key[&"x".to_owned()], Objects::One(_)),
            "a key left with one object holds no set"
        );
        assert!(index.get(&"y".into()).is_empty(), "the old key is dropped");
        assert_eq!(names(index.get(&"z".into())), ["a"]);

        index.apply(&watcher::Event::Delete(cm("b", &["x"])), reads);
        assert!(index.get(&"x".into()).is_empty());

        // "a" was deleted while the watch was down, "c" created.
        index.apply(&watcher::Event::Init, reads);
        index.apply(&watcher::Event::InitApply(cm("c", &["z"])), reads);
        assert_eq!(
            names(index.get(&"z".into())),
            ["a", "c"],
            "answers from what it knew until the re-list is done"
        );
        index.apply(&watcher::Event::InitDone, reads);
        assert_eq!(names(index.get(&"z".into())), ["c"]);
        assert!(
            index.by_key.len() == 1 && index.keys.len() == 1,
            "nothing left behind"
        );
    }

    #[test]
    fn keeps_names_not_versions() {
        let mut index = Index::<ConfigMap, String>::default();
        let mut a = cm("a", &["x"]);
        a.metadata.uid = Some("uid-a".into());
        a.metadata.resource_version = Some("12".into());
        index.apply(&watcher::Event::Apply(a), reads);
        let found = index.get(&"x".into());
        assert_eq!(found.len(), 1);
        assert_eq!(
            (
                found[0].extra.uid.as_deref(),
                found[0].extra.resource_version.as_deref()
            ),
            (None, None)
        );
    }

    #[test]
    fn needed_once_an_object_has_keys() {
        let index = SharedIndex::<ConfigMap, String>::default();
        let (needed, needs) = tokio::sync::watch::channel(false);
        let mut keep = kept(index.clone(), reads);
        let mut fill = needed_once_filled(index, needed);
        let mut event = |e: watcher::Event<ConfigMap>| {
            keep(&e);
            fill(&e);
        };
        event(watcher::Event::Apply(cm("reads-nothing", &[])));
        assert!(!*needs.borrow(), "an object without keys needs no watch");
        event(watcher::Event::Apply(cm("a", &["x"])));
        assert!(*needs.borrow());
    }
}
