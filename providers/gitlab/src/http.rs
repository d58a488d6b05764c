//! The GitLab REST API v4, the calls this provider makes: the `gitlab` crate's typed endpoints
//! for project and group variables and its page walk, sent through our own `reqwest::Client`
//! (one per provider client, with the store's CA roots) by [`Call`], our implementation of the
//! crate's `AsyncClient`. The crate's `GitlabBuilder` is not used: it asks `GET /user` before
//! any call, and brings a client of its own.
//!
//! What stays ours: every call is counted by its ESO call name; a 429 is waited out as
//! `Retry-After` says, a bounded number of times; GitLab's `X-Next-Page` ends a page walk; and
//! errors name the call and the project or group, never a value or the token (the crate's own
//! messages may quote what it could not parse, so they are never shown).

use std::borrow::Cow;
use std::sync::Mutex;
use std::time::Duration;

use api::providers::gitlab::GitlabProvider;
use async_trait::async_trait;
use bytes::Bytes;
use gitlab::api::{AsyncClient, AsyncQuery, Endpoint, Pageable, Pagination, RestClient};
use http::header::{CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use http::{Method, StatusCode};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use provider::{CredentialsReader, Error, Result};
use reqwest::Url;

use crate::push::VariableWrite;
use crate::variables::{Place, ProjectGroup, Variable};

/// gitlab.com, when `url` is unset.
pub(crate) const DEFAULT_URL: &str = "https://gitlab.com/";
/// A listing longer than this many pages (of the crate's 100) is refused rather than followed
/// forever.
const MAX_PAGES: u32 = 1000;
/// Tries of one request when GitLab answers 429.
const MAX_ATTEMPTS: u32 = 4;
/// The longest `Retry-After` waited for; a longer one fails the call instead of holding a worker.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);
/// GitLab's own messages are short; a proxy's may not be.
const MESSAGE_MAX: usize = 300;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// ESO's call name: `ProjectVariableGet`, `GroupVariablesList`, ...
    pub call: String,
    /// `success` or `error` (any answer but 2xx, or no answer).
    pub status: String,
}

/// `gitlab_api_calls_total{call,status}`.
pub type Calls = Family<CallLabels, Counter>;

/// ESO's metric call names, and ours for writes.
pub(crate) mod call {
    pub const LIST_PROJECTS_GROUPS: &str = "ListProjectsGroups";
    pub const PROJECT_VARIABLE_GET: &str = "ProjectVariableGet";
    pub const PROJECT_VARIABLES_LIST: &str = "ProjectVariablesList";
    pub const GROUP_VARIABLE_GET: &str = "GroupVariableGet";
    pub const GROUP_VARIABLES_LIST: &str = "GroupVariablesList";
    pub const PROJECT_VARIABLE_CREATE: &str = "ProjectVariableCreate";
    pub const PROJECT_VARIABLE_UPDATE: &str = "ProjectVariableUpdate";
    pub const PROJECT_VARIABLE_DELETE: &str = "ProjectVariableDelete";
    pub const GROUP_VARIABLE_CREATE: &str = "GroupVariableCreate";
    pub const GROUP_VARIABLE_UPDATE: &str = "GroupVariableUpdate";
    pub const GROUP_VARIABLE_DELETE: &str = "GroupVariableDelete";
}

/// A failed call: GitLab's status and `message`, or why there was no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    #[error("GitLab answered {status} to {call} on {place}{}", message_suffix(.message))]
    Status {
        call: &'static str,
        place: String,
        status: u16,
        message: String,
    },
    #[error("{call} on {place}: {reason}")]
    Transport {
        call: &'static str,
        place: String,
        reason: String,
    },
}

fn message_suffix(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

impl ApiError {
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            Self::Transport { .. } => None,
        }
    }
}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        match e.status() {
            None | Some(500..=599) => Error::Unavailable(e.to_string()),
            Some(_) => Error::Backend(e.to_string()),
        }
    }
}

