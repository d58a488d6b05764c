//! When an object leaves a watch cache: what the operator's controllers and the provider server
//! both need to forget what they built for an object that is gone.

use std::hash::Hash;

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

/// For a watch whose events pass here after `reader`'s writer applied them: calls `gone` for
/// each object that leaves it, at its Delete event or, for one deleted while the watch was down
/// (no Delete is ever sent for it), at the end of the re-list that no longer holds it.
pub fn on_departure<K>(
    reader: Store<K>,
    gone: impl FnMut(ObjectRef<K>),
) -> impl FnMut(&watcher::Event<K>)
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    on_departure_with(reader, K::DynamicType::default(), gone)
}

/// [`on_departure`] for a kind known at run time (a provider kind, as `DynamicObject`).
pub fn on_departure_with<K>(
    reader: Store<K>,
    dyntype: K::DynamicType,
    mut gone: impl FnMut(ObjectRef<K>),
) -> impl FnMut(&watcher::Event<K>)
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    // The reader shows the old list until the re-list is done.
    let mut before: Option<Vec<ObjectRef<K>>> = None;
    move |event| match event {
        watcher::Event::Delete(obj) => gone(ObjectRef::from_obj_with(obj, dyntype.clone())),
        watcher::Event::Init => {
            before = Some(
                reader
                    .state()
                    .iter()
                    .map(|o| ObjectRef::from_obj_with(o.as_ref(), dyntype.clone()))
                    .collect(),
            );
        }
        watcher::Event::InitDone => {
            for object in before.take().into_iter().flatten() {
                if reader.get(&object).is_none() {
                    gone(object);
                }
            }
        }
        watcher::Event::Apply(_) | watcher::Event::InitApply(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;

    use super::*;

    fn cm(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("n".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn objects_deleted_while_the_watch_was_down_are_gone_after_the_relist() {
        let (reader, mut writer) = reflector::store::<ConfigMap>();
        let mut departed = Vec::new();
        let mut see = on_departure(reader, |r: ObjectRef<ConfigMap>| departed.push(r.name));
        let mut event = |e: watcher::Event<ConfigMap>| {
            writer.apply_watcher_event(&e);
            see(&e);
        };
        event(watcher::Event::Init);
        for name in ["a", "b", "c"] {
            event(watcher::Event::InitApply(cm(name)));
        }
        event(watcher::Event::InitDone);
        event(watcher::Event::Delete(cm("a")));
        // The watch broke; "b" was deleted meanwhile and "d" created.
        event(watcher::Event::Init);
        for name in ["c", "d"] {
            event(watcher::Event::InitApply(cm(name)));
        }
        event(watcher::Event::InitDone);
        drop(see);
        assert_eq!(departed, ["a", "b"]);
    }
}
