//! Whether a provider configuration works, for a store and for a provider object alike: check
//! the spec, build a client, ask the backend. Both reconcilers report what this returns.

use std::time::Duration;

use api::conditions::ConditionStatus;
use api::provider_kinds::Capabilities;
use api::store::ProviderRef;
use clientmanager::{ClassRef, LoadedStore, ProviderObject};
use provider::{Caller, Validation};

use crate::context::Context;
use crate::events::EventType;

/// ESO's reasons for a store's Ready condition, plus ProviderNotInstalled.
pub mod reason {
    pub const VALID: &str = "Valid";
    pub const INVALID_PROVIDER_CONFIG: &str = "InvalidProviderConfig";
    pub const VALIDATION_FAILED: &str = "ValidationFailed";
    pub const VALIDATION_UNKNOWN: &str = "ValidationUnknown";
    pub const PROVIDER_NOT_INSTALLED: &str = "ProviderNotInstalled";
    /// The Warning event of a configuration the provider accepts but warns about (an http://
    /// server that sends its token in clear).
    pub const PROVIDER_WARNING: &str = "ProviderWarning";
    /// The kind's CRD is there, its controller not yet (it waits for RBAC to list and watch it).
    pub const PROVIDER_NOT_WATCHED: &str = "ProviderNotWatched";
}

/// The one way a store or provider reconcile fails: its status (or, being deleted, its
/// finalizers) could not be written. Everything else is reported in the status.
#[derive(Debug, thiserror::Error)]
#[error("could not write {part} of {kind} {name:?}: {source}")]
pub struct StatusError {
    /// `status` or `finalizers`.
    pub part: &'static str,
    pub kind: String,
    pub name: String,
    pub source: kube::Error,
}

impl crate::outcome::ErrorKind for StatusError {
    fn kind(&self) -> &'static str {
        "Status"
    }
}

/// What to write into a Ready condition.
#[derive(Clone, Debug, PartialEq)]
pub struct Readiness {
    pub status: ConditionStatus,
    pub reason: &'static str,
    pub message: String,
    pub capabilities: Option<Capabilities>,
    /// Check again sooner than the usual interval.
    pub requeue: Option<Duration>,
    /// What the provider warned about; the message carries them too.
    pub warnings: Vec<String>,
}

impl Readiness {
    pub fn failed(reason: &'static str, message: String) -> Self {
        Self {
            status: ConditionStatus::False,
            reason,
            message,
            capabilities: None,
            requeue: None,
            warnings: Vec::new(),
        }
    }

    /// This condition with `warning` added, in its message and its Warning event.
    pub fn warn(mut self, warning: String) -> Self {
        // The message already ends with the warnings there are, as `with_warnings` wrote them.
        let joint = if self.warnings.is_empty() {
            "; warnings: "
        } else {
            "; "
        };
        self.message = format!("{}{joint}{warning}", self.message);
        self.warnings.push(warning);
        self
    }

    /// The events that announce this Ready condition when it changes: its own, and a Warning for
    /// the provider's warnings, which a Ready store would otherwise show only in its message.
    pub fn events(&self) -> Vec<(EventType, &'static str, String)> {
        let type_ = if self.status == ConditionStatus::False {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let mut events = vec![(type_, self.reason, self.message.clone())];
        if !self.warnings.is_empty() {
            events.push((
                EventType::Warning,
                reason::PROVIDER_WARNING,
                self.warnings.join("; "),
            ));
        }
        events
    }

    /// A client manager error, as a store or provider object reports it.
    pub fn from_manager(e: clientmanager::Error) -> Self {
        match e {
            clientmanager::Error::ProviderNotInstalled { .. }
            | clientmanager::Error::ProviderNotWatched { .. } => {
                let reason = if matches!(e, clientmanager::Error::ProviderNotWatched { .. }) {
                    reason::PROVIDER_NOT_WATCHED
                } else {
                    reason::PROVIDER_NOT_INSTALLED
                };
                Self {
                    // Starting the kind's controller also triggers a resync; this is the fallback.
                    requeue: Some(Duration::from_secs(30)),
                    ..Self::failed(reason, e.to_string())
                }
            }
            e => Self::failed(reason::INVALID_PROVIDER_CONFIG, e.to_string()),
        }
    }
}

/// Who is being checked, for the words of the condition.
#[derive(Clone, Copy, Debug)]
pub enum Subject {
    Store,
    Provider,
}

impl Subject {
    fn noun(self) -> &'static str {
        match self {
            Self::Store => "store",
            Self::Provider => "provider",
        }
    }
}

