//! Pure: the object a generic target should be, and whether the one that exists is still what
//! was written, as ESO builds and checks it (`spec.target.manifest`).

use std::collections::BTreeMap;

use api::external_secret::{CreationPolicy, ExternalSecret, ManifestReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use crate::externalsecret::desired::{
    CREATED_BY_LABEL, DATA_HASH_ANNOTATION, MANAGED_LABEL, creation_policy, target_name,
};
use crate::externalsecret::hash;
use crate::templating::{Sources, TemplateError};

/// The kind to write, unless it is a plain Secret (then the ExternalSecret is an ordinary one).
pub fn manifest(es: &ExternalSecret) -> Option<&ManifestReference> {
    es.spec
        .target
        .as_ref()
        .and_then(|t| t.manifest.as_deref())
        .filter(|m| !(m.api_version == "v1" && m.kind == "Secret"))
}

/// What ESO hashes: `spec` when the object has one, else `data`.
pub fn content(object: &Value) -> Option<&Value> {
    ["spec", "data"]
        .into_iter()
        .filter_map(|field| object.get(field))
        .find(|v| !v.is_null())
}

/// Whether `existing` still holds what was written: the managed label and a data-hash of its
/// content. Orphan targets are never checked, as in ESO.
pub fn is_valid(es: &ExternalSecret, existing: Option<&DynamicObject>) -> bool {
    if creation_policy(es) == CreationPolicy::Orphan {
        return true;
    }
    let Some(existing) = existing else {
        return false;
    };
    existing.labels().get(MANAGED_LABEL).map(String::as_str) == Some("true")
        && content(&existing.data).is_some_and(|c| {
            existing.annotations().get(DATA_HASH_ANNOTATION) == Some(&hash::object_hash(c))
        })
}

/// The object to write. With Merge and CreateOrMerge the existing object is the base, so what
/// others wrote stays; otherwise it is built afresh, as ESO does.
pub fn desired_object(
    es: &ExternalSecret,
    manifest: &ManifestReference,
    fetched: BTreeMap<String, Vec<u8>>,
    sources: &Sources,
    existing: Option<&DynamicObject>,
) -> Result<DynamicObject, TemplateError> {
    let policy = creation_policy(es);
    let base = existing.filter(|_| {
        matches!(
            policy,
            CreationPolicy::Merge | CreationPolicy::CreateOrMerge
        )
    });
    let mut object = match base {
        Some(existing) => {
            let mut object = serde_json::to_value(existing).expect("an object serializes");
            // Left out, the API server keeps them; sent back, they would be ours to keep right.
            if let Some(meta) = object["metadata"].as_object_mut() {
                meta.remove("managedFields");
            }
            object
        }
        None => {
            let content = if matches!(manifest.kind.as_str(), "ConfigMap" | "Secret") {
                "data"
            } else {
                "spec"
            };
            let mut object = json!({
                "apiVersion": manifest.api_version,
                "kind": manifest.kind,
                "metadata": {"name": target_name(es), "namespace": es.namespace()},
            });
            object[content] = json!({});
            // Written afresh, as ESO does, but not at the cost of what other controllers hold
            // on to: a replace would drop their finalizers and owner references (ESO's does).
            if let Some(existing) = existing {
                let meta = &existing.metadata;
                if let Some(finalizers) = meta.finalizers.as_ref().filter(|f| !f.is_empty()) {
                    object["metadata"]["finalizers"] = json!(finalizers);
                }
                if let Some(owners) = meta.owner_references.as_ref().filter(|o| !o.is_empty()) {
                    object["metadata"]["ownerReferences"] = json!(owners);
                }
            }
            object
        }
    };
    let template = es.spec.target.as_ref().and_then(|t| t.template.as_deref());
    // ESO copies the template's labels and annotations as written (it renders them only for
    // Secrets), else the ExternalSecret's own.
    let (labels, annotations) = match template {
        Some(t) => {
            let meta = t.metadata.clone().unwrap_or_default();
            (
                meta.labels.unwrap_or_default(),
                meta.annotations.unwrap_or_default(),
            )
        }
        None => (es.labels().clone(), es.annotations().clone()),
    };
    extend(&mut object, "labels", labels);
    extend(&mut object, "annotations", annotations);
    extend(
        &mut object,
        "labels",
        BTreeMap::from([(MANAGED_LABEL.to_owned(), "true".to_owned())]),
    );
    let strings = || -> serde_json::Map<String, Value> {
        fetched
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    Value::String(String::from_utf8_lossy(v).into_owned()),
                )
            })
            .collect()
    };
    match template {
        Some(template) => crate::templating::object::render_into(
            "spec.target.template",
            template,
            &fetched,
            sources,
            &mut object,
        )?,
        None if manifest.kind == "ConfigMap" => object["data"] = Value::Object(strings()),
        None => {
            if !object["spec"].is_object() {
                object["spec"] = json!({});
            }
            object["spec"]["data"] = Value::Object(strings());
        }
    }
    let digest = content(&object)
        .map(hash::object_hash)
        .ok_or_else(|| TemplateError {
            field: "spec.target.manifest".into(),
            message: "the target has neither spec nor data to hold the fetched values".into(),
        })?;
    extend(
        &mut object,
        "annotations",
        BTreeMap::from([(DATA_HASH_ANNOTATION.to_owned(), digest)]),
    );
    let mut object: DynamicObject = serde_json::from_value(object).map_err(|e| TemplateError {
        field: "spec.target.template".into(),
        message: format!(
            "the rendered object is not a Kubernetes object: {}",
            without_value(&e)
        ),
    })?;
    own(es, &mut object);
    Ok(object)
}

