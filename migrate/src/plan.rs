//! What migrating one store means, decided without the cluster: from the store and the provider
//! object it is converted to (or references), the two merge patches to apply.

use api::store::LABEL_CONVERTED_FROM;
use clientmanager::{LoadedStore, convert, provider_resource};
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use provider::ProviderRegistry;
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Inline `spec.provider` to `spec.providerRef`.
    ProviderRef,
    /// `spec.providerRef` back to inline `spec.provider`.
    Inline,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    Unchanged(String),
    Refused(String),
    Change(Change),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// One line for the report.
    pub summary: String,
    /// JSON merge patch of the store; `None` when it is already as wanted (finishing an
    /// interrupted run).
    pub store_patch: Option<Value>,
    /// The provider object's resource and its merge patch.
    pub object_patch: Option<(ApiResource, Value)>,
}

/// The provider object a migration of `store` reads, either way: the one the store references,
/// or the one it is converted to.
pub(crate) fn object_resource(
    registry: &ProviderRegistry,
    store: &LoadedStore,
) -> Option<ApiResource> {
    match &store.spec.provider_ref {
        Some(reference) => provider_resource(registry, reference)
            .ok()
            .map(|(_, _, r)| r),
        None => convert(registry, store).ok()?.generated.map(|g| g.resource),
    }
}

pub(crate) fn object_name(store: &LoadedStore) -> String {
    match &store.spec.provider_ref {
        Some(reference) => reference.name.clone(),
        None => store.name.clone(),
    }
}

fn owned_by(object: &DynamicObject, uid: Option<&str>) -> bool {
    object
        .owner_references()
        .iter()
        .any(|o| Some(o.uid.as_str()) == uid && o.controller == Some(true))
}

fn owner_references(object: &DynamicObject, uid: Option<&str>) -> Vec<Value> {
    object
        .owner_references()
        .iter()
        .filter(|o| Some(o.uid.as_str()) != uid)
        .map(|o| serde_json::to_value(o).unwrap_or_default())
        .collect()
}

/// The merge patch that lets the object outlive the store: its owner reference and label gone.
fn release(
    resource: &ApiResource,
    object: &DynamicObject,
    uid: Option<&str>,
) -> (ApiResource, Value) {
    let others = owner_references(object, uid);
    let owners = if others.is_empty() {
        Value::Null
    } else {
        Value::Array(others)
    };
    (
        resource.clone(),
        json!({"metadata": {"ownerReferences": owners, "labels": {LABEL_CONVERTED_FROM: null}}}),
    )
}

pub fn plan(
    registry: &ProviderRegistry,
    store: &LoadedStore,
    object: Option<&(ApiResource, DynamicObject)>,
    direction: Direction,
) -> Plan {
    match direction {
        Direction::ProviderRef => to_provider_ref(registry, store, object),
        Direction::Inline => to_inline(registry, store, object),
    }
}

fn to_provider_ref(
    registry: &ProviderRegistry,
    store: &LoadedStore,
    object: Option<&(ApiResource, DynamicObject)>,
) -> Plan {
    let uid = store.uid.as_deref();
    if let Some(reference) = &store.spec.provider_ref {
        return match object {
            // An earlier run switched the store but did not get to release the object.
            Some((resource, o)) if owned_by(o, uid) => Plan::Change(Change {
                summary: format!(
                    "released {} {} (finishing an earlier run)",
                    reference.kind, reference.name
                ),
                store_patch: None,
                object_patch: Some(release(resource, o, uid)),
            }),
            _ => Plan::Unchanged(format!(
                "already references {} {}",
                reference.kind, reference.name
            )),
        };
    }
    let converted = match convert(registry, store) {
        Ok(c) => c,
        Err(e) => return Plan::Refused(e.to_string()),
    };
    let Some(generated) = converted.generated else {
        return Plan::Unchanged("no inline provider".into());
    };
    let kind = &generated.resource.kind;
    let Some((resource, o)) = object else {
        return Plan::Refused(format!(
            "{kind} {:?} converted from it does not exist: the operator writes it when it reconciles the store; is it running, and is the {} CRD installed?",
            store.name, generated.crd
        ));
    };
    if !owned_by(o, uid) {
        return Plan::Refused(format!(
            "{kind} {:?} is not owned by this store (the store reports InvalidProviderConfig); rename the store or remove that object first",
            store.name
        ));
    }
    if o.data.get("spec") != Some(generated.spec()) {
        return Plan::Refused(format!(
            "{kind} {:?} does not match spec.provider yet: wait for the operator to reconcile the store",
            store.name
        ));
    }
    let reference = converted.reference;
    Plan::Change(Change {
        summary: format!(
            "spec.provider moved to providerRef {} {} {} (the object is kept)",
            reference.api_version, reference.kind, reference.name
        ),
        store_patch: Some(json!({"spec": {"provider": null, "providerRef": reference}})),
        object_patch: Some(release(resource, o, uid)),
    })
}

