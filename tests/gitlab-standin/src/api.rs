//! The GitLab API v4 routes the stand-in serves, with GitLab's order of checks: 401 (token),
//! 404 (container the user cannot see), 403 (role too low), 400 (Grape parameters), then the
//! model's validations.

use std::sync::Arc;
use std::time::SystemTime;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{MatchedPath, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Map, Value, json};

use crate::Shared;
use crate::model::{Container, Role, StoredVariable, Variable, VariableType};
use crate::params::Params;

/// The route template requests that match no route are counted under.
pub const UNMATCHED: &str = "(unmatched)";

const AMBIGUOUS: &str =
    "There are multiple variables with provided parameters. Please use 'filter[environment_scope]'";

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/api/v4/user", get(current_user))
        .route("/api/v4/projects/{id}", get(project))
        .route("/api/v4/projects/{id}/groups", get(project_groups))
        .route(
            "/api/v4/projects/{id}/variables",
            get(list_project).post(create_project),
        )
        .route(
            "/api/v4/projects/{id}/variables/{key}",
            get(get_project).put(update_project).delete(delete_project),
        )
        .route(
            "/api/v4/groups/{id}/variables",
            get(list_group).post(create_group),
        )
        .route(
            "/api/v4/groups/{id}/variables/{key}",
            get(get_group).put(update_group).delete(delete_group),
        )
        .fallback(|| async { error(StatusCode::NOT_FOUND, "error", "404 Not Found") })
        .layer(middleware::from_fn_with_state(shared.clone(), observe))
        .with_state(shared)
}

/// Counts the request, answers the rate limit, and checks the response against the OpenAPI
/// document on its way out.
async fn observe(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let template = request
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED, MatchedPath::as_str)
        .to_owned();
    let limited = {
        let mut traffic = shared.traffic();
        *traffic
            .requests
            .entry((method.to_string(), template.clone()))
            .or_default() += 1;
        if traffic.rate_limited > 0 {
            traffic.rate_limited -= 1;
            true
        } else {
            false
        }
    };
    let response = if limited {
        rate_limited()
    } else {
        next.run(request).await
    };
    if !shared.openapi.covers(&method, &template) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "message",
            "stand-in: could not buffer its own response",
        );
    };
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let problem = shared
        .openapi
        .check(&method, &template, parts.status, content_type, &body);
    if let Some(problem) = problem {
        let violation = crate::Violation {
            method: method.to_string(),
            path,
            operation: template,
            status: parts.status.as_u16(),
            problem,
        };
        eprintln!("gitlab-standin: OpenAPI violation: {violation}");
        let strict = shared.strict.load(std::sync::atomic::Ordering::SeqCst);
        let message = format!("stand-in OpenAPI violation: {violation}");
        shared.traffic().violations.push(violation);
        if strict {
            // A status GitLab never sends here, so the client under test fails at once.
            return error(StatusCode::INTERNAL_SERVER_ERROR, "message", &message);
        }
    }
    Response::from_parts(parts, Body::from(body))
}

/// Rack::Attack's throttle answer, as GitLab configures it.
fn rate_limited() -> Response {
    let mut response = (StatusCode::TOO_MANY_REQUESTS, "Retry later\n").into_response();
    let headers = response.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    headers.insert(
        "RateLimit-Name",
        HeaderValue::from_static("throttle_authenticated_api"),
    );
    headers.insert("RateLimit-Remaining", HeaderValue::from_static("0"));
    response
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn error(status: StatusCode, field: &str, message: &str) -> Response {
    json_response(status, &json!({ field: message }))
}

/// Why a request fails, each with GitLab's status and body.
enum ApiError {
    Unauthorized,
    NotFound(&'static str),
    Forbidden,
    /// Grape's parameter validation: `{"error": "a is missing, b is invalid"}`.
    Params(Vec<String>),
    /// Model validation: `{"message": {"field": ["..."]}}`.
    Invalid(Map<String, Value>),
    Conflict,
    PreconditionFailed,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            Self::Unauthorized => error(StatusCode::UNAUTHORIZED, "message", "401 Unauthorized"),
            Self::NotFound(what) => error(
                StatusCode::NOT_FOUND,
                "message",
                &format!("404 {what} Not Found"),
            ),
            Self::Forbidden => error(StatusCode::FORBIDDEN, "message", "403 Forbidden"),
            Self::Params(errors) => error(StatusCode::BAD_REQUEST, "error", &errors.join(", ")),
            Self::Invalid(fields) => {
                json_response(StatusCode::BAD_REQUEST, &json!({ "message": fields }))
            }
            Self::Conflict => error(StatusCode::CONFLICT, "message", AMBIGUOUS),
            Self::PreconditionFailed => error(
                StatusCode::PRECONDITION_FAILED,
                "message",
                "412 Precondition Failed",
            ),
        }
    }
}

