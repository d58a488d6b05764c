//! Calls spread over every endpoint of a class's address, as gRPC clients do behind a headless
//! Service: the host is resolved to all its addresses, each gets a [`Channel`] of its own, and
//! each call goes to the endpoint with the fewest calls outstanding (in turn among equals, so
//! calls made one after another still go round).
//!
//! The host is resolved again every [`Settings::resolve_interval`] (at the first call after it
//! passed, without holding that call up) and at once when a connection is lost or refused, so a
//! replica added later gets calls and one that went away is dropped. An endpoint that could not
//! be reached gets no calls until a dial in the background reaches it again.
//!
//! A call the server never saw (the endpoint could not be reached, its connection was going
//! away, or it refused the stream) is made again on another endpoint, whatever the method; a
//! read (GetSecret, GetSecretMap, GetAllSecrets, SecretExists, Validate, Capabilities, health)
//! also once after its connection broke mid-call. A rolling update of the servers is thus no
//! failure for the caller, and the client manager's breaker sees none.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame};

use crate::transport::{
    BoxError, Channel, Dial, Failure, Response, Settings, TransportError, grpc_timeout,
};

/// Makes the dialler of one endpoint.
pub(crate) trait Dialler: Send + Sync + 'static {
    fn to(&self, endpoint: SocketAddr) -> Box<dyn Dial>;
}

/// What the generated stubs call through: every endpoint of one address, with one TLS
/// material. Cheap to clone, shared by every stub.
#[derive(Clone)]
pub struct Transport {
    shared: Arc<Shared>,
    /// Every call to this endpoint alone (a health check of one endpoint).
    pinned: Option<Arc<Endpoint>>,
}

struct Shared {
    /// `host:port` as the class has it.
    address: String,
    dialler: Box<dyn Dialler>,
    tls: bool,
    authority: http::uri::Authority,
    settings: Settings,
    endpoints: RwLock<Arc<[Arc<Endpoint>]>>,
    /// When the host was last resolved; held while it is, so lookups do not pile up.
    resolved: tokio::sync::Mutex<Option<Instant>>,
    /// Set when a connection was lost or refused: resolve at the next call.
    stale: AtomicBool,
    /// Where the search for the least busy endpoint starts, moved on by every call.
    turn: AtomicUsize,
}

struct Endpoint {
    addr: SocketAddr,
    channel: Channel,
    outstanding: AtomicUsize,
    /// Could not be reached; a dial in the background clears it.
    down: AtomicBool,
    /// When that dial was last started.
    redialled: Mutex<Option<Instant>>,
}

/// How long a down endpoint waits between dials in the background.
const REDIAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The calls made again after their connection broke mid-call: they change nothing.
const READS: &[&str] = &[
    "/provider.v1.SecretStoreProvider/GetSecret",
    "/provider.v1.SecretStoreProvider/GetSecretMap",
    "/provider.v1.SecretStoreProvider/GetAllSecrets",
    "/provider.v1.SecretStoreProvider/SecretExists",
    "/provider.v1.SecretStoreProvider/Validate",
    "/provider.v1.SecretStoreProvider/Capabilities",
    "/grpc.health.v1.Health/Check",
];

