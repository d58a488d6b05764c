use provider::{ProviderIdentity, StaticCredentials};
use serde_json::json;

use super::*;

fn check(spec: Value) -> Result<SpecReport> {
    Gitlab::default().validate_spec(&spec)
}

fn token() -> Value {
    json!({"SecretRef": {"accessToken": {"name": "gitlab-token", "key": "token"}}})
}

fn request(spec: Value) -> ClientRequest {
    ClientRequest {
        provider: ProviderIdentity {
            kind: "Gitlab".into(),
            namespace: Some("team-a".into()),
            name: "gitlab".into(),
        },
        api_version: "providers.external-secrets.io/v1alpha1".into(),
        spec,
        namespace: "team-a".into(),
    }
}

fn credentials(token: &[u8]) -> Arc<dyn CredentialsReader> {
    let mut c = StaticCredentials::default();
    c.secrets.insert(
        ("team-a".into(), "gitlab-token".into(), "token".into()),
        token.to_vec(),
    );
    Arc::new(c)
}

/// Accepted, as ESO does for local servers, but said: the token travels in clear.
#[test]
fn an_http_url_is_warned_about() {
    let warnings = |url: &str| {
        check(json!({"auth": token(), "projectID": "1", "url": url}))
            .unwrap()
            .warnings
    };
    assert_eq!(
        warnings("http://gitlab.local"),
        ["url uses http://: the access token is sent in clear"]
    );
    assert!(warnings("https://gitlab.local").is_empty());
    assert!(
        check(json!({"auth": token(), "projectID": "1"}))
            .unwrap()
            .warnings
            .is_empty(),
        "the default is gitlab.com over https"
    );
}

#[test]
fn spec_errors_name_their_field() {
    let message = |spec: Value| check(spec).unwrap_err().to_string();
    assert!(message(json!({"auth": token()})).contains("projectID or groupIDs is required"));
    assert!(
        message(json!({"auth": token(), "projectID": ""}))
            .contains("projectID or groupIDs is required")
    );
    assert!(
        message(json!({"auth": token(), "groupIDs": ["1", ""]}))
            .contains("groupIDs[1] must not be empty")
    );
    assert!(
        message(
            json!({"auth": token(), "projectID": "1", "groupIDs": ["2"], "inheritFromGroups": true})
        )
        .contains("groupIDs and inheritFromGroups are exclusive")
    );
    assert!(
        message(json!({"auth": token(), "groupIDs": ["2"], "inheritFromGroups": false, "url": "gitlab.local"}))
            .contains("url:")
    );
    assert!(
        message(json!({"auth": {"SecretRef": {}}, "projectID": "1"}))
            .contains("auth.SecretRef.accessToken is required")
    );
    assert!(
        message(
            json!({"auth": {"SecretRef": {"accessToken": {"key": "token"}}}, "projectID": "1"})
        )
        .contains("auth.SecretRef.accessToken.name is required")
    );
    assert!(
        message(json!({"auth": {"SecretRef": {"accessToken": {"name": "t"}}}, "projectID": "1"}))
            .contains("auth.SecretRef.accessToken.key is required")
    );
    // ESO's spelling only: `secretRef` is not `SecretRef`.
    assert!(
        message(json!({"auth": {"secretRef": {"accessToken": {"name": "t", "key": "k"}}}, "projectID": "1"}))
            .contains("SecretRef")
    );

    assert_eq!(
        check(json!({"auth": token(), "projectID": "group/app", "inheritFromGroups": true}))
            .unwrap(),
        SpecReport::default()
    );
    assert!(
        check(json!({"auth": token(), "groupIDs": ["1", "2"], "environment": "production"}))
            .is_ok()
    );
}

