//! The server's own metrics (per method: calls by gRPC code, latency, calls in flight) and the
//! HTTP endpoint that serves them with the client manager's and the providers' metrics.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use axum::Router;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Calls by method and gRPC code (`_total` is appended on export).
pub const HANDLED: &str = "grpc_server_handled";
/// Latency of calls by method, in seconds.
pub const HANDLING_SECONDS: &str = "grpc_server_handling_seconds";
/// Calls being served, by method.
pub const IN_FLIGHT: &str = "grpc_server_in_flight";

/// Upper bounds in seconds: a cached client answers in milliseconds, a backend login or an
/// outage takes seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    method: &'static str,
    code: &'static str,
}

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// Metrics of `provider.v1.SecretStoreProvider` calls.
#[derive(Clone)]
pub struct GrpcMetrics {
    handled: Family<CodeLabels, Counter>,
    seconds: Family<MethodLabels, Histogram, fn() -> Histogram>,
    in_flight: Family<MethodLabels, Gauge>,
}

impl GrpcMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            handled: Family::default(),
            seconds: Family::new_with_constructor(histogram),
            in_flight: Family::default(),
        };
        registry.register(
            HANDLED,
            "provider.v1 calls answered, by method and gRPC code",
            m.handled.clone(),
        );
        registry.register(
            HANDLING_SECONDS,
            "Time to answer a provider.v1 call, by method",
            m.seconds.clone(),
        );
        registry.register(
            IN_FLIGHT,
            "provider.v1 calls being served, by method",
            m.in_flight.clone(),
        );
        m
    }

    /// Counts a call as in flight until the returned guard is finished or dropped; a call
    /// dropped unfinished (the client went away) counts as `Canceled`.
    pub(crate) fn start(&self, method: &'static str) -> InFlight {
        self.in_flight.get_or_create(&MethodLabels { method }).inc();
        InFlight {
            metrics: self.clone(),
            method,
            started: Instant::now(),
            finished: false,
        }
    }

    fn record(&self, method: &'static str, code: tonic::Code, elapsed: Duration) {
        self.handled
            .get_or_create(&CodeLabels {
                method,
                code: code_name(code),
            })
            .inc();
        self.seconds
            .get_or_create(&MethodLabels { method })
            .observe(elapsed.as_secs_f64());
    }
}

/// A call being served.
pub(crate) struct InFlight {
    metrics: GrpcMetrics,
    method: &'static str,
    started: Instant,
    finished: bool,
}

impl InFlight {
    pub(crate) fn finish(mut self, code: tonic::Code) {
        self.finished = true;
        self.metrics
            .record(self.method, code, self.started.elapsed());
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.finished {
            self.metrics
                .record(self.method, tonic::Code::Cancelled, self.started.elapsed());
        }
        self.metrics
            .in_flight
            .get_or_create(&MethodLabels {
                method: self.method,
            })
            .dec();
    }
}

/// gRPC's own spelling of a code, as other gRPC servers' metrics label it.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "Canceled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

/// `/metrics`, plus `/healthz` and `/readyz` for probes that cannot speak mTLS gRPC (the
/// kubelet's); `/readyz` fails once the server is shutting down.
pub(crate) fn router(registry: Arc<Registry>, serving: Arc<AtomicBool>) -> Router {
    http_endpoints::metrics(registry).merge(http_endpoints::probes(serving, "shutting down"))
}

/// Serves [`router`] on `listener` until `shutdown`.
pub(crate) async fn serve_http(
    listener: tokio::net::TcpListener,
    registry: Arc<Registry>,
    serving: Arc<AtomicBool>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    if let Err(e) = axum::serve(listener, router(registry, serving))
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::error!(error = %e, address = ?addr, "metrics server failed");
    }
}