/// Validates `object` on behalf of `caller` working in `namespace`, through `class`'s server
/// when it is served out of process.
pub async fn check(
    ctx: &Context,
    subject: Subject,
    object: ProviderObject,
    (caller, namespace): (Caller, &str),
    class: Option<ClassRef>,
) -> Readiness {
    let provider = object.provider.clone();
    let warnings = match provider.validate_spec(&object.spec) {
        Ok(report) => report.warnings,
        Err(e) => {
            let message = match subject {
                Subject::Store => e.to_string(),
                Subject::Provider => format!("spec: {e}"),
            };
            return Readiness::failed(reason::INVALID_PROVIDER_CONFIG, message);
        }
    };
    // A provider object says what it could do even when no client can be built.
    let known = Some(provider.capabilities()).filter(|_| matches!(subject, Subject::Provider));
    let handle = ctx
        .manager
        .client_via(object, caller, namespace, class)
        .await;
    judge(ctx, subject, handle, warnings, known).await
}

/// Validates a store whose provider kind this operator does not compile in, through `class`'s
/// server: the server checks the spec, and says what the store may be used for.
pub async fn check_foreign(
    ctx: &Context,
    store: &LoadedStore,
    reference: &ProviderRef,
    (caller, namespace): (Caller, &str),
    class: &ClassRef,
) -> Readiness {
    let handle = ctx
        .manager
        .foreign_client(reference, store, caller, namespace, class)
        .await;
    judge(ctx, Subject::Store, handle, Vec::new(), None).await
}

/// The Ready condition for a client (or why there is none) and the spec's `warnings`.
async fn judge(
    ctx: &Context,
    subject: Subject,
    handle: clientmanager::Result<clientmanager::Handle>,
    mut warnings: Vec<String>,
    known: Option<Capabilities>,
) -> Readiness {
    let handle = match handle {
        Ok(h) => h,
        Err(e) => {
            let requeue = retry_client(&e);
            return Readiness {
                capabilities: known,
                requeue,
                ..Readiness::failed(
                    reason::INVALID_PROVIDER_CONFIG,
                    format!("unable to create client: {e}"),
                )
            };
        }
    };
    let capabilities = Some(handle.capabilities);
    let noun = subject.noun();
    let validated = handle.client.validate().await;
    // A compiled-in kind served out of process: the server's spec check is the same as ours.
    for warning in handle.client.validation_warnings() {
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
    }
    ctx.metrics
        .provider_call(&handle.identity.kind, "Validate", validated.is_ok());
    // A provider that cannot be reached is asked again soon (its client answers for it while it
    // waits, so this costs nothing): the ExternalSecrets of a store that is not Ready wait for
    // it to turn Ready, which the store's usual interval would put off for minutes. So is a
    // login whose credentials cannot be read yet (a ServiceAccount applied after the store).
    let requeue = match validated {
        Err(provider::Error::Unavailable(_)) => Some(UNAVAILABLE_RETRY),
        Err(provider::Error::Credentials { .. }) => Some(CREDENTIALS_RETRY),
        _ => None,
    };
    let (status, reason, message) = match validated {
        Ok(Validation::Ready) => (
            ConditionStatus::True,
            reason::VALID,
            with_warnings(&format!("{noun} validated"), &warnings),
        ),
        Ok(Validation::Unknown) => (
            ConditionStatus::True,
            reason::VALIDATION_UNKNOWN,
            with_warnings(
                match subject {
                    Subject::Store => {
                        "store validation could not be completed; the store is usable"
                    }
                    Subject::Provider => "provider validation could not be completed",
                },
                &warnings,
            ),
        ),
        Err(e) => (
            ConditionStatus::False,
            reason::VALIDATION_FAILED,
            // A warning often explains the failure (no auth set, say).
            with_warnings(&format!("unable to validate {noun}: {e}"), &warnings),
        ),
    };
    Readiness {
        status,
        reason,
        message,
        capabilities,
        requeue,
        warnings,
    }
}

/// When a store whose client could not be made looks again. Credentials that cannot be read are
/// often on their way (a Secret or ServiceAccount applied after the store, or the TLS Secret a
/// tenant's ProviderClass gets from the operator moments after the class appears): nothing wakes
/// the store when they appear, so it looks again soon rather than at its usual interval.
fn retry_client(error: &clientmanager::Error) -> Option<Duration> {
    matches!(
        error,
        clientmanager::Error::Credentials { .. }
            | clientmanager::Error::RuntimeTls { .. }
            | clientmanager::Error::Provider(provider::Error::Credentials { .. })
    )
    .then_some(CREDENTIALS_RETRY)
}

