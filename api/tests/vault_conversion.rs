//! The Vault converter between v1alpha1 and v1beta1 loses nothing: any object of either version
//! comes back unchanged after a trip through the other (property tests over every field, several
//! login methods included), each field lands where v1beta1 groups it, and whatever the other
//! version cannot hold rides in an annotation that the way back removes.

mod support;

use std::collections::BTreeMap;

use external_secrets_api::PROVIDERS_GROUP;
use external_secrets_api::provider_kinds::{ConversionError, Scope};
use external_secrets_api::providers::vault::conversion::{V1ALPHA1_ONLY, V1BETA1_ONLY};
use external_secrets_api::providers::vault::{
    DESCRIPTOR, GcpSecretRef, GcpWorkloadIdentity, VaultAppRole, VaultAuth, VaultAwsAuthSecretRef,
    VaultAwsJwtAuth, VaultCertAuth, VaultCheckAndSet, VaultClientTls, VaultGcpAuth, VaultIamAuth,
    VaultJwtAuth, VaultKubernetesAuth, VaultKubernetesServiceAccountTokenAuth, VaultKvVersion,
    VaultLdapAuth, VaultProvider, VaultUserPassAuth, v1beta1,
};
use proptest::collection::{btree_map, vec};
use proptest::option::of as opt;
use proptest::prelude::*;
use serde_json::{Value, json};
use support::{annotation, bytes, ca_provider, secret_key, service_account, text, word};

fn convert(object: Value, version: &str) -> Result<Value, ConversionError> {
    support::convert(&DESCRIPTOR, object, version)
}

fn vault(group: &str, version: &str, spec: Value) -> Value {
    support::provider_object(&DESCRIPTOR, group, version, spec)
}

/// The number of login methods a v1beta1 spec sets, which the CRD's CEL rule requires to be 1.
fn methods(spec: &Value) -> usize {
    spec["auth"].as_object().map_or(0, |auth| {
        auth.keys().filter(|k| k.as_str() != "namespace").count()
    })
}

// Strategies for the Vault fields of both versions.

fn headers() -> BoxedStrategy<BTreeMap<String, String>> {
    btree_map("X-[A-Za-z-]{1,8}", text(), 0..3).boxed()
}

fn check_and_set() -> BoxedStrategy<VaultCheckAndSet> {
    opt(any::<bool>())
        .prop_map(|required| VaultCheckAndSet { required })
        .boxed()
}

fn app_role() -> BoxedStrategy<VaultAppRole> {
    (opt(text()), opt(text()), opt(secret_key()), secret_key())
        .prop_map(|(path, role_id, role_ref, secret_ref)| VaultAppRole {
            path,
            role_id,
            role_ref,
            secret_ref,
        })
        .boxed()
}

fn kubernetes() -> BoxedStrategy<VaultKubernetesAuth> {
    (
        opt(text()),
        opt(service_account()),
        opt(secret_key()),
        text(),
    )
        .prop_map(
            |(mount_path, service_account_ref, secret_ref, role)| VaultKubernetesAuth {
                mount_path,
                service_account_ref,
                secret_ref,
                role,
            },
        )
        .boxed()
}

fn ldap() -> BoxedStrategy<VaultLdapAuth> {
    (opt(text()), text(), opt(secret_key()))
        .prop_map(|(path, username, secret_ref)| VaultLdapAuth {
            path,
            username,
            secret_ref,
        })
        .boxed()
}

fn user_pass() -> BoxedStrategy<VaultUserPassAuth> {
    (opt(text()), text(), opt(secret_key()))
        .prop_map(|(path, username, secret_ref)| VaultUserPassAuth {
            path,
            username,
            secret_ref,
        })
        .boxed()
}