type ApiResult = Result<Response, ApiError>;

/// The token, from wherever GitLab reads one: `PRIVATE-TOKEN`, `Authorization: Bearer`, or the
/// `private_token` / `access_token` query parameters.
fn token(headers: &HeaderMap, params: &Params) -> Option<String> {
    let header_token = headers
        .get("private-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(|t| t.trim().to_owned());
    let query = |name: &str| {
        params
            .query_pairs()
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    header_token
        .or(bearer)
        .or_else(|| query("private_token"))
        .or_else(|| query("access_token"))
}

/// What a request needs from its container.
#[derive(Clone, Copy)]
enum Need {
    /// See it (any membership).
    Read,
    /// Manage its CI/CD variables: Maintainer for a project, Owner for a group.
    Variables,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Project,
    Group,
}

impl Kind {
    fn container_name(self) -> &'static str {
        match self {
            Self::Project => "Project",
            Self::Group => "Group",
        }
    }

    fn variable_name(self) -> &'static str {
        match self {
            Self::Project => "Variable",
            Self::Group => "GroupVariable",
        }
    }
}

/// A request's common prologue: parameters, then 401 → 404 → 403.
struct Call {
    params: Params,
    container: Container,
}

fn parse_params(uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Result<Params, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    Params::parse(uri.query(), content_type, body).map_err(|e| ApiError::Params(vec![e]))
}

fn authenticate(shared: &Shared, headers: &HeaderMap, params: &Params) -> Result<u64, ApiError> {
    let token = token(headers, params).ok_or(ApiError::Unauthorized)?;
    shared
        .state()
        .tokens
        .get(&token)
        .copied()
        .ok_or(ApiError::Unauthorized)
}

fn begin(
    shared: &Shared,
    kind: Kind,
    id: &str,
    need: Need,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Call, ApiError> {
    let params = match parse_params(uri, headers, body) {
        Ok(params) => params,
        Err(e) => {
            // Authentication comes first even then: an unreadable body from a stranger is a
            // 401. Tokens are read from headers and the query only, never from the body.
            let query_only = Params::parse(uri.query(), None, b"").unwrap_or_default();
            authenticate(shared, headers, &query_only)?;
            return Err(e);
        }
    };
    let user = authenticate(shared, headers, &params)?;
    let state = shared.state();
    let container = match kind {
        Kind::Project => state.find_project(id).map(Container::Project),
        Kind::Group => state.find_group(id).map(Container::Group),
    }
    .filter(|c| state.can_read(user, *c))
    .ok_or(ApiError::NotFound(kind.container_name()))?;
    let required = match (need, kind) {
        (Need::Read, _) => Role::Guest,
        (Need::Variables, Kind::Project) => Role::Maintainer,
        (Need::Variables, Kind::Group) => Role::Owner,
    };
    if state
        .role(user, container)
        .is_none_or(|role| role < required)
    {
        return Err(ApiError::Forbidden);
    }
    Ok(Call { params, container })
}

async fn current_user(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
) -> ApiResult {
    let params = parse_params(&uri, &headers, b"")?;
    let user = authenticate(&shared, &headers, &params)?;
    let state = shared.state();
    let user = state.users.get(&user).ok_or(ApiError::Unauthorized)?;
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "id": user.id,
            "username": user.username,
            "name": user.username,
            "state": "active",
            "locked": false,
            "avatar_url": null,
            "web_url": format!("{}/{}", shared.base_url, user.username),
            "is_admin": false,
            "bot": false,
        }),
    ))
}

