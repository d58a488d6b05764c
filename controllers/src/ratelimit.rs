//! Client-side rate limiting of API server requests (`--client-qps`, `--client-burst`), as a
//! token bucket in front of kube's HTTP stack. kube-rs has none of its own, and without one a
//! burst of reconciles at start-up can flood the API server.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use tokio::time::Sleep;
use tower::{Layer, Service};

use crate::api_requests::ApiRequests;

struct Bucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    /// Takes a token, or says how long until one is there.
    fn take(&self) -> Result<(), Duration> {
        let mut state = self.state.lock().expect("rate limiter lock poisoned");
        let (tokens, last) = &mut *state;
        let now = Instant::now();
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * self.qps).min(self.burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *tokens) / self.qps))
        }
    }
}

#[derive(Clone)]
pub struct RateLimitLayer {
    bucket: Arc<Bucket>,
}

impl RateLimitLayer {
    /// `qps` requests per second on average, up to `burst` at once. A `qps` of zero or less
    /// turns limiting off.
    pub fn new(qps: f32, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            bucket: Arc::new(Bucket {
                qps: f64::from(qps),
                burst,
                state: Mutex::new((burst, Instant::now())),
            }),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            bucket: self.bucket.clone(),
            sleep: None,
            permitted: false,
        }
    }
}

pub struct RateLimit<S> {
    inner: S,
    bucket: Arc<Bucket>,
    sleep: Option<Pin<Box<Sleep>>>,
    permitted: bool,
}

impl<S, Req> Service<Req> for RateLimit<S>
where
    S: Service<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.permitted && self.bucket.qps > 0.0 {
            if let Some(sleep) = &mut self.sleep {
                ready!(sleep.as_mut().poll(cx));
                self.sleep = None;
            }
            match self.bucket.take() {
                Ok(()) => self.permitted = true,
                Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.permitted = false;
        self.inner.call(req)
    }
}

/// The operator's API server clients, each behind a rate limiter of its own.
pub struct Clients {
    /// Reconciles and their watches.
    pub work: kube::Client,
    /// The leader Lease, the webhook's CA injection and the provider servers' TLS Secrets: as
    /// client-go gives leader election a client of its own, so that a busy operator does not
    /// lose its Lease, nor let a certificate expire, waiting behind its own reconciles.
    pub control: kube::Client,
    /// What both send, counted.
    pub requests: ApiRequests,
}

impl Clients {
    /// Both clients, each with `qps` and `burst`.
    pub fn new(config: kube::Config, qps: f32, burst: u32) -> Result<Self, kube::Error> {
        let requests = ApiRequests::default();
        Self::build(qps, burst, requests.clone(), |limiter| {
            Ok(kube::client::ClientBuilder::try_from(config.clone())?
                .with_layer(&limiter)
                .with_layer(&requests)
                .build())
        })
    }

    fn build<E>(
        qps: f32,
        burst: u32,
        requests: ApiRequests,
        client: impl Fn(RateLimitLayer) -> Result<kube::Client, E>,
    ) -> Result<Self, E> {
        Ok(Self {
            work: client(RateLimitLayer::new(qps, burst))?,
            control: client(RateLimitLayer::new(qps, burst))?,
            requests,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_a_burst_then_paces() {
        let layer = RateLimitLayer::new(10.0, 3);
        let b = &layer.bucket;
        assert!(b.take().is_ok() && b.take().is_ok() && b.take().is_ok());
        let wait = b.take().unwrap_err();
        assert!(
            wait <= Duration::from_millis(100) && wait > Duration::from_millis(50),
            "{wait:?}"
        );
        std::thread::sleep(Duration::from_millis(110));
        assert!(b.take().is_ok());
    }

    /// With the reconciles' budget spent, a Lease renewal still goes out at once.
    #[tokio::test]
    async fn control_requests_do_not_wait_behind_work() {
        let clients = Clients::build(0.5, 1, ApiRequests::default(), |limiter| {
            let (api_server, _) = crate::standin::client(|_| (200, serde_json::json!({})));
            let answer = tower::service_fn(move |request| {
                let api_server = api_server.clone();
                async move { api_server.send(request).await }
            });
            Ok::<_, std::convert::Infallible>(kube::Client::new(
                tower::ServiceBuilder::new().layer(limiter).service(answer),
                "default",
            ))
        })
        .unwrap();
        let get = |client: &kube::Client| {
            let request = http::Request::get("/api/v1/namespaces/default/configmaps/x")
                .body(Vec::new())
                .unwrap();
            let client = client.clone();
            async move { client.request_text(request).await.unwrap() }
        };
        get(&clients.work).await;
        let started = Instant::now();
        let renewal = tokio::time::timeout(Duration::from_secs(1), get(&clients.control)).await;
        assert!(
            renewal.is_ok(),
            "the Lease renewal waited behind the reconciles ({:?})",
            started.elapsed()
        );
    }
}