fn jwt() -> BoxedStrategy<VaultJwtAuth> {
    let token = (service_account(), opt(vec(text(), 0..3)), opt(any::<i64>())).prop_map(
        |(service_account_ref, audiences, expiration_seconds)| {
            VaultKubernetesServiceAccountTokenAuth {
                service_account_ref,
                audiences,
                expiration_seconds,
            }
        },
    );
    (opt(text()), opt(text()), opt(secret_key()), opt(token))
        .prop_map(
            |(path, role, secret_ref, kubernetes_service_account_token)| VaultJwtAuth {
                path,
                role,
                secret_ref,
                kubernetes_service_account_token,
            },
        )
        .boxed()
}

fn cert() -> BoxedStrategy<VaultCertAuth> {
    (
        opt(text()),
        opt(text()),
        opt(secret_key()),
        opt(secret_key()),
    )
        .prop_map(
            |(path, vault_role, client_cert, secret_ref)| VaultCertAuth {
                path,
                vault_role,
                client_cert,
                secret_ref,
            },
        )
        .boxed()
}

fn iam() -> BoxedStrategy<VaultIamAuth> {
    let secret_ref = (opt(secret_key()), opt(secret_key()), opt(secret_key())).prop_map(
        |(access_key_id, secret_access_key, session_token)| VaultAwsAuthSecretRef {
            access_key_id,
            secret_access_key,
            session_token,
        },
    );
    let jwt = opt(service_account()).prop_map(|service_account_ref| VaultAwsJwtAuth {
        service_account_ref,
    });
    (
        opt(text()),
        opt(text()),
        opt(text()),
        text(),
        opt(text()),
        opt(text()),
        opt(secret_ref),
        opt(jwt),
    )
        .prop_map(
            |(
                path,
                region,
                aws_iam_role,
                vault_role,
                external_id,
                vault_aws_iam_server_id,
                secret_ref,
                jwt_auth,
            )| VaultIamAuth {
                path,
                region,
                aws_iam_role,
                vault_role,
                external_id,
                vault_aws_iam_server_id,
                secret_ref,
                jwt_auth,
            },
        )
        .boxed()
}

fn gcp() -> BoxedStrategy<VaultGcpAuth> {
    let secret_ref =
        opt(secret_key()).prop_map(|secret_access_key| GcpSecretRef { secret_access_key });
    let workload_identity = (service_account(), opt(text()), opt(text()), opt(text())).prop_map(
        |(service_account_ref, cluster_location, cluster_name, cluster_project_id)| {
            GcpWorkloadIdentity {
                service_account_ref,
                cluster_location,
                cluster_name,
                cluster_project_id,
            }
        },
    );
    (
        opt(text()),
        text(),
        opt(text()),
        opt(text()),
        opt(secret_ref),
        opt(workload_identity),
        opt(service_account()),
    )
        .prop_map(
            |(
                path,
                role,
                project_id,
                location,
                secret_ref,
                workload_identity,
                service_account_ref,
            )| VaultGcpAuth {
                path,
                role,
                project_id,
                location,
                secret_ref,
                workload_identity,
                service_account_ref,
            },
        )
        .boxed()
}

/// Any subset of the methods, so several (and none) are covered too.
fn alpha_auth() -> BoxedStrategy<VaultAuth> {
    (
        opt(word()),
        opt(secret_key()),
        opt(app_role()),
        opt(kubernetes()),
        opt(ldap()),
        opt(jwt()),
        opt(cert()),
        opt(iam()),
        opt(user_pass()),
        opt(gcp()),
    )
        .prop_map(
            |(
                namespace,
                token_secret_ref,
                app_role,
                kubernetes,
                ldap,
                jwt,
                cert,
                iam,
                user_pass,
                gcp,
            )| {
                VaultAuth {
                    namespace,
                    token_secret_ref,
                    app_role,
                    kubernetes,
                    ldap,
                    jwt,
                    cert,
                    iam,
                    user_pass,
                    gcp,
                }
            },
        )
        .boxed()
}

