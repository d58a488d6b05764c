//! What the controllers' watches share: the scope they watch and what counts as a change.

use std::hash::{DefaultHasher, Hash, Hasher};

use kube::{Api, Resource, ResourceExt};

/// All namespaces, or the one of single-namespace mode.
pub(crate) fn scoped<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// What a reconcile reacts to: spec (generation), labels, annotations, finalizers and deletion,
/// not status, which the reconcile itself writes.
pub(crate) fn fingerprint<K: Resource>(obj: &K) -> Option<u64> {
    let mut h = DefaultHasher::new();
    obj.meta().generation.hash(&mut h);
    obj.labels().hash(&mut h);
    obj.annotations().hash(&mut h);
    obj.finalizers().hash(&mut h);
    obj.meta()
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(&mut h);
    Some(h.finish())
}
