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

/// A kube client whose requests go through the rate limiter.
pub fn client(config: kube::Config, qps: f32, burst: u32) -> Result<kube::Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&RateLimitLayer::new(qps, burst))
        .build())
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
}
