//! Offset pagination: GitLab's headers and Link URLs, on variable lists and ancestor groups.

mod common;

use common::*;
use external_secrets_gitlab_standin::Variable;
use reqwest::StatusCode;
use serde_json::Value;

fn seed(gitlab: &external_secrets_gitlab_standin::GitlabStandin, n: usize) {
    for i in 0..n {
        gitlab
            .add_project_variable(
                PROJECT,
                Variable::new(format!("VAR_{i:03}"), format!("v{i}")),
            )
            .expect("seed");
    }
}

fn keys(body: &Value) -> Vec<String> {
    body.as_array()
        .expect("a list")
        .iter()
        .map(|v| v["key"].as_str().expect("key").to_owned())
        .collect()
}

#[tokio::test]
async fn default_page_is_20_with_all_headers() {
    let gitlab = seeded();
    seed(&gitlab, 45);
    let path = format!("/projects/{PROJECT_ENC}/variables");
    let first = get(&gitlab, &path, MAINTAINER).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(keys(&first.json()).len(), 20);
    assert_eq!(first.header("x-page"), "1");
    assert_eq!(first.header("x-per-page"), "20");
    assert_eq!(first.header("x-next-page"), "2");
    assert_eq!(first.header("x-prev-page"), "");
    assert_eq!(first.header("x-total"), "45");
    assert_eq!(first.header("x-total-pages"), "3");
    let base = format!("{}/api/v4/projects/{PROJECT_ENC}/variables", gitlab.url());
    let id = "id=acme%2Fplatform%2Fapp";
    assert_eq!(
        first.header("link"),
        format!(
            "<{base}?{id}&page=2&per_page=20>; rel=\"next\", <{base}?{id}&page=1&per_page=20>; rel=\"first\", <{base}?{id}&page=3&per_page=20>; rel=\"last\""
        )
    );
    let last = get(&gitlab, &format!("{path}?page=3"), MAINTAINER).await;
    assert_eq!(
        keys(&last.json()),
        (40..45).map(|i| format!("VAR_{i:03}")).collect::<Vec<_>>()
    );
    assert_eq!(last.header("x-next-page"), "");
    assert_eq!(last.header("x-prev-page"), "2");
    assert!(last.header("link").starts_with(&format!(
        "<{base}?{id}&page=2&per_page=20>; rel=\"prev\", <"
    )));
    let beyond = get(&gitlab, &format!("{path}?page=9"), MAINTAINER).await;
    assert_eq!(beyond.json(), Value::Array(vec![]));
    assert_eq!(beyond.header("x-prev-page"), "");
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn per_page_is_capped_at_100_and_links_keep_other_parameters() {
    let gitlab = seeded();
    seed(&gitlab, 150);
    let path = format!("/projects/{PROJECT_ENC}/variables?per_page=500&private_token={MAINTAINER}");
    let answer = call(&gitlab, reqwest::Method::GET, &path, None, None).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(keys(&answer.json()).len(), 100);
    assert_eq!(answer.header("x-per-page"), "100");
    assert_eq!(answer.header("x-total-pages"), "2");
    let link = answer.header("link");
    // Rails' to_query: every parameter, sorted by name, per_page as requested.
    assert!(
        link.contains(&format!("?id=acme%2Fplatform%2Fapp&page=2&per_page=500&private_token={MAINTAINER}>; rel=\"next\"")),
        "{link}"
    );

    // Walking `rel="next"` visits every variable exactly once.
    let mut url = Some(format!(
        "{}/api/v4/projects/{PROJECT_ENC}/variables?per_page=7",
        gitlab.url()
    ));
    let mut seen = Vec::new();
    let client = reqwest::Client::new();
    while let Some(next) = url.take() {
        let response = client
            .get(&next)
            .header("PRIVATE-TOKEN", MAINTAINER)
            .send()
            .await
            .expect("send");
        let link = response.headers()["link"]
            .to_str()
            .expect("ascii")
            .to_owned();
        seen.extend(keys(&response.json::<Value>().await.expect("json")));
        url = link
            .split(", ")
            .find(|l| l.ends_with("rel=\"next\""))
            .map(|l| l[1..l.find('>').expect("<url>")].to_owned());
    }
    assert_eq!(seen.len(), 150);
    seen.dedup();
    assert_eq!(seen.len(), 150);
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn an_empty_list_has_one_page() {
    let gitlab = seeded();
    let answer = get(&gitlab, &format!("/groups/{GROUP_ENC}/variables"), OWNER).await;
    assert_eq!(answer.json(), Value::Array(vec![]));
    assert_eq!(answer.header("x-total"), "0");
    assert_eq!(answer.header("x-total-pages"), "1");
    assert_eq!(answer.header("x-next-page"), "");
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn project_groups_lists_ancestors_and_shared_groups() {
    let gitlab = seeded();
    gitlab.add_group("partners").expect("group");
    gitlab
        .share_project_with_group(PROJECT, "partners")
        .expect("share");
    let path = format!("/projects/{PROJECT_ENC}/groups");
    let answer = get(&gitlab, &path, DEVELOPER).await;
    assert_eq!(answer.status, StatusCode::OK);
    let groups = answer.json();
    let paths: Vec<&str> = groups
        .as_array()
        .expect("list")
        .iter()
        .map(|g| g["full_path"].as_str().expect("path"))
        .collect();
    assert_eq!(paths, ["acme", "acme/platform"]);
    assert_eq!(groups[1]["full_name"], "acme / platform");
    assert_eq!(groups[1]["name"], "platform");
    assert_eq!(
        groups[1]["web_url"],
        format!("{}/groups/acme/platform", gitlab.url())
    );
    assert_eq!(answer.header("x-total"), "2");
    assert!(answer.header("link").contains("with_shared=false"));
    let shared = get(&gitlab, &format!("{path}?with_shared=true"), DEVELOPER)
        .await
        .json();
    assert_eq!(shared.as_array().expect("list").len(), 3);
    let stranger = get(&gitlab, &path, STRANGER).await;
    assert_eq!(stranger.status, StatusCode::NOT_FOUND);
    gitlab.assert_no_violations();
}