async fn project(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> ApiResult {
    let call = begin(&shared, Kind::Project, &id, Need::Read, &uri, &headers, b"")?;
    let state = shared.state();
    let Container::Project(project) = call.container else {
        return Err(ApiError::NotFound("Project"));
    };
    let project = state
        .projects
        .get(&project)
        .ok_or(ApiError::NotFound("Project"))?;
    let namespace = state
        .groups
        .get(&project.namespace)
        .ok_or(ApiError::NotFound("Project"))?;
    let names: Vec<&str> = state
        .group_chain(namespace.id)
        .iter()
        .rev()
        .filter_map(|g| state.groups.get(g).map(|g| g.name.as_str()))
        .chain([project.name.as_str()])
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "id": project.id,
            "description": null,
            "name": project.name,
            "name_with_namespace": names.join(" / "),
            "path": project.name,
            "path_with_namespace": project.full_path,
            "default_branch": "main",
            "visibility": "private",
            "web_url": format!("{}/{}", shared.base_url, project.full_path),
            "namespace": {
                "id": namespace.id,
                "name": namespace.name,
                "path": namespace.name,
                "kind": "group",
                "full_path": namespace.full_path,
                "parent_id": namespace.parent,
                "avatar_url": null,
                "web_url": format!("{}/groups/{}", shared.base_url, namespace.full_path),
            },
        }),
    ))
}

/// `GET /projects/:id/groups`: the ancestor groups, root first (plus shared groups with
/// `with_shared=true`), as `APIEntitiesPublicGroupDetails`.
async fn project_groups(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> ApiResult {
    let call = begin(&shared, Kind::Project, &id, Need::Read, &uri, &headers, b"")?;
    let mut errors = Vec::new();
    let with_shared = call.params.boolean("with_shared", &mut errors);
    let _ = call.params.boolean("shared_visible_only", &mut errors);
    let _ = call.params.integer("shared_min_access_level", &mut errors);
    let search = call.params.string("search", &mut errors);
    let skip: Vec<u64> = call
        .params
        .string("skip_groups", &mut errors)
        .map(|s| s.split(',').filter_map(|g| g.trim().parse().ok()).collect())
        .unwrap_or_default();
    let page = Page::from_params(&call.params, &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Params(errors));
    }
    let items: Vec<Value> = {
        let state = shared.state();
        let Container::Project(project) = call.container else {
            return Err(ApiError::NotFound("Project"));
        };
        let project = state
            .projects
            .get(&project)
            .ok_or(ApiError::NotFound("Project"))?;
        let mut groups: Vec<u64> = state.group_chain(project.namespace);
        groups.reverse();
        if with_shared == Some(true) {
            for shared in &project.shared_with {
                if !groups.contains(shared) {
                    groups.push(*shared);
                }
            }
        }
        groups
            .into_iter()
            .filter(|g| !skip.contains(g))
            .filter_map(|g| state.groups.get(&g))
            .filter(|g| {
                search.as_deref().is_none_or(|s| {
                    let s = s.to_lowercase();
                    g.name.to_lowercase().contains(&s) || g.full_path.to_lowercase().contains(&s)
                })
            })
            .map(|g| {
                let full_name: Vec<&str> = state
                    .group_chain(g.id)
                    .iter()
                    .rev()
                    .filter_map(|a| state.groups.get(a).map(|a| a.name.as_str()))
                    .collect();
                json!({
                    "id": g.id,
                    "web_url": format!("{}/groups/{}", shared.base_url, g.full_path),
                    "name": g.name,
                    "avatar_url": null,
                    "full_name": full_name.join(" / "),
                    "full_path": g.full_path,
                })
            })
            .collect()
    };
    let mut defaults = vec![("with_shared", "false"), ("shared_visible_only", "false")];
    defaults.retain(|(k, _)| !call.params.has(k));
    Ok(page.respond(&shared.base_url, &uri, &id, &call.params, &defaults, items))
}