fn alpha_spec() -> BoxedStrategy<VaultProvider> {
    let client_tls =
        (opt(secret_key()), opt(secret_key())).prop_map(|(cert_secret_ref, key_secret_ref)| {
            VaultClientTls {
                cert_secret_ref,
                key_secret_ref,
            }
        });
    (
        opt(alpha_auth()),
        text(),
        opt(text()),
        opt(prop_oneof![
            Just(VaultKvVersion::V1),
            Just(VaultKvVersion::V2)
        ]),
        opt(word()),
        opt(bytes()),
        opt(client_tls),
        opt(ca_provider()),
        opt(any::<bool>()),
        opt(any::<bool>()),
        opt(headers()),
        opt(check_and_set()),
    )
        .prop_map(
            |(
                auth,
                server,
                path,
                version,
                namespace,
                ca_bundle,
                client_tls,
                ca_provider,
                read_your_writes,
                forward_inconsistent,
                headers,
                check_and_set,
            )| VaultProvider {
                auth,
                server,
                path,
                version,
                namespace,
                ca_bundle,
                client_tls,
                ca_provider,
                read_your_writes,
                forward_inconsistent,
                headers,
                check_and_set,
            },
        )
        .boxed()
}

/// Any subset of the methods: the CEL rule refuses all but one, yet the converter must not lose
/// the others should such an object reach it.
fn beta_auth() -> BoxedStrategy<v1beta1::VaultAuth> {
    alpha_auth()
        .prop_map(|a| v1beta1::VaultAuth {
            namespace: a.namespace,
            token_secret_ref: a.token_secret_ref,
            app_role: a.app_role,
            kubernetes: a.kubernetes,
            ldap: a.ldap,
            user_pass: a.user_pass,
            jwt: a.jwt,
            cert: a.cert,
            iam: a.iam,
            gcp: a.gcp,
        })
        .boxed()
}

fn beta_spec() -> BoxedStrategy<v1beta1::VaultProvider> {
    let kv = (
        opt(text()),
        opt(prop_oneof![
            Just(v1beta1::KvVersion::V1),
            Just(v1beta1::KvVersion::V2)
        ]),
    )
        .prop_map(|(mount_path, version)| v1beta1::VaultKv {
            mount_path,
            version,
        });
    let tls = (
        opt(bytes()),
        opt(ca_provider()),
        opt(secret_key()),
        opt(secret_key()),
    )
        .prop_map(
            |(ca_bundle, ca_provider, client_cert, client_key)| v1beta1::VaultTls {
                ca_bundle,
                ca_provider,
                client_cert,
                client_key,
            },
        );
    (
        opt(beta_auth()),
        text(),
        opt(kv),
        opt(word()),
        opt(tls),
        opt(any::<bool>()),
        opt(any::<bool>()),
        opt(headers()),
        opt(check_and_set()),
    )
        .prop_map(
            |(
                auth,
                server,
                kv,
                namespace,
                tls,
                read_your_writes,
                forward_inconsistent,
                headers,
                check_and_set,
            )| v1beta1::VaultProvider {
                auth,
                server,
                kv,
                namespace,
                tls,
                read_your_writes,
                forward_inconsistent,
                headers,
                check_and_set,
            },
        )
        .boxed()
}

// A spec converted to v1beta1 holds at most the one login method ESO would use.
support::round_trip_proptests!(
    DESCRIPTOR,
    alpha: alpha_spec(),
    beta: beta_spec(),
    valid_beta: |spec| methods(spec) <= 1,
);

/// `alpha` (a v1alpha1 spec, `server` added) converts to exactly `beta` with no annotation, and
/// both come back unchanged.
fn moves(case: &str, mut alpha: Value, mut beta: Value) {
    for spec in [&mut alpha, &mut beta] {
        if spec.get("server").is_none() {
            spec["server"] = json!("https://vault:8200");
        }
    }
    support::moves(&DESCRIPTOR, case, alpha, beta);
}

/// One test per field of v1alpha1: where v1beta1 keeps it, and that it comes back.
macro_rules! each_field_survives {
    ($($test:ident: $alpha:tt => $beta:tt;)+) => {$(
        #[test]
        fn $test() {
            super::moves(stringify!($test), serde_json::json!($alpha), serde_json::json!($beta));
        }
    )+};
}

