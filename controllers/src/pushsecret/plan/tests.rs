use serde_json::json;

use super::*;

fn ps(yaml: &str) -> PushSecret {
    serde_yaml::from_str(yaml).unwrap()
}

const PS: &str = r#"
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {name: p, namespace: n}
spec:
  secretStoreRefs: [{name: fake}]
  selector: {secret: {name: src}}
  data:
  - match: {secretKey: token, remoteRef: {remoteKey: remote-token}}
  - match: {remoteRef: {remoteKey: whole, property: all}}
"#;

/// A PushSecret to the SecretStore `fake` with only these `dataTo` rules and `data` entries.
fn bulk(data_to: serde_json::Value, data: serde_json::Value) -> PushSecret {
    serde_json::from_value(json!({
        "apiVersion": "external-secrets.io/v1alpha1",
        "kind": "PushSecret",
        "metadata": {"name": "p", "namespace": "n"},
        "spec": {
            "secretStoreRefs": [{"name": "fake", "kind": "SecretStore"}, {"labelSelector": {"matchLabels": {"tier": "prod"}}}],
            "selector": {"secret": {"name": "src"}},
            "dataTo": data_to,
            "data": data,
        },
    }))
    .unwrap()
}

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
        .collect()
}

fn source() -> BTreeMap<String, Vec<u8>> {
    data(&[("token", "t0k"), ("user", "u")])
}

const NO_LABELS: &BTreeMap<String, String> = &BTreeMap::new();

fn fake() -> Store<'static> {
    Store {
        kind: StoreKind::SecretStore,
        name: "fake",
        labels: NO_LABELS,
    }
}

fn plan(ps: &PushSecret, data: &BTreeMap<String, Vec<u8>>) -> Result<Vec<Push>, Invalid> {
    pushes(&ps.spec, fake(), &Source { name: "src", data })
}

/// A pushed JSON object (the whole Secret or a bundle).
fn as_json(p: &Push) -> serde_json::Value {
    serde_json::from_slice(&p.request.value).unwrap()
}

/// Each push as (remote key, source key, value as text).
fn summary(pushes: &[Push]) -> Vec<(String, Option<String>, String)> {
    pushes
        .iter()
        .map(|p| {
            (
                status_key(&p.entry),
                p.entry.match_.secret_key.clone(),
                String::from_utf8(p.request.value.clone()).unwrap(),
            )
        })
        .collect()
}

fn owned(rows: &[(&str, Option<&str>, &str)]) -> Vec<(String, Option<String>, String)> {
    rows.iter()
        .map(|(r, k, v)| ((*r).to_owned(), k.map(str::to_owned), (*v).to_owned()))
        .collect()
}

#[test]
fn pushes_by_key_and_whole_secret() {
    let p = plan(&ps(PS), &source()).unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].request.value, b"t0k");
    assert_eq!(p[0].request.remote.remote_key, "remote-token");
    assert_eq!(status_key(&p[0].entry), "remote-token");
    assert_eq!(as_json(&p[1]), json!({"token": "t0k", "user": "u"}));
    assert_eq!(status_key(&p[1].entry), "whole/all");
}

#[test]
fn a_missing_key_names_the_entry_not_the_value() {
    let err = plan(
        &ps(&PS.replace("secretKey: token", "secretKey: nope")),
        &source(),
    )
    .unwrap_err();
    assert_eq!(err.0, "spec.data[0].match.secretKey");
    assert!(
        err.1.contains("\"src\"") && err.1.contains("\"nope\""),
        "{}",
        err.1
    );
    assert!(!err.1.contains("t0k"));
}

