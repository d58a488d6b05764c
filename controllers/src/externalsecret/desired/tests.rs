use std::collections::BTreeMap;

use api::external_secret::ExternalSecret;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

use super::*;

fn es(yaml: &str) -> ExternalSecret {
    let mut es: ExternalSecret = serde_yaml::from_str(yaml).unwrap();
    es.metadata.uid = Some("uid-1".into());
    es.metadata.generation = Some(3);
    es
}

const BASIC: &str = r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: app, namespace: team}
spec:
  secretStoreRef: {name: fake}
  refreshInterval: 1m
  target: {name: app-secret}
  data:
  - secretKey: user
    remoteRef: {key: user}
"#;

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect()
}

/// Through the template stage, as the reconciler does.
fn shaped(es: &ExternalSecret, data: &BTreeMap<String, Vec<u8>>) -> crate::templating::Shaped {
    let template = es.spec.target.as_ref().and_then(|t| t.template.as_deref());
    crate::templating::shape(
        "spec.target.template",
        template,
        data.clone(),
        &Default::default(),
        es.labels(),
        es.annotations(),
    )
    .unwrap()
}

fn synced(mut es: ExternalSecret, at: Timestamp) -> ExternalSecret {
    let version = synced_resource_version(&es);
    es.status = Some(api::external_secret::ExternalSecretStatus {
        refresh_time: Some(Time(at)),
        synced_resource_version: Some(version),
        ..Default::default()
    });
    es
}

fn secret_with(data_: &BTreeMap<String, Vec<u8>>, hash: Option<String>, managed: bool) -> Secret {
    let mut s = Secret {
        data: Some(
            data_
                .iter()
                .map(|(k, v)| (k.clone(), ByteString(v.clone())))
                .collect(),
        ),
        ..Default::default()
    };
    if managed {
        s.metadata.labels = Some(BTreeMap::from([(MANAGED_LABEL.into(), "true".into())]));
    }
    if let Some(h) = hash {
        s.metadata.annotations = Some(BTreeMap::from([(DATA_HASH_ANNOTATION.into(), h)]));
    }
    s
}