/// Named after the v1alpha1 field.
mod each_field {
    each_field_survives! {
        server: {"server": "https://vault.example.com:8200"} => {"server": "https://vault.example.com:8200"};
        path: {"path": "secret"} => {"kv": {"mountPath": "secret"}};
        version_v1: {"version": "v1"} => {"kv": {"version": 1}};
        version_v2: {"version": "v2"} => {"kv": {"version": 2}};
        path_and_version: {"path": "kv", "version": "v1"} => {"kv": {"mountPath": "kv", "version": 1}};
        namespace: {"namespace": "team-a"} => {"namespace": "team-a"};
        ca_bundle: {"caBundle": "aGVsbG8="} => {"tls": {"caBundle": "aGVsbG8="}};
        ca_provider: {"caProvider": {"type": "ConfigMap", "name": "ca", "key": "ca.crt", "namespace": "ops"}}
            => {"tls": {"caProvider": {"type": "ConfigMap", "name": "ca", "key": "ca.crt", "namespace": "ops"}}};
        tls_cert_secret_ref: {"tls": {"certSecretRef": {"name": "client", "key": "tls.crt", "namespace": "ops"}}}
            => {"tls": {"clientCert": {"name": "client", "key": "tls.crt", "namespace": "ops"}}};
        tls_key_secret_ref: {"tls": {"keySecretRef": {"name": "client", "key": "tls.key"}}}
            => {"tls": {"clientKey": {"name": "client", "key": "tls.key"}}};
        every_tls_field: {
            "caBundle": "aGVsbG8=",
            "caProvider": {"type": "Secret", "name": "ca"},
            "tls": {"certSecretRef": {"name": "c"}, "keySecretRef": {"name": "k"}}
        } => {"tls": {
            "caBundle": "aGVsbG8=",
            "caProvider": {"type": "Secret", "name": "ca"},
            "clientCert": {"name": "c"},
            "clientKey": {"name": "k"}
        }};
        read_your_writes: {"readYourWrites": true} => {"readYourWrites": true};
        forward_inconsistent: {"forwardInconsistent": false} => {"forwardInconsistent": false};
        headers: {"headers": {"X-A": "1", "X-B": ""}} => {"headers": {"X-A": "1", "X-B": ""}};
        check_and_set: {"checkAndSet": {"required": true}} => {"checkAndSet": {"required": true}};
        check_and_set_empty: {"checkAndSet": {}} => {"checkAndSet": {}};
        auth_namespace: {"auth": {"namespace": "ns", "tokenSecretRef": {"name": "t"}}}
            => {"auth": {"namespace": "ns", "tokenSecretRef": {"name": "t"}}};
        auth_token: {"auth": {"tokenSecretRef": {"name": "t", "key": "token", "namespace": "ops"}}}
            => {"auth": {"tokenSecretRef": {"name": "t", "key": "token", "namespace": "ops"}}};
        auth_app_role: {"auth": {"appRole": {
            "path": "approle", "roleId": "id", "roleRef": {"name": "r", "key": "role-id"},
            "secretRef": {"name": "s", "key": "secret-id"}
        }}} => {"auth": {"appRole": {
            "path": "approle", "roleId": "id", "roleRef": {"name": "r", "key": "role-id"},
            "secretRef": {"name": "s", "key": "secret-id"}
        }}};
        auth_kubernetes: {"auth": {"kubernetes": {
            "mountPath": "k8s", "role": "demo", "secretRef": {"name": "t"},
            "serviceAccountRef": {"name": "sa", "namespace": "ops", "audiences": ["vault"]}
        }}} => {"auth": {"kubernetes": {
            "mountPath": "k8s", "role": "demo", "secretRef": {"name": "t"},
            "serviceAccountRef": {"name": "sa", "namespace": "ops", "audiences": ["vault"]}
        }}};
        auth_ldap: {"auth": {"ldap": {"path": "ldap", "username": "u", "secretRef": {"name": "p"}}}}
            => {"auth": {"ldap": {"path": "ldap", "username": "u", "secretRef": {"name": "p"}}}};
        auth_user_pass: {"auth": {"userPass": {"path": "up", "username": "u", "secretRef": {"name": "p"}}}}
            => {"auth": {"userPass": {"path": "up", "username": "u", "secretRef": {"name": "p"}}}};
        auth_jwt: {"auth": {"jwt": {
            "path": "jwt", "role": "r", "secretRef": {"name": "j"},
            "kubernetesServiceAccountToken": {
                "serviceAccountRef": {"name": "sa"}, "audiences": ["a"], "expirationSeconds": 600
            }
        }}} => {"auth": {"jwt": {
            "path": "jwt", "role": "r", "secretRef": {"name": "j"},
            "kubernetesServiceAccountToken": {
                "serviceAccountRef": {"name": "sa"}, "audiences": ["a"], "expirationSeconds": 600
            }
        }}};
        auth_cert: {"auth": {"cert": {
            "path": "cert", "vaultRole": "r", "clientCert": {"name": "c"}, "secretRef": {"name": "k"}
        }}} => {"auth": {"cert": {
            "path": "cert", "vaultRole": "r", "clientCert": {"name": "c"}, "secretRef": {"name": "k"}
        }}};
        auth_iam: {"auth": {"iam": {
            "path": "aws", "region": "eu-west-1", "role": "arn:aws:iam::1:role/r", "vaultRole": "v",
            "externalID": "e", "vaultAwsIamServerID": "s",
            "secretRef": {
                "accessKeyIDSecretRef": {"name": "a"},
                "secretAccessKeySecretRef": {"name": "b"},
                "sessionTokenSecretRef": {"name": "c"}
            },
            "jwt": {"serviceAccountRef": {"name": "irsa"}}
        }}} => {"auth": {"iam": {
            "path": "aws", "region": "eu-west-1", "role": "arn:aws:iam::1:role/r", "vaultRole": "v",
            "externalID": "e", "vaultAwsIamServerID": "s",
            "secretRef": {
                "accessKeyIDSecretRef": {"name": "a"},
                "secretAccessKeySecretRef": {"name": "b"},
                "sessionTokenSecretRef": {"name": "c"}
            },
            "jwt": {"serviceAccountRef": {"name": "irsa"}}
        }}};
        auth_gcp: {"auth": {"gcp": {
            "path": "gcp", "role": "r", "projectID": "p", "location": "l",
            "secretRef": {"secretAccessKeySecretRef": {"name": "k"}},
            "workloadIdentity": {
                "serviceAccountRef": {"name": "wi"}, "clusterLocation": "cl", "clusterName": "cn",
                "clusterProjectID": "cp"
            },
            "serviceAccountRef": {"name": "imp"}
        }}} => {"auth": {"gcp": {
            "path": "gcp", "role": "r", "projectID": "p", "location": "l",
            "secretRef": {"secretAccessKeySecretRef": {"name": "k"}},
            "workloadIdentity": {
                "serviceAccountRef": {"name": "wi"}, "clusterLocation": "cl", "clusterName": "cn",
                "clusterProjectID": "cp"
            },
            "serviceAccountRef": {"name": "imp"}
        }}};
    }
}

