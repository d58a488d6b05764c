//! The GitLab REST API v4, only the calls this provider makes, as small typed functions over one
//! `reqwest::Client` per provider client. Every call is counted by its ESO call name, follows
//! `X-Next-Page` when listing, and waits out a 429 as `Retry-After` says, a bounded number of
//! times. Errors name the call and the project or group, never a value or the token.

use std::time::Duration;

use api::providers::gitlab::GitlabProvider;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use provider::{CredentialsReader, Error, Result};
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::push::VariableWrite;
use crate::variables::{Place, ProjectGroup, Variable};

/// gitlab.com, when `url` is unset.
pub(crate) const DEFAULT_URL: &str = "https://gitlab.com/";
/// GitLab's largest page.
const PER_PAGE: &str = "100";
/// A listing longer than this many pages is refused rather than followed forever.
const MAX_PAGES: u32 = 1000;
/// Tries of one request when GitLab answers 429.
const MAX_ATTEMPTS: u32 = 4;
/// The longest `Retry-After` waited for; a longer one fails the call instead of holding a worker.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);

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

/// GitLab's `{"message": ...}` (a string or a hash of field errors) or Grape's `{"error": ...}`,
/// shortened. GitLab does not echo variable values in these.
pub(crate) fn error_message(body: &str) -> String {
    let text = match serde_json::from_str::<Value>(body) {
        Ok(Value::Object(map)) => match map.get("message").or_else(|| map.get("error")) {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        },
        _ => String::new(),
    };
    text.chars().take(300).collect()
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

    /// `base` + the path segments, each percent-encoded (a project path's `/` becomes `%2F`).
    fn url(&self, segments: &[&str], query: &[(&str, &str)]) -> Url {
        let mut url = self.base.clone();
        {
            let mut path = url.path_segments_mut().expect("an http(s) URL has a path");
            path.pop_if_empty();
            path.extend(segments);
        }
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        url
    }

    fn count(&self, call: &'static str, ok: bool) {
        self.calls
            .get_or_create(&CallLabels {
                call: call.to_owned(),
                status: if ok { "success" } else { "error" }.to_owned(),
            })
            .inc();
    }

    /// One request, tried again after a 429. Answers other than 2xx are errors.
    async fn send(
        &self,
        call: &'static str,
        place: &Place,
        method: Method,
        url: Url,
        body: Option<&VariableWrite>,
    ) -> Result<reqwest::Response, ApiError> {
        let transport = |e: reqwest::Error| ApiError::Transport {
            call,
            place: place.to_string(),
            // Without the URL: it holds the key, which is fine, but keep messages short.
            reason: e.without_url().to_string(),
        };
        let mut attempt = 1;
        let result = loop {
            let mut request = self.http.request(method.clone(), url.clone());
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = match request.send().await {
                Ok(r) => r,
                Err(e) => break Err(transport(e)),
            };
            let status = response.status();
            if status == StatusCode::TOO_MANY_REQUESTS {
                let retry_after = response
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                if let Some(wait) = retry_wait(retry_after.as_deref(), attempt) {
                    tracing::debug!(call, %place, ?wait, "GitLab rate limit, waiting");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                    continue;
                }
                break Err(ApiError::Status {
                    call,
                    place: place.to_string(),
                    status: 429,
                    message: format!(
                        "rate limited after {attempt} tries (Retry-After: {})",
                        retry_after.as_deref().unwrap_or("unset")
                    ),
                });
            }
            if status.is_success() {
                break Ok(response);
            }
            let body = response.text().await.unwrap_or_default();
            break Err(ApiError::Status {
                call,
                place: place.to_string(),
                status: status.as_u16(),
                message: error_message(&body),
            });
        };
        self.count(call, result.is_ok());
        result
    }

    async fn json<T: DeserializeOwned>(
        call: &'static str,
        place: &Place,
        response: reqwest::Response,
    ) -> Result<T, ApiError> {
        let bytes = response.bytes().await.map_err(|e| ApiError::Transport {
            call,
            place: place.to_string(),
            reason: e.without_url().to_string(),
        })?;
        // serde_json's message could quote the body (a value): name only the position.
        serde_json::from_slice(&bytes).map_err(|e| ApiError::Transport {
            call,
            place: place.to_string(),
            reason: format!(
                "unexpected answer (not the JSON expected at line {} column {})",
                e.line(),
                e.column()
            ),
        })
    }

    fn collection(place: &Place) -> (&'static str, &str) {
        match place {
            Place::Project(id) => ("projects", id),
            Place::Group(id) => ("groups", id),
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
        let call = match place {
            Place::Project(_) => call::PROJECT_VARIABLE_GET,
            Place::Group(_) => call::GROUP_VARIABLE_GET,
        };
        let (collection, id) = Self::collection(place);
        let query: Vec<(&str, &str)> = scope
            .map(|s| ("filter[environment_scope]", s))
            .into_iter()
            .collect();
        let url = self.url(&[collection, id, "variables", key], &query);
        match self.send(call, place, Method::GET, url, None).await {
            Ok(response) => Self::json(call, place, response).await.map(Some),
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
        let call = match place {
            Place::Project(_) => call::PROJECT_VARIABLES_LIST,
            Place::Group(_) => call::GROUP_VARIABLES_LIST,
        };
        let (collection, id) = Self::collection(place);
        self.list(call, place, &[collection, id, "variables"], first_page_only)
            .await
    }

    /// `GET /projects/:id/groups`: the project's ancestor groups.
    pub(crate) async fn list_project_groups(
        &self,
        project: &str,
    ) -> Result<Vec<ProjectGroup>, ApiError> {
        let place = Place::Project(project.to_owned());
        self.list(
            call::LIST_PROJECTS_GROUPS,
            &place,
            &["projects", project, "groups"],
            false,
        )
        .await
    }

    async fn list<T: DeserializeOwned>(
        &self,
        call: &'static str,
        place: &Place,
        segments: &[&str],
        first_page_only: bool,
    ) -> Result<Vec<T>, ApiError> {
        let mut all = Vec::new();
        let mut page = 1u32;
        loop {
            let page_text = page.to_string();
            let url = self.url(
                segments,
                &[("per_page", PER_PAGE), ("page", page_text.as_str())],
            );
            let response = self.send(call, place, Method::GET, url, None).await?;
            let next = next_page(
                response
                    .headers()
                    .get("x-next-page")
                    .and_then(|v| v.to_str().ok()),
            );
            let items: Vec<T> = Self::json(call, place, response).await?;
            all.extend(items);
            match next {
                Some(n) if !first_page_only && n > page && n <= MAX_PAGES => page = n,
                Some(n) if !first_page_only && n > MAX_PAGES => {
                    return Err(ApiError::Transport {
                        call,
                        place: place.to_string(),
                        reason: format!("more than {MAX_PAGES} pages of 100"),
                    });
                }
                _ => return Ok(all),
            }
        }
    }

    /// `POST /{projects,groups}/:id/variables`.
    pub(crate) async fn create_variable(
        &self,
        place: &Place,
        body: &VariableWrite,
    ) -> Result<(), ApiError> {
        let call = match place {
            Place::Project(_) => call::PROJECT_VARIABLE_CREATE,
            Place::Group(_) => call::GROUP_VARIABLE_CREATE,
        };
        let (collection, id) = Self::collection(place);
        let url = self.url(&[collection, id, "variables"], &[]);
        self.send(call, place, Method::POST, url, Some(body))
            .await
            .map(drop)
    }

    /// `PUT /{projects,groups}/:id/variables/:key?filter[environment_scope]=...`: the variable of
    /// that exact scope.
    pub(crate) async fn update_variable(
        &self,
        place: &Place,
        body: &VariableWrite,
    ) -> Result<(), ApiError> {
        let call = match place {
            Place::Project(_) => call::PROJECT_VARIABLE_UPDATE,
            Place::Group(_) => call::GROUP_VARIABLE_UPDATE,
        };
        let (collection, id) = Self::collection(place);
        let url = self.url(
            &[collection, id, "variables", &body.key],
            &[("filter[environment_scope]", &body.environment_scope)],
        );
        self.send(call, place, Method::PUT, url, Some(body))
            .await
            .map(drop)
    }

    /// `DELETE /{projects,groups}/:id/variables/:key?filter[environment_scope]=...`; a 404 is
    /// not an error (gone already).
    pub(crate) async fn delete_variable(
        &self,
        place: &Place,
        key: &str,
        scope: &str,
    ) -> Result<(), ApiError> {
        let call = match place {
            Place::Project(_) => call::PROJECT_VARIABLE_DELETE,
            Place::Group(_) => call::GROUP_VARIABLE_DELETE,
        };
        let (collection, id) = Self::collection(place);
        let url = self.url(
            &[collection, id, "variables", key],
            &[("filter[environment_scope]", scope)],
        );
        match self.send(call, place, Method::DELETE, url, None).await {
            Ok(_) => Ok(()),
            Err(e) if e.status() == Some(404) => Ok(()),
            Err(e) => Err(e),
        }
    }
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

    #[test]
    fn error_messages_come_from_gitlabs_body() {
        assert_eq!(
            error_message(r#"{"message":"404 Variable Not Found"}"#),
            "404 Variable Not Found"
        );
        assert_eq!(
            error_message(r#"{"message":{"key":["(A) has already been taken"]}}"#),
            r#"{"key":["(A) has already been taken"]}"#
        );
        assert_eq!(
            error_message(r#"{"error":"variable_type does not have a valid value"}"#),
            "variable_type does not have a valid value"
        );
        assert_eq!(error_message("<html>bad gateway</html>"), "");
        let e = ApiError::Status {
            call: call::PROJECT_VARIABLE_GET,
            place: Place::Project("group/app".into()).to_string(),
            status: 403,
            message: "403 Forbidden".into(),
        };
        assert_eq!(
            e.to_string(),
            "GitLab answered 403 to ProjectVariableGet on project \"group/app\": 403 Forbidden"
        );
    }

    #[tokio::test]
    async fn paths_are_percent_encoded_segments() {
        let spec = GitlabProvider {
            url: Some("https://gitlab.example.com/".into()),
            ..GitlabProvider::default()
        };
        let api = GitlabApi::connect(
            &spec,
            "glpat-token",
            &provider::StaticCredentials::default(),
            Calls::default(),
        )
        .await
        .unwrap();
        assert_eq!(
            api.url(
                &["projects", "group/sub/app", "variables", "DB_PASSWORD"],
                &[("filter[environment_scope]", "review/*")]
            )
            .as_str(),
            "https://gitlab.example.com/api/v4/projects/group%2Fsub%2Fapp/variables/DB_PASSWORD?filter%5Benvironment_scope%5D=review%2F*"
        );
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
