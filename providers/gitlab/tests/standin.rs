//! The provider's HTTP side against the GitLab stand-in (`tests/gitlab-standin`, checked against
//! GitLab's OpenAPI document and python-gitlab): what the e2e suite cannot see from the cluster.
//! Pages followed as `X-Next-Page` says, 429s waited out as `Retry-After` says, every call
//! counted by its ESO name, and refusals that name the variable but never carry a value.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use external_secrets_provider_gitlab::Gitlab;
use gitlab_standin::{GitlabStandin, Role, Variable};
use provider::{
    Caller, ClientRequest, FindRequest, ProviderIdentity, ProviderRuntime, ProviderSchema,
    PushRemoteRef, PushRequest, RemoteRef, SecretsClient, StaticCredentials, Validation,
};
use serde_json::{Value, json};

const PROJECT: &str = "acme/platform/app";
const TOKEN: &str = "glpat-provider-test";
const LIST: &str = "/api/v4/projects/{id}/variables";

fn standin() -> GitlabStandin {
    let gitlab = GitlabStandin::start_strict().expect("the stand-in starts");
    gitlab.add_group("acme").unwrap();
    gitlab.add_group("acme/platform").unwrap();
    gitlab.add_project(PROJECT).unwrap();
    gitlab.add_user("ci", TOKEN).unwrap();
    gitlab.grant("ci", "acme", Role::Owner).unwrap();
    gitlab.grant("ci", PROJECT, Role::Maintainer).unwrap();
    gitlab
}

/// A client of `provider` for a SecretStore in `team-a` reading `PROJECT` with `extra` fields.
async fn client(provider: &Gitlab, gitlab: &GitlabStandin, extra: Value) -> Box<dyn SecretsClient> {
    let mut spec = json!({
        "url": gitlab.url(),
        "projectID": PROJECT,
        "auth": {"SecretRef": {"accessToken": {"name": "gitlab-token", "key": "token"}}},
    });
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    let spec = provider
        .apply_referent(spec, Caller::SecretStore, "team-a")
        .unwrap();
    let mut credentials = StaticCredentials::default();
    credentials.secrets.insert(
        ("team-a".into(), "gitlab-token".into(), "token".into()),
        TOKEN.as_bytes().to_vec(),
    );
    provider
        .new_client(
            ClientRequest {
                provider: ProviderIdentity {
                    kind: "Gitlab".into(),
                    namespace: Some("team-a".into()),
                    name: "gitlab".into(),
                },
                api_version: "providers.external-secrets.io/v1alpha1".into(),
                spec,
                namespace: "team-a".into(),
            },
            Arc::new(credentials),
        )
        .await
        .expect("a client")
}

fn remote(key: &str) -> RemoteRef {
    RemoteRef {
        key: key.into(),
        ..RemoteRef::default()
    }
}

fn find_all() -> FindRequest {
    FindRequest {
        name_regexp: Some(".".into()),
        ..FindRequest::default()
    }
}

fn push(key: &str, value: &str, metadata: Option<Value>) -> PushRequest {
    PushRequest {
        remote: PushRemoteRef {
            remote_key: key.into(),
            property: None,
        },
        secret_key: Some("k".into()),
        value: value.as_bytes().to_vec(),
        metadata,
        source: Default::default(),
    }
}

/// `gitlab_api_calls_total` as the operator's /metrics shows it: `{(call, status): count}`.
fn calls(provider: &Gitlab) -> BTreeMap<(String, String), u64> {
    let mut registry = prometheus_client::registry::Registry::default();
    provider.register_metrics(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("gitlab_api_calls_total{call=\""))
        .map(|rest| {
            let (call, rest) = rest.split_once("\",status=\"").unwrap();
            let (status, count) = rest.split_once("\"} ").unwrap();
            ((call.to_owned(), status.to_owned()), count.parse().unwrap())
        })
        .collect()
}

fn counted(entries: &[(&str, &str, u64)]) -> BTreeMap<(String, String), u64> {
    entries
        .iter()
        .map(|(call, status, n)| (((*call).to_owned(), (*status).to_owned()), *n))
        .collect()
}