#[test]
fn reverse_unicode_decodes_escapes_back() {
    assert_eq!(reverse_unicode("caf_U00e9_"), "café");
    assert_eq!(reverse_unicode("a_U002F_b_U0040_c"), "a/b@c");
    assert_eq!(reverse_unicode("smile_U1f600_"), "smile😀");
    // Not an escape: too few digits, or not hex; left as they are.
    assert_eq!(reverse_unicode("_U12_ and _Uzzzz_"), "_U12_ and _Uzzzz_");
    // A surrogate is no character: Go (hence ESO) prints U+FFFD.
    assert_eq!(reverse_unicode("_Ud800_"), "\u{fffd}");
}

#[test]
fn reverse_unicode_data_entries_name_the_decoded_key() {
    let p = ps(r#"
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {name: p, namespace: n}
spec:
  secretStoreRefs: [{name: fake}]
  selector: {secret: {name: src}}
  data:
  - match: {secretKey: "db/pass", remoteRef: {remoteKey: pass}}
    conversionStrategy: ReverseUnicode
  - match: {remoteRef: {remoteKey: all}}
    conversionStrategy: ReverseUnicode
"#);
    let source = data(&[("db_U002f_pass", "pw"), ("plain", "x")]);
    let planned = plan(&p, &source).unwrap();
    assert_eq!(planned[0].request.value, b"pw");
    assert_eq!(planned[0].request.secret_key.as_deref(), Some("db/pass"));
    assert_eq!(as_json(&planned[1]), json!({"db/pass": "pw", "plain": "x"}));

    // The Secret's own key is not there under this strategy.
    let own = ps(&serde_yaml::to_string(&p)
        .unwrap()
        .replace("db/pass", "db_U002f_pass"));
    let err = plan(&own, &source).unwrap_err();
    assert_eq!(err.0, "spec.data[0].match.secretKey");

    // Two keys that decode to one are refused naming both.
    let clash = data(&[("a_U0041_", "1"), ("aA", "2")]);
    let err = plan(&p, &clash).unwrap_err();
    assert_eq!(err.0, "spec.data[0].conversionStrategy");
    assert!(
        err.1.contains("a_U0041_") && err.1.contains("\"aA\""),
        "{}",
        err.1
    );
}

#[test]
fn data_to_pushes_each_matching_key_renamed_in_order() {
    let p = bulk(
        json!([{
            "storeRef": {"name": "fake"},
            "match": {"regexp": "^db-"},
            "rewrite": [
                {"regexp": {"source": "^db-", "target": "prod/"}},
                {"transform": {"template": "{{ .value | upper }}"}},
            ],
            "metadata": {"labels": {"team": "a"}},
        }]),
        json!([]),
    );
    let source = data(&[("db-user", "u"), ("db-host", "h"), ("api", "k")]);
    let planned = plan(&p, &source).unwrap();
    assert_eq!(
        summary(&planned),
        owned(&[
            ("PROD/HOST", Some("db-host"), "h"),
            ("PROD/USER", Some("db-user"), "u"),
        ])
    );
    let entry = &planned[0].entry;
    assert_eq!(
        entry.conversion_strategy,
        Some(PushSecretConversionStrategy::None)
    );
    assert_eq!(entry.metadata, Some(json!({"labels": {"team": "a"}})));
    assert_eq!(planned[0].request.metadata, entry.metadata);
}

#[test]
fn data_to_with_remote_key_bundles_the_matching_keys() {
    let p = bulk(
        json!([{"storeRef": {"name": "fake"}, "remoteKey": "app/db", "match": {"regexp": "^DB_"}}]),
        json!([]),
    );
    let source = data(&[("DB_HOST", "h"), ("DB_USER", "u"), ("OTHER", "o")]);
    let planned = plan(&p, &source).unwrap();
    assert_eq!(planned.len(), 1);
    assert_eq!(status_key(&planned[0].entry), "app/db");
    assert_eq!(planned[0].entry.match_.secret_key, None);
    assert_eq!(planned[0].request.secret_key, None);
    assert_eq!(
        as_json(&planned[0]),
        json!({"DB_HOST": "h", "DB_USER": "u"})
    );
}

#[test]
fn data_to_converts_keys_before_matching_and_records_the_secrets_own_key() {
    let p = bulk(
        json!([
            {"storeRef": {"name": "fake"}, "match": {"regexp": "^é"}, "conversionStrategy": "ReverseUnicode"},
            {"storeRef": {"name": "fake"}, "remoteKey": "bundle", "conversionStrategy": "ReverseUnicode"},
        ]),
        json!([]),
    );
    let source = data(&[("_U00e9_t_U00e9_", "summer"), ("winter", "w")]);
    let planned = plan(&p, &source).unwrap();
    assert_eq!(
        summary(&planned[..1]),
        owned(&[("été", Some("_U00e9_t_U00e9_"), "summer")])
    );
    assert_eq!(
        as_json(&planned[1]),
        json!({"été": "summer", "winter": "w"})
    );
}

#[test]
fn data_to_rules_apply_to_the_stores_they_name_or_select() {
    let p = bulk(
        json!([
            {"storeRef": {"name": "fake"}, "match": {"regexp": "^a$"}},
            {"storeRef": {"name": "fake", "kind": "ClusterSecretStore"}, "match": {"regexp": "^b$"}},
            {"storeRef": {"labelSelector": {"matchLabels": {"tier": "prod"}}}, "match": {"regexp": "^c$"}},
        ]),
        json!([]),
    );
    let source = data(&[("a", "1"), ("b", "2"), ("c", "3")]);
    let keys = |store: Store<'_>| -> Vec<String> {
        pushes(
            &p.spec,
            store,
            &Source {
                name: "src",
                data: &source,
            },
        )
        .unwrap()
        .iter()
        .map(|p| status_key(&p.entry))
        .collect()
    };
    assert_eq!(keys(fake()), ["a"]);
    let prod = BTreeMap::from([("tier".to_owned(), "prod".to_owned())]);
    let labelled = Store {
        kind: StoreKind::SecretStore,
        name: "other",
        labels: &prod,
    };
    assert_eq!(keys(labelled), ["c"]);
    let cluster = Store {
        kind: StoreKind::ClusterSecretStore,
        name: "fake",
        labels: &prod,
    };
    assert_eq!(keys(cluster), ["b"]);
}