/// `{url}/api/v4/`, from the spec's `url` (gitlab.com when unset). A URL already ending in
/// `/api/v4` is kept, as ESO's client does.
pub(crate) fn api_base(url: Option<&str>) -> Result<Url> {
    let raw = url.filter(|u| !u.is_empty()).unwrap_or(DEFAULT_URL);
    let parsed = Url::parse(raw).map_err(|e| Error::InvalidSpec(format!("url: {raw:?}: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(Error::InvalidSpec(format!(
            "url: {raw:?} is not an http:// or https:// URL"
        )));
    }
    let path = parsed.path().trim_end_matches('/');
    let path = if path.ends_with("/api/v4") {
        format!("{path}/")
    } else {
        format!("{path}/api/v4/")
    };
    let mut base = parsed;
    base.set_path(&path);
    base.set_query(None);
    base.set_fragment(None);
    Ok(base)
}

/// The next page from `X-Next-Page`; empty or absent on the last page.
pub(crate) fn next_page(header: Option<&str>) -> Option<u32> {
    header.and_then(|h| h.trim().parse().ok())
}

/// How long to wait before try `attempt` (1-based) after a 429, from `Retry-After` in seconds,
/// else 1, 2, 4 seconds; `None` when the tries are used up or GitLab asks for too long a wait.
pub(crate) fn retry_wait(retry_after: Option<&str>, attempt: u32) -> Option<Duration> {
    if attempt >= MAX_ATTEMPTS {
        return None;
    }
    let wait = match retry_after.and_then(|h| h.trim().parse::<u64>().ok()) {
        Some(seconds) => Duration::from_secs(seconds),
        None => Duration::from_secs(1 << (attempt - 1).min(5)),
    };
    (wait <= MAX_RETRY_WAIT).then_some(wait)
}

/// Reads the PEM CA bundle from `caBundle` and `caProvider`.
async fn roots(
    spec: &GitlabProvider,
    credentials: &dyn CredentialsReader,
) -> Result<Vec<reqwest::Certificate>> {
    let pems = provider::ca_pems(
        spec.ca_bundle.as_ref().map(|b| b.0.as_slice()),
        spec.ca_provider.as_ref(),
        credentials,
    )
    .await?;
    let mut roots = Vec::new();
    for pem in pems {
        roots.extend(reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
            Error::InvalidSpec(format!("caBundle/caProvider: not a PEM bundle: {e}"))
        })?);
    }
    Ok(roots)
}

/// Why [`Call`] has no answer to give the crate. Never holds a value: reqwest's message is
/// taken without the URL, and bodies are not quoted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Transport {
    #[error("{0}")]
    Http(String),
    #[error("rate limited after {attempts} tries (Retry-After: {retry_after})")]
    RateLimited { attempts: u32, retry_after: String },
    #[error("more than {MAX_PAGES} pages of 100")]
    TooManyPages,
}

/// An endpoint the crate's builder refused (a field left unset: a bug of ours, named).
#[derive(Debug)]
pub(crate) struct BuildError(String);

fn built<T, E: std::fmt::Display>(result: std::result::Result<T, E>) -> Result<T, BuildError> {
    result.map_err(|e| BuildError(e.to_string()))
}

/// A create's or an update's builder with every field of a [`VariableWrite`] set.
macro_rules! written {
    ($builder:expr, $w:expr) => {
        $builder
            .key(&$w.key)
            .value(&$w.value)
            .environment_scope(&$w.environment_scope)
            .variable_type(variable_type($w.variable_type))
            .masked($w.masked)
            .protected($w.protected)
            .raw($w.raw)
            .description(&$w.description)
    };
}

