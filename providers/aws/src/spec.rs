//! What a store's `spec.provider.aws` means, checked once: every field this provider does not
//! act on is refused naming it, never ignored.

use api::providers::aws::{AwsProvider, AwsSecretsManager};
use provider::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Service {
    SecretsManager,
    ParameterStore,
}

/// How Secrets Manager deletes a secret (ESO's `spec.provider.aws.secretsManager`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Deletion {
    pub force_without_recovery: bool,
    pub recovery_window_in_days: Option<i64>,
}

/// The parts of a spec the clients act on, after [`check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Checked {
    pub service: Service,
    pub prefix: String,
    pub deletion: Deletion,
}

fn invalid(message: impl Into<String>) -> Error {
    Error::InvalidSpec(message.into())
}

/// Static checks; errors name the field.
pub(crate) fn check(spec: &AwsProvider) -> Result<Checked> {
    let service = match spec.service.as_str() {
        "SecretsManager" => Service::SecretsManager,
        "ParameterStore" => Service::ParameterStore,
        "CertificateManager" => {
            return Err(invalid(
                "service: CertificateManager is not served by this operator; SecretsManager and ParameterStore are",
            ));
        }
        other => {
            return Err(invalid(format!(
                "service: {other:?} is not one of SecretsManager, ParameterStore"
            )));
        }
    };
    let region_ok = !spec.region.is_empty()
        && spec
            .region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !region_ok {
        return Err(invalid(format!(
            "region: {:?} is not an AWS region name such as eu-central-1",
            spec.region
        )));
    }
    check_auth(spec)?;
    check_roles(spec)?;
    let deletion = match &spec.secrets_manager {
        None => Deletion::default(),
        Some(sm) => deletion(sm)?,
    };
    Ok(Checked {
        service,
        prefix: spec.prefix.clone().unwrap_or_default(),
        deletion,
    })
}

fn check_auth(spec: &AwsProvider) -> Result<()> {
    let Some(auth) = &spec.auth else {
        return Ok(());
    };
    if auth.secret_ref.is_some() && auth.jwt.is_some() {
        return Err(invalid(
            "auth: secretRef and jwt are exclusive; give one (neither means the pod's own credentials)",
        ));
    }
    if let Some(secret_ref) = &auth.secret_ref {
        let selectors = [
            ("accessKeyIDSecretRef", Some(&secret_ref.access_key_id)),
            (
                "secretAccessKeySecretRef",
                Some(&secret_ref.secret_access_key),
            ),
            ("sessionTokenSecretRef", secret_ref.session_token.as_ref()),
        ];
        for (field, selector) in selectors {
            let Some(selector) = selector else { continue };
            for (part, value) in [("name", &selector.name), ("key", &selector.key)] {
                if value.as_deref().is_none_or(str::is_empty) {
                    return Err(invalid(format!(
                        "auth.secretRef.{field}.{part} is required"
                    )));
                }
            }
        }
    }
    if let Some(jwt) = &auth.jwt
        && jwt.service_account_ref.is_none()
    {
        return Err(invalid("auth.jwt.serviceAccountRef is required"));
    }
    Ok(())
}

fn check_roles(spec: &AwsProvider) -> Result<()> {
    let roles = spec.additional_roles.iter().flatten().enumerate();
    for (i, role) in roles {
        if role.is_empty() {
            return Err(invalid(format!("additionalRoles[{i}] must not be empty")));
        }
    }
    let has_role = spec.role.as_deref().is_some_and(|r| !r.is_empty());
    // ESO passes these only with `role`; without one they would do nothing.
    let role_only = [
        (
            "externalID",
            spec.external_id.as_deref().is_some_and(|e| !e.is_empty()),
        ),
        (
            "sessionTags",
            spec.session_tags.as_ref().is_some_and(|t| !t.is_empty()),
        ),
        (
            "transitiveTagKeys",
            spec.transitive_tag_keys
                .as_ref()
                .is_some_and(|t| !t.is_empty()),
        ),
    ];
    for (field, set) in role_only {
        if set && !has_role {
            return Err(invalid(format!(
                "{field} applies to assuming role, and role is not set"
            )));
        }
    }
    if spec
        .transitive_tag_keys
        .as_ref()
        .is_some_and(|t| !t.is_empty())
        && spec.session_tags.as_ref().is_none_or(Vec::is_empty)
    {
        return Err(invalid("transitiveTagKeys needs sessionTags"));
    }
    match spec.session_tags_policy.as_deref() {
        None | Some("" | "None") => {}
        Some(other) => {
            return Err(invalid(format!(
                "sessionTagsPolicy: {other:?} is not supported; tag sessions with sessionTags"
            )));
        }
    }
    if spec
        .custom_session_tags
        .as_ref()
        .is_some_and(|t| !t.is_empty())
    {
        return Err(invalid(
            "customSessionTags is not supported; tag sessions with sessionTags",
        ));
    }
    Ok(())
}

