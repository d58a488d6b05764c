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
//! The status details (`grpc-status-details-bin`) are what gRPC defines them to be, a
//! `google.rpc.Status` with the call's code and message: grpc-go, which ESO's core uses, checks
//! that code against the call's and turns a mismatch into INTERNAL. The variant's own fields ride
//! inside it, a `provider.v1.Error` packed as a `google.protobuf.Any`. Read back are both that
//! and the bare `provider.v1.Error` our servers sent before; without either (an ESO server) the
//! code and message alone are kept.

use std::collections::HashMap;

use prost::Message;
use provider::Error;
use tonic::{Code, Status};

use crate::v1;

/// The type URL of a `provider.v1.Error` packed in a `google.protobuf.Any`.
pub const ERROR_TYPE_URL: &str = "type.googleapis.com/provider.v1.Error";

/// `google.rpc.Status`, the message gRPC defines for `grpc-status-details-bin`.
#[derive(Clone, PartialEq, Message)]
pub struct RpcStatus {
    /// The call's status code.
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
    #[prost(message, repeated, tag = "3")]
    pub details: Vec<prost_types::Any>,
}

const REFERENCE: &str = "reference";
const REASON: &str = "reason";
const PROVIDER: &str = "provider";
const OPERATION: &str = "operation";

/// The variant's name, as `provider.v1.Error.code` carries it, and its gRPC code.
fn kind(error: &Error) -> (&'static str, Code) {
    match error {
        Error::NoSecret => ("NoSecret", Code::NotFound),
        Error::InvalidSpec(_) => ("InvalidSpec", Code::InvalidArgument),
        Error::Credentials { .. } => ("Credentials", Code::PermissionDenied),
        Error::Backend(_) => ("Backend", Code::Unknown),
        Error::Unavailable(_) => ("Unavailable", Code::Unavailable),
        Error::Conflict(_) => ("Conflict", Code::FailedPrecondition),
        Error::Unsupported { .. } => ("Unsupported", Code::Unimplemented),
    }
}

/// `error` as a `provider.v1.Error`: its variant, whole text and fields.
pub fn error_to_wire(error: &Error) -> v1::Error {
    let details: HashMap<String, String> = match error {
        Error::Credentials { reference, reason } => HashMap::from([
            (REFERENCE.into(), reference.clone()),
            (REASON.into(), reason.clone()),
        ]),
        Error::Unsupported {
            provider,
            operation,
        } => HashMap::from([
            (PROVIDER.into(), provider.clone()),
            (OPERATION.into(), operation.clone()),
        ]),
        _ => HashMap::new(),
    };
    v1::Error {
        code: kind(error).0.into(),
        message: error.to_string(),
        retryable: matches!(error, Error::Unavailable(_)),
        details,
    }
}

pub fn error_to_status(error: &Error) -> Status {
    let code = kind(error).1;
    let message = error.to_string();
    let details = RpcStatus {
        code: code as i32,
        message: message.clone(),
        details: vec![prost_types::Any {
            type_url: ERROR_TYPE_URL.into(),
            value: error_to_wire(error).encode_to_vec(),
        }],
    };
    Status::with_details(code, message, details.encode_to_vec().into())
}

/// A status's details (`grpc-status-details-bin`) read as gRPC defines them.
pub fn rpc_status(details: &[u8]) -> Result<RpcStatus, prost::DecodeError> {
    RpcStatus::decode(details)
}

/// The `provider.v1.Error` in a status's details: packed in a `google.rpc.Status`, or bare as
/// our older servers sent it.
pub fn error_in_details(details: &[u8]) -> Option<v1::Error> {
    if details.is_empty() {
        return None;
    }
    // Each shape fails to decode as the other (field 1 is an integer in one, a string in the
    // other), but a bare Error without its `code` decodes as a Status with no details: hence
    // the fall back to the bare shape whenever no packed Error was found.
    rpc_status(details)
        .ok()
        .and_then(|status| {
            status
                .details
                .into_iter()
                .find(|any| any.type_url == ERROR_TYPE_URL)
        })
        .and_then(|any| v1::Error::decode(any.value.as_slice()).ok())
        .or_else(|| v1::Error::decode(details).ok())
}

