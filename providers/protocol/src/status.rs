//! Provider errors as gRPC status and back: one mapping for both adapters, written out in the
//! README ("Providers out of process"). A status keeps the distinction `provider::Error` makes, so
//! a store's or an ExternalSecret's condition reads the same in process and out of process.
//!
//! | provider::Error | gRPC code |
//! |---|---|
//! | NoSecret | NOT_FOUND |
//! | InvalidSpec | INVALID_ARGUMENT |
//! | Credentials | PERMISSION_DENIED (UNAUTHENTICATED reads as it too) |
//! | Conflict | FAILED_PRECONDITION |
//! | Unsupported | UNIMPLEMENTED |
//! | Unavailable | UNAVAILABLE (DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED read as it too) |
//! | Backend | UNKNOWN (any other code reads as it) |
//!
//! The variant's own fields ride in the status details as an encoded `provider.v1.Error`, which
//! ESO's peers ignore; without them (an ESO server) the message alone is kept.

use std::collections::HashMap;

use prost::Message;
use provider::Error;
use tonic::{Code, Status};

use crate::v1;

const REFERENCE: &str = "reference";
const REASON: &str = "reason";
const PROVIDER: &str = "provider";
const OPERATION: &str = "operation";

pub fn error_to_status(error: &Error) -> Status {
    let (code, name, details): (_, _, HashMap<String, String>) = match error {
        Error::NoSecret => (Code::NotFound, "NoSecret", HashMap::new()),
        Error::InvalidSpec(_) => (Code::InvalidArgument, "InvalidSpec", HashMap::new()),
        Error::Credentials { reference, reason } => (
            Code::PermissionDenied,
            "Credentials",
            HashMap::from([
                (REFERENCE.into(), reference.clone()),
                (REASON.into(), reason.clone()),
            ]),
        ),
        Error::Backend(_) => (Code::Unknown, "Backend", HashMap::new()),
        Error::Unavailable(_) => (Code::Unavailable, "Unavailable", HashMap::new()),
        Error::Conflict(_) => (Code::FailedPrecondition, "Conflict", HashMap::new()),
        Error::Unsupported {
            provider,
            operation,
        } => (
            Code::Unimplemented,
            "Unsupported",
            HashMap::from([
                (PROVIDER.into(), provider.clone()),
                (OPERATION.into(), operation.clone()),
            ]),
        ),
    };
    let message = error.to_string();
    let detail = v1::Error {
        code: name.into(),
        message: message.clone(),
        retryable: matches!(error, Error::Unavailable(_)),
        details,
    };
    Status::with_details(code, message, detail.encode_to_vec().into())
}

/// The provider error a status stands for; `method` names the call, for a server that does not
/// have it at all (UNIMPLEMENTED from an older or foreign server).
pub fn error_from_status(status: &Status, method: &str) -> Error {
    let mut details = v1::Error::decode(status.details())
        .map(|e| e.details)
        .unwrap_or_default();
    let message = status.message().to_owned();
    match status.code() {
        Code::NotFound => Error::NoSecret,
        Code::InvalidArgument => {
            Error::InvalidSpec(strip(&message, "invalid provider configuration: "))
        }
        Code::PermissionDenied | Code::Unauthenticated => Error::Credentials {
            reference: details
                .remove(REFERENCE)
                .unwrap_or_else(|| "the provider's credentials".into()),
            reason: details.remove(REASON).unwrap_or(message),
        },
        Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted | Code::Aborted => {
            Error::Unavailable(message)
        }
        Code::FailedPrecondition => Error::Conflict(message),
        Code::Unimplemented => Error::Unsupported {
            provider: details.remove(PROVIDER).unwrap_or_default(),
            operation: details.remove(OPERATION).unwrap_or_else(|| method.into()),
        },
        _ => Error::Backend(message),
    }
}

/// Our server's message is the error's whole text; the variant adds its prefix again.
fn strip(message: &str, prefix: &str) -> String {
    message.strip_prefix(prefix).unwrap_or(message).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_error() -> Vec<Error> {
        vec![
            Error::NoSecret,
            Error::InvalidSpec("spec.vault.server: required".into()),
            Error::Credentials {
                reference: "Secret ns/token key \"t\"".into(),
                reason: "not found".into(),
            },
            Error::Backend("permission denied on secret/data/x".into()),
            Error::Unavailable("connection refused".into()),
            Error::Conflict("secret \"x\" exists and is not managed by external-secrets".into()),
            Error::Unsupported {
                provider: "Fake".into(),
                operation: "GetAllSecrets".into(),
            },
        ]
    }

    #[test]
    fn every_error_survives_the_wire_with_its_variant_and_words() {
        for error in every_error() {
            let status = error_to_status(&error);
            // Across the wire only code, message and details travel.
            let status = Status::with_details(
                status.code(),
                status.message().to_owned(),
                status.details().to_vec().into(),
            );
            let back = error_from_status(&status, "GetSecret");
            assert_eq!(
                std::mem::discriminant(&back),
                std::mem::discriminant(&error),
                "{error:?} came back as {back:?}"
            );
            assert_eq!(back.to_string(), error.to_string());
        }
    }

    #[test]
    fn codes_are_the_documented_ones() {
        let codes: Vec<Code> = every_error()
            .iter()
            .map(|e| error_to_status(e).code())
            .collect();
        assert_eq!(
            codes,
            [
                Code::NotFound,
                Code::InvalidArgument,
                Code::PermissionDenied,
                Code::Unknown,
                Code::Unavailable,
                Code::FailedPrecondition,
                Code::Unimplemented,
            ]
        );
    }

    #[test]
    fn a_foreign_server_status_without_details_keeps_its_meaning() {
        let cases = [
            (Code::NotFound, "no such key"),
            (Code::Unauthenticated, "login failed"),
            (Code::DeadlineExceeded, "deadline"),
            (Code::Unimplemented, "method not found"),
            (Code::Internal, "boom"),
        ];
        let got: Vec<String> = cases
            .iter()
            .map(|(code, m)| error_from_status(&Status::new(*code, *m), "SecretExists").to_string())
            .collect();
        assert_eq!(
            got,
            [
                "Secret does not exist",
                "could not read the provider's credentials: login failed",
                "deadline",
                "this provider server does not support SecretExists",
                "boom",
            ]
        );
        assert!(matches!(
            error_from_status(&Status::new(Code::DeadlineExceeded, "late"), "GetSecret"),
            Error::Unavailable(_)
        ));
    }
}