#[test]
fn a_data_entry_overrides_data_to_for_its_source_key() {
    // ESO's documented override: every key under its own name, db-host elsewhere.
    let p = bulk(
        json!([{"storeRef": {"name": "fake"}}, {"storeRef": {"name": "fake"}, "remoteKey": "all"}]),
        json!([{"match": {"secretKey": "db-host", "remoteRef": {"remoteKey": "custom/database/hostname"}}}]),
    );
    let source = data(&[("db-host", "h"), ("db-port", "5432")]);
    let planned = plan(&p, &source).unwrap();
    assert_eq!(
        summary(&planned)
            .into_iter()
            .map(|(r, k, _)| (r, k))
            .collect::<Vec<_>>(),
        vec![
            ("db-port".to_owned(), Some("db-port".to_owned())),
            ("all".to_owned(), None),
            (
                "custom/database/hostname".to_owned(),
                Some("db-host".to_owned())
            ),
        ]
    );
}

#[test]
fn two_values_for_one_remote_key_are_refused_naming_both() {
    let rules = bulk(
        json!([
            {"storeRef": {"name": "fake"}, "match": {"regexp": "^a"}, "rewrite": [{"regexp": {"source": ".*", "target": "same"}}]},
        ]),
        json!([]),
    );
    let source = data(&[("a1", "s3cr3t"), ("a2", "other")]);
    let err = plan(&rules, &source).unwrap_err();
    assert_eq!(err.0, "spec.dataTo[0]");
    assert!(
        err.1.contains("\"a1\"") && err.1.contains("\"a2\"") && err.1.contains("\"same\""),
        "{}",
        err.1
    );
    assert!(!err.1.contains("s3cr3t"));

    let mixed = bulk(
        json!([{"storeRef": {"name": "fake"}, "remoteKey": "x"}]),
        json!([{"match": {"secretKey": "a1", "remoteRef": {"remoteKey": "x"}}}]),
    );
    let err = plan(&mixed, &source).unwrap_err();
    assert_eq!(err.0, "spec.data[0]");
    assert!(err.1.contains("spec.dataTo[0]"), "{}", err.1);
}