/// Offset pagination as GitLab does it (`lib/gitlab/pagination/offset_header_builder.rb`).
struct Page {
    page: u64,
    per_page: u64,
    /// `params[:per_page]` as Grape has it (the request's, or the default 20), which the
    /// `Link` URLs repeat even when it is above the maximum.
    requested_per_page: i64,
}

impl Page {
    const DEFAULT_PER_PAGE: i64 = 20;
    const MAX_PER_PAGE: u64 = 100;
    /// Above this many records GitLab leaves out the totals and `rel="last"`.
    const COUNT_LIMIT: usize = 10_000;

    fn from_params(params: &Params, errors: &mut Vec<String>) -> Self {
        let page = params.integer("page", errors).unwrap_or(1);
        let requested_per_page = params
            .integer("per_page", errors)
            .unwrap_or(Self::DEFAULT_PER_PAGE);
        let per_page = if requested_per_page < 1 {
            Self::DEFAULT_PER_PAGE as u64
        } else {
            (requested_per_page as u64).min(Self::MAX_PER_PAGE)
        };
        Self {
            page: page.max(1) as u64,
            per_page,
            requested_per_page,
        }
    }

    fn respond(
        &self,
        base_url: &str,
        uri: &Uri,
        id: &str,
        params: &Params,
        defaults: &[(&str, &str)],
        items: Vec<Value>,
    ) -> Response {
        let total = items.len() as u64;
        let total_pages = total.div_ceil(self.per_page).max(1);
        let out_of_range = self.page > total.div_ceil(self.per_page);
        let next = (!out_of_range && self.page < total_pages).then_some(self.page + 1);
        let prev = (!out_of_range && self.page > 1).then_some(self.page - 1);
        let start = ((self.page - 1) * self.per_page).min(total) as usize;
        let body: Vec<Value> = items
            .into_iter()
            .skip(start)
            .take(self.per_page as usize)
            .collect();
        let with_counts = total as usize <= Self::COUNT_LIMIT;

        // Grape's `params` hold the route's `:id`, the query, the declared defaults and
        // page/per_page; Rails' `to_query` sorts them by name.
        let mut query: Vec<(String, String)> = params
            .query_pairs()
            .iter()
            .filter(|(k, _)| k != "page" && k != "per_page" && k != "id")
            .cloned()
            .collect();
        query.push(("id".to_owned(), id.to_owned()));
        query.extend(
            defaults
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        query.push(("per_page".to_owned(), self.requested_per_page.to_string()));
        let href = |page: u64| {
            let mut pairs = query.clone();
            pairs.push(("page".to_owned(), page.to_string()));
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            let encoded = form_urlencoded::Serializer::new(String::new())
                .extend_pairs(pairs)
                .finish();
            format!("{base_url}{}?{encoded}", uri.path())
        };
        let mut links = Vec::new();
        if let Some(prev) = prev {
            links.push(format!("<{}>; rel=\"prev\"", href(prev)));
        }
        if let Some(next) = next {
            links.push(format!("<{}>; rel=\"next\"", href(next)));
        }
        links.push(format!("<{}>; rel=\"first\"", href(1)));
        if with_counts {
            links.push(format!("<{}>; rel=\"last\"", href(total_pages)));
        }

        let mut response = json_response(StatusCode::OK, &Value::Array(body));
        let headers = response.headers_mut();
        let mut set = |name: &'static str, value: String| {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        };
        set("X-Per-Page", self.per_page.to_string());
        set("X-Page", self.page.to_string());
        set(
            "X-Next-Page",
            next.map(|p| p.to_string()).unwrap_or_default(),
        );
        set(
            "X-Prev-Page",
            prev.map(|p| p.to_string()).unwrap_or_default(),
        );
        set("Link", links.join(", "));
        if with_counts {
            set("X-Total", total.to_string());
            set("X-Total-Pages", total_pages.to_string());
        }
        response
    }
}

async fn list(
    shared: Arc<Shared>,
    kind: Kind,
    id: String,
    uri: Uri,
    headers: HeaderMap,
) -> ApiResult {
    let call = begin(&shared, kind, &id, Need::Variables, &uri, &headers, b"")?;
    let mut errors = Vec::new();
    let page = Page::from_params(&call.params, &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Params(errors));
    }
    let items: Vec<Value> = shared
        .state()
        .variables(call.container)
        .map(|v| v.iter().map(|v| v.variable.to_json()).collect())
        .unwrap_or_default();
    Ok(page.respond(&shared.base_url, &uri, &id, &call.params, &[], items))
}