#[test]
fn owner_secret_has_eso_metadata_and_owner_reference() {
    let es = es(BASIC);
    let d = data(&[("user", "alice")]);
    let secret = desired_secret(&es, &shaped(&es, &d), None).unwrap();
    assert_eq!(secret["metadata"]["name"], "app-secret");
    assert_eq!(secret["metadata"]["namespace"], "team");
    assert_eq!(secret["metadata"]["labels"][MANAGED_LABEL], "true");
    assert_eq!(
        secret["metadata"]["labels"][CREATED_BY_LABEL],
        hash::created_by("team", "app")
    );
    assert_eq!(
        secret["metadata"]["annotations"][DATA_HASH_ANNOTATION],
        hash::data_hash(&d)
    );
    assert_eq!(secret["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    assert_eq!(secret["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(secret["data"]["user"], "YWxpY2U=");
    assert!(secret.get("type").is_none());
}

/// ESO hashes the Secret's final data: with Merge the keys of other writers are in it, so a
/// Secret left as we wrote it is valid and not fetched again.
#[test]
fn merge_targets_hash_the_merged_data() {
    let merge = es(&BASIC.replace(
        "target: {name: app-secret}",
        "target: {name: app-secret, creationPolicy: Merge}",
    ));
    let ours = data(&[("user", "alice")]);
    let existing = secret_with(&data(&[("user", "old"), ("other", "theirs")]), None, false);
    let body = desired_secret(&merge, &shaped(&merge, &ours), Some(&existing)).unwrap();
    let merged = data(&[("user", "alice"), ("other", "theirs")]);
    assert_eq!(
        body["metadata"]["annotations"][DATA_HASH_ANNOTATION],
        hash::data_hash(&merged)
    );
    let written = secret_with(&merged, Some(hash::data_hash(&merged)), true);
    assert!(secret_is_valid(&merge, Some(&written)));
    // Owner: exactly ours, whatever was there.
    let owner = es(BASIC);
    let body = desired_secret(&owner, &shaped(&owner, &ours), Some(&existing)).unwrap();
    assert_eq!(
        body["metadata"]["annotations"][DATA_HASH_ANNOTATION],
        hash::data_hash(&ours)
    );
}

#[test]
fn other_policies_shape_the_secret() {
    let orphan = es(&BASIC.replace("target: {name: app-secret}", "target: {name: app-secret, creationPolicy: Orphan, immutable: true, template: {type: kubernetes.io/tls, metadata: {labels: {a: b}, finalizers: [example.com/keep]}}}"));
    let secret = desired_secret(&orphan, &shaped(&orphan, &data(&[("user", "x")])), None).unwrap();
    assert!(secret["metadata"].get("ownerReferences").is_none());
    assert!(secret["metadata"]["labels"].get(CREATED_BY_LABEL).is_none());
    assert_eq!(secret["metadata"]["labels"]["a"], "b");
    assert_eq!(secret["metadata"]["finalizers"][0], "example.com/keep");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    assert_eq!(secret["immutable"], true);
    let none = es(&BASIC.replace(
        "target: {name: app-secret}",
        "target: {creationPolicy: None}",
    ));
    assert!(desired_secret(&none, &shaped(&none, &data(&[])), None).is_none());
}

#[test]
fn refresh_follows_policy_interval_and_changes() {
    let now: Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
    let fresh = es(BASIC);
    assert!(should_refresh(&fresh, now), "never synced");
    let recent = synced(es(BASIC), now - SignedDuration::from_secs(30));
    assert!(!should_refresh(&recent, now));
    let requeue = requeue_after(&recent, now).unwrap();
    assert!(requeue <= Duration::from_secs(30) && requeue >= Duration::from_secs(29));
    let old = synced(es(BASIC), now - SignedDuration::from_secs(61));
    assert!(should_refresh(&old, now));
    let mut labelled = recent.clone();
    labelled.metadata.labels = Some(BTreeMap::from([("force-sync".into(), "1".into())]));
    assert!(should_refresh(&labelled, now), "labels changed");
    let mut bumped = recent.clone();
    bumped.metadata.generation = Some(4);
    assert!(should_refresh(&bumped, now), "spec changed");

    let mut failed = recent.clone();
    failed.status.as_mut().unwrap().conditions = vec![api::conditions::Condition::ready(
        api::conditions::ConditionStatus::False,
        "SecretSyncedError",
        "provider down",
    )];
    assert!(should_refresh(&failed, now), "a failed sync is retried");

    let once = synced(
        es(&format!("{BASIC}  refreshPolicy: CreatedOnce\n")),
        now - SignedDuration::from_secs(3600),
    );
    assert!(!should_refresh(&once, now));
    assert!(requeue_after(&once, now).is_none());
    let mut once_changed = once.clone();
    once_changed.metadata.generation = Some(9);
    assert!(!should_refresh(&once_changed, now));

    let on_change = synced(
        es(&format!("{BASIC}  refreshPolicy: OnChange\n")),
        now - SignedDuration::from_secs(3600),
    );
    assert!(!should_refresh(&on_change, now));
    let mut on_change_bumped = on_change.clone();
    on_change_bumped.metadata.generation = Some(9);
    assert!(should_refresh(&on_change_bumped, now));

    let zero = synced(
        es(&BASIC.replace("refreshInterval: 1m", "refreshInterval: \"0\"")),
        now - SignedDuration::from_secs(3600),
    );
    assert!(!should_refresh(&zero, now));
    assert!(requeue_after(&zero, now).is_none());
}

#[test]
fn sync_windows_gate_periodic_refreshes_only() {
    // 12:00 on a Thursday, inside a deny window open every day from 09:00 to 17:00.
    let now: Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
    let windowed = |policy: &str| {
        synced(
            es(&format!(
                "{BASIC}  syncWindows: {{kind: deny, windows: [{{schedule: '0 9 * * *', duration: 8h}}]}}\n{policy}"
            )),
            now - SignedDuration::from_secs(3600),
        )
    };
    let due = windowed("");
    assert!(!should_refresh(&due, now), "held by the deny window");
    assert!(!follows_store_changes(&due, now));
    // Woken when the window closes, not polled through it.
    assert_eq!(
        requeue_after(&due, now),
        Some(Duration::from_secs(5 * 3600 + 1))
    );
    assert!(should_refresh(
        &due,
        "2026-01-01T17:00:01Z".parse().unwrap()
    ));

    let mut changed = due.clone();
    changed.metadata.generation = Some(4);
    assert!(should_refresh(&changed, now), "a spec change is not held");

    let mut failed = due.clone();
    failed.status.as_mut().unwrap().conditions = vec![api::conditions::Condition::ready(
        api::conditions::ConditionStatus::False,
        "SecretSyncedError",
        "provider down",
    )];
    assert!(
        !should_refresh(&failed, now),
        "a retry is a periodic refresh"
    );

    // The window does not concern refresh policies that are not periodic.
    let mut on_change = windowed("  refreshPolicy: OnChange\n");
    on_change.metadata.generation = Some(4);
    assert!(should_refresh(&on_change, now));
}

#[test]
fn secret_validity_detects_hand_edits() {
    let es_ = es(BASIC);
    let d = data(&[("user", "alice")]);
    assert!(!secret_is_valid(&es_, None));
    assert!(!secret_is_valid(
        &es_,
        Some(&secret_with(&d, Some(hash::data_hash(&d)), false))
    ));
    assert!(secret_is_valid(
        &es_,
        Some(&secret_with(&d, Some(hash::data_hash(&d)), true))
    ));
    let edited = data(&[("user", "mallory")]);
    assert!(!secret_is_valid(
        &es_,
        Some(&secret_with(&edited, Some(hash::data_hash(&d)), true))
    ));
    let orphan = es(&BASIC.replace(
        "target: {name: app-secret}",
        "target: {creationPolicy: Orphan}",
    ));
    assert!(secret_is_valid(&orphan, None));
}

#[test]
fn stale_keys_depend_on_the_creation_policy() {
    let existing = secret_with(&data(&[("user", "a"), ("extra", "b")]), None, true);
    let want = data(&[("user", "a")]);
    assert_eq!(
        stale_keys(&es(BASIC), &existing, &want),
        vec!["extra".to_string()]
    );
    let merge = es(&BASIC.replace(
        "target: {name: app-secret}",
        "target: {creationPolicy: Merge}",
    ));
    assert!(stale_keys(&merge, &existing, &want).is_empty());
    // With Merge, what this ExternalSecret's field manager wrote before (applied, or updated
    // by Go ESO) and no longer has goes; another writer's key stays.
    let mut written = secret_with(
        &data(&[("user", "a"), ("old", "o"), ("extra", "b")]),
        None,
        true,
    );
    let owned = |operation: &str, keys: &[&str]| {
        let data: serde_json::Map<String, serde_json::Value> = keys
            .iter()
            .map(|k| (format!("f:{k}"), serde_json::json!({})))
            .collect();
        serde_json::from_value(serde_json::json!({
            "manager": field_manager("app"), "operation": operation,
            "fieldsV1": {"f:data": data},
        }))
        .unwrap()
    };
    written.metadata.managed_fields =
        Some(vec![owned("Apply", &["user"]), owned("Update", &["old"])]);
    assert_eq!(stale_keys(&merge, &written, &want), vec!["old".to_string()]);
}

#[test]
fn field_manager_is_esos() {
    assert_eq!(
        field_manager("app"),
        "externalsecrets.external-secrets.io/app"
    );
    let long = "a".repeat(40);
    let m = field_manager(&long);
    assert!(
        m.starts_with("externalsecrets.external-secrets.io/sha3/"),
        "{m}"
    );
}

#[test]
fn decoding_strategies() {
    assert_eq!(decode(b"aGk=".to_vec(), Decoding::Base64).unwrap(), b"hi");
    assert_eq!(
        decode(b"_-8=".to_vec(), Decoding::Base64Url).unwrap(),
        vec![0xff, 0xef]
    );
    assert_eq!(decode(b"aGk=".to_vec(), Decoding::Auto).unwrap(), b"hi");
    assert_eq!(
        decode(b"not base64!".to_vec(), Decoding::Auto).unwrap(),
        b"not base64!"
    );
    assert_eq!(decode(b"aGk=".to_vec(), Decoding::None).unwrap(), b"aGk=");
    // As lenient as Go's decoder: line breaks are skipped, non-zero trailing bits accepted;
    // padding is still required, as Go's StdEncoding requires it.
    assert_eq!(
        decode(b"aGVs\r\nbG8=\n".to_vec(), Decoding::Base64).unwrap(),
        b"hello"
    );
    assert_eq!(decode(b"aGl=".to_vec(), Decoding::Base64).unwrap(), b"hi");
    assert!(decode(b"aGk".to_vec(), Decoding::Base64).is_err());
    assert_eq!(
        decode(b"_-8=\n".to_vec(), Decoding::Base64Url).unwrap(),
        vec![0xff, 0xef]
    );
    let err = decode(b"s3cr3t!".to_vec(), Decoding::Base64).unwrap_err();
    assert!(
        !err.contains('!') && !err.contains("33"),
        "the error quotes the value: {err}"
    );
}

#[test]
fn unsupported_features_name_their_field() {
    let templated = es(&BASIC.replace(
        "target: {name: app-secret}",
        "target: {template: {data: {a: '{{ .user }}'}}}",
    ));
    assert!(unsupported(&templated).is_ok(), "templates are rendered");
    assert!(unsupported(&es(BASIC)).is_ok());
    // Providers that cannot read metadata say so themselves.
    let fetch = es(&BASIC.replace(
        "remoteRef: {key: user}",
        "remoteRef: {key: user, metadataPolicy: Fetch}",
    ));
    assert!(unsupported(&fetch).is_ok());
    let generated = es(&BASIC.replace(
        "remoteRef: {key: user}",
        "remoteRef: {key: user}\n    sourceRef: {generatorRef: {kind: Password, name: p}}",
    ));
    assert_eq!(
        unsupported(&generated).unwrap_err().0,
        "spec.data[0].sourceRef.generatorRef"
    );
}

#[test]
fn key_conversion_and_validation() {
    assert_eq!(convert_key("app/db.password", false), "app_db.password");
    assert_eq!(convert_key("app/db pass", true), "app_U002f_db_U0020_pass");
    // As ESO (Go's unicode.IsLetter and IsNumber), letters and digits of any script are kept;
    // such a key is then refused as a Secret key, naming it, instead of being mangled.
    assert_eq!(convert_key("ключ", true), "ключ");
    assert_eq!(convert_key("пароль/1", false), "пароль_1");
    assert_eq!(convert_key("٣", false), "٣");
    assert!(!valid_key("ключ"));
    assert!(valid_key("a-b_c.d"));
    assert!(!valid_key("a/b"));
    assert!(!valid_key(".."));
    assert!(!valid_key(""));
}

#[test]
fn nul_bytes_fail_only_when_asked() {
    use api::external_secret::NullBytePolicy;
    assert!(check_nul(b"a\0b", Some(NullBytePolicy::Fail)).is_err());
    assert!(check_nul(b"a\0b", Some(NullBytePolicy::Ignore)).is_ok());
    assert!(check_nul(b"a\0b", None).is_ok());
    assert!(check_nul(b"ab", Some(NullBytePolicy::Fail)).is_ok());
}

#[test]
fn a_secret_controlled_by_another_object_is_refused() {
    let with_policy = |policy: &str| {
        es(&BASIC.replace(
            "target: {name: app-secret}",
            &format!("target: {{name: app-secret, creationPolicy: {policy}}}"),
        ))
    };
    let controller = |api_version: &str, kind: &str, uid: &str| OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: "other".into(),
        uid: uid.into(),
        controller: Some(true),
        ..Default::default()
    };
    let mut secret = secret_with(&data(&[]), None, true);
    // (policy, refused when another ExternalSecret controls it, when a Deployment does)
    let table = [
        ("Owner", true, true),
        ("Orphan", true, false),
        ("Merge", true, false),
        ("CreateOrMerge", true, false),
        ("None", false, false),
    ];
    for (policy, by_es, by_other) in table {
        let es_ = with_policy(policy);
        secret.metadata.owner_references = None;
        assert!(
            ownership_conflict(&es_, secret.owner_references()).is_none(),
            "{policy}"
        );
        secret.metadata.owner_references = Some(vec![controller(
            "external-secrets.io/v1",
            "ExternalSecret",
            "uid-2",
        )]);
        assert_eq!(
            ownership_conflict(&es_, secret.owner_references()).is_some(),
            by_es,
            "{policy}, another ExternalSecret"
        );
        secret.metadata.owner_references = Some(vec![controller("apps/v1", "Deployment", "uid-2")]);
        assert_eq!(
            ownership_conflict(&es_, secret.owner_references()).is_some(),
            by_other,
            "{policy}, a Deployment"
        );
        // Its own owner reference is never a conflict.
        secret.metadata.owner_references = Some(vec![controller(
            "external-secrets.io/v1",
            "ExternalSecret",
            "uid-1",
        )]);
        assert!(
            ownership_conflict(&es_, secret.owner_references()).is_none(),
            "{policy}, itself"
        );
    }
}

#[test]
fn keys_that_convert_to_the_same_key_are_an_error() {
    let map: BTreeMap<String, Vec<u8>> = [("a/b", "1"), ("a:b", "2"), ("c", "3")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.as_bytes().to_vec()))
        .collect();
    let err = convert_keys(map.clone(), false).unwrap_err();
    assert_eq!(
        err,
        r#"keys "a/b" and "a:b" both become "a_b"; use rewrite to tell them apart"#
    );
    // Unicode keeps them apart.
    let converted = convert_keys(map, true).unwrap();
    assert_eq!(
        converted.keys().collect::<Vec<_>>(),
        ["a_U002f_b", "a_U003a_b", "c"]
    );
}