/// The provider error a status stands for; `method` names the call, for a server that does not
/// have it at all (UNIMPLEMENTED from an older or foreign server).
pub fn error_from_status(status: &Status, method: &str) -> Error {
    let details = error_in_details(status.details())
        .map(|e| e.details)
        .unwrap_or_default();
    from_parts(status.code(), status.message().to_owned(), details, method)
}

/// The provider error a `provider.v1.Error` stands for, by its variant's name (a name we do not
/// know reads as a backend failure).
pub fn error_from_wire(error: v1::Error, method: &str) -> Error {
    let code = match error.code.as_str() {
        "NoSecret" => Code::NotFound,
        "InvalidSpec" => Code::InvalidArgument,
        "Credentials" => Code::PermissionDenied,
        "Unavailable" => Code::Unavailable,
        "Conflict" => Code::FailedPrecondition,
        "Unsupported" => Code::Unimplemented,
        _ => Code::Unknown,
    };
    from_parts(code, error.message, error.details, method)
}

fn from_parts(
    code: Code,
    message: String,
    mut details: HashMap<String, String>,
    method: &str,
) -> Error {
    match code {
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

    /// What a gRPC library finds in `grpc-status-details-bin`: grpc-go refuses a status whose
    /// details do not decode as a `google.rpc.Status` with the call's own code.
    #[test]
    fn the_details_are_a_google_rpc_status_of_the_same_code_with_the_error_packed_in() {
        for error in every_error() {
            let status = error_to_status(&error);
            let details = RpcStatus::decode(status.details()).expect("a google.rpc.Status");
            assert_eq!(details.code, status.code() as i32, "{error:?}");
            assert_eq!(details.message, status.message(), "{error:?}");
            let [packed] = details.details.as_slice() else {
                panic!("{error:?}: one detail, not {:?}", details.details);
            };
            assert_eq!(packed.type_url, "type.googleapis.com/provider.v1.Error");
            let inner = v1::Error::decode(packed.value.as_slice()).expect("a provider.v1.Error");
            assert_eq!(inner.message, error.to_string());
        }
        let credentials = error_to_status(&every_error()[2]);
        let inner = error_in_details(credentials.details()).unwrap();
        assert_eq!(inner.code, "Credentials");
        assert_eq!(inner.details["reference"], "Secret ns/token key \"t\"");
    }

    /// Our servers before this change put a bare `provider.v1.Error` in the details.
    #[test]
    fn a_bare_provider_error_of_an_older_server_is_still_read() {
        let older = |code, error: &Error| {
            Status::with_details(
                code,
                error.to_string(),
                error_to_wire(error).encode_to_vec().into(),
            )
        };
        let credentials = every_error().swap_remove(2);
        let back = error_from_status(&older(Code::PermissionDenied, &credentials), "GetSecret");
        assert_eq!(format!("{back:?}"), format!("{credentials:?}"));
        let unsupported = every_error().swap_remove(6);
        let back = error_from_status(&older(Code::Unimplemented, &unsupported), "GetSecret");
        assert_eq!(format!("{back:?}"), format!("{unsupported:?}"));
        // Without its `code` field a bare Error also decodes as a google.rpc.Status with no
        // details; its fields are still found.
        let bare = v1::Error {
            details: HashMap::from([("reference".into(), "Secret ns/x".into())]),
            ..Default::default()
        };
        assert_eq!(
            error_in_details(&bare.encode_to_vec()).map(|e| e.details),
            Some(bare.details)
        );
    }

    #[test]
    fn every_error_survives_a_failed_validation_by_its_name() {
        for error in every_error() {
            let back = error_from_wire(error_to_wire(&error), "Validate");
            assert_eq!(format!("{back:?}"), format!("{error:?}"));
        }
        let foreign = v1::Error {
            code: "Whatever".into(),
            message: "no".into(),
            ..Default::default()
        };
        assert!(matches!(error_from_wire(foreign, "Validate"), Error::Backend(m) if m == "no"));
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