/// AWS's own rule for DeleteSecret, checked before any secret is deleted.
fn deletion(sm: &AwsSecretsManager) -> Result<Deletion> {
    let force = sm.force_delete_without_recovery == Some(true);
    let window = sm.recovery_window_in_days.filter(|d| *d != 0);
    if force && window.is_some() {
        return Err(invalid(
            "secretsManager: forceDeleteWithoutRecovery and recoveryWindowInDays are exclusive",
        ));
    }
    if let Some(days) = window
        && !(7..=30).contains(&days)
    {
        return Err(invalid(format!(
            "secretsManager.recoveryWindowInDays: {days} is not between 7 and 30"
        )));
    }
    Ok(Deletion {
        force_without_recovery: force,
        recovery_window_in_days: window,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(v: serde_json::Value) -> Result<Checked> {
        check(&serde_json::from_value(v).unwrap())
    }

    #[test]
    fn every_refusal_names_its_field() {
        let cases = [
            (
                json!({"service": "CertificateManager", "region": "eu-west-1"}),
                "service: CertificateManager",
            ),
            (
                json!({"service": "S3", "region": "eu-west-1"}),
                "service: \"S3\"",
            ),
            (
                json!({"service": "SecretsManager", "region": ""}),
                "region: \"\"",
            ),
            (
                json!({"service": "SecretsManager", "region": "eu-west-1", "auth": {"secretRef": {"accessKeyIDSecretRef": {"name": "a"}, "secretAccessKeySecretRef": {"name": "a", "key": "k"}}}}),
                "auth.secretRef.accessKeyIDSecretRef.key is required",
            ),
            (
                json!({"service": "SecretsManager", "region": "eu-west-1", "auth": {"jwt": {}}}),
                "auth.jwt.serviceAccountRef is required",
            ),
            (
                json!({"service": "SecretsManager", "region": "eu-west-1", "externalID": "x"}),
                "externalID applies to assuming role",
            ),
            (
                json!({"service": "SecretsManager", "region": "eu-west-1", "sessionTagsPolicy": "Simple"}),
                "sessionTagsPolicy: \"Simple\"",
            ),
            (
                json!({"service": "SecretsManager", "region": "eu-west-1", "secretsManager": {"forceDeleteWithoutRecovery": true, "recoveryWindowInDays": 9}}),
                "are exclusive",
            ),
            (
                json!({"service": "SecretsManager", "region": "eu-west-1", "secretsManager": {"recoveryWindowInDays": 3}}),
                "recoveryWindowInDays: 3",
            ),
            (
                json!({"service": "ParameterStore", "region": "eu-west-1", "role": "r", "transitiveTagKeys": ["a"]}),
                "transitiveTagKeys needs sessionTags",
            ),
        ];
        for (spec, expected) in cases {
            let err = parse(spec.clone()).unwrap_err().to_string();
            assert!(err.contains(expected), "{spec}: {err}");
        }
    }

    #[test]
    fn eso_documentation_stores_pass() {
        let checked = parse(json!({
            "service": "SecretsManager", "role": "arn:aws:iam::123456789012:role/external-secrets",
            "region": "eu-central-1",
            "secretsManager": {"forceDeleteWithoutRecovery": true},
            "auth": {"secretRef": {
                "accessKeyIDSecretRef": {"name": "awssm-secret", "key": "access-key"},
                "secretAccessKeySecretRef": {"name": "awssm-secret", "key": "secret-access-key"}}}
        }))
        .unwrap();
        assert_eq!(checked.service, Service::SecretsManager);
        assert!(checked.deletion.force_without_recovery);
        let checked = parse(
            json!({"service": "ParameterStore", "region": "eu-central-1", "prefix": "/app/"}),
        )
        .unwrap();
        assert_eq!(
            (checked.service, checked.prefix.as_str()),
            (Service::ParameterStore, "/app/")
        );
    }
}
