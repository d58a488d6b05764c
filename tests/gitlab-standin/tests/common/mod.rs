//! A seeded stand-in and a small HTTP helper shared by the test files.
#![allow(dead_code)] // each test file uses a different part

use external_secrets_gitlab_standin::{GitlabStandin, Role};
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::Value;

pub const OWNER: &str = "glpat-owner";
pub const MAINTAINER: &str = "glpat-maintainer";
pub const DEVELOPER: &str = "glpat-developer";
pub const STRANGER: &str = "glpat-stranger";

pub const PROJECT: &str = "acme/platform/app";
pub const PROJECT_ENC: &str = "acme%2Fplatform%2Fapp";
pub const GROUP: &str = "acme/platform";
pub const GROUP_ENC: &str = "acme%2Fplatform";

/// acme ⊃ acme/platform ⊃ acme/platform/app; `owner` owns acme (and so everything in it),
/// `maintainer` maintains the project and the subgroup, `developer` develops the project,
/// `stranger` is a member of nothing.
pub fn seeded() -> GitlabStandin {
    let gitlab = GitlabStandin::start().expect("start the stand-in");
    gitlab.add_group("acme").expect("group");
    gitlab.add_group(GROUP).expect("subgroup");
    gitlab.add_project(PROJECT).expect("project");
    for (user, token) in [
        ("owner", OWNER),
        ("maintainer", MAINTAINER),
        ("developer", DEVELOPER),
        ("stranger", STRANGER),
    ] {
        gitlab.add_user(user, token).expect("user");
    }
    gitlab.grant("owner", "acme", Role::Owner).expect("grant");
    gitlab
        .grant("maintainer", PROJECT, Role::Maintainer)
        .expect("grant");
    gitlab
        .grant("maintainer", GROUP, Role::Maintainer)
        .expect("grant");
    gitlab
        .grant("developer", PROJECT, Role::Developer)
        .expect("grant");
    gitlab
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text))
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("no header {name} in {:?}", self.headers))
    }
}

/// One request to `/api/v4{path}` with `PRIVATE-TOKEN` (if any) and a JSON body (if any).
pub async fn call(
    gitlab: &GitlabStandin,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Answer {
    let mut request =
        reqwest::Client::new().request(method, format!("{}/api/v4{path}", gitlab.url()));
    if let Some(token) = token {
        request = request.header("PRIVATE-TOKEN", token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("send");
    Answer {
        status: response.status(),
        headers: response.headers().clone(),
        text: response.text().await.expect("body"),
    }
}

pub async fn get(gitlab: &GitlabStandin, path: &str, token: &str) -> Answer {
    call(gitlab, Method::GET, path, Some(token), None).await
}
