use super::*;

#[test]
fn remote_refs_survive_the_wire() {
    let refs = [
        RemoteRef::default(),
        RemoteRef {
            key: "db/creds".into(),
            property: Some("password".into()),
            version: Some("3".into()),
            fetch_metadata: true,
        },
    ];
    for r in refs {
        assert_eq!(remote_from_wire(remote_to_wire(&r)), r);
    }
    assert_eq!(
        remote_to_wire(&RemoteRef {
            fetch_metadata: true,
            ..Default::default()
        })
        .metadata_policy,
        "Fetch",
        "ESO's spelling"
    );
}

#[test]
fn finds_survive_the_wire() {
    let finds = [
        FindRequest::default(),
        FindRequest {
            path: Some("team/".into()),
            name_regexp: Some("^db-.*".into()),
            tags: BTreeMap::from([("env".into(), "prod".into())]),
        },
    ];
    for f in finds {
        assert_eq!(find_from_wire(find_to_wire(&f)), f);
    }
}

#[test]
fn pushes_survive_the_wire_by_key_and_whole() {
    let by_key = PushRequest {
        remote: PushRemoteRef {
            remote_key: "app".into(),
            property: Some("password".into()),
        },
        secret_key: Some("pw".into()),
        value: vec![0, 159, 146, 150],
        metadata: Some(
            serde_json::json!({"apiVersion": "kubernetes.external-secrets.io/v1alpha1", "kind": "PushSecretMetadata"}),
        ),
        source: PushSource {
            type_: Some("kubernetes.io/tls".into()),
            labels: [("app".into(), "shop".into())].into(),
            annotations: [("note".into(), "kept".into())].into(),
        },
    };
    let whole = PushRequest {
        remote: PushRemoteRef {
            remote_key: "app".into(),
            property: None,
        },
        secret_key: None,
        value: br#"{"a":"1","b":"two"}"#.to_vec(),
        metadata: None,
        source: Default::default(),
    };
    for p in [by_key, whole] {
        assert_eq!(push_from_wire(push_to_wire(&p)).unwrap(), p);
    }
}

#[test]
fn a_whole_secret_push_sends_every_key_as_eso_does() {
    let wire = push_to_wire(&PushRequest {
        remote: PushRemoteRef::default(),
        secret_key: None,
        value: br#"{"a":"1","b":"two"}"#.to_vec(),
        metadata: None,
        source: Default::default(),
    });
    assert_eq!(wire.push_secret_data.unwrap().secret_key, "");
    assert_eq!(
        wire.secret_data,
        HashMap::from([("a".into(), b"1".to_vec()), ("b".into(), b"two".to_vec())])
    );
}

#[test]
fn a_push_naming_a_key_it_does_not_carry_names_the_field() {
    let err = push_from_wire(v1::PushSecretRequest {
        push_secret_data: Some(v1::PushSecretData {
            secret_key: "pw".into(),
            ..Default::default()
        }),
        ..Default::default()
    })
    .unwrap_err();
    assert!(err.contains("push_secret_data.secret_key"), "{err}");
}

#[test]
fn capabilities_survive_the_wire_and_unknown_ones_promise_least() {
    for c in [
        Capabilities::ReadOnly,
        Capabilities::WriteOnly,
        Capabilities::ReadWrite,
    ] {
        assert_eq!(capabilities_from_wire(capabilities_to_wire(c) as i32), c);
    }
    assert_eq!(capabilities_from_wire(7), Capabilities::ReadOnly);
}
