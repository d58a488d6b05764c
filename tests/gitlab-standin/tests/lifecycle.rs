//! Rate limiting, outages (stop and restart on the same port), the request counter, and the
//! OpenAPI check's strict mode.

mod common;

use common::*;
use external_secrets_gitlab_standin::{GitlabStandin, Variable};
use reqwest::StatusCode;

#[tokio::test]
async fn rate_limit_answers_429_with_retry_after_then_recovers() {
    let gitlab = seeded();
    gitlab.set_rate_limit(2);
    let path = format!("/projects/{PROJECT_ENC}/variables");
    for _ in 0..2 {
        let answer = get(&gitlab, &path, MAINTAINER).await;
        assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(answer.header("retry-after"), "1");
        assert_eq!(answer.text, "Retry later\n");
    }
    assert_eq!(get(&gitlab, &path, MAINTAINER).await.status, StatusCode::OK);
    assert_eq!(
        gitlab.request_count("GET", "/api/v4/projects/{id}/variables"),
        3,
        "rate-limited requests are requests too"
    );
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn stop_refuses_connections_and_restart_keeps_port_and_data() {
    let gitlab = seeded();
    gitlab
        .add_project_variable(PROJECT, Variable::new("K", "v"))
        .expect("seed");
    let url = gitlab.url();
    let path = format!("/projects/{PROJECT_ENC}/variables/K");
    assert_eq!(get(&gitlab, &path, MAINTAINER).await.status, StatusCode::OK);
    gitlab.stop();
    assert!(!gitlab.is_running());
    let refused = reqwest::Client::new()
        .get(format!("{url}/api/v4{path}"))
        .header("PRIVATE-TOKEN", MAINTAINER)
        .send()
        .await;
    assert!(refused.is_err(), "a stopped stand-in must not answer");
    gitlab.restart().expect("restart");
    assert_eq!(gitlab.url(), url);
    let answer = get(&gitlab, &path, MAINTAINER).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json()["value"], "v");
    gitlab.assert_no_violations();
}

#[test]
fn works_from_synchronous_code_and_counts_requests_by_route() {
    let gitlab = seeded();
    gitlab
        .add_project_variable(PROJECT, Variable::new("K", "v"))
        .expect("seed");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for _ in 0..3 {
            get(
                &gitlab,
                &format!("/projects/{PROJECT_ENC}/variables/K"),
                MAINTAINER,
            )
            .await;
        }
        get(
            &gitlab,
            &format!("/projects/{PROJECT_ENC}/groups"),
            MAINTAINER,
        )
        .await;
        get(&gitlab, "/nowhere", MAINTAINER).await;
    });
    let requests = gitlab.requests();
    let count = |m: &str, t: &str| {
        requests
            .get(&(m.to_owned(), t.to_owned()))
            .copied()
            .unwrap_or_default()
    };
    assert_eq!(count("GET", "/api/v4/projects/{id}/variables/{key}"), 3);
    assert_eq!(count("GET", "/api/v4/projects/{id}/groups"), 1);
    assert_eq!(count("GET", external_secrets_gitlab_standin::UNMATCHED), 1);
    assert_eq!(gitlab.total_requests(), 5);
    gitlab.reset_requests();
    assert_eq!(gitlab.total_requests(), 0);
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn strict_mode_is_on_and_clean_for_a_normal_session() {
    let gitlab = GitlabStandin::start_strict().expect("start");
    gitlab.add_group("g").expect("group");
    gitlab.add_project("g/p").expect("project");
    gitlab.add_user("u", "t").expect("user");
    gitlab
        .grant("u", "g", external_secrets_gitlab_standin::Role::Owner)
        .expect("grant");
    gitlab
        .add_project_variable("g/p", Variable::new("K", "v").hidden().description("x"))
        .expect_err("a 1-character value cannot be masked");
    gitlab
        .add_project_variable("g/p", Variable::new("K", "long-enough").hidden())
        .expect("seed");
    for path in [
        "/projects/g%2Fp/variables",
        "/projects/g%2Fp/variables/K",
        "/projects/g%2Fp/variables/NO",
        "/groups/g/variables",
        "/projects/g%2Fp/groups",
    ] {
        let answer = get(&gitlab, path, "t").await;
        assert_ne!(
            answer.status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{path}: {}",
            answer.text
        );
    }
    assert!(gitlab.violations().is_empty());
    // Dropping a strict stand-in with no violations does not panic.
}

/// The one response the stand-in is known to get wrong (a path segment that is not UTF-8 gets
/// axum's plain-text 400, see the README) shows the check at work: recorded normally, a 500
/// in strict mode.
#[tokio::test]
async fn violations_are_recorded_and_strict_mode_turns_them_into_500s() {
    let gitlab = seeded();
    let answer = get(&gitlab, "/projects/%FF/variables", MAINTAINER).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    let violations = gitlab.violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert_eq!(violations[0].operation, "/api/v4/projects/{id}/variables");
    gitlab.set_strict(true);
    let answer = get(&gitlab, "/projects/%FF/variables", MAINTAINER).await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        answer.text.contains("stand-in OpenAPI violation"),
        "{}",
        answer.text
    );
    // Leave strict mode, or dropping the stand-in would (rightly) panic.
    gitlab.set_strict(false);
}