impl Transport {
    pub(crate) fn new(
        address: String,
        dialler: Box<dyn Dialler>,
        tls: bool,
        authority: http::uri::Authority,
        settings: Settings,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                address,
                dialler,
                tls,
                authority,
                settings,
                endpoints: RwLock::new(Arc::new([])),
                resolved: Default::default(),
                stale: AtomicBool::new(false),
                turn: AtomicUsize::new(0),
            }),
            pinned: None,
        }
    }

    /// One transport per endpoint the address resolves to now, each sending every call to its
    /// endpoint alone over the connection the balanced calls use.
    pub async fn endpoints(&self) -> Result<Vec<(SocketAddr, Transport)>, BoxError> {
        self.shared.resolve(true).await?;
        Ok(self
            .shared
            .snapshot()
            .iter()
            .map(|e| {
                let pinned = Self {
                    shared: self.shared.clone(),
                    pinned: Some(e.clone()),
                };
                (e.addr, pinned)
            })
            .collect())
    }

    /// Calls made now on each endpoint, by address.
    pub fn outstanding(&self) -> Vec<(SocketAddr, usize)> {
        self.shared
            .snapshot()
            .iter()
            .map(|e| (e.addr, e.outstanding.load(Ordering::Relaxed)))
            .collect()
    }

    async fn call(&self, request: http::Request<tonic::body::Body>) -> Result<Response, BoxError> {
        if let Some(endpoint) = &self.pinned {
            return endpoint.call(request).await.map_err(Failure::into_error);
        }
        let started = Instant::now();
        self.shared.resolve(false).await?;
        let read = READS.contains(&request.uri().path());
        let (parts, body) = request.into_parts();
        let mut body = Replay::take(body).await;
        let mut tried: Vec<SocketAddr> = Vec::new();
        let (mut lost_again, mut same_again, mut looked_again) = (false, false, false);
        loop {
            let Some(endpoint) = self.shared.pick(&tried) else {
                return Err(TransportError::NoEndpoint(self.shared.address.clone()).into());
            };
            tried.push(endpoint.addr);
            let again = body.again();
            let request =
                http::Request::from_parts(clone_head(&parts, started.elapsed()), body.into_body());
            let failure = match endpoint.call(request).await {
                Ok(answer) => return Ok(answer),
                Err(failure) => failure,
            };
            let retry = match &failure {
                Failure::Unreached(_) => {
                    endpoint.down.store(true, Ordering::Relaxed);
                    true
                }
                Failure::Refused(_) => true,
                Failure::Lost(_) if read && !lost_again => {
                    lost_again = true;
                    true
                }
                Failure::Lost(_) => false,
            };
            // With no other endpoint, the same one over a new connection, once: behind a
            // ClusterIP Service that reaches another Pod.
            if retry
                && !same_again
                && !matches!(failure, Failure::Unreached(_))
                && !self.shared.any_left(&tried)
            {
                same_again = true;
                tried.pop();
            }
            self.shared.stale.store(true, Ordering::Relaxed);
            // Nothing left to try: the name may resolve to Pods that came since the last lookup
            // (a Deployment of one replica rolled), so look once now rather than fail the call.
            if retry && !looked_again && !self.shared.any_left(&tried) {
                looked_again = true;
                let _ = self.shared.lookup(false).await;
            }
            let error = failure.into_error();
            match again {
                Some(next) if retry && self.shared.any_left(&tried) => {
                    tracing::debug!(endpoint = %endpoint.addr, error = %error, "a call to a provider server is made again on another endpoint");
                    body = next;
                }
                _ => return Err(error),
            }
        }
    }
}