/// serde's complaint with the value it quotes left out: `invalid type: string "<value>",
/// expected a map` says `invalid type: string, expected a map`.
fn without_value(e: &serde_json::Error) -> String {
    let message = e.to_string();
    for lead in ["invalid type: ", "invalid value: "] {
        let Some(start) = message.find(lead).map(|at| at + lead.len()) else {
            continue;
        };
        let Some(len) = message[start..].find(", expected") else {
            continue;
        };
        // The words before the value: `string "x"`, `integer 5`, `floating point 1.5`.
        let what = message[start..start + len]
            .split(['"', '`'])
            .next()
            .unwrap_or_default()
            .trim_end();
        return format!("{}{what}{}", &message[..start], &message[start + len..]);
    }
    message
}

fn extend(object: &mut Value, field: &str, entries: BTreeMap<String, String>) {
    if !object["metadata"][field].is_object() {
        object["metadata"][field] = json!({});
    }
    let map = object["metadata"][field]
        .as_object_mut()
        .expect("made a map above");
    map.extend(entries.into_iter().map(|(k, v)| (k, Value::String(v))));
}

/// ESO's ownership: with Owner, this ExternalSecret is the controller and the created-by label
/// is set; with any other policy, both are taken off if they were ours.
fn own(es: &ExternalSecret, object: &mut DynamicObject) {
    let uid = es.uid();
    let mut owners: Vec<OwnerReference> = object
        .owner_references()
        .iter()
        .filter(|o| Some(&o.uid) != uid.as_ref())
        .cloned()
        .collect();
    let labels = object.labels_mut();
    if creation_policy(es) == CreationPolicy::Owner {
        owners.extend(es.controller_owner_ref(&()));
        labels.insert(
            CREATED_BY_LABEL.to_owned(),
            hash::created_by(&es.namespace().unwrap_or_default(), &es.name_any()),
        );
    } else {
        labels.remove(CREATED_BY_LABEL);
    }
    object.metadata.owner_references = (!owners.is_empty()).then_some(owners);
}

