use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use provider::{PushSource, StaticCredentials};
use serde_json::json;

use super::*;
use crate::metadata::PushMetadata;

fn secret(data: &[(&str, &str)], labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Secret {
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    Secret {
        metadata: ObjectMeta {
            name: Some("db".into()),
            labels: Some(map(labels)),
            annotations: Some(map(annotations)),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Secret::default()
    }
}

fn remote(property: Option<&str>, fetch_metadata: bool) -> RemoteRef {
    RemoteRef {
        key: "db".into(),
        property: property.map(Into::into),
        version: None,
        fetch_metadata,
    }
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap()
}

#[test]
fn a_property_is_a_data_key_first_then_a_json_path_into_one() {
    let s = secret(
        &[
            ("username", "admin"),
            ("file.png", "bytes"),
            ("config", r#"{"db":{"host":"h","port":5432}}"#),
        ],
        &[],
        &[],
    );
    let get = |p: &str| secrets::value(&s, &remote(Some(p), false));
    assert_eq!(text(get("username").unwrap()), "admin");
    assert_eq!(text(get("file.png").unwrap()), "bytes");
    assert_eq!(text(get("config.db.host").unwrap()), "h");
    assert_eq!(text(get("config.db.port").unwrap()), "5432");
    assert_eq!(
        text(get("config.db").unwrap()),
        r#"{"host":"h","port":5432}"#
    );
    for missing in ["password", "config.db.user", "username.x", ".x", "x."] {
        assert!(matches!(get(missing), Err(Error::NoSecret)), "{missing}");
    }
    let whole: serde_json::Value =
        serde_json::from_slice(&secrets::value(&s, &remote(None, false)).unwrap()).unwrap();
    assert_eq!(
        whole,
        json!({"username": "admin", "file.png": "bytes", "config": r#"{"db":{"host":"h","port":5432}}"#})
    );
}

#[test]
fn fetched_metadata_is_labels_and_annotations() {
    let s = secret(
        &[("k", "v")],
        &[("dev", "alice"), ("team", "db")],
        &[("config", r#"{"a":{"b":"deep"}}"#)],
    );
    let get = |p: Option<&str>| secrets::value(&s, &remote(p, true));
    let all: serde_json::Value = serde_json::from_slice(&get(None).unwrap()).unwrap();
    assert_eq!(
        all,
        json!({"labels": {"dev": "alice", "team": "db"}, "annotations": {"config": r#"{"a":{"b":"deep"}}"#}})
    );
    assert_eq!(
        text(get(Some("labels")).unwrap()),
        r#"{"dev":"alice","team":"db"}"#
    );
    assert_eq!(text(get(Some("labels.dev")).unwrap()), "alice");
    assert_eq!(text(get(Some("annotations.config.a.b")).unwrap()), "deep");
    assert!(matches!(get(Some("labels.nobody")), Err(Error::NoSecret)));
    assert!(matches!(get(Some("data")), Err(Error::NoSecret)));

    let map = secrets::map(&s, &remote(None, true)).unwrap();
    assert_eq!(
        text(map["labels"].clone()),
        r#"{"dev":"alice","team":"db"}"#
    );
    let labels = secrets::map(&s, &remote(Some("labels"), true)).unwrap();
    assert_eq!(text(labels["dev"].clone()), "alice");
}

#[test]
fn a_map_is_the_data_or_the_object_a_property_selects() {
    let s = secret(
        &[("a", "1"), ("json", r#"{"x":"y","n":2,"o":{"p":true}}"#)],
        &[],
        &[],
    );
    let all = secrets::map(&s, &remote(None, false)).unwrap();
    assert_eq!(all.keys().collect::<Vec<_>>(), ["a", "json"]);
    let inner = secrets::map(&s, &remote(Some("json"), false)).unwrap();
    assert_eq!(text(inner["x"].clone()), "y");
    assert_eq!(text(inner["n"].clone()), "2");
    assert_eq!(text(inner["o"].clone()), r#"{"p":true}"#);
    let err = secrets::map(&s, &remote(Some("a"), false)).unwrap_err();
    assert!(err.to_string().contains("not a JSON object"), "{err}");
}

#[test]
fn find_keeps_names_matching_the_regexp_and_carrying_every_tag() {
    let named = |name: &str, labels: &[(&str, &str)]| {
        let mut s = secret(&[("k", name)], labels, &[]);
        s.metadata.name = Some(name.into());
        s
    };
    let listed = [
        named("tls-a", &[("app", "nginx")]),
        named("tls-b", &[("app", "shop")]),
        named("db", &[("app", "nginx")]),
    ];
    let find = |regexp: Option<&str>, tags: &[(&str, &str)]| {
        let request = FindRequest {
            path: None,
            name_regexp: regexp.map(Into::into),
            tags: tags
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        secrets::found(&listed, &request)
            .unwrap()
            .into_keys()
            .collect::<Vec<_>>()
    };
    assert_eq!(find(Some("^tls-"), &[]), ["tls-a", "tls-b"]);
    assert_eq!(find(None, &[("app", "nginx")]), ["db", "tls-a"]);
    assert_eq!(find(Some("tls-.*"), &[("app", "nginx")]), ["tls-a"]);
    assert_eq!(find(None, &[]).len(), 3);
    let values = secrets::found(&listed, &FindRequest::default()).unwrap();
    assert_eq!(text(values["db"].clone()), r#"{"k":"db"}"#);
    assert_eq!(
        secrets::label_selector(&[("a".into(), "1".into()), ("b".into(), "2".into())].into()),
        "a=1,b=2"
    );
    let bad = FindRequest {
        name_regexp: Some("(".into()),
        ..FindRequest::default()
    };
    assert!(
        secrets::found(&listed, &bad)
            .unwrap_err()
            .to_string()
            .contains("find.name.regexp")
    );
}

fn push(property: Option<&str>, secret_key: Option<&str>, value: &[u8]) -> PushRequest {
    PushRequest {
        remote: PushRemoteRef {
            remote_key: "remote".into(),
            property: property.map(Into::into),
        },
        secret_key: secret_key.map(Into::into),
        value: value.to_vec(),
        metadata: None,
        source: PushSource {
            type_: Some("kubernetes.io/basic-auth".into()),
            labels: [("app".into(), "shop".into())].into(),
            annotations: [("owner".into(), "team-a".into())].into(),
        },
    }
}

fn data_of(s: &Secret) -> BTreeMap<String, String> {
    s.data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
        .collect()
}

#[test]
fn a_pushed_property_joins_the_keys_already_there() {
    let existing = secret(
        &[("keep", "1"), ("password", "old")],
        &[("remote", "yes")],
        &[],
    );
    let desired = secrets::desired(
        Some(&existing),
        "shared",
        &push(Some("password"), Some("pw"), b"new"),
        None,
    )
    .unwrap();
    assert_eq!(
        data_of(&desired),
        BTreeMap::from([
            ("keep".into(), "1".into()),
            ("password".into(), "new".into())
        ])
    );
    assert_eq!(desired.metadata.namespace.as_deref(), Some("shared"));
    assert_eq!(desired.metadata.name.as_deref(), Some("remote"));
    assert_eq!(desired.type_.as_deref(), Some("kubernetes.io/basic-auth"));
    // The source's labels join the remote Secret's own (targetMergePolicy Merge by default).
    let labels = desired.metadata.labels.clone().unwrap();
    assert_eq!(labels.get("remote").map(String::as_str), Some("yes"));
    assert_eq!(labels.get("app").map(String::as_str), Some("shop"));
    assert!(!secrets::unchanged(&existing, &desired));
    let mut again = existing.clone();
    again.data = desired.data.clone();
    again.type_ = desired.type_.clone();
    again.metadata.labels = desired.metadata.labels.clone();
    again.metadata.annotations = desired.metadata.annotations.clone();
    assert!(secrets::unchanged(&again, &desired));
}

#[test]
fn a_whole_secret_replaces_the_data_and_a_property_can_hold_it_as_json() {
    let existing = secret(&[("stale", "x")], &[], &[]);
    let whole = br#"{"a":"1","b":"2"}"#;
    let replaced = secrets::desired(Some(&existing), "ns", &push(None, None, whole), None).unwrap();
    assert_eq!(
        data_of(&replaced),
        BTreeMap::from([("a".into(), "1".into()), ("b".into(), "2".into())])
    );
    let nested = secrets::desired(None, "ns", &push(Some("all"), None, whole), None).unwrap();
    assert_eq!(data_of(&nested)["all"], r#"{"a":"1","b":"2"}"#);
    let err = secrets::desired(None, "ns", &push(None, Some("pw"), b"v"), None).unwrap_err();
    assert!(err.to_string().contains("remoteRef.property"), "{err}");
    let mut untyped = push(Some("p"), Some("k"), b"v");
    untyped.source.type_ = None;
    assert_eq!(
        secrets::desired(None, "ns", &untyped, None)
            .unwrap()
            .type_
            .as_deref(),
        Some("Opaque")
    );
}

#[test]
fn entry_metadata_merges_or_replaces_as_eso_says() {
    let parse = |spec: serde_json::Value| {
        metadata::parse(Some(&json!({
            "apiVersion": metadata::API_VERSION,
            "kind": "PushSecretMetadata",
            "spec": spec,
        })))
    };
    let merged = parse(
        json!({"labels": {"color": "red", "app": "entry"}, "annotations": {"yes": "please"}}),
    )
    .unwrap();
    let existing = secret(&[("k", "v")], &[("remote", "yes")], &[("old", "a")]);
    let desired = secrets::desired(
        Some(&existing),
        "ns",
        &push(Some("k"), Some("k"), b"v"),
        merged.as_ref(),
    )
    .unwrap();
    let labels = desired.metadata.labels.clone().unwrap();
    assert_eq!(labels["color"], "red");
    assert_eq!(
        labels["app"], "entry",
        "the entry's labels win over the source's"
    );
    assert_eq!(labels["remote"], "yes");
    let annotations = desired.metadata.annotations.clone().unwrap();
    assert_eq!(
        annotations.keys().collect::<Vec<_>>(),
        ["old", "owner", "yes"]
    );

    let replace = parse(json!({"sourceMergePolicy": "Replace", "targetMergePolicy": "Replace", "labels": {"only": "this"}}))
        .unwrap();
    let desired = secrets::desired(
        Some(&existing),
        "ns",
        &push(Some("k"), Some("k"), b"v"),
        replace.as_ref(),
    )
    .unwrap();
    assert_eq!(
        desired.metadata.labels.unwrap(),
        BTreeMap::from([("only".into(), "this".into())])
    );
    assert!(desired.metadata.annotations.unwrap().is_empty());

    let ignore = parse(json!({"targetMergePolicy": "Ignore"})).unwrap();
    let desired = secrets::desired(
        Some(&existing),
        "ns",
        &push(Some("k"), Some("k"), b"v"),
        ignore.as_ref(),
    )
    .unwrap();
    assert_eq!(desired.metadata.labels, existing.metadata.labels);

    assert_eq!(
        parse(json!({"remoteNamespace": "other"}))
            .unwrap()
            .unwrap()
            .remote_namespace
            .as_deref(),
        Some("other")
    );
    assert!(
        parse(json!({"colour": "red"}))
            .unwrap_err()
            .to_string()
            .contains("colour")
    );
    let wrong = metadata::parse(Some(
        &json!({"apiVersion": "gitlab.external-secrets.io/v1alpha1", "kind": "PushSecretMetadata"}),
    ))
    .unwrap_err();
    assert!(wrong.to_string().contains("metadata.apiVersion"), "{wrong}");
    assert_eq!(metadata::parse(None).unwrap(), None::<PushMetadata>);
}

#[test]
fn deleting_removes_only_the_property_and_the_secret_with_the_last_one() {
    let two = secret(&[("a", "1"), ("b", "2")], &[], &[]);
    assert_eq!(
        secrets::deletion(&two, Some("a")),
        Deletion::Update([("b".to_owned(), ByteString(b"2".to_vec()))].into())
    );
    assert_eq!(secrets::deletion(&two, Some("c")), Deletion::Nothing);
    assert_eq!(secrets::deletion(&two, None), Deletion::Delete);
    let one = secret(&[("a", "1")], &[], &[]);
    assert_eq!(secrets::deletion(&one, Some("a")), Deletion::Delete);
    assert!(secrets::exists(Some(&two), Some("a")));
    assert!(!secrets::exists(Some(&two), Some("c")));
    assert!(secrets::exists(Some(&two), None));
    assert!(!secrets::exists(None, None));
}

fn check(spec: serde_json::Value) -> Result<SpecReport> {
    Kubernetes::default().validate_spec(&spec)
}

#[test]
fn a_spec_needs_exactly_one_way_to_authenticate() {
    let token = json!({"bearerToken": {"name": "t", "key": "token"}});
    let ca =
        json!({"caProvider": {"type": "ConfigMap", "name": "kube-root-ca.crt", "key": "ca.crt"}});
    let err = |spec| check(spec).unwrap_err().to_string();
    assert!(err(json!({"server": ca})).contains("set auth or authRef"));
    assert!(
        err(json!({"server": ca, "auth": {"token": token}, "authRef": {"name": "k", "key": "config"}}))
            .contains("not both")
    );
    assert!(
        err(json!({"server": ca, "auth": {"token": token, "serviceAccount": {"name": "sa"}}}))
            .contains("not token and serviceAccount")
    );
    assert!(
        check(json!({"server": ca, "auth": {"token": token}}))
            .unwrap()
            .warnings
            .is_empty()
    );
    let no_ca = check(json!({"auth": {"serviceAccount": {"name": "sa"}}})).unwrap();
    assert_eq!(
        no_ca.warnings,
        ["No caBundle or caProvider specified; TLS connections will use system certificate roots."]
    );
}

#[test]
fn credentials_stay_in_a_secret_stores_namespace() {
    let spec = json!({
        "server": {"caProvider": {"type": "ConfigMap", "name": "kube-root-ca.crt", "key": "ca.crt"}},
        "auth": {"cert": {
            "clientCert": {"name": "tls", "key": "tls.crt"},
            "clientKey": {"name": "tls", "key": "tls.key", "namespace": "elsewhere"},
        }},
    });
    let k = Kubernetes::default();
    let err = k
        .apply_referent(spec.clone(), Caller::SecretStore, "team-a")
        .unwrap_err()
        .to_string();
    assert!(err.contains("auth.cert.clientKey.namespace"), "{err}");
    let applied = k
        .apply_referent(spec.clone(), Caller::ClusterSecretStore, "team-b")
        .unwrap();
    assert_eq!(applied["auth"]["cert"]["clientCert"]["namespace"], "team-b");
    assert_eq!(
        applied["auth"]["cert"]["clientKey"]["namespace"],
        "elsewhere"
    );
    assert_eq!(applied["server"]["caProvider"]["namespace"], "team-b");
    let refs = k.credential_refs(&applied, "team-b");
    assert_eq!(refs.len(), 3, "{refs:?}");
    assert!(refs.iter().any(|r| r.kind == CredentialKind::ConfigMap));
    let sa = k
        .apply_referent(
            json!({"auth": {"serviceAccount": {"name": "reader"}}}),
            Caller::SecretStore,
            "team-a",
        )
        .unwrap();
    assert_eq!(
        k.credential_refs(&sa, "team-a"),
        [CredentialRef {
            kind: CredentialKind::ServiceAccountToken,
            namespace: "team-a".into(),
            name: "reader".into()
        }]
    );
}

#[test]
fn a_token_is_asked_for_again_after_four_fifths_of_its_lifetime() {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let token = format!(
        "{}.{}.sig",
        b64.encode(br#"{"alg":"RS256"}"#),
        b64.encode(br#"{"iat":1000,"exp":4600}"#)
    );
    let now = UNIX_EPOCH + Duration::from_secs(1000);
    assert_eq!(
        connect::renewal(&token, now),
        UNIX_EPOCH + Duration::from_secs(1000 + 2880)
    );
    assert_eq!(
        connect::renewal("opaque", now),
        now + Duration::from_secs(600)
    );
}

fn client_request(spec: serde_json::Value, namespace: Option<&str>) -> ClientRequest {
    ClientRequest {
        provider: provider::ProviderIdentity {
            kind: "Kubernetes".into(),
            namespace: namespace.map(Into::into),
            name: "k".into(),
        },
        api_version: "providers.external-secrets.io/v1alpha1".into(),
        spec,
        namespace: "team-a".into(),
    }
}

#[tokio::test]
async fn a_kubeconfig_may_not_run_commands_or_read_files() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let kubeconfig = |user: serde_json::Value| {
        serde_json::to_string(&json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": "https://remote.example:6443"}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        }))
        .unwrap()
    };
    let spec = json!({"authRef": {"name": "kc", "key": "config", "namespace": "team-a"}});
    let build = |user: serde_json::Value| {
        let mut credentials = StaticCredentials::default();
        credentials.secrets.insert(
            ("team-a".into(), "kc".into(), "config".into()),
            kubeconfig(user).into_bytes(),
        );
        let spec = spec.clone();
        async move {
            Kubernetes::default()
                .new_client(client_request(spec, Some("team-a")), Arc::new(credentials))
                .await
                .map(drop)
        }
    };
    for (user, named) in [
        (
            json!({"exec": {"command": "sh", "apiVersion": "client.authentication.k8s.io/v1"}}),
            "exec",
        ),
        (
            json!({"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}),
            "tokenFile",
        ),
        (
            json!({"client-certificate": "/etc/cert", "client-key": "/etc/key"}),
            "client-certificate",
        ),
    ] {
        let err = build(user).await.unwrap_err().to_string();
        assert!(err.contains("authRef") && err.contains(named), "{err}");
    }
    build(json!({"token": "t"})).await.unwrap();
}

#[tokio::test]
async fn a_missing_credential_fails_the_client_naming_it() {
    let spec = json!({
        "server": {"url": "https://remote.example:6443"},
        "auth": {"token": {"bearerToken": {"name": "t", "key": "token", "namespace": "team-a"}}},
    });
    let err = Kubernetes::default()
        .new_client(
            client_request(spec, Some("team-a")),
            Arc::new(StaticCredentials::default()),
        )
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("Secret team-a/t"), "{err}");

    // A referent cluster store checked on its own cannot be checked yet.
    let referent = json!({
        "server": {"url": "https://remote.example:6443"},
        "auth": {"token": {"bearerToken": {"name": "t", "key": "token"}}},
    });
    let client = Kubernetes::default()
        .new_client(
            client_request(referent, None),
            Arc::new(StaticCredentials::default()),
        )
        .await
        .unwrap();
    assert_eq!(client.validate().await.unwrap(), Validation::Unknown);
}
