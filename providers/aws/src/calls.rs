//! Every attempt of every AWS call, counted by service, operation and outcome, from inside the
//! SDK (an interceptor), so attempts the SDK retries on its own (throttling) are counted too.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::FinalizerInterceptorContextRef;
use aws_smithy_runtime_api::client::orchestrator::{HttpResponse, Metadata};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// The SDK's service name: `Secrets Manager`, `SSM`, `STS`.
    pub service: String,
    /// The API operation: `GetSecretValue`, `GetParametersByPath`, `AssumeRole`, ...
    pub call: String,
    /// `success`, `throttled` (AWS asked to slow down; the SDK waits and retries) or `error`.
    pub status: String,
}

pub(crate) type Calls = Family<CallLabels, Counter>;

#[derive(Debug)]
pub(crate) struct CountCalls {
    calls: Calls,
}

impl CountCalls {
    pub(crate) fn new(calls: Calls) -> Self {
        Self { calls }
    }
}

impl Intercept for CountCalls {
    fn name(&self) -> &'static str {
        "CountCalls"
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let (service, call) = cfg
            .load::<Metadata>()
            .map(|m| (m.service().to_owned(), m.name().to_owned()))
            .unwrap_or_default();
        let status = match context.output_or_error() {
            Some(Ok(_)) => "success",
            _ if context.response().is_some_and(throttled) => "throttled",
            _ => "error",
        };
        self.calls
            .get_or_create(&CallLabels {
                service,
                call,
                status: status.to_owned(),
            })
            .inc();
        Ok(())
    }
}

/// AWS's ways of saying "too many requests": HTTP 429, or an error code naming throttling in
/// the JSON protocols' `x-amzn-ErrorType` header or any protocol's error body.
fn throttled(response: &HttpResponse) -> bool {
    const CODES: [&str; 5] = [
        "Throttl",
        "TooManyRequests",
        "RequestLimitExceeded",
        "TooManyUpdates",
        "SlowDown",
    ];
    if response.status().as_u16() == 429 {
        return true;
    }
    let in_header = response
        .headers()
        .get("x-amzn-ErrorType")
        .is_some_and(|v| CODES.iter().any(|c| v.contains(c)));
    let in_body = response
        .body()
        .bytes()
        .map(String::from_utf8_lossy)
        .is_some_and(|b| CODES.iter().any(|c| b.contains(c)));
    response.status().is_client_error() && (in_header || in_body)
}
