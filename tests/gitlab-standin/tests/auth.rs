//! Authentication and access: the token forms, 401 before 404 before 403, and `:id` as a
//! numeric id or a URL-encoded full path.

mod common;

use common::*;
use external_secrets_gitlab_standin::Variable;
use reqwest::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn every_token_form_authenticates() {
    let gitlab = seeded();
    let url = format!("{}/api/v4/projects/{PROJECT_ENC}/variables", gitlab.url());
    let client = reqwest::Client::new();
    let requests = [
        client.get(&url).header("PRIVATE-TOKEN", MAINTAINER),
        client.get(&url).bearer_auth(MAINTAINER),
        client.get(format!("{url}?private_token={MAINTAINER}")),
        client.get(format!("{url}?access_token={MAINTAINER}")),
    ];
    for request in requests {
        let response = request.send().await.expect("send");
        assert_eq!(response.status(), StatusCode::OK);
    }
    let user = get(&gitlab, "/user", MAINTAINER).await;
    assert_eq!(user.status, StatusCode::OK);
    assert_eq!(user.json()["username"], "maintainer");
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn no_or_bad_token_is_401_even_for_what_does_not_exist() {
    let gitlab = seeded();
    for path in [
        format!("/projects/{PROJECT_ENC}/variables"),
        "/projects/no%2Fsuch/variables".to_owned(),
        "/projects/999/variables/KEY".to_owned(),
        "/groups/999/variables".to_owned(),
        "/groups/acme/variables/KEY".to_owned(),
        "/user".to_owned(),
    ] {
        for token in [None, Some("glpat-wrong")] {
            let answer = call(&gitlab, Method::GET, &path, token, None).await;
            assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{path}");
            assert_eq!(answer.json(), json!({"message": "401 Unauthorized"}));
        }
    }
    // Writes too, before their body is looked at.
    let answer = call(
        &gitlab,
        Method::POST,
        "/projects/999/variables",
        None,
        Some(json!({})),
    )
    .await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn unknown_or_unreadable_is_404_before_403() {
    let gitlab = seeded();
    let cases = [
        (
            "/projects/999/variables",
            MAINTAINER,
            "404 Project Not Found",
        ),
        (
            "/projects/acme%2Fnope/variables",
            OWNER,
            "404 Project Not Found",
        ),
        // It exists, but the stranger may not even know that.
        (
            &format!("/projects/{PROJECT_ENC}/variables/K") as &str,
            STRANGER,
            "404 Project Not Found",
        ),
        ("/groups/999/variables", OWNER, "404 Group Not Found"),
        ("/groups/acme/variables/K", STRANGER, "404 Group Not Found"),
    ];
    for (path, token, message) in cases {
        let answer = get(&gitlab, path, token).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(answer.json(), json!({"message": message}), "{path}");
    }
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn too_low_a_role_is_403() {
    let gitlab = seeded();
    gitlab
        .add_group_variable(GROUP, Variable::new("G", "g"))
        .expect("seed");
    // Project variables need Maintainer; group variables need Owner.
    for (path, token) in [
        (format!("/projects/{PROJECT_ENC}/variables"), DEVELOPER),
        (format!("/projects/{PROJECT_ENC}/variables/K"), DEVELOPER),
        (format!("/groups/{GROUP_ENC}/variables"), MAINTAINER),
        (format!("/groups/{GROUP_ENC}/variables/G"), MAINTAINER),
    ] {
        let answer = get(&gitlab, &path, token).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{path}");
        assert_eq!(answer.json(), json!({"message": "403 Forbidden"}));
    }
    let create = call(
        &gitlab,
        Method::POST,
        &format!("/groups/{GROUP_ENC}/variables"),
        Some(MAINTAINER),
        Some(json!({"key": "X", "value": "y"})),
    )
    .await;
    assert_eq!(create.status, StatusCode::FORBIDDEN);
    // The owner of the parent group owns the subgroup by inheritance.
    assert_eq!(
        get(&gitlab, &format!("/groups/{GROUP_ENC}/variables/G"), OWNER)
            .await
            .status,
        StatusCode::OK
    );
    // A developer can still read the project itself.
    assert_eq!(
        get(&gitlab, &format!("/projects/{PROJECT_ENC}"), DEVELOPER)
            .await
            .status,
        StatusCode::OK
    );
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn numeric_ids_and_encoded_paths_are_the_same_thing() {
    let gitlab = seeded();
    gitlab
        .add_project_variable(PROJECT, Variable::new("K", "v"))
        .expect("seed");
    gitlab
        .add_group_variable(GROUP, Variable::new("G", "g"))
        .expect("seed");
    let project = gitlab.project_id(PROJECT).expect("id");
    let group = gitlab.group_id(GROUP).expect("id");
    let by_id = get(
        &gitlab,
        &format!("/projects/{project}/variables/K"),
        MAINTAINER,
    )
    .await;
    let by_path = get(
        &gitlab,
        &format!("/projects/{PROJECT_ENC}/variables/K"),
        MAINTAINER,
    )
    .await;
    let mixed_case = get(
        &gitlab,
        "/projects/ACME%2Fplatform%2Fapp/variables/K",
        MAINTAINER,
    )
    .await;
    assert_eq!(by_id.status, StatusCode::OK);
    assert_eq!(by_id.json(), by_path.json());
    assert_eq!(by_id.json(), mixed_case.json());
    let by_id = get(&gitlab, &format!("/groups/{group}/variables/G"), OWNER).await;
    let by_path = get(&gitlab, &format!("/groups/{GROUP_ENC}/variables/G"), OWNER).await;
    assert_eq!(by_id.status, StatusCode::OK);
    assert_eq!(by_id.json(), by_path.json());
    // An unencoded `/` matches no route at all.
    let raw = get(
        &gitlab,
        "/projects/acme/platform/app/variables/K",
        MAINTAINER,
    )
    .await;
    assert_eq!(raw.status, StatusCode::NOT_FOUND);
    assert_eq!(raw.json(), json!({"error": "404 Not Found"}));

    let project_json = get(&gitlab, &format!("/projects/{project}"), MAINTAINER)
        .await
        .json();
    assert_eq!(project_json["path_with_namespace"], PROJECT);
    assert_eq!(project_json["id"], project);
    gitlab.assert_no_violations();
}