#[test]
fn bad_patterns_and_empty_names_are_refused_naming_the_field() {
    let source = data(&[("a", "1")]);
    for (rule, field) in [
        (
            json!({"match": {"regexp": "("}}),
            "spec.dataTo[0].match.regexp",
        ),
        (
            json!({"rewrite": [{"regexp": {"source": "(", "target": ""}}]}),
            "spec.dataTo[0].rewrite[0].regexp.source",
        ),
        (
            json!({"rewrite": [{"transform": {"template": "{{ .value "}}]}),
            "spec.dataTo[0].rewrite[0].transform.template",
        ),
        (
            json!({"rewrite": [{"regexp": {"source": ".*", "target": ""}}]}),
            "spec.dataTo[0].rewrite",
        ),
    ] {
        let mut rule = rule;
        rule["storeRef"] = json!({"name": "fake"});
        let refused = plan(&bulk(json!([rule]), json!([])), &source).unwrap_err();
        assert_eq!(refused.0, field, "{rule}");
    }
    // A rule matching nothing pushes nothing, and is no error.
    let none = bulk(
        json!([{"storeRef": {"name": "fake"}, "match": {"regexp": "^zzz"}}]),
        json!([]),
    );
    assert!(plan(&none, &source).unwrap().is_empty());
}

#[test]
fn data_to_store_refs_must_be_among_the_stores_pushed_to() {
    let prod = BTreeMap::from([("tier".to_owned(), "prod".to_owned())]);
    let labelled = Store {
        kind: StoreKind::SecretStore,
        name: "other",
        labels: &prod,
    };
    let ok = bulk(
        json!([{"storeRef": {"name": "fake"}}, {"storeRef": {"labelSelector": {"matchLabels": {"tier": "prod"}}}}]),
        json!([]),
    );
    assert!(check_data_to_stores(&ok.spec, &[fake(), labelled]).is_ok());

    let unlisted = bulk(json!([{"storeRef": {"name": "elsewhere"}}]), json!([]));
    assert_eq!(
        check_data_to_stores(&unlisted.spec, &[fake()])
            .unwrap_err()
            .0,
        "spec.dataTo[0].storeRef.name"
    );
    let wrong_kind = bulk(
        json!([{"storeRef": {"name": "fake", "kind": "ClusterSecretStore"}}]),
        json!([]),
    );
    assert!(check_data_to_stores(&wrong_kind.spec, &[fake()]).is_err());
    let selects_none = bulk(
        json!([{"storeRef": {"labelSelector": {"matchLabels": {"tier": "dev"}}}}]),
        json!([]),
    );
    assert_eq!(
        check_data_to_stores(&selects_none.spec, &[fake(), labelled])
            .unwrap_err()
            .0,
        "spec.dataTo[0].storeRef.labelSelector"
    );
}

#[test]
fn the_later_source_secret_wins_a_remote_key_and_it_is_written_once() {
    let p = ps(PS);
    let a = plan(&p, &data(&[("token", "a"), ("x", "1")])).unwrap();
    let b = plan(&p, &data(&[("token", "b"), ("y", "2")])).unwrap();
    let merged = last_wins(a.into_iter().chain(b));
    assert_eq!(merged.len(), 2);
    assert_eq!(merged[0].request.value, b"b");
    assert_eq!(as_json(&merged[1]), json!({"token": "b", "y": "2"}));
}

fn entry(remote: &str) -> PushSecretData {
    serde_json::from_value(json!({"match": {"remoteRef": {"remoteKey": remote}}})).unwrap()
}

