//! The GitLab converter between v1alpha1 and v1beta1 loses nothing: any object of either version
//! comes back unchanged after a trip through the other (property tests over every field, both
//! group settings at once included), each field lands where v1beta1 spells it, and what v1beta1
//! cannot hold rides in an annotation that never changes which groups are read.

mod support;

use external_secrets_api::PROVIDERS_GROUP;
use external_secrets_api::provider_kinds::ConversionError;
use external_secrets_api::providers::gitlab::conversion::{V1ALPHA1_ONLY, V1BETA1_ONLY};
use external_secrets_api::providers::gitlab::{
    DESCRIPTOR, GitlabAuth, GitlabProvider, GitlabSecretRef, v1beta1,
};
use proptest::collection::vec;
use proptest::option::of as opt;
use proptest::prelude::*;
use serde_json::{Value, json};
use support::{annotation, bytes, ca_provider, secret_key, text, word};

fn convert(object: Value, version: &str) -> Result<Value, ConversionError> {
    support::convert(&DESCRIPTOR, object, version)
}

fn gitlab(version: &str, spec: Value) -> Value {
    support::provider_object(&DESCRIPTOR, PROVIDERS_GROUP, version, spec)
}

/// What the CRD's CEL rule requires of a v1beta1 spec: at most one of the group settings.
fn one_group_setting(spec: &Value) -> bool {
    spec["groups"]
        .as_object()
        .is_none_or(|groups| !(groups.contains_key("ids") && groups.contains_key("inherit")))
}

// Strategies for every field of both versions.

fn token() -> BoxedStrategy<GitlabSecretRef> {
    opt(secret_key())
        .prop_map(|access_token| GitlabSecretRef { access_token })
        .boxed()
}

fn group_ids() -> BoxedStrategy<Vec<String>> {
    vec(prop_oneof![word(), "[0-9]{1,4}"], 0..3).boxed()
}

/// Both group settings independently, so a list beside `inheritFromGroups` (ESO's schema allows
/// it) is covered too.
fn alpha_spec() -> BoxedStrategy<GitlabProvider> {
    (
        opt(text()),
        token(),
        opt(text()),
        opt(any::<bool>()),
        opt(group_ids()),
        opt(text()),
        opt(bytes()),
        opt(ca_provider()),
    )
        .prop_map(
            |(
                url,
                secret_ref,
                project_id,
                inherit_from_groups,
                group_ids,
                environment,
                ca_bundle,
                ca_provider,
            )| GitlabProvider {
                url,
                auth: GitlabAuth { secret_ref },
                project_id,
                inherit_from_groups,
                group_ids,
                environment,
                ca_bundle,
                ca_provider,
            },
        )
        .boxed()
}

/// Both group settings independently: the CEL rule refuses them together, yet the converter
/// must not lose either should such an object reach it.
fn beta_spec() -> BoxedStrategy<v1beta1::GitlabProvider> {
    let groups = (opt(group_ids()), opt(any::<bool>()))
        .prop_map(|(ids, inherit)| v1beta1::GitlabGroups { ids, inherit });
    (
        opt(text()),
        token(),
        opt(text()),
        opt(groups),
        opt(text()),
        opt(bytes()),
        opt(ca_provider()),
    )
        .prop_map(
            |(url, secret_ref, project, groups, environment, ca_bundle, ca_provider)| {
                v1beta1::GitlabProvider {
                    url,
                    auth: v1beta1::GitlabAuth { secret_ref },
                    project,
                    groups,
                    environment,
                    ca_bundle,
                    ca_provider,
                }
            },
        )
        .boxed()
}

support::round_trip_proptests!(
    DESCRIPTOR,
    alpha: alpha_spec(),
    beta: beta_spec(),
    valid_beta: one_group_setting,
);

/// Each v1alpha1 field, where v1beta1 keeps it: `(case, v1alpha1 fields, v1beta1 fields)`, the
/// token added to both.
fn fields() -> Vec<(&'static str, Value, Value)> {
    vec![
        ("auth", json!({}), json!({})),
        (
            "url",
            json!({"url": "https://gitlab.example.com/"}),
            json!({"url": "https://gitlab.example.com/"}),
        ),
        (
            "projectID",
            json!({"projectID": "acme/app"}),
            json!({"project": "acme/app"}),
        ),
        (
            "groupIDs",
            json!({"groupIDs": ["42", "acme/platform"]}),
            json!({"groups": {"ids": ["42", "acme/platform"]}}),
        ),
        (
            "groupIDs empty",
            json!({"groupIDs": []}),
            json!({"groups": {"ids": []}}),
        ),
        (
            "inheritFromGroups",
            json!({"inheritFromGroups": true}),
            json!({"groups": {"inherit": true}}),
        ),
        (
            "inheritFromGroups false",
            json!({"inheritFromGroups": false}),
            json!({"groups": {"inherit": false}}),
        ),
        (
            "environment",
            json!({"environment": "production"}),
            json!({"environment": "production"}),
        ),
        (
            "caBundle",
            json!({"caBundle": "aGVsbG8="}),
            json!({"caBundle": "aGVsbG8="}),
        ),
        (
            "caProvider",
            json!({"caProvider": {"type": "ConfigMap", "name": "ca", "key": "ca.crt", "namespace": "ops"}}),
            json!({"caProvider": {"type": "ConfigMap", "name": "ca", "key": "ca.crt", "namespace": "ops"}}),
        ),
        (
            "every field",
            json!({
                "url": "https://gitlab.example.com/", "projectID": "1234", "groupIDs": ["1"],
                "environment": "staging", "caBundle": "aGVsbG8=", "caProvider": {"type": "Secret", "name": "ca"},
            }),
            json!({
                "url": "https://gitlab.example.com/", "project": "1234", "groups": {"ids": ["1"]},
                "environment": "staging", "caBundle": "aGVsbG8=", "caProvider": {"type": "Secret", "name": "ca"},
            }),
        ),
    ]
}