/// One call counted against its endpoint until it ends, however it ends: a call whose deadline
/// passes, or whose caller goes away, is dropped mid-await.
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn count(outstanding: &'a AtomicUsize) -> Self {
        outstanding.fetch_add(1, Ordering::Relaxed);
        Self(outstanding)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Endpoint {
    async fn call(&self, request: http::Request<tonic::body::Body>) -> Result<Response, Failure> {
        let _counted = InFlight::count(&self.outstanding);
        let answer = self.channel.call(request).await;
        if answer.is_ok() {
            self.down.store(false, Ordering::Relaxed);
        }
        answer
    }

    /// Dials in the background, at most once per [`REDIAL`], to learn whether a down endpoint
    /// is back.
    fn redial(self: &Arc<Self>) {
        let mut last = self.redialled.lock().expect("redial lock poisoned");
        if last.is_some_and(|at| at.elapsed() < REDIAL) {
            return;
        }
        *last = Some(Instant::now());
        let endpoint = self.clone();
        tokio::spawn(async move {
            if endpoint.channel.connect().await {
                endpoint.down.store(false, Ordering::Relaxed);
            }
        });
    }
}

impl Shared {
    fn snapshot(&self) -> Arc<[Arc<Endpoint>]> {
        self.endpoints
            .read()
            .expect("endpoints lock poisoned")
            .clone()
    }

    /// Resolves the host when it never was, or (`now`) at once; otherwise starts a resolution
    /// in the background when the interval passed or a connection was lost.
    async fn resolve(self: &Arc<Self>, now: bool) -> Result<(), BoxError> {
        if now {
            return self.lookup(false).await;
        }
        if self.snapshot().is_empty() {
            // The first calls: one of them looks, the others use what it found.
            return self.lookup(true).await;
        }
        let due = self.stale.load(Ordering::Relaxed)
            || self.resolved.try_lock().is_ok_and(|at| {
                (*at).is_none_or(|at| at.elapsed() >= self.settings.resolve_interval)
            });
        if due {
            let shared = self.clone();
            tokio::spawn(async move {
                let _ = shared.lookup(true).await;
            });
        }
        Ok(())
    }

    /// Looks the host up and keeps the endpoints (and their connections) it still has.
    /// `if_due`: not when another lookup finished since the caller decided to look.
    async fn lookup(&self, if_due: bool) -> Result<(), BoxError> {
        let mut resolved = self.resolved.lock().await;
        if if_due
            && !self.stale.load(Ordering::Relaxed)
            && resolved.is_some_and(|at| at.elapsed() < self.settings.resolve_interval)
        {
            return Ok(());
        }
        self.stale.store(false, Ordering::Relaxed);
        let found = match tokio::net::lookup_host(&self.address).await {
            Ok(found) => found,
            Err(e) => {
                // The endpoints known stay in use: a DNS hiccup is no outage.
                tracing::debug!(address = %self.address, error = %e, "resolving a provider server's address failed");
                if self.snapshot().is_empty() {
                    return Err(TransportError::Resolve(self.address.clone(), e).into());
                }
                *resolved = Some(Instant::now());
                return Ok(());
            }
        };
        let mut addrs: Vec<SocketAddr> = found.collect();
        addrs.sort();
        addrs.dedup();
        let known = self.snapshot();
        let endpoints: Arc<[Arc<Endpoint>]> = addrs
            .into_iter()
            .map(|addr| match known.iter().find(|e| e.addr == addr) {
                Some(kept) => kept.clone(),
                None => Arc::new(Endpoint {
                    addr,
                    channel: Channel::new(
                        self.dialler.to(addr),
                        self.tls,
                        self.authority.clone(),
                        self.settings.clone(),
                    ),
                    outstanding: AtomicUsize::new(0),
                    down: AtomicBool::new(false),
                    redialled: Mutex::new(None),
                }),
            })
            .collect();
        if endpoints.len() != known.len()
            || endpoints
                .iter()
                .zip(known.iter())
                .any(|(a, b)| a.addr != b.addr)
        {
            tracing::debug!(address = %self.address, endpoints = ?endpoints.iter().map(|e| e.addr).collect::<Vec<_>>(), "a provider server's endpoints changed");
        }
        *self.endpoints.write().expect("endpoints lock poisoned") = endpoints;
        *resolved = Some(Instant::now());
        Ok(())
    }

    /// The endpoint with the fewest calls outstanding among those not `tried` that are up;
    /// one that is down only when none is up (it may be back).
    fn pick(&self, tried: &[SocketAddr]) -> Option<Arc<Endpoint>> {
        let endpoints = self.snapshot();
        let n = endpoints.len();
        let start = self.turn.fetch_add(1, Ordering::Relaxed);
        let untried = (0..n)
            .map(|i| &endpoints[start.wrapping_add(i) % n])
            .filter(|e| !tried.contains(&e.addr));
        let mut best: Option<&Arc<Endpoint>> = None;
        let mut fallback = None;
        for endpoint in untried {
            if endpoint.down.load(Ordering::Relaxed) {
                endpoint.redial();
                fallback.get_or_insert(endpoint);
                continue;
            }
            let load = endpoint.outstanding.load(Ordering::Relaxed);
            if best.is_none_or(|b| load < b.outstanding.load(Ordering::Relaxed)) {
                best = Some(endpoint);
            }
        }
        best.or(fallback).cloned()
    }

    fn any_left(&self, tried: &[SocketAddr]) -> bool {
        self.snapshot().iter().any(|e| !tried.contains(&e.addr))
    }
}

/// The request head again, for another attempt (extensions are the stubs' own and not sent),
/// its `grpc-timeout` less the time `spent` on the attempts before: a server must not go on
/// with a retried write after the caller has given up on it.
fn clone_head(parts: &http::request::Parts, spent: Duration) -> http::request::Parts {
    let mut head = http::Request::new(());
    *head.method_mut() = parts.method.clone();
    *head.uri_mut() = parts.uri.clone();
    *head.version_mut() = parts.version;
    *head.headers_mut() = parts.headers.clone();
    if let Some(timeout) = grpc_timeout(&parts.headers) {
        // gRPC allows eight digits.
        let left = timeout
            .saturating_sub(spent)
            .as_millis()
            .clamp(1, 99_999_999);
        let value = http::HeaderValue::from_str(&format!("{left}m"))
            .expect("digits and a unit are a header value");
        head.headers_mut().insert("grpc-timeout", value);
    }
    head.into_parts().0
}

/// A request body that can be sent again: the messages ready when the call is made (all of a
/// unary call's), and whatever streams after them.
struct Replay {
    taken: VecDeque<Bytes>,
    /// What ended the ready part when it was not the body's end: the next message not ready
    /// yet (`None` here, `rest` set), trailers or the body's error.
    next: Option<Result<Frame<Bytes>, tonic::Status>>,
    rest: Option<tonic::body::Body>,
}

impl Replay {
    /// Takes the messages that are ready without waiting; a body that ends among them can be
    /// sent any number of times.
    async fn take(mut body: tonic::body::Body) -> Self {
        let mut taken = VecDeque::new();
        let (next, more) = std::future::poll_fn(|cx| {
            loop {
                match Pin::new(&mut body).poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                        Ok(data) => taken.push_back(data),
                        Err(frame) => return Poll::Ready((Some(Ok(frame)), true)),
                    },
                    Poll::Ready(Some(Err(e))) => return Poll::Ready((Some(Err(e)), true)),
                    Poll::Ready(None) => return Poll::Ready((None, false)),
                    Poll::Pending => return Poll::Ready((None, true)),
                }
            }
        })
        .await;
        Self {
            taken,
            next,
            rest: more.then_some(body),
        }
    }

    /// The same body for another attempt, if it is all known.
    fn again(&self) -> Option<Self> {
        self.rest.is_none().then(|| Self {
            taken: self.taken.clone(),
            next: None,
            rest: None,
        })
    }

    fn into_body(self) -> tonic::body::Body {
        tonic::body::Body::new(self)
    }
}