fn synced(stores: &[(&str, &[&str])]) -> Synced {
    stores
        .iter()
        .map(|(store, keys)| {
            (
                (*store).to_owned(),
                keys.iter().map(|k| ((*k).to_owned(), entry(k))).collect(),
            )
        })
        .collect()
}

#[test]
fn stale_entries_are_those_no_longer_pushed() {
    let before = synced(&[
        ("SecretStore/fake", &["a", "b"]),
        ("SecretStore/gone", &["c"]),
    ]);
    let now = synced(&[("SecretStore/fake", &["b"])]);
    let gone: Vec<String> = stale(&before, &now)
        .iter()
        .map(|(store, e)| format!("{store}:{}", status_key(e)))
        .collect();
    assert_eq!(gone, ["SecretStore/fake:a", "SecretStore/gone:c"]);
    assert!(stale(&now, &now).is_empty());
}

#[test]
fn a_partial_push_keeps_what_was_pushed_before_on_record() {
    let before = synced(&[("SecretStore/a", &["old"]), ("SecretStore/b", &["x"])]);
    let now = synced(&[("SecretStore/a", &["new"]), ("SecretStore/c", &[])]);
    assert_eq!(
        merged(&now, &before),
        synced(&[
            ("SecretStore/a", &["new", "old"]),
            ("SecretStore/b", &["x"]),
            ("SecretStore/c", &[]),
        ])
    );
}

#[test]
fn a_store_is_held_by_delete_policy_push_secrets_that_use_it() {
    let mut p = bulk(json!([]), json!([]));
    p.spec.deletion_policy = Some(PushSecretDeletionPolicy::Delete);
    let prod = BTreeMap::from([("tier".to_owned(), "prod".to_owned())]);
    let selected = Store {
        kind: StoreKind::SecretStore,
        name: "picked",
        labels: &prod,
    };
    let uses = Uses::of(&p);
    assert!(uses.holds(fake(), Some("n")));
    assert!(uses.holds(selected, Some("n")));
    // A SecretStore of another namespace is another store.
    assert!(!uses.holds(fake(), Some("elsewhere")));
    let unnamed = Store {
        kind: StoreKind::SecretStore,
        name: "unnamed",
        labels: NO_LABELS,
    };
    assert!(!uses.holds(unnamed, Some("n")));
    // Entries recorded there hold it too, named or not.
    p.status = Some(api::push_secret::PushSecretStatus {
        synced_push_secrets: Some(synced(&[("SecretStore/unnamed", &["k"])])),
        ..Default::default()
    });
    let uses = Uses::of(&p);
    assert!(uses.pushed_to(unnamed, Some("n")));
    assert!(!uses.references(unnamed, Some("n")));
    assert!(uses.holds(unnamed, Some("n")));
    // Without deletionPolicy Delete nothing is held.
    p.spec.deletion_policy = None;
    let uses = Uses::of(&p);
    assert!(!uses.holds(fake(), Some("n")));
    assert!(!uses.holds(unnamed, Some("n")));
    // A ClusterSecretStore serves every namespace.
    let mut cluster = bulk(json!([]), json!([]));
    cluster.spec.deletion_policy = Some(PushSecretDeletionPolicy::Delete);
    cluster.spec.secret_store_refs[0].kind = Some(SecretStoreKind::ClusterSecretStore);
    let shared = Store {
        kind: StoreKind::ClusterSecretStore,
        name: "fake",
        labels: NO_LABELS,
    };
    assert!(Uses::of(&cluster).holds(shared, None));
}

#[test]
fn generators_are_refused_naming_the_field() {
    assert!(unsupported(&ps(PS)).is_ok());
    let generated = PS.replace(
        "selector: {secret: {name: src}}",
        "selector: {generatorRef: {kind: Password, name: pw}}",
    );
    assert_eq!(
        unsupported(&ps(&generated)).unwrap_err().0,
        "spec.selector.generatorRef"
    );
}