#[test]
fn each_field_lands_where_v1beta1_spells_it() {
    let token =
        json!({"accessToken": {"name": "gitlab-token", "key": "token", "namespace": "ops"}});
    for (case, mut alpha, mut beta) in fields() {
        alpha["auth"] = json!({"SecretRef": token});
        beta["auth"] = json!({"secretRef": token});
        support::moves(&DESCRIPTOR, case, alpha, beta);
    }
}

/// What one version holds that the other cannot: `(case, version, spec, the spec at the other
/// version, the annotation it carries)`. Each comes back unchanged.
#[test]
fn what_the_other_version_cannot_hold_rides_in_an_annotation() {
    let cases = [
        (
            "a list beside inheritFromGroups: ESO reads the ancestors",
            "v1alpha1",
            json!({"groupIDs": ["1", "2"], "inheritFromGroups": true}),
            json!({"groups": {"inherit": true}}),
            V1ALPHA1_ONLY,
            json!({"groupIDs": ["1", "2"]}),
        ),
        (
            "a list beside inheritFromGroups: false",
            "v1alpha1",
            json!({"groupIDs": ["1"], "inheritFromGroups": false}),
            json!({"groups": {"ids": ["1"]}}),
            V1ALPHA1_ONLY,
            json!({"inheritFromGroups": false}),
        ),
        (
            "groups left empty",
            "v1beta1",
            json!({"groups": {}}),
            json!({}),
            V1BETA1_ONLY,
            json!({"groups": {}}),
        ),
        (
            "both group settings, which the CEL rule refuses",
            "v1beta1",
            json!({"groups": {"ids": ["1"], "inherit": true}}),
            json!({"groupIDs": ["1"], "inheritFromGroups": true}),
            V1BETA1_ONLY,
            json!({"groups": {"ids": ["1"]}}),
        ),
    ];
    for (case, version, mut spec, mut other, key, leftover) in cases {
        let other_version = if version == "v1alpha1" {
            spec["auth"] = json!({"SecretRef": {}});
            other["auth"] = json!({"secretRef": {}});
            "v1beta1"
        } else {
            spec["auth"] = json!({"secretRef": {}});
            other["auth"] = json!({"SecretRef": {}});
            "v1alpha1"
        };
        let original = gitlab(version, spec);
        let converted = convert(original.clone(), other_version).unwrap();
        assert_eq!(converted["spec"], other, "{case}");
        assert_eq!(annotation(&converted, key), Some(leftover), "{case}");
        assert_eq!(
            convert(converted, version).unwrap(),
            original,
            "{case}: restored, annotation removed"
        );
    }
}

/// An annotation written before the object was edited at v1beta1 must not change which groups
/// are read: `(case, the edited v1beta1 groups, the stale leftover, the v1alpha1 groups)`.
#[test]
fn a_stale_annotation_never_changes_the_groups_read() {
    let cases = [
        (
            "a new list over a stale one",
            json!({"groups": {"ids": ["new"]}}),
            json!({"groupIDs": ["stale"]}),
            json!({"groupIDs": ["new"]}),
        ),
        (
            "no groups now",
            json!({}),
            json!({"groupIDs": ["stale"]}),
            json!({}),
        ),
        (
            "inheriting now, against a stale false",
            json!({"groups": {"inherit": true}}),
            json!({"inheritFromGroups": false}),
            json!({"inheritFromGroups": true}),
        ),
        (
            "a list now, against a stale true",
            json!({"groups": {"ids": ["new"]}}),
            json!({"inheritFromGroups": true}),
            json!({"groupIDs": ["new"]}),
        ),
        (
            "still inheriting: the list ESO ignores comes back",
            json!({"groups": {"inherit": true}, "environment": "edited"}),
            json!({"groupIDs": ["1"]}),
            json!({"groupIDs": ["1"], "inheritFromGroups": true, "environment": "edited"}),
        ),
    ];
    for (case, mut beta, stale, mut alpha) in cases {
        beta["auth"] = json!({"secretRef": {}});
        alpha["auth"] = json!({"SecretRef": {}});
        let mut object = gitlab("v1beta1", beta);
        object["metadata"]["annotations"] = json!({V1ALPHA1_ONLY: stale.to_string()});
        let converted = convert(object, "v1alpha1").unwrap();
        assert_eq!(converted["spec"], alpha, "{case}");
    }
}

#[test]
fn errors_name_the_kind_and_the_field() {
    let fails = |object, version: &str, field: &str, words: &str| {
        let to = format!("{PROVIDERS_GROUP}/{version}");
        support::refused(&DESCRIPTOR, object, &to, field, words)
    };
    let ok = || gitlab("v1alpha1", json!({"auth": {"SecretRef": {}}}));
    fails(
        ok(),
        "v2",
        "desiredAPIVersion",
        "Gitlab is not served at v2",
    );
    let mut vault = ok();
    vault["kind"] = json!("Vault");
    fails(
        vault,
        "v1beta1",
        "kind",
        "not converted by the Gitlab converter",
    );
    fails(
        gitlab("v1alpha1", json!({"auth": {"secretRef": {}}})),
        "v1beta1",
        "spec.auth",
        "missing field `SecretRef`",
    );
    fails(
        gitlab(
            "v1beta1",
            json!({"auth": {"secretRef": {}}, "groups": {"ids": "1"}}),
        ),
        "v1alpha1",
        "spec.groups.ids",
        "expected a sequence",
    );
}
