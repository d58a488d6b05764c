//! The test kind: `Widget` in any group ending in `test.external-secrets.io`, `v1` with
//! `spec.size` (the storage version) and `v2` with `spec.dimensions.size`. A `v2` widget may
//! also carry `spec.dimensions.unit`, which `v1` has no field for; it travels in an annotation
//! so that a round trip keeps it, as the provider converters must.

#![allow(dead_code)]

use serde_json::{Map, Value, json};

use external_secrets_conversion_webhook::Converters;

pub const GROUP_SUFFIX: &str = "test.external-secrets.io";
const UNIT_ANNOTATION: &str = "test.external-secrets.io/v2-unit";

/// Converts widgets; `crd` is the one CRD that gets the CA bundle.
pub struct Widgets {
    pub crd: String,
}

impl Converters for Widgets {
    fn convert(
        &self,
        group: &str,
        kind: &str,
        mut object: Value,
        to_api_version: &str,
    ) -> Result<Value, String> {
        if !group.ends_with(GROUP_SUFFIX) || kind != "Widget" {
            return Err(format!("no converter for kind {kind} in group {group}"));
        }
        let (to_group, to_version) = to_api_version
            .split_once('/')
            .ok_or_else(|| format!("{to_api_version} is not group/version"))?;
        if to_group != group {
            return Err(format!("{to_api_version} is not in group {group}"));
        }
        let Some(Value::Object(spec)) = object.get_mut("spec").map(Value::take) else {
            return Err("spec is missing".into());
        };
        let mut annotations = object
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
            .map(std::mem::take)
            .unwrap_or_default();
        let spec = match to_version {
            "v1" => to_v1(spec, &mut annotations),
            "v2" => to_v2(spec, &mut annotations),
            other => return Err(format!("unknown version {other}; Widget has v1 and v2")),
        };
        object["spec"] = Value::Object(spec);
        if annotations.is_empty() {
            if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.remove("annotations");
            }
        } else {
            object["metadata"]["annotations"] = Value::Object(annotations);
        }
        object["apiVersion"] = to_api_version.into();
        Ok(object)
    }

    fn needs_conversion(&self, crd_name: &str) -> bool {
        crd_name == self.crd
    }
}

fn to_v1(mut spec: Map<String, Value>, annotations: &mut Map<String, Value>) -> Map<String, Value> {
    if let Some(Value::Object(mut dimensions)) = spec.remove("dimensions") {
        if let Some(size) = dimensions.remove("size") {
            spec.insert("size".into(), size);
        }
        if let Some(Value::String(unit)) = dimensions.remove("unit") {
            annotations.insert(UNIT_ANNOTATION.into(), unit.into());
        }
    }
    spec
}

fn to_v2(mut spec: Map<String, Value>, annotations: &mut Map<String, Value>) -> Map<String, Value> {
    let mut dimensions = Map::new();
    if let Some(size) = spec.remove("size") {
        dimensions.insert("size".into(), size);
    }
    if let Some(unit) = annotations.remove(UNIT_ANNOTATION) {
        dimensions.insert("unit".into(), unit);
    }
    if !dimensions.is_empty() {
        spec.insert("dimensions".into(), Value::Object(dimensions));
    }
    spec
}

/// The two-version Widget CRD of `group`, converting through the webhook at `url`, with no CA
/// bundle yet: the webhook injects it.
pub fn widget_crd(group: &str, url: &str) -> Value {
    let v1 = json!({"type": "object", "properties": {"size": {"type": "string"}}});
    let v2 = json!({"type": "object", "properties": {"dimensions": {"type": "object", "properties": {
        "size": {"type": "string"}, "unit": {"type": "string"},
    }}}});
    let version = |name: &str, storage: bool, spec: Value| {
        json!({
            "name": name, "served": true, "storage": storage,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}},
        })
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "versions": [version("v1", true, v1), version("v2", false, v2)],
            "conversion": {"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"url": url},
            }},
        },
    })
}

/// A single-version kind of `group` that never needs the webhook.
pub fn gadget_crd(group: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }}}],
        },
    })
}