/// The crate has one set of endpoint types per owner of variables, alike but for their names
/// and the owner's setter (`project`, `group`): our requests, written once for both.
macro_rules! owner_endpoints {
    ($owner:ident, $module:ident, $Get:ident, $List:ident, $Create:ident, $Update:ident,
     $Delete:ident, $Filter:ident, $Type:ident) => {
        mod $owner {
            use gitlab::api::$module::variables::{
                $Create, $Delete, $Filter, $Get, $List, $Type, $Update,
            };

            use super::{BuildError, built};
            use crate::push::{VariableType, VariableWrite};

            fn filter(scope: &str) -> Result<$Filter<'_>, BuildError> {
                built($Filter::builder().environment_scope(scope).build())
            }

            fn variable_type(t: VariableType) -> $Type {
                match t {
                    VariableType::EnvVar => $Type::EnvVar,
                    VariableType::File => $Type::File,
                }
            }

            pub(super) fn get<'a>(
                id: &'a str,
                key: &'a str,
                scope: Option<&'a str>,
            ) -> Result<$Get<'a>, BuildError> {
                let mut builder = $Get::builder();
                builder.$owner(id).key(key);
                if let Some(scope) = scope {
                    builder.filter(filter(scope)?);
                }
                built(builder.build())
            }

            pub(super) fn list(id: &str) -> Result<$List<'_>, BuildError> {
                built($List::builder().$owner(id).build())
            }

            pub(super) fn create<'a>(
                id: &'a str,
                w: &'a VariableWrite,
            ) -> Result<$Create<'a>, BuildError> {
                built(written!($Create::builder().$owner(id), w).build())
            }

            /// The variable of that exact scope.
            pub(super) fn update<'a>(
                id: &'a str,
                w: &'a VariableWrite,
            ) -> Result<$Update<'a>, BuildError> {
                let filter = filter(&w.environment_scope)?;
                built(
                    written!($Update::builder().$owner(id), w)
                        .filter(filter)
                        .build(),
                )
            }

            pub(super) fn delete<'a>(
                id: &'a str,
                key: &'a str,
                scope: &'a str,
            ) -> Result<$Delete<'a>, BuildError> {
                built(
                    $Delete::builder()
                        .$owner(id)
                        .key(key)
                        .filter(filter(scope)?)
                        .build(),
                )
            }
        }
    };
}

owner_endpoints!(
    project,
    projects,
    ProjectVariable,
    ProjectVariables,
    CreateProjectVariable,
    UpdateProjectVariable,
    DeleteProjectVariable,
    ProjectVariableFilter,
    ProjectVariableType
);
owner_endpoints!(
    group,
    groups,
    GroupVariable,
    GroupVariables,
    CreateGroupVariable,
    UpdateGroupVariable,
    DeleteGroupVariable,
    GroupVariableFilter,
    GroupVariableType
);

/// `GET /projects/:id/groups`, the project's ancestor groups: the one call the crate has no
/// endpoint for.
struct ProjectGroups<'a> {
    project: &'a str,
}

impl Endpoint for ProjectGroups<'_> {
    fn method(&self) -> Method {
        Method::GET
    }

    fn endpoint(&self) -> Cow<'static, str> {
        format!(
            "projects/{}/groups",
            gitlab::api::common::path_escaped(self.project)
        )
        .into()
    }
}

impl Pageable for ProjectGroups<'_> {}

/// Runs the query `$query` builds with `$owner`, the `project` or `group` module as `place`
/// says, as the call of that owner's name.
macro_rules! per_owner {
    ($api:expr, $place:expr, $project_call:expr, $group_call:expr,
     |$owner:ident, $id:ident| $query:expr) => {
        match $place {
            Place::Project($id) => {
                use project as $owner;
                $api.call($project_call, $place).query($query).await
            }
            Place::Group($id) => {
                use group as $owner;
                $api.call($group_call, $place).query($query).await
            }
        }
    };
}

/// One provider client's connection to GitLab.
pub(crate) struct GitlabApi {
    http: reqwest::Client,
    base: Url,
    calls: Calls,
}