const UNAVAILABLE_RETRY: Duration = Duration::from_secs(5);
const CREDENTIALS_RETRY: Duration = Duration::from_secs(20);

/// A Ready message carrying the provider's warnings, so they are seen without an admission
/// webhook.
fn with_warnings(message: &str, warnings: &[String]) -> String {
    if warnings.is_empty() {
        message.to_owned()
    } else {
        format!("{message}; warnings: {}", warnings.join("; "))
    }
}

#[cfg(test)]
mod tests {
    /// A warning the store adds joins those of the provider, in the message as in the event.
    #[test]
    fn a_store_warning_joins_the_providers() {
        let mut ready = super::Readiness::failed(super::reason::VALID, "store validated".into());
        let alone = ready.clone().warn("spec.retrySettings is not used".into());
        assert_eq!(
            alone.message,
            "store validated; warnings: spec.retrySettings is not used"
        );
        ready.message = super::with_warnings(&ready.message, &["http://".to_owned()]);
        ready.warnings = vec!["http://".to_owned()];
        let both = ready.warn("spec.retrySettings is not used".into());
        assert_eq!(
            both.message,
            "store validated; warnings: http://; spec.retrySettings is not used"
        );
        let events = both.events();
        assert_eq!(events[1].2, "http://; spec.retrySettings is not used");
    }

    /// A class's TLS Secret that is not there yet (the operator writes a tenant's moments after
    /// the class appears) is looked for again soon, as a store's own credentials are; a store
    /// that read before the write otherwise waited its whole interval (5 minutes by default).
    #[test]
    fn a_missing_class_tls_secret_is_looked_for_again_soon() {
        let missing = clientmanager::Error::RuntimeTls {
            class: clientmanager::ClassRef {
                namespace: Some("team".into()),
                name: "fake".into(),
            },
            reason: "Secret team/external-secrets-provider-tls does not exist".into(),
        };
        assert_eq!(
            super::retry_client(&missing),
            Some(super::CREDENTIALS_RETRY)
        );
        let spec = clientmanager::Error::RuntimeSpec {
            class: clientmanager::ClassRef::cluster("shared"),
            reason: "spec.callTimeout: 0s".into(),
        };
        assert_eq!(super::retry_client(&spec), None);
    }

    #[test]
    fn a_kind_not_installed_and_one_not_watched_yet_are_told_apart() {
        let installed = super::Readiness::from_manager(clientmanager::Error::ProviderNotWatched {
            kind: "Gitlab".into(),
            crd: "gitlabs.providers.external-secrets.io".into(),
        });
        assert_eq!(installed.reason, "ProviderNotWatched");
        let missing = super::Readiness::from_manager(clientmanager::Error::ProviderNotInstalled {
            kind: "Gitlab".into(),
            crd: "gitlabs.providers.external-secrets.io".into(),
            chart_value: "providers.gitlab.enabled".into(),
        });
        assert_eq!(missing.reason, "ProviderNotInstalled");
        assert!(missing.message.contains("providers.gitlab.enabled"));
    }

    #[test]
    fn a_warning_is_a_warning_event_even_on_a_ready_store() {
        use super::{EventType, Readiness, reason};
        let warning = "server uses http://: the Vault token is sent in clear".to_owned();
        let ready = Readiness {
            status: api::conditions::ConditionStatus::True,
            reason: reason::VALID,
            message: super::with_warnings("store validated", std::slice::from_ref(&warning)),
            capabilities: None,
            requeue: None,
            warnings: vec![warning.clone()],
        };
        assert_eq!(
            ready.events(),
            [
                (
                    EventType::Normal,
                    reason::VALID,
                    format!("store validated; warnings: {warning}")
                ),
                (EventType::Warning, reason::PROVIDER_WARNING, warning),
            ]
        );
        let failed = Readiness::failed(reason::VALIDATION_FAILED, "no".into());
        assert_eq!(
            failed.events(),
            [(EventType::Warning, reason::VALIDATION_FAILED, "no".into())]
        );
    }

    #[test]
    fn warnings_reach_the_valid_message() {
        assert_eq!(
            super::with_warnings("store validated", &[]),
            "store validated"
        );
        assert_eq!(
            super::with_warnings("store validated", &["a".into(), "b".into()]),
            "store validated; warnings: a; b"
        );
    }
}