impl Body for Replay {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        if let Some(data) = self.taken.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if let Some(next) = self.next.take() {
            return Poll::Ready(Some(next));
        }
        match &mut self.rest {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.taken.is_empty()
            && self.next.is_none()
            && self.rest.as_ref().is_none_or(Body::is_end_stream)
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for Transport {
    type Response = Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Readiness (a free stream) is awaited inside the call, under its deadline.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let this = self.clone();
        // The caller's own deadline (tonic sends it as `grpc-timeout`), longer or shorter than
        // the connection's: a class's `spec.callTimeout` is the one that counts. It covers every
        // attempt.
        let deadline = grpc_timeout(request.headers()).unwrap_or(this.shared.settings.deadline);
        Box::pin(async move {
            match tokio::time::timeout(deadline, this.call(request)).await {
                Ok(answer) => answer,
                Err(_) => {
                    // DEADLINE_EXCEEDED as gRPC says a client reports it; the source marks the
                    // failure as ours, not the server's answer.
                    let error = TransportError::Deadline(deadline);
                    let mut status = tonic::Status::deadline_exceeded(error.to_string());
                    status.set_source(Arc::new(error));
                    Err(status.into())
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_attempt_is_sent_the_time_left() {
        let (parts, ()) = http::Request::post("/provider.v1.SecretStoreProvider/PushSecret")
            .header("grpc-timeout", "30S")
            .header("te", "trailers")
            .body(())
            .unwrap()
            .into_parts();
        let head = clone_head(&parts, Duration::from_millis(12_500));
        assert_eq!(head.headers["grpc-timeout"], "17500m");
        assert_eq!(head.headers["te"], "trailers");
        assert_eq!(head.uri, parts.uri);
        let spent = clone_head(&parts, Duration::from_secs(40));
        assert_eq!(spent.headers["grpc-timeout"], "1m");
    }
}