/// The variables matching `key` and, when given, the exact `filter[environment_scope]`.
fn lookup(variables: &[StoredVariable], key: &str, scope: Option<&str>) -> Vec<usize> {
    variables
        .iter()
        .enumerate()
        .filter(|(_, v)| {
            v.variable.key == key && scope.is_none_or(|s| v.variable.environment_scope == s)
        })
        .map(|(i, _)| i)
        .collect()
}

/// Exactly one match, or GitLab's 404 / 409.
fn single(
    variables: &[StoredVariable],
    kind: Kind,
    key: &str,
    scope: Option<&str>,
) -> Result<usize, ApiError> {
    match lookup(variables, key, scope).as_slice() {
        [] => Err(ApiError::NotFound(kind.variable_name())),
        [one] => Ok(*one),
        _ => Err(ApiError::Conflict),
    }
}

async fn get_variable(
    shared: Arc<Shared>,
    kind: Kind,
    id: String,
    key: String,
    uri: Uri,
    headers: HeaderMap,
) -> ApiResult {
    let call = begin(&shared, kind, &id, Need::Variables, &uri, &headers, b"")?;
    let state = shared.state();
    let variables = state
        .variables(call.container)
        .ok_or(ApiError::NotFound(kind.container_name()))?;
    let index = single(variables, kind, &key, call.params.filter_scope().as_deref())?;
    Ok(json_response(
        StatusCode::OK,
        &variables[index].variable.to_json(),
    ))
}

/// The fields a create or update may set, after Grape's coercion.
#[derive(Default)]
struct Fields {
    value: Option<String>,
    protected: Option<bool>,
    masked: Option<bool>,
    masked_and_hidden: Option<bool>,
    raw: Option<bool>,
    variable_type: Option<VariableType>,
    environment_scope: Option<String>,
    description: Option<String>,
}

impl Fields {
    fn parse(params: &Params, creating: bool, errors: &mut Vec<String>) -> Self {
        let variable_type = match params.string("variable_type", errors) {
            None => None,
            Some(t) => match VariableType::parse(&t) {
                Some(t) => Some(t),
                None => {
                    errors.push("variable_type does not have a valid value".to_owned());
                    None
                }
            },
        };
        Self {
            value: params.string("value", errors),
            protected: params.boolean("protected", errors),
            masked: params.boolean("masked", errors),
            // Only create declares it; an update ignores it like any undeclared parameter.
            masked_and_hidden: if creating {
                params.boolean("masked_and_hidden", errors)
            } else {
                None
            },
            raw: params.boolean("raw", errors),
            variable_type,
            environment_scope: params.string("environment_scope", errors),
            description: params.string("description", errors),
        }
    }

    fn apply(self, variable: &mut Variable) {
        if let Some(value) = self.value {
            variable.value = value;
        }
        if let Some(protected) = self.protected {
            variable.protected = protected;
        }
        if let Some(masked) = self.masked {
            variable.masked = masked;
        }
        if self.masked_and_hidden == Some(true) {
            variable.masked = true;
            variable.hidden = true;
        }
        if let Some(raw) = self.raw {
            variable.raw = raw;
        }
        if let Some(variable_type) = self.variable_type {
            variable.variable_type = variable_type;
        }
        if let Some(scope) = self.environment_scope {
            variable.environment_scope = scope;
        }
        if let Some(description) = self.description {
            variable.description = Some(description);
        }
    }
}

