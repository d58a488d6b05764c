//! What the converter tests of every kind with two versions share: whole objects around a spec,
//! strategies for the types of `meta`, and the round-trip checks themselves, so that each kind's
//! test only says what its fields are and where they go.

// Each test crate uses part of it.
#![allow(dead_code)]

use external_secrets_api::meta::{
    CaProvider, CaProviderType, SecretKeySelector, ServiceAccountSelector,
};
use external_secrets_api::provider_kinds::{ConversionError, Descriptor, Scope};
use external_secrets_api::{CLUSTER_PROVIDERS_GROUP, PROVIDERS_GROUP};
use k8s_openapi::ByteString;
use proptest::collection::{btree_map, vec};
use proptest::option::of as opt;
use proptest::prelude::*;
use serde_json::{Value, json};

/// Converts `object` to `version` in its own group with the kind's converter.
pub fn convert(
    descriptor: &Descriptor,
    object: Value,
    version: &str,
) -> Result<Value, ConversionError> {
    let group = object["apiVersion"]
        .as_str()
        .and_then(|a| a.split_once('/'))
        .map(|(g, _)| g.to_owned())
        .unwrap_or_default();
    let conversion = descriptor.conversion.expect("the kind has a conversion");
    (conversion.convert)(object, &format!("{group}/{version}"))
}

/// A namespaced object of the kind, named after it.
pub fn provider_object(descriptor: &Descriptor, group: &str, version: &str, spec: Value) -> Value {
    json!({
        "apiVersion": format!("{group}/{version}"),
        "kind": descriptor.kind,
        "metadata": {"name": descriptor.kind.to_lowercase(), "namespace": "default"},
        "spec": spec,
    })
}

/// The leftover the annotation `key` holds, parsed.
pub fn annotation(object: &Value, key: &str) -> Option<Value> {
    object["metadata"]["annotations"][key]
        .as_str()
        .map(|text| serde_json::from_str(text).expect("the annotation holds JSON"))
}

pub fn scope(object: &Value) -> Scope {
    let group = object["apiVersion"]
        .as_str()
        .unwrap()
        .split_once('/')
        .unwrap()
        .0;
    Scope::of_group(group).unwrap()
}

// Strategies for the shared types.

pub fn word() -> BoxedStrategy<String> {
    "[a-z][a-z0-9-]{0,6}".boxed()
}

pub fn text() -> BoxedStrategy<String> {
    "[ -~]{0,10}".boxed()
}

pub fn secret_key() -> BoxedStrategy<SecretKeySelector> {
    (opt(word()), opt(word()), opt(word()))
        .prop_map(|(name, namespace, key)| SecretKeySelector {
            name,
            namespace,
            key,
        })
        .boxed()
}

pub fn service_account() -> BoxedStrategy<ServiceAccountSelector> {
    (word(), opt(word()), opt(vec(text(), 0..3)))
        .prop_map(|(name, namespace, audiences)| ServiceAccountSelector {
            name,
            namespace,
            audiences,
        })
        .boxed()
}

pub fn ca_provider() -> BoxedStrategy<CaProvider> {
    (
        prop_oneof![
            Just(CaProviderType::Secret),
            Just(CaProviderType::ConfigMap)
        ],
        word(),
        opt(word()),
        opt(word()),
    )
        .prop_map(|(type_, name, key, namespace)| CaProvider {
            type_,
            name,
            key,
            namespace,
        })
        .boxed()
}

pub fn bytes() -> BoxedStrategy<ByteString> {
    vec(any::<u8>(), 0..16).prop_map(ByteString).boxed()
}

