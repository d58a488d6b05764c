//! The five variable operations on projects and groups, with GitLab's rules and error bodies.

mod common;

use common::*;
use external_secrets_gitlab_standin::{Variable, VariableType};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn project_path(rest: &str) -> String {
    format!("/projects/{PROJECT_ENC}/variables{rest}")
}

fn group_path(rest: &str) -> String {
    format!("/groups/{GROUP_ENC}/variables{rest}")
}

#[tokio::test]
async fn create_answers_201_with_gitlab_defaults_and_get_reads_it_back() {
    let gitlab = seeded();
    let created = call(
        &gitlab,
        Method::POST,
        &project_path(""),
        Some(MAINTAINER),
        Some(json!({"key": "DB_PASSWORD", "value": "hunter2"})),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let expected = json!({
        "variable_type": "env_var", "key": "DB_PASSWORD", "value": "hunter2", "hidden": false,
        "protected": false, "masked": false, "raw": false, "environment_scope": "*",
        "description": null,
    });
    assert_eq!(created.json(), expected);
    let read = get(&gitlab, &project_path("/DB_PASSWORD"), MAINTAINER).await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.json(), expected);

    // Every field, on a group, as form data (GitLab takes both).
    let form = reqwest::Client::new()
        .post(format!("{}/api/v4{}", gitlab.url(), group_path("")))
        .header("PRIVATE-TOKEN", OWNER)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(
            form_urlencoded::Serializer::new(String::new())
                .extend_pairs([
                    ("key", " CERT "),
                    ("value", "-----BEGIN-----"),
                    ("variable_type", "file"),
                    ("protected", "true"),
                    ("raw", "true"),
                    ("environment_scope", "production"),
                    ("description", "the cert"),
                ])
                .finish(),
        )
        .send()
        .await
        .expect("send");
    assert_eq!(form.status(), StatusCode::CREATED);
    let body: Value = form.json().await.expect("json");
    assert_eq!(body["key"], "CERT", "the key is stripped");
    assert_eq!(body["variable_type"], "file");
    assert_eq!(body["protected"], true);
    assert_eq!(body["raw"], true);
    assert_eq!(body["environment_scope"], "production");
    assert_eq!(body["description"], "the cert");
    let stored = gitlab.group_variables(GROUP).expect("read back");
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].variable_type, VariableType::File);
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn filter_environment_scope_is_an_exact_match_and_ambiguity_is_409() {
    let gitlab = seeded();
    for scope in ["*", "production", "prod*"] {
        gitlab
            .add_project_variable(
                PROJECT,
                Variable::new("TOKEN", format!("v-{scope}")).scope(scope),
            )
            .expect("seed");
        gitlab
            .add_group_variable(
                GROUP,
                Variable::new("TOKEN", format!("g-{scope}")).scope(scope),
            )
            .expect("seed");
    }
    let ambiguous = json!({"message": "There are multiple variables with provided parameters. Please use 'filter[environment_scope]'"});
    for (path, token) in [
        (project_path("/TOKEN"), MAINTAINER),
        (group_path("/TOKEN"), OWNER),
    ] {
        let answer = get(&gitlab, &path, token).await;
        assert_eq!(answer.status, StatusCode::CONFLICT);
        assert_eq!(answer.json(), ambiguous);
        // An empty filter is no filter.
        let empty = get(
            &gitlab,
            &format!("{path}?filter[environment_scope]="),
            token,
        )
        .await;
        assert_eq!(empty.status, StatusCode::CONFLICT);
        let exact = get(
            &gitlab,
            &format!("{path}?filter%5Benvironment_scope%5D=production"),
            token,
        )
        .await;
        assert_eq!(exact.status, StatusCode::OK);
        assert_eq!(exact.json()["environment_scope"], "production");
        // `prod*` is a literal scope, not a glob.
        let literal = get(
            &gitlab,
            &format!("{path}?filter[environment_scope]=prod*"),
            token,
        )
        .await;
        assert_eq!(literal.json()["environment_scope"], "prod*");
        let none = get(
            &gitlab,
            &format!("{path}?filter[environment_scope]=staging"),
            token,
        )
        .await;
        assert_eq!(none.status, StatusCode::NOT_FOUND);
    }
    let missing = get(&gitlab, &project_path("/NOPE"), MAINTAINER).await;
    assert_eq!(missing.json(), json!({"message": "404 Variable Not Found"}));
    let missing = get(&gitlab, &group_path("/NOPE"), OWNER).await;
    assert_eq!(
        missing.json(),
        json!({"message": "404 GroupVariable Not Found"})
    );

    // PUT and DELETE take the filter from the body as well as the query.
    let put = call(
        &gitlab,
        Method::PUT,
        &project_path("/TOKEN"),
        Some(MAINTAINER),
        Some(json!({"value": "new", "filter": {"environment_scope": "production"}})),
    )
    .await;
    assert_eq!(put.status, StatusCode::OK);
    assert_eq!(put.json()["value"], "new");
    let put = call(
        &gitlab,
        Method::PUT,
        &project_path("/TOKEN"),
        Some(MAINTAINER),
        Some(json!({"value": "x"})),
    )
    .await;
    assert_eq!(put.status, StatusCode::CONFLICT);
    let delete = call(
        &gitlab,
        Method::DELETE,
        &group_path("/TOKEN"),
        Some(OWNER),
        Some(json!({"filter": {"environment_scope": "prod*"}})),
    )
    .await;
    assert_eq!(delete.status, StatusCode::NO_CONTENT);
    assert_eq!(delete.text, "");
    let delete = call(
        &gitlab,
        Method::DELETE,
        &project_path("/TOKEN"),
        Some(MAINTAINER),
        None,
    )
    .await;
    assert_eq!(delete.status, StatusCode::CONFLICT);
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn update_changes_fields_but_never_the_key_and_delete_is_204() {
    let gitlab = seeded();
    gitlab
        .add_project_variable(PROJECT, Variable::new("API_KEY", "old").description("d"))
        .expect("seed");
    let put = call(
        &gitlab,
        Method::PUT,
        &project_path("/API_KEY"),
        Some(MAINTAINER),
        Some(json!({"key": "RENAMED", "value": "abcdefgh12", "masked": true, "protected": true, "environment_scope": "staging"})),
    )
    .await;
    assert_eq!(put.status, StatusCode::OK);
    let body = put.json();
    assert_eq!(body["key"], "API_KEY");
    assert_eq!(body["value"], "abcdefgh12");
    assert_eq!(body["masked"], true);
    assert_eq!(body["protected"], true);
    assert_eq!(body["environment_scope"], "staging");
    assert_eq!(body["description"], "d");
    let missing = call(
        &gitlab,
        Method::PUT,
        &project_path("/NOPE"),
        Some(MAINTAINER),
        Some(json!({"value": "x"})),
    )
    .await;
    assert_eq!(missing.json(), json!({"message": "404 Variable Not Found"}));

    let delete = call(
        &gitlab,
        Method::DELETE,
        &project_path("/API_KEY"),
        Some(MAINTAINER),
        None,
    )
    .await;
    assert_eq!(delete.status, StatusCode::NO_CONTENT);
    assert!(delete.text.is_empty());
    assert!(gitlab.project_variables(PROJECT).expect("read").is_empty());
    let again = call(
        &gitlab,
        Method::DELETE,
        &project_path("/API_KEY"),
        Some(MAINTAINER),
        None,
    )
    .await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn group_put_without_filter_updates_one_variable_instead_of_409() {
    let gitlab = seeded();
    gitlab
        .add_group_variable(GROUP, Variable::new("K", "star"))
        .expect("seed");
    gitlab
        .add_group_variable(GROUP, Variable::new("K", "prod").scope("production"))
        .expect("seed");
    let put = call(
        &gitlab,
        Method::PUT,
        &group_path("/K"),
        Some(OWNER),
        Some(json!({"value": "changed"})),
    )
    .await;
    assert_eq!(put.status, StatusCode::OK);
    assert_eq!(put.json()["environment_scope"], "*");
    let missing = call(
        &gitlab,
        Method::PUT,
        &group_path("/NOPE"),
        Some(OWNER),
        Some(json!({"value": "x"})),
    )
    .await;
    assert_eq!(
        missing.json(),
        json!({"message": "404 GroupVariable Not Found"})
    );
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn hidden_variables_never_show_their_value() {
    let gitlab = seeded();
    let created = call(
        &gitlab,
        Method::POST,
        &project_path(""),
        Some(MAINTAINER),
        Some(json!({"key": "HIDDEN", "value": "s3cr3t-value", "masked_and_hidden": true})),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let body = created.json();
    assert_eq!(body["value"], Value::Null);
    assert_eq!(body["hidden"], true);
    assert_eq!(body["masked"], true);
    assert_eq!(
        get(&gitlab, &project_path("/HIDDEN"), MAINTAINER)
            .await
            .json()["value"],
        Value::Null
    );
    assert_eq!(
        get(&gitlab, &project_path(""), MAINTAINER).await.json()[0]["value"],
        Value::Null
    );
    // The update bodies do not take masked_and_hidden: it cannot be turned on later.
    gitlab
        .add_project_variable(PROJECT, Variable::new("PLAIN", "plain-value"))
        .expect("seed");
    let put = call(
        &gitlab,
        Method::PUT,
        &project_path("/PLAIN"),
        Some(MAINTAINER),
        Some(json!({"masked_and_hidden": true})),
    )
    .await;
    assert_eq!(put.json()["hidden"], false);
    // The stand-in keeps the value for assertions.
    assert_eq!(
        gitlab.project_variables(PROJECT).expect("read")[0].value,
        "s3cr3t-value"
    );
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn key_and_masked_value_rules_give_gitlab_400_bodies() {
    let gitlab = seeded();
    let post = |body: Value| {
        let gitlab = &gitlab;
        async move {
            call(
                gitlab,
                Method::POST,
                &project_path(""),
                Some(MAINTAINER),
                Some(body),
            )
            .await
        }
    };
    let bad_key = post(json!({"key": "my-key", "value": "v"})).await;
    assert_eq!(bad_key.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        bad_key.json(),
        json!({"message": {"key": ["can contain only letters, digits and '_'."]}})
    );
    let long_key = post(json!({"key": "K".repeat(256), "value": "v"})).await;
    assert_eq!(
        long_key.json(),
        json!({"message": {"key": ["is too long (maximum is 255 characters)"]}})
    );
    let blank = post(json!({"key": "  ", "value": "v"})).await;
    assert_eq!(
        blank.json(),
        json!({"message": {"key": ["can't be blank", "can contain only letters, digits and '_'."]}})
    );

    for (value, raw) in [
        ("short", false),
        ("has spaces in it", false),
        ("dollar$sign", false),
        ("two\nlines!", true),
    ] {
        let masked = post(json!({"key": "M", "value": value, "masked": true, "raw": raw})).await;
        assert_eq!(masked.status, StatusCode::BAD_REQUEST, "{value:?}");
        assert_eq!(masked.json(), json!({"message": {"value": ["is invalid"]}}));
    }
    let raw_ok =
        post(json!({"key": "M", "value": "dollar$sign", "masked": true, "raw": true})).await;
    assert_eq!(raw_ok.status, StatusCode::CREATED);
    // Masking an existing value that cannot be masked fails the same way.
    gitlab
        .add_project_variable(PROJECT, Variable::new("SHORT", "abc"))
        .expect("seed");
    let put = call(
        &gitlab,
        Method::PUT,
        &project_path("/SHORT"),
        Some(MAINTAINER),
        Some(json!({"masked": true})),
    )
    .await;
    assert_eq!(put.json(), json!({"message": {"value": ["is invalid"]}}));

    let duplicate = post(json!({"key": "M", "value": "other"})).await;
    assert_eq!(duplicate.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        duplicate.json(),
        json!({"message": {"key": ["(M) has already been taken"]}})
    );
    // The same key in another scope is fine.
    let scoped =
        post(json!({"key": "M", "value": "other", "environment_scope": "production"})).await;
    assert_eq!(scoped.status, StatusCode::CREATED);
    let long_description =
        post(json!({"key": "D", "value": "v", "description": "d".repeat(256)})).await;
    assert_eq!(
        long_description.json(),
        json!({"message": {"description": ["is too long (maximum is 255 characters)"]}})
    );
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn parameter_errors_are_grape_400s() {
    let gitlab = seeded();
    let post = |body: Value| {
        let gitlab = &gitlab;
        async move {
            call(
                gitlab,
                Method::POST,
                &group_path(""),
                Some(OWNER),
                Some(body),
            )
            .await
        }
    };
    assert_eq!(
        post(json!({})).await.json(),
        json!({"error": "key is missing, value is missing"})
    );
    assert_eq!(
        post(json!({"key": "K"})).await.json(),
        json!({"error": "value is missing"})
    );
    let bad_type = post(json!({"key": "K", "value": "v", "variable_type": "secret"})).await;
    assert_eq!(bad_type.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        bad_type.json(),
        json!({"error": "variable_type does not have a valid value"})
    );
    let bad_bool = post(json!({"key": "K", "value": "v", "protected": "maybe"})).await;
    assert_eq!(bad_bool.json(), json!({"error": "protected is invalid"}));
    let bad_page = get(&gitlab, &format!("{}?page=abc", group_path("")), OWNER).await;
    assert_eq!(bad_page.json(), json!({"error": "page is invalid"}));
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn group_delete_honours_if_unmodified_since() {
    let gitlab = seeded();
    gitlab
        .add_group_variable(GROUP, Variable::new("K", "v"))
        .expect("seed");
    let old = httpdate_of(std::time::SystemTime::now() - std::time::Duration::from_secs(3600));
    let response = reqwest::Client::new()
        .delete(format!("{}/api/v4{}", gitlab.url(), group_path("/K")))
        .header("PRIVATE-TOKEN", OWNER)
        .header("If-Unmodified-Since", old)
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), StatusCode::PRECONDITION_FAILED);
    assert_eq!(
        response.json::<Value>().await.expect("json"),
        json!({"message": "412 Precondition Failed"})
    );
    let later = httpdate_of(std::time::SystemTime::now() + std::time::Duration::from_secs(3600));
    let response = reqwest::Client::new()
        .delete(format!("{}/api/v4{}", gitlab.url(), group_path("/K")))
        .header("PRIVATE-TOKEN", OWNER)
        .header("If-Unmodified-Since", later)
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    gitlab.assert_no_violations();
}

fn httpdate_of(time: std::time::SystemTime) -> String {
    httpdate::fmt_http_date(time)
}