/// The model's validations (`Ci::HasVariable`, `Ci::Maskable`, the uniqueness of key and
/// scope), with Rails' messages. `others` are the container's other variables.
pub(crate) fn validate(
    variable: &Variable,
    others: &[&Variable],
) -> Result<(), Map<String, Value>> {
    let mut errors: Vec<(&str, String)> = Vec::new();
    let key = &variable.key;
    // Rails runs presence, length and format one after the other, so a blank key gets two
    // messages.
    if key.is_empty() {
        errors.push(("key", "can't be blank".to_owned()));
    }
    if key.chars().count() > 255 {
        errors.push(("key", "is too long (maximum is 255 characters)".to_owned()));
    }
    if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        errors.push((
            "key",
            "can contain only letters, digits and '_'.".to_owned(),
        ));
    }
    if variable.masked && !maskable(&variable.value, variable.raw) {
        errors.push(("value", "is invalid".to_owned()));
    }
    if variable.environment_scope.is_empty() {
        errors.push(("environment_scope", "can't be blank".to_owned()));
    }
    if variable
        .description
        .as_ref()
        .is_some_and(|d| d.chars().count() > 255)
    {
        errors.push((
            "description",
            "is too long (maximum is 255 characters)".to_owned(),
        ));
    }
    if others
        .iter()
        .any(|o| o.key == *key && o.environment_scope == variable.environment_scope)
    {
        errors.push(("key", format!("({key}) has already been taken")));
    }
    if errors.is_empty() {
        return Ok(());
    }
    let mut fields = Map::new();
    for (field, message) in errors {
        if let Value::Array(messages) = fields
            .entry(field)
            .or_insert_with(|| Value::Array(Vec::new()))
        {
            messages.push(Value::String(message));
        }
    }
    Err(fields)
}

/// `Ci::Maskable`: at least 8 characters on one line; expanded values only from
/// `[a-zA-Z0-9_+=/@:.~-]`, raw ones anything but whitespace.
fn maskable(value: &str, raw: bool) -> bool {
    value.chars().count() >= 8
        && value.chars().all(|c| {
            if raw {
                !c.is_whitespace()
            } else {
                c.is_ascii_alphanumeric() || "_+=/@:.~-".contains(c)
            }
        })
}

async fn create(
    shared: Arc<Shared>,
    kind: Kind,
    id: String,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let call = begin(&shared, kind, &id, Need::Variables, &uri, &headers, &body)?;
    let mut errors = Vec::new();
    let key = call.params.string("key", &mut errors);
    if !call.params.has("key") {
        errors.insert(0, "key is missing".to_owned());
    }
    if !call.params.has("value") {
        errors.push("value is missing".to_owned());
    }
    let fields = Fields::parse(&call.params, true, &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Params(errors));
    }
    // Rails strips the key before validating it.
    let mut variable = Variable::new(key.unwrap_or_default().trim(), "");
    fields.apply(&mut variable);
    let mut state = shared.state();
    let variables = state
        .variables_mut(call.container)
        .ok_or(ApiError::NotFound(kind.container_name()))?;
    let others: Vec<&Variable> = variables.iter().map(|v| &v.variable).collect();
    validate(&variable, &others).map_err(ApiError::Invalid)?;
    let body = variable.to_json();
    variables.push(StoredVariable {
        variable,
        updated_at: SystemTime::now(),
    });
    Ok(json_response(StatusCode::CREATED, &body))
}