/// A whole object of the kind around `spec` at `version`: either group, the user's own
/// annotations and labels, a status.
pub fn object(
    descriptor: &'static Descriptor,
    version: &'static str,
    spec: Value,
) -> impl Strategy<Value = Value> {
    (
        prop_oneof![Just(PROVIDERS_GROUP), Just(CLUSTER_PROVIDERS_GROUP)],
        opt(btree_map("example.com/[a-z]{1,5}", text(), 1..3)),
        opt(btree_map("[a-z]{1,5}", word(), 1..3)),
        opt(any::<i64>()),
    )
        .prop_map(move |(group, annotations, labels, generation)| {
            let mut object = provider_object(descriptor, group, version, spec.clone());
            if group == CLUSTER_PROVIDERS_GROUP {
                object["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("namespace");
            }
            if let Some(annotations) = annotations {
                object["metadata"]["annotations"] = json!(annotations);
            }
            if let Some(labels) = labels {
                object["metadata"]["labels"] = json!(labels);
            }
            if let Some(generation) = generation {
                object["status"] = json!({
                    "observedGeneration": generation,
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Valid"}],
                    "capabilities": "ReadWrite",
                });
            }
            object
        })
}

/// `original` through `via` and back is unchanged, and what the API server would serve at `via`
/// is an object of that version: stable through its Rust type, and `valid` (what the CRD's CEL
/// rules require of it).
pub fn round_trips(
    descriptor: &Descriptor,
    original: &Value,
    via: &str,
    valid: fn(&Value) -> bool,
) -> Result<(), TestCaseError> {
    let converted = convert(descriptor, original.clone(), via).unwrap();
    prop_assert_eq!(
        converted["apiVersion"].as_str().unwrap().rsplit('/').next(),
        Some(via)
    );
    prop_assert_eq!(
        &descriptor
            .roundtrip(scope(&converted), converted.clone())
            .unwrap(),
        &converted
    );
    prop_assert!(valid(&converted["spec"]), "{}", converted["spec"]);
    let back = convert(descriptor, converted, version_of(original)).unwrap();
    prop_assert_eq!(&back, original);
    Ok(())
}

/// Twice through `via` and back is as good as once: the annotations do not pile up.
pub fn repeated_round_trips_are_stable(
    descriptor: &Descriptor,
    original: &Value,
    via: &str,
) -> Result<(), TestCaseError> {
    let converted = convert(descriptor, original.clone(), via).unwrap();
    let back = convert(descriptor, converted.clone(), version_of(original)).unwrap();
    let again = convert(descriptor, back, via).unwrap();
    prop_assert_eq!(again, converted);
    Ok(())
}

/// `alpha` (a v1alpha1 spec) converts to exactly `beta` with no annotation, `beta` to exactly
/// `alpha`, and each comes back unchanged; `case` names the failure.
pub fn moves(descriptor: &Descriptor, case: &str, alpha: Value, beta: Value) {
    let alpha = provider_object(descriptor, PROVIDERS_GROUP, "v1alpha1", alpha);
    let beta = provider_object(descriptor, PROVIDERS_GROUP, "v1beta1", beta);
    for (from, to, version) in [(&alpha, &beta, "v1beta1"), (&beta, &alpha, "v1alpha1")] {
        let converted = convert(descriptor, from.clone(), version).unwrap();
        assert_eq!(converted["spec"], to["spec"], "{case}: to {version}");
        assert_eq!(
            converted["metadata"], from["metadata"],
            "{case}: to {version} needs no annotation"
        );
        let back = convert(descriptor, converted, version_of(from)).unwrap();
        assert_eq!(&back, from, "{case}: to {version} and back");
    }
}

/// The version of `object`, from its `apiVersion`.
fn version_of(object: &Value) -> &str {
    object["apiVersion"]
        .as_str()
        .and_then(|a| a.rsplit('/').next())
        .unwrap()
}

/// The property tests of a kind with two versions, over every field: any object of either version
/// comes back unchanged through the other, and repeated trips do not pile up annotations.
/// `$valid_beta` is what the v1beta1 CRD's CEL rules require of a spec converted to v1beta1.
macro_rules! round_trip_proptests {
    ($descriptor:expr, alpha: $alpha_spec:expr, beta: $beta_spec:expr, valid_beta: $valid_beta:expr $(,)?) => {
        fn alpha_object() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
            proptest::strategy::Strategy::prop_flat_map($alpha_spec, |spec| {
                $crate::support::object(&$descriptor, "v1alpha1", serde_json::to_value(spec).unwrap())
            })
        }

        fn beta_object() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
            proptest::strategy::Strategy::prop_flat_map($beta_spec, |spec| {
                $crate::support::object(&$descriptor, "v1beta1", serde_json::to_value(spec).unwrap())
            })
        }

        proptest::proptest! {
            #![proptest_config(proptest::test_runner::Config::with_cases(512))]

            #[test]
            fn v1alpha1_through_v1beta1_is_the_identity(original in alpha_object()) {
                $crate::support::round_trips(&$descriptor, &original, "v1beta1", $valid_beta)?;
            }

            #[test]
            fn v1beta1_through_v1alpha1_is_the_identity(original in beta_object()) {
                $crate::support::round_trips(&$descriptor, &original, "v1alpha1", |_| true)?;
            }

            #[test]
            fn repeated_round_trips_are_stable(original in alpha_object()) {
                $crate::support::repeated_round_trips_are_stable(&$descriptor, &original, "v1beta1")?;
            }
        }
    };
}

pub(crate) use round_trip_proptests;

/// Converting `object` to `to_api_version` fails at `field`, with a message containing `words`.
pub fn refused(
    descriptor: &Descriptor,
    object: Value,
    to_api_version: &str,
    field: &str,
    words: &str,
) {
    let conversion = descriptor.conversion.expect("the kind has a conversion");
    let e = (conversion.convert)(object.clone(), to_api_version).unwrap_err();
    assert_eq!(e.field, field, "{object} to {to_api_version}: {e}");
    assert!(
        e.to_string().contains(words),
        "{object} to {to_api_version}: {e}"
    );
}
