//! AWS errors as this operator reports them: the service's error code and message, or what
//! kept the call from an answer, without request IDs or signing details (ESO's `SanitizeErr`).

use std::sync::LazyLock;

use aws_sdk_secretsmanager::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use provider::Error;
use regex::Regex;

static NOISE: LazyLock<[Regex; 2]> = LazyLock::new(|| {
    [
        Regex::new(r"request id: \S+").expect("a valid pattern"),
        Regex::new(r" Credential=.+").expect("a valid pattern"),
    ]
});

fn sanitize(text: &str) -> String {
    NOISE
        .iter()
        .fold(text.to_owned(), |t, r| r.replace_all(&t, "").into_owned())
}

/// `service call: code: message` for an answer; the cause chain when there was none.
pub(crate) fn sdk_error<E, R>(service: &str, call: &str, error: SdkError<E, R>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    match &error {
        SdkError::ServiceError(e) => {
            let e = e.err();
            let code = e.code().unwrap_or("an error without a code");
            let message = e.message().map(|m| format!(": {m}")).unwrap_or_default();
            let text = sanitize(&format!("{service} {call}: {code}{message}"));
            if code.contains("Throttl") || code == "ServiceUnavailable" || code == "InternalFailure"
            {
                Error::Unavailable(text)
            } else {
                Error::Backend(text)
            }
        }
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) => Error::Unavailable(sanitize(
            &format!("{service} {call}: {}", DisplayErrorContext(&error)),
        )),
        _ => Error::Backend(sanitize(&format!(
            "{service} {call}: {}",
            DisplayErrorContext(&error)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_and_signing_details_are_dropped() {
        assert_eq!(
            sanitize("AccessDenied: request id: 1234-abcd, denied"),
            "AccessDenied:  denied"
        );
        assert_eq!(
            sanitize("SignatureDoesNotMatch: bad Credential=AKIA/2024/eu/sts/aws4_request"),
            "SignatureDoesNotMatch: bad"
        );
    }
}