#[test]
fn several_login_methods_keep_all_but_esos_choice_in_an_annotation() {
    let alpha = json!({
        "apiVersion": "cluster.providers.external-secrets.io/v1alpha1",
        "kind": "Vault",
        "metadata": {"name": "vault", "annotations": {"team": "a"}},
        "spec": {
            "server": "https://vault:8200",
            "auth": {
                "namespace": "ns",
                "gcp": {"role": "g"},
                "kubernetes": {"role": "k"},
                "ldap": {"username": "l"},
            },
        },
    });
    let beta = convert(alpha.clone(), "v1beta1").unwrap();
    // ESO logs in with the first method in its order: kubernetes before ldap before gcp.
    assert_eq!(
        beta["spec"]["auth"],
        json!({"namespace": "ns", "kubernetes": {"role": "k"}})
    );
    assert_eq!(
        annotation(&beta, V1ALPHA1_ONLY),
        Some(json!({"auth": {"gcp": {"role": "g"}, "ldap": {"username": "l"}}}))
    );
    assert_eq!(beta["metadata"]["annotations"]["team"], "a");
    let back = convert(beta, "v1alpha1").unwrap();
    assert_eq!(back, alpha, "restored, annotation removed");
}

#[test]
fn login_settings_without_a_method_survive() {
    for auth in [json!({"namespace": "ns"}), json!({})] {
        let alpha = vault(
            PROVIDERS_GROUP,
            "v1alpha1",
            json!({"server": "s", "auth": auth}),
        );
        let beta = convert(alpha.clone(), "v1beta1").unwrap();
        assert_eq!(
            beta["spec"],
            json!({"server": "s"}),
            "v1beta1 has no auth without a method"
        );
        assert_eq!(
            annotation(&beta, V1ALPHA1_ONLY),
            Some(json!({"auth": auth}))
        );
        assert_eq!(convert(beta, "v1alpha1").unwrap(), alpha);
    }
}

