//! One `apiextensions.k8s.io/v1` ConversionReview in, its response out: the pure half of the
//! webhook, with no I/O, so that every answer can be checked against a golden file.
//!
//! The API server shows `result.message` to whoever made the request that needed the
//! conversion, so every failure names the object (by its index in the review, kind and name)
//! and what was wrong with it. A failed review converts nothing: `convertedObjects` is empty.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::Converters;

/// The only ConversionReview version this webhook speaks; the CRDs declare it in
/// `conversionReviewVersions`.
pub const REVIEW_API_VERSION: &str = "apiextensions.k8s.io/v1";
const REVIEW_KIND: &str = "ConversionReview";

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut {
    api_version: &'static str,
    kind: &'static str,
    response: ResponseOut,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut {
    uid: String,
    result: StatusOut,
    converted_objects: Vec<Value>,
}

#[derive(Debug, Serialize)]
struct StatusOut {
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

/// Answers the ConversionReview in `body`. Always returns a ConversionReview (HTTP 200 with
/// `result.status: Failure` is how the API server learns why a conversion failed).
pub fn review(body: &[u8], converters: &dyn Converters) -> Vec<u8> {
    let response = match answer(body, converters) {
        Ok((uid, objects)) => ResponseOut {
            uid,
            result: StatusOut {
                status: "Success",
                message: None,
            },
            converted_objects: objects,
        },
        Err((uid, message)) => failure(uid, message),
    };
    encode(response)
}

/// The response to a review that could not be handled at all (the handler did not finish).
pub(crate) fn failure_review(message: String) -> Vec<u8> {
    encode(failure(String::new(), message))
}

fn failure(uid: String, message: String) -> ResponseOut {
    ResponseOut {
        uid,
        result: StatusOut {
            status: "Failure",
            message: Some(message),
        },
        converted_objects: Vec::new(),
    }
}

fn encode(response: ResponseOut) -> Vec<u8> {
    let review = ReviewOut {
        api_version: REVIEW_API_VERSION,
        kind: REVIEW_KIND,
        response,
    };
    // Serializing values that came out of serde_json cannot fail; the fallback keeps the
    // promise of always answering with a ConversionReview anyway.
    serde_json::to_vec(&review).unwrap_or_else(|e| {
        format!(
            r#"{{"apiVersion":"{REVIEW_API_VERSION}","kind":"{REVIEW_KIND}","response":{{"uid":"","result":{{"status":"Failure","message":"encoding the response failed: {}"}},"convertedObjects":[]}}}}"#,
            e.to_string().replace(['"', '\\'], "'")
        )
        .into_bytes()
    })
}

type Failed = (String, String);

/// `(uid, converted objects)`, or `(uid, message)`; the uid is whatever could be read.
fn answer(body: &[u8], converters: &dyn Converters) -> Result<(String, Vec<Value>), Failed> {
    let no_uid = |message: String| (String::new(), message);
    let review: Value = serde_json::from_slice(body)
        .map_err(|e| no_uid(format!("the request body is not JSON: {e}")))?;
    let Value::Object(review) = review else {
        return Err(no_uid(format!(
            "the request body is {}, not a ConversionReview object",
            type_name(&review)
        )));
    };
    // The uid is read first so that even a malformed review is answered with its own uid.
    let request = review.get("request");
    let uid = request
        .and_then(|r| r.get("uid"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let fail = |message: String| (uid.clone(), message);

    match review.get("apiVersion").and_then(Value::as_str) {
        Some(REVIEW_API_VERSION) => {}
        Some(other) => {
            return Err(fail(format!(
                "ConversionReview apiVersion {other} is not supported; this webhook speaks {REVIEW_API_VERSION}"
            )));
        }
        None => return Err(fail("ConversionReview apiVersion is missing".into())),
    }
    match review.get("kind").and_then(Value::as_str) {
        Some(REVIEW_KIND) => {}
        Some(other) => return Err(fail(format!("kind is {other}, not {REVIEW_KIND}"))),
        None => return Err(fail("kind is missing".into())),
    }
    let request = match request {
        Some(Value::Object(request)) => request,
        Some(Value::Null) | None => return Err(fail("the ConversionReview has no request".into())),
        Some(other) => {
            return Err(fail(format!(
                "request is {}, not an object",
                type_name(other)
            )));
        }
    };
    if uid.is_empty() {
        return Err(fail("request.uid is missing or empty".into()));
    }
    let desired = match request.get("desiredAPIVersion") {
        Some(Value::String(desired)) if !desired.is_empty() => desired.as_str(),
        Some(Value::String(_)) | Some(Value::Null) | None => {
            return Err(fail("request.desiredAPIVersion is missing".into()));
        }
        Some(other) => {
            return Err(fail(format!(
                "request.desiredAPIVersion is {}, not a string",
                type_name(other)
            )));
        }
    };
    let objects = match request.get("objects") {
        Some(Value::Array(objects)) => objects,
        Some(Value::Null) | None => return Err(fail("request.objects is missing".into())),
        Some(other) => {
            return Err(fail(format!(
                "request.objects is {}, not a list",
                type_name(other)
            )));
        }
    };
    let (desired_group, _) = split_api_version(desired);

    let mut converted = Vec::with_capacity(objects.len());
    for (index, object) in objects.iter().enumerate() {
        let object =
            convert_one(index, object, desired, desired_group, converters).map_err(fail)?;
        converted.push(object);
    }
    Ok((uid, converted))
}

fn convert_one(
    index: usize,
    object: &Value,
    desired: &str,
    desired_group: &str,
    converters: &dyn Converters,
) -> Result<Value, String> {
    let Value::Object(fields) = object else {
        return Err(format!(
            "request.objects[{index}] is {}, not an object",
            type_name(object)
        ));
    };
    let api_version = string_field(fields, "apiVersion")
        .ok_or_else(|| format!("request.objects[{index}].apiVersion is missing"))?;
    let kind = string_field(fields, "kind")
        .ok_or_else(|| format!("request.objects[{index}].kind is missing"))?;
    let identity = Identity::of(fields);
    let what = format!("request.objects[{index}] ({kind} {identity})");
    let (group, _) = split_api_version(api_version);
    if group != desired_group {
        return Err(format!(
            "{what} is in group {group:?} at {api_version}, but desiredAPIVersion {desired} is in group {desired_group:?}"
        ));
    }
    if api_version == desired {
        return Ok(object.clone());
    }
    let out = converters
        .convert(group, kind, object.clone(), desired)
        .map_err(|e| format!("{what}: converting from {api_version} to {desired}: {e}"))?;

    // The API server rejects these changes too, but without saying which converter made them.
    let Value::Object(out_fields) = &out else {
        return Err(format!(
            "{what}: the {kind} converter returned {}, not an object",
            type_name(&out)
        ));
    };
    let out_version = string_field(out_fields, "apiVersion").unwrap_or_default();
    if out_version != desired {
        return Err(format!(
            "{what}: the {kind} converter returned apiVersion {out_version:?}, not {desired}"
        ));
    }
    let out_kind = string_field(out_fields, "kind").unwrap_or_default();
    if out_kind != kind {
        return Err(format!(
            "{what}: the {kind} converter changed kind to {out_kind:?}"
        ));
    }
    let out_identity = Identity::of(out_fields);
    if out_identity != identity {
        return Err(format!(
            "{what}: the {kind} converter changed metadata.name, metadata.namespace or metadata.uid to {out_identity}"
        ));
    }
    Ok(out)
}

/// What the API server insists a conversion keeps.
#[derive(PartialEq)]
struct Identity<'a> {
    namespace: Option<&'a str>,
    name: Option<&'a str>,
    uid: Option<&'a str>,
}

impl<'a> Identity<'a> {
    fn of(object: &'a Map<String, Value>) -> Self {
        let metadata = object.get("metadata");
        let field = |name| metadata.and_then(|m| m.get(name)).and_then(Value::as_str);
        Self {
            namespace: field("namespace"),
            name: field("name"),
            uid: field("uid"),
        }
    }
}

impl std::fmt::Display for Identity<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(namespace) = self.namespace {
            write!(f, "{namespace}/")?;
        }
        write!(f, "{}", self.name.unwrap_or("<no name>"))?;
        if let Some(uid) = self.uid {
            write!(f, " uid {uid}")?;
        }
        Ok(())
    }
}

fn string_field<'a>(object: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    object
        .get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// `group/version` → `(group, version)`; the core group has no slash.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// `Widget` in `test.external-secrets.io`: v1 `spec.size`, v2 `spec.dimensions.size`.
    struct Widgets;

    impl Converters for Widgets {
        fn convert(
            &self,
            group: &str,
            kind: &str,
            mut object: Value,
            to: &str,
        ) -> Result<Value, String> {
            if group != "test.external-secrets.io" || kind != "Widget" {
                return Err(format!("no converter for {kind} in group {group}"));
            }
            let spec = object
                .get_mut("spec")
                .and_then(Value::as_object_mut)
                .ok_or("spec is missing")?;
            match to {
                "test.external-secrets.io/v2" => {
                    let size = spec.remove("size").unwrap_or(Value::Null);
                    spec.insert("dimensions".into(), json!({ "size": size }));
                }
                "test.external-secrets.io/v1" => {
                    let size = spec
                        .remove("dimensions")
                        .and_then(|mut d| d.get_mut("size").map(Value::take))
                        .unwrap_or(Value::Null);
                    spec.insert("size".into(), size);
                }
                other => return Err(format!("unknown version {other}")),
            }
            object["apiVersion"] = to.into();
            Ok(object)
        }

        fn needs_conversion(&self, crd_name: &str) -> bool {
            crd_name == "widgets.test.external-secrets.io"
        }
    }

    /// Breaks whatever it is asked to break, to prove the checks on converter output.
    struct Broken(&'static str);

    impl Converters for Broken {
        fn convert(&self, _: &str, _: &str, mut object: Value, to: &str) -> Result<Value, String> {
            object["apiVersion"] = to.into();
            match self.0 {
                "name" => object["metadata"]["name"] = "other".into(),
                "kind" => object["kind"] = "Gadget".into(),
                "version" => object["apiVersion"] = "test.external-secrets.io/v9".into(),
                _ => object = json!([]),
            }
            Ok(object)
        }

        fn needs_conversion(&self, _: &str) -> bool {
            true
        }
    }

    fn widget(version: &str, name: &str, spec: Value) -> Value {
        json!({
            "apiVersion": format!("test.external-secrets.io/{version}"),
            "kind": "Widget",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": spec,
        })
    }

    fn request(desired: &str, objects: Vec<Value>) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {"uid": "u-1", "desiredAPIVersion": desired, "objects": objects},
        }))
        .unwrap()
    }

    fn run(body: &[u8], converters: &dyn Converters) -> Value {
        serde_json::from_slice(&review(body, converters)).unwrap()
    }

    fn failure_message(out: &Value) -> &str {
        assert_eq!(out["response"]["result"]["status"], "Failure", "{out}");
        assert_eq!(out["response"]["convertedObjects"], json!([]), "{out}");
        out["response"]["result"]["message"].as_str().unwrap()
    }

    #[test]
    fn converts_several_objects_in_order_from_mixed_versions() {
        let body = request(
            "test.external-secrets.io/v2",
            vec![
                widget("v1", "a", json!({"size": "S"})),
                widget("v2", "b", json!({"dimensions": {"size": "M"}})),
                widget("v1", "c", json!({"size": "L"})),
            ],
        );
        let out = run(&body, &Widgets);
        assert_eq!(out["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(out["kind"], "ConversionReview");
        assert_eq!(out["response"]["uid"], "u-1");
        assert_eq!(out["response"]["result"], json!({"status": "Success"}));
        let objects = out["response"]["convertedObjects"].as_array().unwrap();
        let names: Vec<_> = objects.iter().map(|o| &o["metadata"]["name"]).collect();
        assert_eq!(names, ["a", "b", "c"]);
        for (object, size) in objects.iter().zip(["S", "M", "L"]) {
            assert_eq!(object["apiVersion"], "test.external-secrets.io/v2");
            assert_eq!(object["spec"], json!({"dimensions": {"size": size}}));
        }
    }

    #[test]
    fn an_empty_list_succeeds() {
        let out = run(&request("test.external-secrets.io/v2", vec![]), &Widgets);
        assert_eq!(out["response"]["result"]["status"], "Success");
        assert_eq!(out["response"]["convertedObjects"], json!([]));
    }

    #[test]
    fn one_bad_object_fails_the_whole_review_and_names_it() {
        let body = request(
            "test.external-secrets.io/v3",
            vec![widget("v1", "a", json!({"size": "S"}))],
        );
        let out = run(&body, &Widgets);
        assert_eq!(out["response"]["uid"], "u-1");
        assert_eq!(
            failure_message(&out),
            "request.objects[0] (Widget ns/a uid uid-a): converting from test.external-secrets.io/v1 \
             to test.external-secrets.io/v3: unknown version test.external-secrets.io/v3"
        );

        let body = request(
            "test.external-secrets.io/v2",
            vec![
                widget("v1", "a", json!({"size": "S"})),
                json!({"apiVersion": "test.external-secrets.io/v1", "kind": "Gizmo", "metadata": {"name": "g"}}),
            ],
        );
        let message = failure_message(&run(&body, &Widgets)).to_owned();
        assert!(
            message.starts_with("request.objects[1] (Gizmo g)"),
            "{message}"
        );
        assert!(message.ends_with("no converter for Gizmo in group test.external-secrets.io"));
    }

    #[test]
    fn malformed_reviews_fail_with_what_is_wrong() {
        let cases: &[(&[u8], &str)] = &[
            (b"{not json", "the request body is not JSON: key must be a string at line 1 column 2"),
            (b"", "the request body is not JSON: EOF while parsing a value at line 1 column 0"),
            (b"[]", "the request body is a list, not a ConversionReview object"),
            (
                br#"{"apiVersion":"apiextensions.k8s.io/v1beta1","kind":"ConversionReview","request":{"uid":"x"}}"#,
                "ConversionReview apiVersion apiextensions.k8s.io/v1beta1 is not supported; this webhook speaks apiextensions.k8s.io/v1",
            ),
            (br#"{"kind":"ConversionReview"}"#, "ConversionReview apiVersion is missing"),
            (
                br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"AdmissionReview"}"#,
                "kind is AdmissionReview, not ConversionReview",
            ),
            (
                br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview"}"#,
                "the ConversionReview has no request",
            ),
            (
                br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":7}"#,
                "request is a number, not an object",
            ),
            (
                br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"objects":[]}}"#,
                "request.uid is missing or empty",
            ),
            (
                br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","objects":[]}}"#,
                "request.desiredAPIVersion is missing",
            ),
            (
                br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"test.external-secrets.io/v2"}}"#,
                "request.objects is missing",
            ),
            (
                br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"test.external-secrets.io/v2","objects":{}}}"#,
                "request.objects is an object, not a list",
            ),
            (
                br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"test.external-secrets.io/v2","objects":[1]}}"#,
                "request.objects[0] is a number, not an object",
            ),
            (
                br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"test.external-secrets.io/v2","objects":[{"kind":"Widget"}]}}"#,
                "request.objects[0].apiVersion is missing",
            ),
            (
                br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"test.external-secrets.io/v2","objects":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}]}}"#,
                r#"request.objects[0] (ConfigMap c) is in group "" at v1, but desiredAPIVersion test.external-secrets.io/v2 is in group "test.external-secrets.io""#,
            ),
        ];
        for (body, want) in cases {
            let out = run(body, &Widgets);
            assert_eq!(
                failure_message(&out),
                *want,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn a_malformed_review_keeps_its_uid() {
        let body = br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u-7","objects":[]}}"#;
        assert_eq!(run(body, &Widgets)["response"]["uid"], "u-7");
    }

    #[test]
    fn objects_already_at_the_desired_version_are_passed_through() {
        let object = widget("v2", "b", json!({"dimensions": {"size": "M"}}));
        let out = run(
            &request("test.external-secrets.io/v2", vec![object.clone()]),
            &Broken("anything"),
        );
        assert_eq!(out["response"]["convertedObjects"], json!([object]));
    }

    #[test]
    fn converter_output_that_the_api_server_would_reject_is_a_failure() {
        let body = request(
            "test.external-secrets.io/v2",
            vec![widget("v1", "a", json!({"size": "S"}))],
        );
        for (broken, want) in [
            (
                "name",
                "changed metadata.name, metadata.namespace or metadata.uid to ns/other uid uid-a",
            ),
            ("kind", "changed kind to \"Gadget\""),
            (
                "version",
                "returned apiVersion \"test.external-secrets.io/v9\", not test.external-secrets.io/v2",
            ),
            ("shape", "returned a list, not an object"),
        ] {
            let out = run(&body, &Broken(broken));
            let message = failure_message(&out);
            assert!(
                message.starts_with(
                    "request.objects[0] (Widget ns/a uid uid-a): the Widget converter "
                ),
                "{message}"
            );
            assert!(message.ends_with(want), "{broken}: {message}");
        }
    }
}