/// Every creationPolicy × deletionPolicy, with and without fetched data, against each state the
/// target can be in. W write, D delete, A nothing to delete, R retain, M wait for a Merge target,
/// N write nothing; refused: n (spec.target.name), d (spec.target.deletionPolicy). Combinations
/// the CRD's rules refuse are here too, for objects stored before those rules existed.
#[test]
fn every_policy_combination() {
    let owner = |api_version: &str, kind: &str, uid: &str| OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: "x".into(),
        uid: uid.into(),
        controller: Some(true),
        ..Default::default()
    };
    let states: [Option<Vec<OwnerReference>>; 5] = [
        None,
        Some(vec![owner(
            "external-secrets.io/v1",
            "ExternalSecret",
            "uid-1",
        )]),
        Some(vec![]),
        Some(vec![owner(
            "external-secrets.io/v1",
            "ExternalSecret",
            "uid-2",
        )]),
        Some(vec![owner("apps/v1", "Deployment", "uid-3")]),
    ];
    // Columns: with data, then with nothing fetched; each for a target that is missing, ours,
    // unowned, another ExternalSecret's, another controller's.
    let table = [
        ("Owner", "Retain", "WWWnn RRRRR"),
        ("Owner", "Delete", "WWWnn ADddd"),
        ("Owner", "Merge", "WWWnn WWWnn"),
        ("Orphan", "Retain", "WWWnW RRRRR"),
        ("Orphan", "Delete", "WWWnW ddddd"),
        ("Orphan", "Merge", "WWWnW WWWnW"),
        ("Merge", "Retain", "MWWnW RRRRR"),
        ("Merge", "Delete", "MWWnW ddddd"),
        ("Merge", "Merge", "MWWnW MWWnW"),
        ("None", "Retain", "NNNNN RRRRR"),
        ("None", "Delete", "NNNNN ddddd"),
        ("None", "Merge", "NNNNN NNNNN"),
        ("CreateOrMerge", "Retain", "WWWnW RRRRR"),
        ("CreateOrMerge", "Delete", "WWWnW ddddd"),
        ("CreateOrMerge", "Merge", "WWWnW WWWnW"),
    ];
    for (creation, deletion, want) in table {
        let es_ = es(&BASIC.replace(
            "target: {name: app-secret}",
            &format!(
                "target: {{name: app-secret, creationPolicy: {creation}, deletionPolicy: {deletion}}}"
            ),
        ));
        let cells: Vec<char> = want.chars().filter(|c| *c != ' ').collect();
        for (i, fetched_nothing) in [false, true].into_iter().enumerate() {
            for (j, state) in states.iter().enumerate() {
                let got = match plan(
                    &es_,
                    fetched_nothing,
                    state.as_deref(),
                    "Secret",
                    "app-secret",
                ) {
                    Ok(Step::Write) => 'W',
                    Ok(Step::Delete) => 'D',
                    Ok(Step::Absent) => 'A',
                    Ok(Step::Retain) => 'R',
                    Ok(Step::WaitForTarget) => 'M',
                    Ok(Step::Nothing) => 'N',
                    Err((field, _)) if field == "spec.target.name" => 'n',
                    Err((field, _)) if field == "spec.target.deletionPolicy" => 'd',
                    Err((field, message)) => panic!("{field}: {message}"),
                };
                assert_eq!(
                    got,
                    cells[i * 5 + j],
                    "creationPolicy {creation}, deletionPolicy {deletion}, nothing fetched: {fetched_nothing}, target state {j}"
                );
            }
        }
    }
}
