use provider::StaticCredentials;
use serde_json::json;

use super::*;

fn request(spec: Value) -> ClientRequest {
    ClientRequest {
        provider: ProviderIdentity {
            kind: "Fake".into(),
            namespace: Some("ns".into()),
            name: "store".into(),
        },
        api_version: "providers.external-secrets.io/v1alpha1".into(),
        spec,
        namespace: "ns".into(),
    }
}

fn spec() -> Value {
    json!({"data": [
        {"key": "plain", "value": "v0"},
        {"key": "plain", "value": "v1", "version": "1"},
        {"key": "json", "value": r#"{"user":"alice","port":5432,"nested":{"a.b":"x"},"list":["p","q"]}"#},
        {"key": "other", "value": "o"},
    ]})
}

fn remote(key: &str, property: Option<&str>, version: Option<&str>) -> RemoteRef {
    RemoteRef {
        key: key.into(),
        property: property.map(Into::into),
        version: version.map(Into::into),
        fetch_metadata: false,
    }
}

#[tokio::test]
async fn get_secret_by_key_version_and_property() {
    let c = Fake::default().client(request(spec())).unwrap();
    assert_eq!(
        c.get_secret(&remote("plain", None, None)).await.unwrap(),
        b"v0"
    );
    assert_eq!(
        c.get_secret(&remote("plain", None, Some("1")))
            .await
            .unwrap(),
        b"v1"
    );
    assert!(matches!(
        c.get_secret(&remote("plain", None, Some("2"))).await,
        Err(Error::NoSecret)
    ));
    assert!(matches!(
        c.get_secret(&remote("missing", None, None)).await,
        Err(Error::NoSecret)
    ));
    assert_eq!(
        c.get_secret(&remote("json", Some("user"), None))
            .await
            .unwrap(),
        b"alice"
    );
    assert_eq!(
        c.get_secret(&remote("json", Some("port"), None))
            .await
            .unwrap(),
        b"5432"
    );
    assert_eq!(
        c.get_secret(&remote("json", Some(r"nested.a\.b"), None))
            .await
            .unwrap(),
        b"x"
    );
    assert_eq!(
        c.get_secret(&remote("json", Some("list.1"), None))
            .await
            .unwrap(),
        b"q"
    );
    assert!(matches!(
        c.get_secret(&remote("json", Some("nope"), None)).await,
        Err(Error::NoSecret)
    ));
}

#[tokio::test]
async fn secret_map_needs_a_json_object() {
    let c = Fake::default().client(request(spec())).unwrap();
    let map = c.get_secret_map(&remote("json", None, None)).await.unwrap();
    assert_eq!(map["user"], b"alice");
    assert_eq!(map["port"], b"5432");
    assert_eq!(map["nested"], br#"{"a.b":"x"}"#);
    let err = c
        .get_secret_map(&remote("plain", None, None))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not a JSON object"), "{err}");
}

/// A value nested deeper than the decoder goes is refused saying so, not as if it were no object.
#[tokio::test]
async fn a_secret_map_nested_too_deep_says_so() {
    let deep = format!("{}1{}", r#"{"k":"#.repeat(3000), "}".repeat(3000));
    let spec = json!({"data": [{"key": "deep", "value": deep}]});
    let c = Fake::default().client(request(spec)).unwrap();
    let err = c
        .get_secret_map(&remote("deep", None, None))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("recursion limit"), "{err}");
}

#[tokio::test]
async fn find_by_regexp_takes_the_newest_version() {
    let c = Fake::default().client(request(spec())).unwrap();
    let find = FindRequest {
        name_regexp: Some("^pl|^ot".into()),
        ..Default::default()
    };
    let all = c.get_all_secrets(&find).await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all["plain"], b"v1");
    assert_eq!(all["other"], b"o");
    assert!(c.get_all_secrets(&FindRequest::default()).await.is_err());
}

#[tokio::test]
async fn pushed_values_survive_a_new_client_but_cannot_shadow_the_spec() {
    let fake = Fake::default();
    let c = fake.client(request(spec())).unwrap();
    let push = |key: &str| PushRequest {
        remote: PushRemoteRef {
            remote_key: key.into(),
            property: None,
        },
        secret_key: Some("k".into()),
        value: b"pushed".to_vec(),
        metadata: None,
        source: Default::default(),
    };
    c.push_secret(&push("new")).await.unwrap();
    assert!(c.push_secret(&push("plain")).await.is_err());
    let again = fake.client(request(json!({"data": []}))).unwrap();
    assert_eq!(
        again.get_secret(&remote("new", None, None)).await.unwrap(),
        b"pushed"
    );
    assert!(matches!(
        again.get_secret(&remote("plain", None, None)).await,
        Err(Error::NoSecret)
    ));
    let gone = PushRemoteRef {
        remote_key: "new".into(),
        property: None,
    };
    assert!(again.secret_exists(&gone).await.unwrap());
    again.delete_secret(&gone).await.unwrap();
    assert!(!again.secret_exists(&gone).await.unwrap());
}

#[tokio::test]
async fn validation_result_hook() {
    let fake = Fake::default();
    for (hook, ok) in [
        (None, Some(Validation::Ready)),
        (Some(1), Some(Validation::Unknown)),
        (Some(2), None),
    ] {
        // Through the contract, as the client manager builds it.
        let c = fake
            .new_client(
                request(json!({"data": [], "validationResult": hook})),
                Arc::new(StaticCredentials::default()),
            )
            .await
            .unwrap();
        assert_eq!(c.validate().await.ok(), ok);
    }
}

#[test]
fn spec_validation_names_the_field() {
    let err = Fake::default()
        .validate_spec(&json!({"data": [{"key": "a", "value": "b"}, {"key": "c"}]}))
        .unwrap_err();
    assert!(err.to_string().contains("data[1].value"), "{err}");
}

#[tokio::test]
async fn metadata_fetch_is_refused_by_name() {
    let c = Fake::default().client(request(spec())).unwrap();
    let remote = RemoteRef {
        fetch_metadata: true,
        ..remote("plain", None, None)
    };
    let err = c.get_secret(&remote).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "metadataPolicy Fetch is not supported by the Fake provider"
    );
}