#[test]
fn groups_left_empty_survive() {
    let alpha = vault(
        PROVIDERS_GROUP,
        "v1alpha1",
        json!({"server": "s", "tls": {}}),
    );
    let beta = convert(alpha.clone(), "v1beta1").unwrap();
    assert_eq!(beta["spec"], json!({"server": "s", "tls": {}}));
    assert_eq!(convert(beta, "v1alpha1").unwrap(), alpha);

    let beta = vault(
        PROVIDERS_GROUP,
        "v1beta1",
        json!({"server": "s", "kv": {}, "tls": {}}),
    );
    let alpha = convert(beta.clone(), "v1alpha1").unwrap();
    assert_eq!(alpha["spec"], json!({"server": "s"}));
    assert_eq!(
        annotation(&alpha, V1BETA1_ONLY),
        Some(json!({"kv": {}, "tls": {}}))
    );
    assert_eq!(convert(alpha, "v1beta1").unwrap(), beta);
}

/// An annotation written before the object was edited at the other version must not change
/// which method logs in: it may only add methods ESO ignores.
#[test]
fn a_stale_annotation_never_changes_the_login_method() {
    let mut beta = vault(
        PROVIDERS_GROUP,
        "v1beta1",
        json!({"server": "s", "auth": {"kubernetes": {"role": "k"}}}),
    );
    beta["metadata"]["annotations"] = json!({
        V1ALPHA1_ONLY: json!({"auth": {
            "namespace": "stale",
            "tokenSecretRef": {"name": "stale"},
            "kubernetes": {"role": "stale"},
            "gcp": {"role": "g"},
        }}).to_string()
    });
    let alpha = convert(beta, "v1alpha1").unwrap();
    assert_eq!(
        alpha["spec"]["auth"],
        json!({"kubernetes": {"role": "k"}, "gcp": {"role": "g"}})
    );
    assert!(alpha["metadata"].get("annotations").is_none());

    // Without any method left, the stale methods go too rather than log in.
    let mut beta = vault(PROVIDERS_GROUP, "v1beta1", json!({"server": "s"}));
    beta["metadata"]["annotations"] =
        json!({V1ALPHA1_ONLY: json!({"auth": {"ldap": {"username": "u"}}}).to_string()});
    let alpha = convert(beta, "v1alpha1").unwrap();
    assert_eq!(alpha["spec"], json!({"server": "s"}));
}

#[test]
fn an_object_at_the_requested_version_is_unchanged() {
    let object = vault(PROVIDERS_GROUP, "v1beta1", json!({"server": "s", "kv": {}}));
    assert_eq!(convert(object.clone(), "v1beta1").unwrap(), object);
}