fn to_inline(
    registry: &ProviderRegistry,
    store: &LoadedStore,
    object: Option<&(ApiResource, DynamicObject)>,
) -> Plan {
    let Some(reference) = &store.spec.provider_ref else {
        return Plan::Unchanged("already inline".into());
    };
    let Some((resource, o)) = object else {
        return Plan::Refused(format!(
            "{} {:?} it references does not exist",
            reference.kind, reference.name
        ));
    };
    if reference.name != store.name {
        return Plan::Refused(format!(
            "it references {} {:?}; inline, it would be converted to one named {:?}: rename one of them, or keep providerRef",
            reference.kind, reference.name, store.name
        ));
    }
    let uid = store.uid.as_deref();
    if o.owner_references()
        .iter()
        .any(|r| r.controller == Some(true) && Some(r.uid.as_str()) != uid)
    {
        return Plan::Refused(format!(
            "{} {:?} is controlled by another object",
            reference.kind, reference.name
        ));
    }
    let Some(provider) = registry.by_kind(&reference.kind) else {
        return Plan::Refused(format!(
            "provider {} is not compiled into this build",
            reference.kind
        ));
    };
    let key = provider.descriptor().store_key;
    let inline = json!({key: o.data.get("spec").cloned().unwrap_or(Value::Null)});
    let mut as_inline = store.clone();
    as_inline.spec.provider_ref = None;
    as_inline.spec.provider = serde_json::from_value(inline.clone()).ok();
    // What the store reconciler would write, so the adopted object is exactly its own.
    let generated = match convert(registry, &as_inline) {
        Ok(c) => c.generated,
        Err(e) => return Plan::Refused(e.to_string()),
    };
    let Some(generated) = generated else {
        return Plan::Refused("the provider object has no spec".into());
    };
    let mut owners = owner_references(o, uid);
    owners.extend(
        generated.object["metadata"]["ownerReferences"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    );
    Plan::Change(Change {
        summary: format!(
            "providerRef {} {} moved to spec.provider.{key} (the object is owned by the store again)",
            reference.kind, reference.name
        ),
        store_patch: Some(json!({"spec": {"providerRef": null, "provider": inline}})),
        object_patch: Some((
            resource.clone(),
            json!({"metadata": {"ownerReferences": owners, "labels": {LABEL_CONVERTED_FROM: store.name}}}),
        )),
    })
}

fn patched(manifest: &Value, patch: Option<&Value>) -> Value {
    let mut new = manifest.clone();
    if let Some(patch) = patch {
        json_patch::merge(&mut new, patch);
    }
    new
}

/// `-`/`+` lines of the store's spec before and after.
pub(crate) fn diff(manifest: &Value, patch: &Option<Value>) -> String {
    let old = serde_yaml::to_string(&manifest["spec"]).unwrap_or_default();
    let new = serde_yaml::to_string(&patched(manifest, patch.as_ref())["spec"]).unwrap_or_default();
    let (old_lines, new_lines): (Vec<&str>, Vec<&str>) =
        (old.lines().collect(), new.lines().collect());
    let mut out = String::new();
    for line in old_lines.iter().filter(|l| !new_lines.contains(l)) {
        out.push_str(&format!("  - {line}\n"));
    }
    for line in new_lines.iter().filter(|l| !old_lines.contains(l)) {
        out.push_str(&format!("  + {line}\n"));
    }
    out
}

/// What a GitOps repository should hold after the change: the store and, going to providerRef,
/// the provider object it now references.
pub(crate) fn manifests(
    manifest: &Value,
    change: &Change,
    object: Option<&(ApiResource, DynamicObject)>,
) -> String {
    let new = patched(manifest, change.store_patch.as_ref());
    let mut docs = Vec::new();
    if let (Some((resource, o)), Some((_, patch))) = (object, &change.object_patch)
        && patch["metadata"]["labels"][LABEL_CONVERTED_FROM].is_null()
    {
        let mut labels = o.labels().clone();
        labels.remove(LABEL_CONVERTED_FROM);
        let mut metadata = json!({"name": o.name_any()});
        if let Some(ns) = o.namespace() {
            metadata["namespace"] = json!(ns);
        }
        if !labels.is_empty() {
            metadata["labels"] = json!(labels);
        }
        docs.push(json!({
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": metadata,
            "spec": o.data.get("spec"),
        }));
    }
    let mut metadata = json!({"name": new["metadata"]["name"]});
    for field in ["namespace", "labels", "annotations"] {
        if !new["metadata"][field].is_null() {
            metadata[field] = new["metadata"][field].clone();
        }
    }
    docs.push(json!({
        "apiVersion": new["apiVersion"],
        "kind": new["kind"],
        "metadata": metadata,
        "spec": new["spec"],
    }));
    docs.iter()
        .map(|d| format!("---\n{}", serde_yaml::to_string(d).unwrap_or_default()))
        .collect()
}

#[cfg(test)]
mod tests {
    use clientmanager::StoreKind;
    use serde_json::json;

    use super::*;

    fn store(spec: Value) -> LoadedStore {
        LoadedStore {
            kind: StoreKind::SecretStore,
            namespace: Some("team".into()),
            name: "db".into(),
            uid: Some("uid-db".into()),
            spec: serde_json::from_value(spec).unwrap(),
            unready: None,
            labels: Default::default(),
            deleting: false,
        }
    }

    fn object(owner: Option<&str>, labelled: bool, spec: Value) -> (ApiResource, DynamicObject) {
        let resource = api::providers::fake::DESCRIPTOR
            .storage_resource(api::provider_kinds::Scope::Namespaced);
        let mut meta = json!({"name": "db", "namespace": "team"});
        if let Some(uid) = owner {
            meta["ownerReferences"] = json!([{"apiVersion": "external-secrets.io/v1", "kind": "SecretStore", "name": "db", "uid": uid, "controller": true}]);
        }
        if labelled {
            meta["labels"] = json!({LABEL_CONVERTED_FROM: "db"});
        }
        let o = serde_json::from_value(json!({
            "apiVersion": resource.api_version, "kind": "Fake", "metadata": meta, "spec": spec,
        }))
        .unwrap();
        (resource, o)
    }

    fn fake_spec() -> Value {
        json!({"data": [{"key": "k", "value": "v"}]})
    }

    #[test]
    fn to_provider_ref_switches_the_store_and_releases_the_object() {
        let registry = providers::registry();
        let inline = store(json!({"provider": {"fake": fake_spec()}}));
        let owned = object(Some("uid-db"), true, fake_spec());
        let Plan::Change(change) = plan(&registry, &inline, Some(&owned), Direction::ProviderRef)
        else {
            panic!("a change")
        };
        assert_eq!(
            change.store_patch,
            Some(json!({"spec": {"provider": null, "providerRef": {
                "apiVersion": "providers.external-secrets.io/v1alpha1", "kind": "Fake", "name": "db"}}}))
        );
        assert_eq!(
            change.object_patch.unwrap().1,
            json!({"metadata": {"ownerReferences": null, "labels": {LABEL_CONVERTED_FROM: null}}})
        );
    }

    /// ESO's documented Secrets Manager store, to providerRef and back: the `AWS` object holds
    /// the inline spec as it was, and the inline spec comes back from it.
    #[test]
    fn an_aws_store_moves_both_ways_unchanged() {
        let registry = providers::registry();
        let aws = json!({
            "service": "SecretsManager", "region": "eu-central-1",
            "role": "arn:aws:iam::123456789012:role/external-secrets",
            "auth": {"secretRef": {
                "accessKeyIDSecretRef": {"name": "awssm-secret", "key": "access-key"},
                "secretAccessKeySecretRef": {"name": "awssm-secret", "key": "secret-access-key"}}},
        });
        let resource = api::providers::aws::DESCRIPTOR
            .storage_resource(api::provider_kinds::Scope::Namespaced);
        let converted: DynamicObject = serde_json::from_value(json!({
            "apiVersion": resource.api_version, "kind": "AWS",
            "metadata": {"name": "db", "namespace": "team", "labels": {LABEL_CONVERTED_FROM: "db"},
                         "ownerReferences": [{"apiVersion": "external-secrets.io/v1", "kind": "SecretStore",
                                              "name": "db", "uid": "uid-db", "controller": true}]},
            "spec": aws,
        }))
        .unwrap();
        let inline = store(json!({"provider": {"aws": aws}}));
        let planned = plan(
            &registry,
            &inline,
            Some(&(resource.clone(), converted.clone())),
            Direction::ProviderRef,
        );
        let Plan::Change(change) = planned else {
            panic!("a change: {planned:?}")
        };
        assert_eq!(
            change.store_patch,
            Some(json!({"spec": {"provider": null, "providerRef": {
                "apiVersion": "providers.external-secrets.io/v1alpha1", "kind": "AWS", "name": "db"}}}))
        );
        let referencing = store(json!({"providerRef": {
            "apiVersion": "providers.external-secrets.io/v1alpha1", "kind": "AWS", "name": "db"}}));
        let Plan::Change(back) = plan(
            &registry,
            &referencing,
            Some(&(resource, converted)),
            Direction::Inline,
        ) else {
            panic!("a change back")
        };
        let patch = back
            .store_patch
            .expect("the store gets its inline provider back");
        assert_eq!(patch["spec"]["provider"]["aws"], aws, "{patch}");
    }

    #[test]
    fn refusals_say_what_to_do() {
        let registry = providers::registry();
        let inline = store(json!({"provider": {"fake": fake_spec()}}));
        let refused = |o: Option<&(ApiResource, DynamicObject)>| match plan(
            &registry,
            &inline,
            o,
            Direction::ProviderRef,
        ) {
            Plan::Refused(why) => why,
            other => panic!("{other:?}"),
        };
        assert!(refused(None).contains("does not exist"));
        assert!(refused(Some(&object(Some("other"), true, fake_spec()))).contains("not owned"));
        assert!(
            refused(Some(&object(Some("uid-db"), true, json!({"data": []}))))
                .contains("does not match spec.provider yet")
        );

        let elsewhere = store(json!({"providerRef": {
            "apiVersion": "providers.external-secrets.io/v1alpha1", "kind": "Fake", "name": "shared"}}));
        match plan(
            &registry,
            &elsewhere,
            Some(&object(None, false, fake_spec())),
            Direction::Inline,
        ) {
            Plan::Refused(why) => assert!(why.contains("rename one of them"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_interrupted_run_is_finished_and_a_done_one_left_alone() {
        let registry = providers::registry();
        let switched = store(json!({"providerRef": {
            "apiVersion": "providers.external-secrets.io/v1alpha1", "kind": "Fake", "name": "db"}}));
        let still_owned = object(Some("uid-db"), true, fake_spec());
        match plan(
            &registry,
            &switched,
            Some(&still_owned),
            Direction::ProviderRef,
        ) {
            Plan::Change(c) => {
                assert_eq!(c.store_patch, None);
                assert!(c.summary.contains("finishing an earlier run"));
            }
            other => panic!("{other:?}"),
        }
        let released = object(None, false, fake_spec());
        assert!(matches!(
            plan(
                &registry,
                &switched,
                Some(&released),
                Direction::ProviderRef
            ),
            Plan::Unchanged(_)
        ));
        // And back: the object adopted exactly as the store reconciler would own it.
        let Plan::Change(back) = plan(&registry, &switched, Some(&released), Direction::Inline)
        else {
            panic!("a change")
        };
        assert_eq!(
            back.store_patch,
            Some(json!({"spec": {"providerRef": null, "provider": {"fake": fake_spec()}}}))
        );
        let patch = back.object_patch.unwrap().1;
        assert_eq!(patch["metadata"]["ownerReferences"][0]["uid"], "uid-db");
        assert_eq!(patch["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(patch["metadata"]["labels"][LABEL_CONVERTED_FROM], "db");
    }
}
