//! Checks every response against GitLab's OpenAPI document
//! (`openapi/gitlab-ci-variables.yaml`, a verbatim subset of GitLab's `openapi_v3.yaml`).
//!
//! The document is turned into JSON Schema by transforming it, never by hand-written checks per
//! route: OpenAPI 3.0's `nullable: true` becomes a `"null"` type, and each response schema is
//! validated inside a wrapper that carries the document's `components`, so its
//! `#/components/schemas/...` references resolve unchanged. Where GitLab's server and its
//! published document disagree, [`apply_deviations`] says so, in one place.

use std::collections::HashMap;

use anyhow::{Context, Result};
use http::{Method, StatusCode};
use jsonschema::{Draft, Validator};
use serde_json::{Value, json};

/// The document, as shipped in the crate.
pub const DOCUMENT: &str = include_str!("../openapi/gitlab-ci-variables.yaml");

/// One response that does not match the document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub method: String,
    /// The request path as sent (URL-encoded).
    pub path: String,
    /// The OpenAPI path template (`/api/v4/projects/{id}/variables/{key}`).
    pub operation: String,
    pub status: u16,
    pub problem: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} (operation {} {}) answered {}: {}",
            self.method, self.path, self.method, self.operation, self.status, self.problem
        )
    }
}

/// What a status of one operation allows.
enum Expected {
    /// A JSON body matching this schema.
    Schema(Box<Validator>),
    /// The document declares the status without content: GitLab sends an error object there.
    ErrorBody,
    /// No body at all (DELETE's 204).
    Empty,
    /// Rack::Attack's plain-text throttle answer (429).
    PlainText,
}

/// The compiled document: per (method, path template), per status, what is expected.
pub(crate) struct OpenApi {
    operations: HashMap<(Method, String), HashMap<u16, Expected>>,
}

impl OpenApi {
    pub fn load() -> Result<Self> {
        let mut doc: Value =
            serde_yaml::from_str(DOCUMENT).context("parsing the OpenAPI document")?;
        apply_deviations(&mut doc)?;
        let components = to_json_schema(doc.get("components").cloned().unwrap_or(Value::Null));
        let paths = doc
            .get("paths")
            .and_then(Value::as_object)
            .context("the OpenAPI document has no paths")?;
        let mut operations = HashMap::new();
        for (path, item) in paths {
            let Some(item) = item.as_object() else {
                continue;
            };
            for (method, operation) in item {
                let Ok(method) = method.to_ascii_uppercase().parse::<Method>() else {
                    continue;
                };
                let mut statuses = HashMap::new();
                let responses = operation.get("responses").and_then(Value::as_object);
                for (status, response) in responses.into_iter().flatten() {
                    let status: u16 = status
                        .parse()
                        .with_context(|| format!("{method} {path}: status {status}"))?;
                    let expected = match response.pointer("/content/application~1json/schema") {
                        Some(schema) => Expected::Schema(Box::new(
                            compile(schema, &components)
                                .with_context(|| format!("{method} {path} {status}"))?,
                        )),
                        None if response.get("x-standin-body") == Some(&json!("empty")) => {
                            Expected::Empty
                        }
                        None if response.get("x-standin-body") == Some(&json!("text")) => {
                            Expected::PlainText
                        }
                        None => Expected::ErrorBody,
                    };
                    statuses.insert(status, expected);
                }
                operations.insert((method, path.clone()), statuses);
            }
        }
        Ok(Self { operations })
    }

    /// Whether the document describes this operation (routes outside it, like `GET /user`,
    /// are not checked).
    pub fn covers(&self, method: &Method, template: &str) -> bool {
        self.operations
            .contains_key(&(method.clone(), template.to_owned()))
    }

    /// Checks one response; `None` when it matches.
    pub fn check(
        &self,
        method: &Method,
        template: &str,
        status: StatusCode,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Option<String> {
        let statuses = self
            .operations
            .get(&(method.clone(), template.to_owned()))?;
        let Some(expected) = statuses.get(&status.as_u16()) else {
            let mut declared: Vec<_> = statuses.keys().collect();
            declared.sort();
            return Some(format!(
                "status {} is not declared (declared: {declared:?})",
                status.as_u16()
            ));
        };
        let json_body = || -> Result<Value, String> {
            if !content_type.is_some_and(|c| c.starts_with("application/json")) {
                return Err(format!(
                    "Content-Type is {content_type:?}, not application/json"
                ));
            }
            serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))
        };
        match expected {
            Expected::Schema(validator) => {
                let body = match json_body() {
                    Ok(body) => body,
                    Err(problem) => return Some(problem),
                };
                let problems: Vec<String> = validator
                    .iter_errors(&body)
                    .map(|e| format!("at {:?}: {e}", e.instance_path().as_str()))
                    .collect();
                (!problems.is_empty()).then(|| problems.join("; "))
            }
            Expected::ErrorBody => match json_body() {
                Ok(body) if is_error_body(&body) => None,
                Ok(body) => Some(format!(
                    "error body {body} is neither {{\"message\": ...}} nor {{\"error\": \"...\"}}"
                )),
                Err(problem) => Some(problem),
            },
            Expected::Empty => (!body.is_empty()).then(|| "a 204 must have no body".to_owned()),
            Expected::PlainText => (!content_type.is_some_and(|c| c.starts_with("text/plain")))
                .then(|| format!("Content-Type is {content_type:?}, not text/plain")),
        }
    }
}