#[test]
fn inheriting_groups_needs_a_project() {
    let err = check(json!({"auth": token(), "inheritFromGroups": true, "groupIDs": []}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("inheritFromGroups needs projectID"), "{err}");
}

#[test]
fn the_provider_reads_and_writes() {
    let gitlab = Gitlab::default();
    assert_eq!(gitlab.capabilities(), Capabilities::ReadWrite);
    assert_eq!(gitlab.descriptor().kind, "Gitlab");
    assert_eq!(gitlab.descriptor().store_key, "gitlab");
    let mut registry = prometheus_client::registry::Registry::default();
    gitlab.register_metrics(&mut registry);
    gitlab
        .calls
        .get_or_create(&CallLabels {
            call: "ProjectVariableGet".into(),
            status: "success".into(),
        })
        .inc();
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(r#"gitlab_api_calls_total{call="ProjectVariableGet",status="success"} 1"#),
        "{text}"
    );
}

#[test]
fn credential_refs_follow_apply_referent() {
    let gitlab = Gitlab::default();
    let spec = json!({"auth": token(), "projectID": "1"});
    let applied = gitlab
        .apply_referent(spec, Caller::SecretStore, "team-a")
        .unwrap();
    assert_eq!(
        gitlab.credential_refs(&applied, "team-a"),
        vec![CredentialRef {
            kind: provider::CredentialKind::Secret,
            namespace: "team-a".into(),
            name: "gitlab-token".into(),
        }]
    );
}

#[test]
fn pushes_go_to_the_project_else_the_first_group_in_the_store_environment() {
    let config = |spec: Value| Config::from_spec(&serde_json::from_value(spec).unwrap());
    let project = config(json!({"auth": token(), "projectID": "1", "groupIDs": ["2"]}));
    assert_eq!(
        project.scope.push_target().unwrap(),
        Place::Project("1".into())
    );
    assert_eq!(project.scope.push_scope(), "*");
    let group =
        config(json!({"auth": token(), "groupIDs": ["2", "3"], "environment": "production"}));
    assert_eq!(group.scope.push_target().unwrap(), Place::Group("2".into()));
    assert_eq!(group.scope.push_scope(), "production");
}

#[tokio::test]
async fn a_client_reads_its_token_through_the_credentials_reader() {
    let gitlab = Gitlab::default();
    let spec = gitlab
        .apply_referent(
            json!({"auth": token(), "projectID": "1", "url": "https://gitlab.example.com"}),
            Caller::SecretStore,
            "team-a",
        )
        .unwrap();
    assert!(
        gitlab
            .new_client(request(spec.clone()), credentials(b"glpat-secret\n"))
            .await
            .is_ok()
    );

    let missing = gitlab
        .new_client(
            request(spec.clone()),
            Arc::new(StaticCredentials::default()),
        )
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(missing.contains("Secret team-a/gitlab-token"), "{missing}");

    let empty = gitlab
        .new_client(request(spec.clone()), credentials(b"  \n"))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        empty.contains("Secret team-a/gitlab-token") && empty.contains("is empty"),
        "{empty}"
    );

    let binary = gitlab
        .new_client(request(spec), credentials(&[0xff, 0x00]))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(binary.contains("not UTF-8"), "{binary}");
}

#[tokio::test]
async fn a_referent_cluster_store_alone_validates_as_unknown() {
    let gitlab = Gitlab::default();
    let spec = gitlab
        .apply_referent(
            json!({"auth": token(), "projectID": "1"}),
            Caller::ClusterSecretStore,
            "",
        )
        .unwrap();
    let client = gitlab
        .new_client(request(spec), Arc::new(StaticCredentials::default()))
        .await
        .unwrap();
    assert_eq!(client.validate().await.unwrap(), Validation::Unknown);
    let err = client
        .get_secret(&RemoteRef {
            key: "k".into(),
            ..RemoteRef::default()
        })
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("referent ClusterSecretStore"), "{err}");
}

#[tokio::test]
async fn unsupported_requests_are_refused_before_any_call() {
    let gitlab = Gitlab::default();
    let spec = gitlab
        .apply_referent(
            json!({"auth": token(), "projectID": "1", "url": "http://127.0.0.1:9"}),
            Caller::SecretStore,
            "team-a",
        )
        .unwrap();
    let client = gitlab
        .new_client(request(spec), credentials(b"glpat-secret"))
        .await
        .unwrap();
    let metadata = client
        .get_secret(&RemoteRef {
            key: "k".into(),
            fetch_metadata: true,
            ..RemoteRef::default()
        })
        .await
        .unwrap_err()
        .to_string();
    assert!(metadata.contains("metadataPolicy Fetch"), "{metadata}");

    let path = client
        .get_all_secrets(&FindRequest {
            path: Some("a".into()),
            name_regexp: Some(".".into()),
            ..FindRequest::default()
        })
        .await
        .unwrap_err()
        .to_string();
    assert!(path.contains("find.path"), "{path}");

    let property = client
        .push_secret(&PushRequest {
            remote: PushRemoteRef {
                remote_key: "k".into(),
                property: Some("p".into()),
            },
            secret_key: Some("k".into()),
            value: b"v".to_vec(),
            metadata: None,
            source: Default::default(),
        })
        .await
        .unwrap_err()
        .to_string();
    assert!(property.contains("remoteRef.property"), "{property}");

    let metadata = client
        .push_secret(&PushRequest {
            remote: PushRemoteRef {
                remote_key: "k".into(),
                property: None,
            },
            secret_key: Some("k".into()),
            value: b"v".to_vec(),
            metadata: Some(json!({"spec": {"maskd": true}})),
            source: Default::default(),
        })
        .await
        .unwrap_err()
        .to_string();
    assert!(metadata.contains("unknown field `maskd`"), "{metadata}");
}

#[test]
fn refusals_say_which_token_and_never_show_it() {
    let token = TokenRef {
        namespace: "team-a".into(),
        name: "gitlab-token".into(),
        key: "token".into(),
    };
    let refused = |status: u16, message: &str| {
        explain(
            ApiError::Status {
                call: "ProjectVariablesList",
                place: Place::Project("1".into()).to_string(),
                status,
                message: message.into(),
            },
            &token,
        )
        .to_string()
    };
    let unauthorized = refused(401, "401 Unauthorized");
    assert!(
        unauthorized.contains("GitLab answered 401 to ProjectVariablesList on project \"1\"")
            && unauthorized.contains("Secret team-a/gitlab-token (key \"token\")"),
        "{unauthorized}"
    );
    assert!(refused(403, "403 Forbidden").contains("Maintainer"));
    assert!(refused(409, "There are multiple variables").contains("spec.environment"));
    assert_eq!(
        refused(500, "boom"),
        "GitLab answered 500 to ProjectVariablesList on project \"1\": boom"
    );
}