fn seed(gitlab: &GitlabStandin, n: usize) {
    for i in 0..n {
        gitlab
            .add_project_variable(
                PROJECT,
                Variable::new(format!("VAR_{i:03}"), format!("v{i}")),
            )
            .unwrap();
    }
}

#[tokio::test]
async fn lists_follow_x_next_page_and_stop_where_it_ends() {
    let gitlab = standin();
    seed(&gitlab, 230);
    let provider = Gitlab::default();
    let client = client(&provider, &gitlab, json!({})).await;

    let found = client.get_all_secrets(&find_all()).await.unwrap();
    assert_eq!(found.len(), 230);
    assert_eq!(found["VAR_229"], b"v229");
    assert_eq!(
        gitlab.request_count("GET", LIST),
        3,
        "pages of 100, 100, 30"
    );

    // Exactly two full pages: GitLab's empty `X-Next-Page` on the second ends the walk, with
    // no request for an empty third page.
    let gitlab = standin();
    seed(&gitlab, 200);
    let client = self::client(&provider, &gitlab, json!({})).await;
    assert_eq!(
        client.get_all_secrets(&find_all()).await.unwrap().len(),
        200
    );
    assert_eq!(gitlab.request_count("GET", LIST), 2);

    // Validation needs one page only.
    gitlab.reset_requests();
    assert_eq!(client.validate().await.unwrap(), Validation::Ready);
    assert_eq!(gitlab.request_count("GET", LIST), 1);
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn a_429_is_waited_out_as_retry_after_says_then_given_up() {
    let gitlab = standin();
    gitlab
        .add_project_variable(PROJECT, Variable::new("DB_PASSWORD", "hunter22"))
        .unwrap();
    let provider = Gitlab::default();
    let client = client(&provider, &gitlab, json!({})).await;

    gitlab.set_rate_limit(2);
    let started = Instant::now();
    assert_eq!(
        client.get_secret(&remote("DB_PASSWORD")).await.unwrap(),
        b"hunter22"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "Retry-After: 1, twice: {:?}",
        started.elapsed()
    );
    assert_eq!(
        gitlab.request_count("GET", "/api/v4/projects/{id}/variables/{key}"),
        3
    );
    // One call, however many tries it took.
    assert_eq!(
        calls(&provider),
        counted(&[("ProjectVariableGet", "success", 1)])
    );

    gitlab.set_rate_limit(100);
    let err = client
        .get_secret(&remote("DB_PASSWORD"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("GitLab answered 429 to ProjectVariableGet on project \"acme/platform/app\"")
            && err.contains("rate limited after 4 tries (Retry-After: 1)"),
        "{err}"
    );
    assert_eq!(
        calls(&provider),
        counted(&[
            ("ProjectVariableGet", "error", 1),
            ("ProjectVariableGet", "success", 1),
        ])
    );
    gitlab.set_rate_limit(0);
}

#[tokio::test]
async fn every_call_is_counted_by_its_eso_name() {
    let gitlab = standin();
    gitlab
        .add_group_variable("acme", Variable::new("ROOT_ONLY", "from-acme"))
        .unwrap();
    gitlab
        .add_project_variable(
            PROJECT,
            Variable::new("APP", "from-app").scope("production"),
        )
        .unwrap();
    let provider = Gitlab::default();
    let inherit = client(
        &provider,
        &gitlab,
        json!({"inheritFromGroups": true, "environment": "production"}),
    )
    .await;
    assert_eq!(
        inherit.get_secret(&remote("APP")).await.unwrap(),
        b"from-app"
    );
    // Not in the project (environment, then `*`), so the ancestors are listed and asked,
    // nearest first.
    assert_eq!(
        inherit.get_secret(&remote("ROOT_ONLY")).await.unwrap(),
        b"from-acme"
    );
    assert_eq!(inherit.get_all_secrets(&find_all()).await.unwrap().len(), 2);

    let project = client(&provider, &gitlab, json!({})).await;
    project
        .push_secret(&push("NEW-KEY", "pushed-value", None))
        .await
        .unwrap();
    project
        .push_secret(&push("NEW-KEY", "changed-value", None))
        .await
        .unwrap();
    assert!(
        project
            .secret_exists(&push("NEW_KEY", "", None).remote)
            .await
            .unwrap()
    );
    project
        .delete_secret(&push("NEW-KEY", "", None).remote)
        .await
        .unwrap();
    assert!(
        gitlab
            .project_variables(PROJECT)
            .unwrap()
            .iter()
            .all(|v| v.key != "NEW_KEY")
    );

    let group = client(
        &provider,
        &gitlab,
        json!({"projectID": null, "groupIDs": ["acme"]}),
    )
    .await;
    group
        .push_secret(&push("GROUP_KEY", "group-value", None))
        .await
        .unwrap();
    group
        .push_secret(&push("GROUP_KEY", "group-value-2", None))
        .await
        .unwrap();
    assert_eq!(
        group.get_secret(&remote("GROUP_KEY")).await.unwrap(),
        b"group-value-2"
    );
    group
        .delete_secret(&push("GROUP_KEY", "", None).remote)
        .await
        .unwrap();

    // A 404 counts as an error, as in ESO.
    assert_eq!(
        calls(&provider),
        counted(&[
            // ROOT_ONLY: acme/platform (production, `*`) and acme (production) miss; the
            // group push's first read misses.
            ("GroupVariableGet", "error", 4),
            // ROOT_ONLY in acme (`*`); the second push's, the read-back's and the delete's
            // reads.
            ("GroupVariableGet", "success", 4),
            ("GroupVariableCreate", "success", 1),
            ("GroupVariableUpdate", "success", 1),
            ("GroupVariableDelete", "success", 1),
            // `find`: both ancestors.
            ("GroupVariablesList", "success", 2),
            // ROOT_ONLY and `find` resolve the ancestors.
            ("ListProjectsGroups", "success", 2),
            // ROOT_ONLY (production, `*`) and the first push miss.
            ("ProjectVariableGet", "error", 3),
            // APP; the second push's, secret_exists' and the delete's reads.
            ("ProjectVariableGet", "success", 4),
            ("ProjectVariableCreate", "success", 1),
            ("ProjectVariableUpdate", "success", 1),
            ("ProjectVariableDelete", "success", 1),
            ("ProjectVariablesList", "success", 1),
        ])
    );
    gitlab.assert_no_violations();
}

#[tokio::test]
async fn refusals_name_the_variable_and_never_carry_a_value() {
    let gitlab = standin();
    gitlab
        .add_project_variable(PROJECT, Variable::new("TWICE", "value-any"))
        .unwrap();
    gitlab
        .add_project_variable(
            PROJECT,
            Variable::new("TWICE", "value-prod").scope("production"),
        )
        .unwrap();
    let provider = Gitlab::default();
    let client = client(&provider, &gitlab, json!({})).await;

    let ambiguous = client
        .get_secret(&remote("TWICE"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        ambiguous.contains("GitLab answered 409 to ProjectVariableGet")
            && ambiguous.contains("set spec.environment"),
        "{ambiguous}"
    );
    assert!(!ambiguous.contains("value-"), "{ambiguous}");

    // GitLab refuses to mask a value with spaces: its message names the field, not the value.
    let masked = json!({
        "apiVersion": "gitlab.external-secrets.io/v1alpha1",
        "kind": "PushSecretMetadata",
        "spec": {"masked": true},
    });
    let refused = client
        .push_secret(&push("MASKED", "not maskable s3cr3t", Some(masked)))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("GitLab answered 400 to ProjectVariableCreate")
            && refused.contains("is invalid"),
        "{refused}"
    );
    assert!(!refused.contains("s3cr3t"), "{refused}");

    let missing = client.get_secret(&remote("MISSING")).await.unwrap_err();
    assert!(matches!(missing, provider::Error::NoSecret), "{missing}");

    gitlab.stop();
    let down = client.get_secret(&remote("TWICE")).await.unwrap_err();
    assert!(matches!(down, provider::Error::Unavailable(_)), "{down}");
    assert!(
        down.to_string()
            .contains("ProjectVariableGet on project \"acme/platform/app\""),
        "{down}"
    );
    gitlab.restart().unwrap();
    gitlab.assert_no_violations();
}
