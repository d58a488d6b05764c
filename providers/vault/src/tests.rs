use serde_json::json;

use super::*;

fn check(spec: Value) -> Result<SpecReport> {
    Vault::default().validate_spec(&spec)
}

#[test]
fn unsupported_and_incomplete_logins_name_their_field() {
    let server = "http://vault:8200";
    let message = |auth: Value| {
        check(json!({"server": server, "auth": auth}))
            .unwrap_err()
            .to_string()
    };
    assert!(
        message(json!({"iam": {"vaultRole": "r"}}))
            .contains("auth.iam: AWS IAM login is not supported")
    );
    assert!(message(json!({"gcp": {"role": "r"}})).contains("auth.gcp:"));
    assert!(
        message(json!({"appRole": {"secretRef": {"name": "s"}}}))
            .contains("auth.appRole: set roleId or roleRef")
    );
    assert!(
        message(json!({"kubernetes": {"role": "r"}}))
            .contains("auth.kubernetes: set serviceAccountRef or secretRef")
    );
    assert!(
        message(json!({"userPass": {"username": "u"}}))
            .contains("auth.userPass.secretRef is required")
    );
    assert!(message(json!({"jwt": {"role": "r"}})).contains("auth.jwt: set secretRef"));
    assert!(message(json!({"cert": {"vaultRole": "r"}})).contains("auth.cert: set clientCert"));
    assert!(
        check(json!({"server": "vault:8200"}))
            .unwrap_err()
            .to_string()
            .contains("server:")
    );
    let ok = check(json!({"server": "https://vault:8200", "readYourWrites": true, "auth": {"appRole": {"roleId": "r", "secretRef": {"name": "s"}}}})).unwrap();
    assert!(ok.warnings.is_empty(), "{ok:?}");
    let anonymous = check(json!({"server": server})).unwrap();
    assert!(
        anonymous
            .warnings
            .iter()
            .any(|w| w.contains("auth is not set")),
        "{anonymous:?}"
    );
}

/// Accepted, as ESO does for local dev servers, but said: the token travels in clear.
#[test]
fn an_http_server_is_warned_about() {
    let auth = json!({"appRole": {"roleId": "r", "secretRef": {"name": "s"}}});
    let clear = check(json!({"server": "http://vault:8200", "auth": auth})).unwrap();
    assert_eq!(
        clear.warnings,
        ["server uses http://: the Vault token is sent in clear"]
    );
    let tls = check(json!({"server": "https://vault:8200", "auth": auth})).unwrap();
    assert!(tls.warnings.is_empty(), "{tls:?}");
}

#[test]
fn the_first_method_in_esos_order_wins() {
    let auth: VaultAuth = serde_json::from_value(json!({
        "userPass": {"username": "u", "secretRef": {"name": "p", "namespace": "ns"}},
        "appRole": {"roleId": "r", "secretRef": {"name": "s", "namespace": "ns"}},
    }))
    .unwrap();
    assert_eq!(login(&auth, false).unwrap().method(), "approle");
}