impl GitlabApi {
    pub(crate) async fn connect(
        spec: &GitlabProvider,
        token: &str,
        credentials: &dyn CredentialsReader,
        calls: Calls,
    ) -> Result<Self> {
        let base = api_base(spec.url.as_deref())?;
        let mut token = HeaderValue::from_str(token).map_err(|_| {
            Error::InvalidSpec(
                "auth.SecretRef.accessToken: the token is not a valid HTTP header value".into(),
            )
        })?;
        token.set_sensitive(true);
        let mut headers = HeaderMap::new();
        headers.insert("PRIVATE-TOKEN", token);
        let mut builder = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .user_agent(concat!("external-secrets-rs/", env!("CARGO_PKG_VERSION")))
            .default_headers(headers);
        for root in roots(spec, credentials).await? {
            builder = builder.add_root_certificate(root);
        }
        let http = builder
            .build()
            .map_err(|e| Error::InvalidSpec(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self { http, base, calls })
    }

    fn call<'a>(&'a self, name: &'static str, place: &'a Place) -> Call<'a> {
        Call {
            api: self,
            name,
            place,
            walk: Mutex::default(),
        }
    }

    /// One request, tried again after a 429.
    async fn send(&self, request: reqwest::Request) -> Result<http::Response<Bytes>, Transport> {
        // Without the URL: it holds the key, which is fine, but keep messages short.
        let transport = |e: reqwest::Error| Transport::Http(e.without_url().to_string());
        let mut attempt = 1;
        loop {
            let again = request.try_clone().ok_or_else(|| {
                Transport::Http("a request body that cannot be sent twice".into())
            })?;
            let response = self.http.execute(again).await.map_err(transport)?;
            if response.status() == StatusCode::TOO_MANY_REQUESTS {
                let retry_after = response
                    .headers()
                    .get(RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                if let Some(wait) = retry_wait(retry_after.as_deref(), attempt) {
                    tracing::debug!(?wait, "GitLab rate limit, waiting");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                    continue;
                }
                return Err(Transport::RateLimited {
                    attempts: attempt,
                    retry_after: retry_after.unwrap_or_else(|| "unset".to_owned()),
                });
            }
            let mut answer = http::Response::builder().status(response.status());
            if let Some(headers) = answer.headers_mut() {
                *headers = response.headers().clone();
            }
            let body = response.bytes().await.map_err(transport)?;
            return answer
                .body(body)
                .map_err(|e| Transport::Http(e.to_string()));
        }
    }

    /// `GET /{projects,groups}/:id/variables/:key`, with `filter[environment_scope]` when given.
    /// `None` on 404.
    pub(crate) async fn get_variable(
        &self,
        place: &Place,
        key: &str,
        scope: Option<&str>,
    ) -> Result<Option<Variable>, ApiError> {
        let found = per_owner!(
            self,
            place,
            call::PROJECT_VARIABLE_GET,
            call::GROUP_VARIABLE_GET,
            |owner, id| owner::get(id, key, scope)
        );
        match found {
            Ok(variable) => Ok(Some(variable)),
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every page of `GET /{projects,groups}/:id/variables`, or only the first with
    /// `first_page_only` (enough to check access).
    pub(crate) async fn list_variables(
        &self,
        place: &Place,
        first_page_only: bool,
    ) -> Result<Vec<Variable>, ApiError> {
        let pages = if first_page_only {
            Pagination::Limit(100)
        } else {
            Pagination::All
        };
        per_owner!(
            self,
            place,
            call::PROJECT_VARIABLES_LIST,
            call::GROUP_VARIABLES_LIST,
            |owner, id| owner::list(id).map(|e| gitlab::api::paged(e, pages))
        )
    }

    /// `GET /projects/:id/groups`: the project's ancestor groups.
    pub(crate) async fn list_project_groups(
        &self,
        project: &str,
    ) -> Result<Vec<ProjectGroup>, ApiError> {
        let place = Place::Project(project.to_owned());
        let call = self.call(call::LIST_PROJECTS_GROUPS, &place);
        call.query(Ok(gitlab::api::paged(
            ProjectGroups { project },
            Pagination::All,
        )))
        .await
    }

    /// `POST /{projects,groups}/:id/variables`.
    pub(crate) async fn create_variable(
        &self,
        place: &Place,
        body: &VariableWrite,
    ) -> Result<(), ApiError> {
        per_owner!(
            self,
            place,
            call::PROJECT_VARIABLE_CREATE,
            call::GROUP_VARIABLE_CREATE,
            |owner, id| owner::create(id, body).map(gitlab::api::ignore)
        )
    }

    /// `PUT /{projects,groups}/:id/variables/:key` with `filter[environment_scope]`: the
    /// variable of that exact scope.
    pub(crate) async fn update_variable(
        &self,
        place: &Place,
        body: &VariableWrite,
    ) -> Result<(), ApiError> {
        per_owner!(
            self,
            place,
            call::PROJECT_VARIABLE_UPDATE,
            call::GROUP_VARIABLE_UPDATE,
            |owner, id| owner::update(id, body).map(gitlab::api::ignore)
        )
    }

    /// `DELETE /{projects,groups}/:id/variables/:key?filter[environment_scope]=...`; a 404 is
    /// not an error (gone already).
    pub(crate) async fn delete_variable(
        &self,
        place: &Place,
        key: &str,
        scope: &str,
    ) -> Result<(), ApiError> {
        let deleted = per_owner!(
            self,
            place,
            call::PROJECT_VARIABLE_DELETE,
            call::GROUP_VARIABLE_DELETE,
            |owner, id| owner::delete(id, key, scope).map(gitlab::api::ignore)
        );
        match deleted {
            Err(e) if e.status() == Some(404) => Ok(()),
            other => other,
        }
    }
}

/// One call, as the crate's client: our HTTP client, the call's ESO name and place for the
/// metric and errors, and where a page walk stands.
struct Call<'a> {
    api: &'a GitlabApi,
    name: &'static str,
    place: &'a Place,
    walk: Mutex<Walk>,
}

#[derive(Default)]
struct Walk {
    /// Requests sent.
    sent: u32,
    /// GitLab's empty `X-Next-Page` said the last page has been read.
    ended: bool,
}

impl Call<'_> {
    /// Runs one of the crate's queries (an endpoint, or one wrapped by `paged` or `ignore`).
    async fn query<T, Q>(&self, query: Result<Q, BuildError>) -> Result<T, ApiError>
    where
        Q: AsyncQuery<T, Self> + Sync,
    {
        let query = query.map_err(|BuildError(reason)| ApiError::Transport {
            call: self.name,
            place: self.place.to_string(),
            reason: format!("cannot build the request: {reason}"),
        })?;
        query.query_async(self).await.map_err(|e| self.error(e))
    }

    /// The crate's error as ours: GitLab's status and message, or why there was no answer, and
    /// never what the crate could not parse (its messages may quote it).
    fn error(&self, e: gitlab::api::ApiError<Transport>) -> ApiError {
        use gitlab::api::ApiError as Crate;
        let status = |status: StatusCode, message: String| ApiError::Status {
            call: self.name,
            place: self.place.to_string(),
            status: status.as_u16(),
            message: message.chars().take(MESSAGE_MAX).collect(),
        };
        let transport = |reason: String| ApiError::Transport {
            call: self.name,
            place: self.place.to_string(),
            reason,
        };
        match e {
            Crate::Client {
                source: source @ Transport::RateLimited { .. },
            } => status(StatusCode::TOO_MANY_REQUESTS, source.to_string()),
            Crate::Client { source } => transport(source.to_string()),
            Crate::GitlabWithStatus { status: code, msg } => status(code, msg),
            // `{"message": {"key": ["(A) has already been taken"]}}`: field errors, as JSON.
            Crate::GitlabObjectWithStatus { status: code, obj } => status(code, obj.to_string()),
            // Neither GitLab's `message` nor Grape's `error`, or no JSON at all (a proxy's
            // page): the status says enough.
            Crate::GitlabUnrecognizedWithStatus { status: code, .. } => status(code, String::new()),
            Crate::GitlabService { status: code, .. } if !code.is_success() => {
                status(code, String::new())
            }
            Crate::GitlabService { .. } | Crate::DataType { .. } | Crate::Json { .. } => {
                transport("unexpected answer (not the JSON expected)".to_owned())
            }
            Crate::MovedPermanently { .. } => status(StatusCode::MOVED_PERMANENTLY, String::new()),
            other => transport(other.to_string()),
        }
    }
}

