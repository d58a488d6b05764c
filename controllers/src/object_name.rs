//! An object's namespace and name as one block, for what is kept per object for as long as it
//! exists (the watch indexes, the queue): two strings and an `Option` were three blocks and 48
//! bytes inline per object (heap profile, hack/README.md).

use std::sync::Arc;

use kube::Resource;
use kube::runtime::reflector::ObjectRef;

/// `namespace/name`, or `name` alone for a cluster-scoped object: neither a namespace nor a
/// name can hold a `/`, so the two read back apart.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ObjectName(Arc<str>);

impl ObjectName {
    pub(crate) fn new(namespace: Option<&str>, name: &str) -> Self {
        ObjectName(match namespace {
            Some(namespace) => format!("{namespace}/{name}").into(),
            None => name.into(),
        })
    }

    pub(crate) fn of<K: Resource>(object: &K) -> Self {
        let meta = object.meta();
        Self::new(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }

    pub(crate) fn namespace(&self) -> Option<&str> {
        self.0.split_once('/').map(|(namespace, _)| namespace)
    }

    pub(crate) fn name(&self) -> &str {
        self.0.split_once('/').map_or(&self.0, |(_, name)| name)
    }

    pub(crate) fn to_ref<K>(&self, dyntype: &K::DynamicType) -> ObjectRef<K>
    where
        K: Resource,
        K::DynamicType: Clone,
    {
        let object = ObjectRef::new_with(self.name(), dyntype.clone());
        match self.namespace() {
            Some(namespace) => object.within(namespace),
            None => object,
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Secret;

    use super::*;

    #[test]
    fn namespace_and_name_read_back_apart() {
        let namespaced = ObjectName::new(Some("team-a"), "db");
        assert_eq!(
            (namespaced.namespace(), namespaced.name()),
            (Some("team-a"), "db")
        );
        let cluster = ObjectName::new(None, "db");
        assert_eq!((cluster.namespace(), cluster.name()), (None, "db"));
        assert_ne!(namespaced, cluster);
        assert_eq!(
            namespaced.to_ref::<Secret>(&()),
            ObjectRef::new("db").within("team-a")
        );
    }
}