/// GitLab's error bodies: `{"message": "..."}` or `{"message": {field: [...]}}` from the API
/// and models, `{"error": "..."}` from Grape's parameter validation.
fn is_error_body(body: &Value) -> bool {
    let Some(object) = body.as_object() else {
        return false;
    };
    object.len() == 1
        && match (object.get("message"), object.get("error")) {
            (Some(Value::String(_)), None) | (None, Some(Value::String(_))) => true,
            (Some(Value::Object(fields)), None) => fields.values().all(|messages| {
                messages
                    .as_array()
                    .is_some_and(|m| m.iter().all(Value::is_string))
            }),
            _ => false,
        }
}

fn compile(schema: &Value, components: &Value) -> Result<Validator> {
    let wrapper = json!({
        "components": components,
        "allOf": [to_json_schema(schema.clone())],
    });
    jsonschema::options()
        .with_draft(Draft::Draft4)
        .build(&wrapper)
        .map_err(|e| anyhow::anyhow!("compiling a response schema: {e}"))
}

/// OpenAPI 3.0 schema objects → JSON Schema (draft 4, which OpenAPI 3.0 is based on): the only
/// keyword that changes meaning is `nullable`.
fn to_json_schema(mut value: Value) -> Value {
    transform_nullable(&mut value);
    value
}

fn transform_nullable(value: &mut Value) {
    match value {
        Value::Object(object) => {
            if object.remove("nullable") == Some(Value::Bool(true)) {
                if let Some(Value::String(t)) = object.get("type").cloned() {
                    object.insert("type".to_owned(), json!([t, "null"]));
                }
                if let Some(Value::Array(values)) = object.get_mut("enum") {
                    values.push(Value::Null);
                }
            }
            object.values_mut().for_each(transform_nullable);
        }
        Value::Array(values) => values.iter_mut().for_each(transform_nullable),
        _ => {}
    }
}

/// Operations whose 200 is a list although the document shows one entity.
const LIST_OPERATIONS: &[&str] = &["getApiV4ProjectsIdVariables", "getApiV4GroupsIdVariables"];

/// Entities GitLab's Grape code exposes unconditionally: a response carries every declared
/// property and nothing else. The generated document cannot say so; the stand-in must.
const CLOSED_ENTITIES: &[&str] = &["APIEntitiesCiVariable", "APIEntitiesPublicGroupDetails"];

