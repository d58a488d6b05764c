//! The chart grants each provider's process (the controller, or the provider's own server) the
//! credential kinds listed in `_helpers.tpl`'s `external-secrets.providerCredentials`; the
//! providers' code says what they read. A provider that starts reading a new kind, or stops,
//! fails here until the table follows it.

use std::collections::BTreeMap;

use provider::CredentialKind;

const HELPERS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../charts/external-secrets/templates/_helpers.tpl"
);

/// The table as the chart writes it: store key → `{secrets, configMaps, serviceAccountTokens}`.
fn chart_table() -> BTreeMap<String, BTreeMap<String, bool>> {
    let helpers = std::fs::read_to_string(HELPERS).expect("the chart's _helpers.tpl");
    let start = helpers
        .find(r#"{{- define "external-secrets.providerCredentials" -}}"#)
        .expect("_helpers.tpl defines external-secrets.providerCredentials");
    let body = &helpers[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    let body = &body[..body.find("{{- end }}").expect("the define's end")];
    serde_yaml::from_str(body).expect("the table is YAML")
}

#[test]
fn the_charts_credential_rbac_follows_the_providers_code() {
    let registry = external_secrets_providers::registry();
    let table = chart_table();
    let keys: Vec<&str> = api::providers::ALL.iter().map(|d| d.store_key).collect();
    assert_eq!(
        table.keys().map(String::as_str).collect::<Vec<_>>().len(),
        keys.len(),
        "the table lists {:?}, the API's providers are {keys:?}",
        table.keys()
    );
    for key in keys {
        let kinds = registry
            .by_store_key(key)
            .map(|p| p.credential_kinds())
            .unwrap_or_default();
        let wanted: BTreeMap<String, bool> = [
            ("secrets", CredentialKind::Secret),
            ("configMaps", CredentialKind::ConfigMap),
            ("serviceAccountTokens", CredentialKind::ServiceAccountToken),
        ]
        .into_iter()
        .filter(|(_, kind)| kinds.contains(kind))
        .map(|(name, _)| (name.to_owned(), true))
        .collect();
        let granted = table.get(key).cloned().unwrap_or_default();
        assert_eq!(
            granted, wanted,
            "providerCredentials.{key} in the chart's _helpers.tpl; the provider's code reads {kinds:?}"
        );
    }
}