impl RestClient for Call<'_> {
    type Error = Transport;

    fn rest_endpoint(&self, endpoint: &str) -> Result<Url, gitlab::api::ApiError<Transport>> {
        Ok(self.api.base.join(endpoint)?)
    }
}

#[async_trait]
impl AsyncClient for Call<'_> {
    async fn rest_async(
        &self,
        request: http::request::Builder,
        body: Vec<u8>,
    ) -> Result<http::Response<Bytes>, gitlab::api::ApiError<Transport>> {
        {
            let mut walk = self.walk.lock().unwrap_or_else(|e| e.into_inner());
            // The crate walks on until a page is short; GitLab said this one was the last, so
            // the crate gets the empty page GitLab would answer, without asking it.
            if walk.ended {
                return Ok(http::Response::new(Bytes::from_static(b"[]")));
            }
            walk.sent += 1;
            if walk.sent > MAX_PAGES {
                return Err(gitlab::api::ApiError::client(Transport::TooManyPages));
            }
        }
        let request = request
            .body(body)
            .map_err(|e| Transport::Http(e.to_string()))
            .and_then(query_for_reads)
            .and_then(|r| reqwest::Request::try_from(r).map_err(|e| Transport::Http(e.to_string())))
            .map_err(gitlab::api::ApiError::client)?;
        let result = self.api.send(request).await;
        let success = result.as_ref().is_ok_and(|r| r.status().is_success());
        self.api
            .calls
            .get_or_create(&CallLabels {
                call: self.name.to_owned(),
                status: if success { "success" } else { "error" }.to_owned(),
            })
            .inc();
        let response = result.map_err(gitlab::api::ApiError::client)?;
        if let Some(next) = response.headers().get("x-next-page") {
            let next = next_page(next.to_str().ok());
            self.walk.lock().unwrap_or_else(|e| e.into_inner()).ended = next.is_none();
        }
        Ok(response)
    }
}

