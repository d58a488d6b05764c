//! Request parameters the way Grape sees them: query string and body (JSON or form) merged,
//! the body winning, with Grape's coercions and its `{"error": "..."}` messages.

use serde_json::{Map, Value};

/// The merged parameters of one request.
#[derive(Debug, Default)]
pub(crate) struct Params {
    query: Vec<(String, String)>,
    body: Map<String, Value>,
}

impl Params {
    /// `content_type` decides how the body is read; an unreadable body is a Grape 400.
    pub fn parse(
        query: Option<&str>,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Result<Self, String> {
        let query = query
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        let body = if body.iter().all(u8::is_ascii_whitespace) {
            Map::new()
        } else if content_type.is_some_and(|c| c.contains("application/x-www-form-urlencoded")) {
            form_urlencoded::parse(body)
                .into_owned()
                .map(|(k, v)| (k, Value::String(v)))
                .collect()
        } else {
            // Grape parses JSON for application/json; python-gitlab and most clients send it.
            match serde_json::from_slice(body) {
                Ok(Value::Object(map)) => map,
                Ok(_) => return Err("body must be a JSON object".to_owned()),
                Err(_) => return Err("body is not valid JSON".to_owned()),
            }
        };
        Ok(Self { query, body })
    }

    /// The raw query pairs, in order (for pagination links).
    pub fn query_pairs(&self) -> &[(String, String)] {
        &self.query
    }

    /// A parameter's value; JSON `null` counts as absent, like Grape's optional params.
    pub fn get(&self, name: &str) -> Option<Value> {
        match self.body.get(name) {
            Some(Value::Null) => None,
            Some(value) => Some(value.clone()),
            None => self
                .query
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| Value::String(v.clone())),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// A `type: String` parameter: numbers and booleans are coerced, objects and arrays are
    /// invalid.
    pub fn string(&self, name: &str, errors: &mut Vec<String>) -> Option<String> {
        match self.get(name)? {
            Value::String(s) => Some(s),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => {
                errors.push(format!("{name} is invalid"));
                None
            }
        }
    }

    /// A `type: Boolean` parameter with Grape's (dry-types') accepted spellings.
    pub fn boolean(&self, name: &str, errors: &mut Vec<String>) -> Option<bool> {
        let parsed = match self.get(name)? {
            Value::Bool(b) => Some(b),
            Value::Number(n) if n.as_i64() == Some(1) => Some(true),
            Value::Number(n) if n.as_i64() == Some(0) => Some(false),
            Value::String(s) => match s.to_ascii_lowercase().as_str() {
                "1" | "on" | "t" | "true" | "y" | "yes" => Some(true),
                "0" | "off" | "f" | "false" | "n" | "no" => Some(false),
                _ => None,
            },
            _ => None,
        };
        if parsed.is_none() {
            errors.push(format!("{name} is invalid"));
        }
        parsed
    }

    /// A `type: Integer` parameter.
    pub fn integer(&self, name: &str, errors: &mut Vec<String>) -> Option<i64> {
        let parsed = match self.get(name)? {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        if parsed.is_none() {
            errors.push(format!("{name} is invalid"));
        }
        parsed
    }

    /// `filter[environment_scope]`, from the query or the body (nested JSON object or flat
    /// form key). An empty value means no filter, as in GitLab's finder.
    pub fn filter_scope(&self) -> Option<String> {
        let nested = match self.body.get("filter") {
            Some(Value::Object(filter)) => filter.get("environment_scope").cloned(),
            _ => None,
        };
        let value = nested.or_else(|| self.get("filter[environment_scope]"));
        match value {
            Some(Value::String(s)) if !s.is_empty() => Some(s),
            _ => None,
        }
    }
}