/// Every place where the stand-in follows GitLab's server rather than its published document
/// (`gitlab-ci-variables-semantics.md`):
///
/// 1. The variable lists (`GET /projects/:id/variables`, `GET /groups/:id/variables`) answer a
///    JSON array of `APIEntitiesCiVariable`, not a single one.
/// 2. `DELETE .../variables/:key` answers 204 with no body, not 200 with the entity.
/// 3. `APIEntitiesCiVariable.value` is `null` for hidden variables, `description` is `null`
///    when none was given, and `APIEntitiesPublicGroupDetails.avatar_url` is `null` for a group
///    without an avatar: those properties are nullable.
/// 4. [`CLOSED_ENTITIES`] are closed: every property required, no other property allowed.
/// 5. Statuses GitLab sends that the document leaves out: 401 (no or bad token), 403 (role too
///    low), 409 (ambiguous key, single-variable operations), 412 (group DELETE with an old
///    `If-Unmodified-Since`) and 429 (rate limit, plain text). Their bodies, like those of the
///    declared statuses without content (400, 404), must be GitLab error objects.
fn apply_deviations(doc: &mut Value) -> Result<()> {
    let schemas = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
        .context("the OpenAPI document has no components.schemas")?;
    for (entity, property) in [
        ("APIEntitiesCiVariable", "value"),
        ("APIEntitiesCiVariable", "description"),
        ("APIEntitiesPublicGroupDetails", "avatar_url"),
    ] {
        let schema = schemas
            .get_mut(entity)
            .and_then(|s| s.pointer_mut(&format!("/properties/{property}")))
            .with_context(|| format!("{entity}.{property} is not in the document"))?;
        schema["nullable"] = json!(true);
    }
    for entity in CLOSED_ENTITIES {
        let schema = schemas
            .get_mut(*entity)
            .with_context(|| format!("{entity} is not in the document"))?;
        let properties: Vec<String> = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        schema["required"] = json!(properties);
        schema["additionalProperties"] = json!(false);
    }

    let paths = doc
        .get_mut("paths")
        .and_then(Value::as_object_mut)
        .context("the OpenAPI document has no paths")?;
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for (method, operation) in item.iter_mut() {
            let id = operation
                .get("operationId")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let Some(responses) = operation
                .get_mut("responses")
                .and_then(Value::as_object_mut)
            else {
                continue;
            };
            if LIST_OPERATIONS.contains(&id.as_str()) {
                let schema = responses
                    .get_mut("200")
                    .and_then(|r| r.pointer_mut("/content/application~1json/schema"))
                    .with_context(|| format!("{id} has no 200 schema"))?;
                *schema = json!({"type": "array", "items": schema.take()});
            }
            if method == "delete" {
                responses.remove("200");
                responses.insert(
                    "204".to_owned(),
                    json!({"description": "No Content", "x-standin-body": "empty"}),
                );
            }
            let single_variable = path.ends_with("/variables/{key}");
            let mut extra = vec!["401", "403"];
            if single_variable {
                extra.push("409");
            }
            if single_variable && method == "delete" && path.starts_with("/api/v4/groups/") {
                extra.push("412");
            }
            for status in extra {
                responses
                    .entry(status)
                    .or_insert_with(|| json!({"description": "GitLab error"}));
            }
            responses.insert(
                "429".to_owned(),
                json!({"description": "Rate limited", "x-standin-body": "text"}),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_compiles_and_covers_the_variable_routes() {
        let api = OpenApi::load().expect("load");
        for (method, path) in [
            (Method::GET, "/api/v4/projects/{id}/variables"),
            (Method::POST, "/api/v4/projects/{id}/variables"),
            (Method::GET, "/api/v4/projects/{id}/variables/{key}"),
            (Method::PUT, "/api/v4/projects/{id}/variables/{key}"),
            (Method::DELETE, "/api/v4/projects/{id}/variables/{key}"),
            (Method::GET, "/api/v4/groups/{id}/variables"),
            (Method::POST, "/api/v4/groups/{id}/variables"),
            (Method::GET, "/api/v4/groups/{id}/variables/{key}"),
            (Method::PUT, "/api/v4/groups/{id}/variables/{key}"),
            (Method::DELETE, "/api/v4/groups/{id}/variables/{key}"),
            (Method::GET, "/api/v4/projects/{id}/groups"),
        ] {
            assert!(api.covers(&method, path), "{method} {path}");
        }
    }

    #[test]
    fn the_check_catches_what_gitlab_would_never_send() {
        let api = OpenApi::load().expect("load");
        let json = Some("application/json");
        let get = |status: u16, body: &str| {
            api.check(
                &Method::GET,
                "/api/v4/projects/{id}/variables/{key}",
                StatusCode::from_u16(status).expect("status"),
                json,
                body.as_bytes(),
            )
        };
        let good = r#"{"variable_type":"env_var","key":"K","value":null,"hidden":true,
            "protected":false,"masked":true,"raw":false,"environment_scope":"*","description":null}"#;
        assert_eq!(get(200, good), None);
        // A missing property, an extra one, a wrong type.
        assert!(get(200, r#"{"key":"K"}"#).is_some());
        assert!(get(200, &good.replace("\"raw\":false", "\"raw\":false,\"x\":1")).is_some());
        assert!(get(200, &good.replace("\"hidden\":true", "\"hidden\":\"yes\"")).is_some());
        // A list where one entity is due, and an undeclared status.
        assert!(get(200, &format!("[{good}]")).is_some());
        assert!(get(500, r#"{"message":"500 Internal Server Error"}"#).is_some());
        // Error bodies.
        assert_eq!(get(404, r#"{"message":"404 Variable Not Found"}"#), None);
        assert!(get(404, r#"{"msg":"nope"}"#).is_some());
        let list = api.check(
            &Method::GET,
            "/api/v4/projects/{id}/variables",
            StatusCode::OK,
            json,
            format!("[{good}]").as_bytes(),
        );
        assert_eq!(list, None);
        let delete = api.check(
            &Method::DELETE,
            "/api/v4/projects/{id}/variables/{key}",
            StatusCode::OK,
            json,
            good.as_bytes(),
        );
        assert!(delete.is_some(), "DELETE answers 204, never 200");
    }
}