/// The crate sends the parameters of a GET or DELETE (`filter[environment_scope]`) as a form
/// body; they go into the query string instead, where GitLab documents them and where ESO's
/// client sends them (a body on a GET has no defined meaning, and proxies may drop it).
fn query_for_reads(request: http::Request<Vec<u8>>) -> Result<http::Request<Vec<u8>>, Transport> {
    let (mut parts, body) = request.into_parts();
    let form = parts
        .headers
        .get(CONTENT_TYPE)
        .is_some_and(|c| c.as_bytes() == b"application/x-www-form-urlencoded");
    if !matches!(parts.method, Method::GET | Method::DELETE) || !form {
        return Ok(http::Request::from_parts(parts, body));
    }
    parts.headers.remove(CONTENT_TYPE);
    if !body.is_empty() {
        let params = String::from_utf8(body)
            .map_err(|_| Transport::Http("form parameters that are not text".into()))?;
        let separator = if parts.uri.query().is_some() {
            '&'
        } else {
            '?'
        };
        parts.uri = format!("{}{separator}{params}", parts.uri)
            .parse()
            .map_err(|e: http::uri::InvalidUri| Transport::Http(e.to_string()))?;
    }
    Ok(http::Request::from_parts(parts, Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_base_defaults_to_gitlab_com_and_keeps_an_explicit_api_path() {
        assert_eq!(
            api_base(None).unwrap().as_str(),
            "https://gitlab.com/api/v4/"
        );
        assert_eq!(
            api_base(Some("")).unwrap().as_str(),
            "https://gitlab.com/api/v4/"
        );
        assert_eq!(
            api_base(Some("https://gitlab.example.com"))
                .unwrap()
                .as_str(),
            "https://gitlab.example.com/api/v4/"
        );
        assert_eq!(
            api_base(Some("http://gitlab:8080/sub/")).unwrap().as_str(),
            "http://gitlab:8080/sub/api/v4/"
        );
        assert_eq!(
            api_base(Some("https://gitlab.example.com/api/v4/"))
                .unwrap()
                .as_str(),
            "https://gitlab.example.com/api/v4/"
        );
        for bad in ["gitlab.example.com", "ftp://gitlab.example.com", "https://"] {
            let err = api_base(Some(bad)).unwrap_err().to_string();
            assert!(err.contains("url:"), "{bad}: {err}");
        }
    }

    #[test]
    fn pages_follow_x_next_page_until_it_is_empty() {
        assert_eq!(next_page(Some("2")), Some(2));
        assert_eq!(next_page(Some("")), None);
        assert_eq!(next_page(None), None);
        assert_eq!(next_page(Some("x")), None);
    }

    #[test]
    fn a_429_is_retried_as_retry_after_says_a_bounded_number_of_times() {
        assert_eq!(retry_wait(Some("3"), 1), Some(Duration::from_secs(3)));
        assert_eq!(retry_wait(Some("0"), 1), Some(Duration::ZERO));
        assert_eq!(retry_wait(None, 1), Some(Duration::from_secs(1)));
        assert_eq!(retry_wait(None, 2), Some(Duration::from_secs(2)));
        assert_eq!(retry_wait(Some("a date"), 3), Some(Duration::from_secs(4)));
        assert_eq!(retry_wait(Some("1"), MAX_ATTEMPTS), None);
        assert_eq!(retry_wait(Some("3600"), 1), None);
    }

    async fn api() -> GitlabApi {
        let spec = GitlabProvider {
            url: Some("https://gitlab.example.com/".into()),
            ..GitlabProvider::default()
        };
        GitlabApi::connect(
            &spec,
            "glpat-token",
            &provider::StaticCredentials::default(),
            Calls::default(),
        )
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn errors_come_from_gitlabs_message_and_never_quote_what_could_not_be_read() {
        use gitlab::api::ApiError as Crate;
        let api = api().await;
        let place = Place::Project("group/app".into());
        let call = api.call(call::PROJECT_VARIABLE_GET, &place);
        let shown = |e: Crate<Transport>| call.error(e).to_string();
        assert_eq!(
            shown(Crate::GitlabWithStatus {
                status: StatusCode::FORBIDDEN,
                msg: "403 Forbidden".into(),
            }),
            "GitLab answered 403 to ProjectVariableGet on project \"group/app\": 403 Forbidden"
        );
        assert_eq!(
            shown(Crate::GitlabObjectWithStatus {
                status: StatusCode::BAD_REQUEST,
                obj: serde_json::json!({"key": ["(A) has already been taken"]}),
            }),
            r#"GitLab answered 400 to ProjectVariableGet on project "group/app": {"key":["(A) has already been taken"]}"#
        );
        assert_eq!(
            shown(Crate::GitlabService {
                status: StatusCode::BAD_GATEWAY,
                data: b"<html>bad gateway s3cr3t</html>".to_vec(),
            }),
            "GitLab answered 502 to ProjectVariableGet on project \"group/app\""
        );
        let unreadable = serde_json::from_str::<bool>(r#""s3cr3t""#).unwrap_err();
        assert_eq!(
            shown(Crate::DataType {
                source: unreadable,
                typename: "Variable",
            }),
            "ProjectVariableGet on project \"group/app\": unexpected answer (not the JSON expected)"
        );
        let rate_limited = call.error(Crate::client(Transport::RateLimited {
            attempts: 4,
            retry_after: "1".into(),
        }));
        assert_eq!(rate_limited.status(), Some(429));
        assert!(matches!(Error::from(rate_limited), Error::Backend(_)));
        let down = call.error(Crate::client(Transport::Http("connection refused".into())));
        assert!(matches!(Error::from(down), Error::Unavailable(_)));
    }

    #[test]
    fn the_parameters_of_reads_and_deletes_go_into_the_query() {
        let request = |method: Method, body: &str| {
            http::Request::builder()
                .method(method)
                .uri("https://gitlab.example.com/api/v4/projects/group%2Fapp/variables/K")
                .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(body.as_bytes().to_vec())
                .unwrap()
        };
        for method in [Method::GET, Method::DELETE] {
            let moved = query_for_reads(request(
                method.clone(),
                "filter%5Benvironment_scope%5D=review%2F%2A",
            ))
            .unwrap();
            assert_eq!(
                moved.uri(),
                "https://gitlab.example.com/api/v4/projects/group%2Fapp/variables/K?filter%5Benvironment_scope%5D=review%2F%2A"
            );
            assert!(moved.body().is_empty() && moved.headers().get(CONTENT_TYPE).is_none());
            let unfiltered = query_for_reads(request(method, "")).unwrap();
            assert_eq!(
                unfiltered.uri(),
                "https://gitlab.example.com/api/v4/projects/group%2Fapp/variables/K"
            );
            assert!(unfiltered.headers().get(CONTENT_TYPE).is_none());
        }
        // A write keeps its body: the value travels there, never in a URL.
        let put = query_for_reads(request(Method::PUT, "value=s3cr3t")).unwrap();
        assert_eq!(put.body(), b"value=s3cr3t");
        assert_eq!(put.uri().query(), None);
    }

    #[tokio::test]
    async fn a_token_that_is_no_header_value_is_refused_without_being_shown() {
        let spec = GitlabProvider::default();
        let bad = GitlabApi::connect(
            &spec,
            "line\nbreak",
            &provider::StaticCredentials::default(),
            Calls::default(),
        )
        .await;
        let err = bad.err().unwrap().to_string();
        assert!(err.contains("auth.SecretRef.accessToken"), "{err}");
        assert!(!err.contains("line"), "{err}");
    }
}