/// Whether writing `desired` over `existing` would change nothing the target is made of: its
/// content, and the labels, annotations and owners we set.
pub fn unchanged(existing: &DynamicObject, desired: &DynamicObject) -> bool {
    let fields = |o: &DynamicObject| -> Value {
        let mut rest = o.data.clone();
        if let Some(map) = rest.as_object_mut() {
            map.remove("status");
        }
        rest
    };
    let subset = |want: &BTreeMap<String, String>, have: &BTreeMap<String, String>| {
        want.iter().all(|(k, v)| have.get(k) == Some(v))
    };
    let owners = |o: &DynamicObject| -> Vec<String> {
        let mut uids: Vec<String> = o
            .owner_references()
            .iter()
            .map(|r| format!("{}/{:?}", r.uid, r.controller))
            .collect();
        uids.sort();
        uids
    };
    fields(existing) == fields(desired)
        && subset(desired.labels(), existing.labels())
        && subset(desired.annotations(), existing.annotations())
        && owners(existing) == owners(desired)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn es(target: &str) -> ExternalSecret {
        let mut es: ExternalSecret = serde_yaml::from_str(&format!(
            "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: app, namespace: team, labels: {{team: a}}}}\nspec:\n  secretStoreRef: {{name: fake}}\n  target: {target}\n"
        ))
        .unwrap();
        es.metadata.uid = Some("uid-1".into());
        es
    }

    fn fetched() -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([
            ("host".to_owned(), b"db".to_vec()),
            ("port".to_owned(), b"5432".to_vec()),
        ])
    }

    fn build(es: &ExternalSecret, existing: Option<&DynamicObject>) -> DynamicObject {
        let manifest = manifest(es).unwrap().clone();
        desired_object(es, &manifest, fetched(), &Sources::default(), existing).unwrap()
    }

    /// serde quotes what it could not take; a rendered value may be a secret.
    #[test]
    fn a_rendered_object_that_is_no_object_is_refused_without_its_values() {
        let es = es(
            "{name: app, manifest: {apiVersion: config.example.com/v1, kind: AppConfig}, template: {templateFrom: [{literal: 'labels: s3cret-{{ .host }}', target: metadata}]}}",
        );
        let manifest = manifest(&es).unwrap().clone();
        let e = desired_object(&es, &manifest, fetched(), &Sources::default(), None)
            .expect_err("metadata.labels is no map");
        assert!(!e.message.contains("s3cret"), "{}", e.message);
        assert_eq!(
            e.message,
            "the rendered object is not a Kubernetes object: invalid type: string, expected a map"
        );
    }

    #[test]
    fn a_configmap_gets_the_data_as_strings_and_esos_metadata() {
        let es = es("{name: app-config, manifest: {apiVersion: v1, kind: ConfigMap}}");
        let cm = build(&es, None);
        let value = serde_json::to_value(&cm).unwrap();
        assert_eq!(value["data"], json!({"host": "db", "port": "5432"}));
        assert_eq!(value["metadata"]["name"], "app-config");
        assert_eq!(value["metadata"]["namespace"], "team");
        assert_eq!(value["metadata"]["labels"]["team"], "a");
        assert_eq!(value["metadata"]["labels"][MANAGED_LABEL], "true");
        assert_eq!(
            value["metadata"]["annotations"][DATA_HASH_ANNOTATION],
            hash::object_hash(&json!({"host": "db", "port": "5432"})).as_str()
        );
        assert_eq!(cm.owner_references()[0].uid, "uid-1");
        assert!(is_valid(&es, Some(&cm)));
        let mut edited = cm.clone();
        edited.data["data"]["host"] = json!("elsewhere");
        assert!(!is_valid(&es, Some(&edited)), "a hand edit is reverted");
        assert!(!is_valid(&es, None));
        assert!(unchanged(&cm, &build(&es, Some(&cm))));
        assert!(!unchanged(&edited, &build(&es, Some(&edited))));
    }

    #[test]
    fn a_custom_resource_gets_spec_data_unless_templated() {
        let es_ =
            es("{name: app, manifest: {apiVersion: argoproj.io/v1alpha1, kind: Application}}");
        let app = serde_json::to_value(build(&es_, None)).unwrap();
        assert_eq!(app["spec"], json!({"data": {"host": "db", "port": "5432"}}));
        let templated = es(
            "{name: app, manifest: {apiVersion: config.example.com/v1, kind: AppConfig}, template: {metadata: {labels: {app: '{{ .host }}'}}, templateFrom: [{literal: 'port: {{ .port }}', target: spec.database}]}}",
        );
        let config = serde_json::to_value(build(&templated, None)).unwrap();
        assert_eq!(config["spec"], json!({"database": {"port": 5432}}));
        // As written: ESO does not render a generic target's metadata.
        assert_eq!(config["metadata"]["labels"]["app"], "{{ .host }}");
        assert!(config["metadata"]["labels"].get("team").is_none());
    }

    #[test]
    fn merge_keeps_what_others_wrote_and_takes_no_ownership() {
        let es_ = es(
            "{name: shared, creationPolicy: Merge, manifest: {apiVersion: config.example.com/v1, kind: AppConfig}, template: {templateFrom: [{literal: 'host: {{ .host }}', target: spec.database}]}}",
        );
        let existing: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "config.example.com/v1", "kind": "AppConfig",
            "metadata": {"name": "shared", "namespace": "team", "labels": {"theirs": "x"},
                         "resourceVersion": "7", "managedFields": [{"manager": "kubectl"}]},
            "spec": {"database": {"pool": 5}, "replicas": 2},
        }))
        .unwrap();
        let merged = build(&es_, Some(&existing));
        let value = serde_json::to_value(&merged).unwrap();
        assert_eq!(
            value["spec"],
            json!({"database": {"pool": 5, "host": "db"}, "replicas": 2})
        );
        assert_eq!(value["metadata"]["labels"]["theirs"], "x");
        assert_eq!(value["metadata"]["resourceVersion"], "7");
        assert!(value["metadata"].get("managedFields").is_none());
        assert!(merged.owner_references().is_empty());
        assert!(!merged.labels().contains_key(CREATED_BY_LABEL));
    }

    #[test]
    fn others_finalizers_and_owners_survive_a_fresh_write() {
        let es_ =
            es("{name: app, manifest: {apiVersion: argoproj.io/v1alpha1, kind: Application}}");
        let existing: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "app", "namespace": "team", "labels": {"theirs": "x"},
                         "finalizers": ["resources-finalizer.argocd.argoproj.io"],
                         "ownerReferences": [
                            {"apiVersion": "v1", "kind": "ConfigMap", "name": "keep", "uid": "u-9"},
                            {"apiVersion": "external-secrets.io/v1", "kind": "ExternalSecret",
                             "name": "app", "uid": "uid-1", "controller": true}]},
            "spec": {"data": {"host": "old"}},
        }))
        .unwrap();
        let app = build(&es_, Some(&existing));
        assert_eq!(
            app.metadata.finalizers.as_deref(),
            Some(&["resources-finalizer.argocd.argoproj.io".to_owned()][..])
        );
        let owners: Vec<&str> = app
            .owner_references()
            .iter()
            .map(|o| o.uid.as_str())
            .collect();
        assert_eq!(owners, ["u-9", "uid-1"], "the other owner kept, ours once");
        // Written afresh otherwise: labels of others go, as in ESO.
        assert!(!app.labels().contains_key("theirs"));
        // The same owners in another order are no change.
        let mut reordered = app.clone();
        reordered
            .metadata
            .owner_references
            .as_mut()
            .unwrap()
            .reverse();
        assert!(unchanged(&reordered, &app));
    }

    #[test]
    fn a_manifest_naming_a_secret_is_an_ordinary_target() {
        assert!(manifest(&es("{manifest: {apiVersion: v1, kind: Secret}}")).is_none());
        assert!(manifest(&es("{manifest: {apiVersion: v1, kind: ConfigMap}}")).is_some());
    }
}