async fn update(
    shared: Arc<Shared>,
    kind: Kind,
    id: String,
    key: String,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let call = begin(&shared, kind, &id, Need::Variables, &uri, &headers, &body)?;
    let mut errors = Vec::new();
    let fields = Fields::parse(&call.params, false, &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Params(errors));
    }
    let scope = call.params.filter_scope();
    let mut state = shared.state();
    let variables = state
        .variables_mut(call.container)
        .ok_or(ApiError::NotFound(kind.container_name()))?;
    let index = match (kind, scope.as_deref()) {
        // Group PUT without a filter keeps its old behaviour: the first variable with the key,
        // never a 409 (lib/api/group_variables.rb).
        (Kind::Group, None) => *lookup(variables, &key, None)
            .first()
            .ok_or(ApiError::NotFound(kind.variable_name()))?,
        (_, scope) => single(variables, kind, &key, scope)?,
    };
    let mut variable = variables[index].variable.clone();
    fields.apply(&mut variable);
    let others: Vec<&Variable> = variables
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != index)
        .map(|(_, v)| &v.variable)
        .collect();
    validate(&variable, &others).map_err(ApiError::Invalid)?;
    let body = variable.to_json();
    variables[index] = StoredVariable {
        variable,
        updated_at: SystemTime::now(),
    };
    Ok(json_response(StatusCode::OK, &body))
}

async fn delete(
    shared: Arc<Shared>,
    kind: Kind,
    id: String,
    key: String,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let call = begin(&shared, kind, &id, Need::Variables, &uri, &headers, &body)?;
    let scope = call.params.filter_scope();
    let mut state = shared.state();
    let variables = state
        .variables_mut(call.container)
        .ok_or(ApiError::NotFound(kind.container_name()))?;
    let index = single(variables, kind, &key, scope.as_deref())?;
    if kind == Kind::Group && modified_since(&headers, variables[index].updated_at) {
        return Err(ApiError::PreconditionFailed);
    }
    variables.remove(index);
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `destroy_conditionally!`: an `If-Unmodified-Since` older than the last update (compared
/// at the header's one-second resolution) fails the delete; an unparsable one is ignored.
fn modified_since(headers: &HeaderMap, updated_at: SystemTime) -> bool {
    let Some(since) = headers
        .get(header::IF_UNMODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok())
    else {
        return false;
    };
    let seconds = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default()
    };
    seconds(updated_at) > seconds(since)
}

// Thin per-route handlers: axum routes need one function per (method, path).

async fn list_project(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    uri: Uri,
    h: HeaderMap,
) -> ApiResult {
    list(s, Kind::Project, id, uri, h).await
}

async fn list_group(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    uri: Uri,
    h: HeaderMap,
) -> ApiResult {
    list(s, Kind::Group, id, uri, h).await
}

async fn create_project(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult {
    create(s, Kind::Project, id, uri, h, body).await
}

async fn create_group(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult {
    create(s, Kind::Group, id, uri, h, body).await
}

async fn get_project(
    State(s): State<Arc<Shared>>,
    Path((id, key)): Path<(String, String)>,
    uri: Uri,
    h: HeaderMap,
) -> ApiResult {
    get_variable(s, Kind::Project, id, key, uri, h).await
}

async fn get_group(
    State(s): State<Arc<Shared>>,
    Path((id, key)): Path<(String, String)>,
    uri: Uri,
    h: HeaderMap,
) -> ApiResult {
    get_variable(s, Kind::Group, id, key, uri, h).await
}

async fn update_project(
    State(s): State<Arc<Shared>>,
    Path((id, key)): Path<(String, String)>,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult {
    update(s, Kind::Project, id, key, uri, h, body).await
}

async fn update_group(
    State(s): State<Arc<Shared>>,
    Path((id, key)): Path<(String, String)>,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult {
    update(s, Kind::Group, id, key, uri, h, body).await
}

async fn delete_project(
    State(s): State<Arc<Shared>>,
    Path((id, key)): Path<(String, String)>,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult {
    delete(s, Kind::Project, id, key, uri, h, body).await
}

async fn delete_group(
    State(s): State<Arc<Shared>>,
    Path((id, key)): Path<(String, String)>,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult {
    delete(s, Kind::Group, id, key, uri, h, body).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_values_follow_gitlab_rules() {
        assert!(maskable("abcdefgh", false));
        assert!(maskable("a+b=c/d@e:f.g~h-i_j", false));
        assert!(!maskable("short", false));
        assert!(!maskable("has space here", false));
        assert!(!maskable("dollar$sign", false));
        assert!(maskable("dollar$sign", true));
        assert!(!maskable("two\nlines!", true));
    }
}