#[test]
fn bad_input_is_an_error_naming_the_field() {
    let ok = || vault(PROVIDERS_GROUP, "v1alpha1", json!({"server": "s"}));
    let fails = |object, to: &str, field: &str, words: &str| {
        support::refused(&DESCRIPTOR, object, to, field, words)
    };
    fails(
        ok(),
        "providers.external-secrets.io/v2",
        "desiredAPIVersion",
        "not served at v2",
    );
    fails(
        ok(),
        "cluster.providers.external-secrets.io/v1beta1",
        "desiredAPIVersion",
        "another group",
    );
    fails(ok(), "v1beta1", "desiredAPIVersion", "<group>/<version>");
    let mut object = ok();
    object["apiVersion"] = json!("providers.external-secrets.io/v9");
    fails(
        object,
        "providers.external-secrets.io/v1beta1",
        "apiVersion",
        "not served at v9",
    );
    let mut object = ok();
    object["apiVersion"] = json!("external-secrets.io/v1alpha1");
    fails(
        object,
        "external-secrets.io/v1beta1",
        "apiVersion",
        "not a provider group",
    );
    let mut object = ok();
    object["apiVersion"] = json!(7);
    fails(
        object,
        "providers.external-secrets.io/v1beta1",
        "apiVersion",
        "missing",
    );
    let mut object = ok();
    object["kind"] = json!("Fake");
    fails(
        object,
        "providers.external-secrets.io/v1beta1",
        "kind",
        "Fake",
    );
    let mut object = ok();
    object.as_object_mut().unwrap().remove("spec");
    fails(
        object,
        "providers.external-secrets.io/v1beta1",
        "spec",
        "missing",
    );

    let to_beta = "providers.external-secrets.io/v1beta1";
    let spec = |spec: Value| vault(PROVIDERS_GROUP, "v1alpha1", spec);
    fails(spec(json!({})), to_beta, "spec", "missing field `server`");
    fails(
        spec(json!({"server": "s", "auth": {"kubernetes": {"role": 5}}})),
        to_beta,
        "spec.auth.kubernetes.role",
        "expected a string",
    );
    fails(
        spec(json!({"server": "s", "version": "v3"})),
        to_beta,
        "spec.version",
        "v3",
    );
    fails(
        vault(
            PROVIDERS_GROUP,
            "v1beta1",
            json!({"server": "s", "kv": {"version": 3}}),
        ),
        "providers.external-secrets.io/v1alpha1",
        "spec.kv.version",
        "expected 1 or 2",
    );

    let mut object = ok();
    object["metadata"]["annotations"] = json!({V1BETA1_ONLY: "{not json"});
    fails(
        object,
        to_beta,
        &format!("metadata.annotations[{V1BETA1_ONLY}]"),
        "not JSON",
    );
    let mut object = ok();
    object["metadata"]["annotations"] =
        json!({V1BETA1_ONLY: json!({"kv": {"version": "two"}}).to_string()});
    fails(
        object,
        to_beta,
        &format!("metadata.annotations[{V1BETA1_ONLY}].kv.version"),
        "invalid type",
    );
    let mut object = ok();
    object["metadata"]["annotations"] = json!(["a"]);
    fails(object, to_beta, "metadata.annotations", "not an object");
    fails(json!([1]), to_beta, "apiVersion", "missing");
}

#[test]
fn roundtrip_reads_each_object_with_the_type_of_its_own_version() {
    let beta = vault(
        PROVIDERS_GROUP,
        "v1beta1",
        json!({"server": "s", "kv": {"mountPath": "secret", "version": 2}}),
    );
    assert_eq!(
        DESCRIPTOR
            .roundtrip(Scope::Namespaced, beta.clone())
            .unwrap(),
        beta
    );
    let mut unserved = beta;
    unserved["apiVersion"] = json!("providers.external-secrets.io/v2");
    let e = DESCRIPTOR
        .roundtrip(Scope::Namespaced, unserved)
        .unwrap_err();
    assert!(e.to_string().contains("not served at v2"), "{e}");
}
