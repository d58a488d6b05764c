//! The HTTP/2 client under the generated gRPC stubs, on the `h2` crate directly rather than
//! tonic's channel.
//!
//! Why our own: a call through tonic's channel crosses a `Buffer` worker task and hyper's
//! per-request tasks before its frames reach the connection, each a wake-up of another thread.
//! Here the caller's own task queues the request's HEADERS and DATA on the stream and awaits the
//! answer on it, so the connection task writes both in one flush and wakes the caller once; on
//! loopback that is ~40 µs of the ~120 µs a call took (hack/README.md, per-call overhead).
//!
//! What tonic's channel did and this does too: dial on the first call and again on the first call
//! after the connection ended (the client manager's breaker spaces those calls out), a connect
//! timeout, a deadline on every call, HTTP/2 pings while idle so a dead peer is noticed between
//! calls, the request's scheme and authority from the address.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use http_body::{Body, Frame};
use tokio::io::{AsyncRead, AsyncWrite};

/// How connections behave; the defaults are ESO's.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The deadline of a call that does not set its own, sent to the server too
    /// (`grpc-timeout`).
    pub deadline: Duration,
    pub connect_timeout: Duration,
    /// HTTP/2 pings, so a dead peer is noticed between calls.
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
    /// How long a connection no client holds is kept for the next one.
    pub idle: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            keepalive_interval: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(5),
            idle: Duration::from_secs(5 * 60),
        }
    }
}

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

pub(crate) type Dialled<'a> =
    Pin<Box<dyn Future<Output = std::io::Result<Box<dyn Io>>> + Send + 'a>>;

/// Opens the byte stream of a new connection (TCP, and TLS when the server wants it).
pub(crate) trait Dial: Send + Sync + 'static {
    fn dial(&self) -> Dialled<'_>;
}

/// Why a call did not reach the server or got no answer in time. Each is a local failure:
/// `RemoteClient` reports the server unreachable, which drives the store's breaker.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TransportError {
    #[error("connecting took longer than {0:?}")]
    ConnectTimeout(Duration),
    #[error("no answer within the deadline of {0:?}")]
    Deadline(Duration),
    #[error(transparent)]
    Connect(std::io::Error),
}

/// Wakes the HTTP/2 connection a call will use; cheap to clone, shared by every stub.
#[derive(Clone)]
pub struct Transport {
    inner: Arc<Inner>,
}

struct Inner {
    dial: Box<dyn Dial>,
    /// `https` or `http`, and `host:port`: tonic's stubs send the path alone.
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    settings: Settings,
    link: tokio::sync::Mutex<Option<Link>>,
}

#[derive(Clone)]
struct Link {
    sender: SendRequest<Bytes>,
    /// Cleared by the connection's task when the connection ends.
    open: Arc<AtomicBool>,
}

impl Transport {
    pub(crate) fn new(
        dial: Box<dyn Dial>,
        tls: bool,
        authority: http::uri::Authority,
        settings: Settings,
    ) -> Self {
        let scheme = if tls {
            http::uri::Scheme::HTTPS
        } else {
            http::uri::Scheme::HTTP
        };
        Self {
            inner: Arc::new(Inner {
                dial,
                scheme,
                authority,
                settings,
                link: Default::default(),
            }),
        }
    }

    /// The open connection's handle, dialled first if there is none; callers arriving while it
    /// is dialled wait for that one rather than dial their own.
    async fn sender(&self) -> Result<SendRequest<Bytes>, BoxError> {
        let mut link = self.inner.link.lock().await;
        if let Some(open) = link.as_ref().filter(|l| l.open.load(Ordering::Acquire)) {
            return Ok(open.sender.clone());
        }
        let timeout = self.inner.settings.connect_timeout;
        let opened = tokio::time::timeout(timeout, self.open())
            .await
            .map_err(|_| TransportError::ConnectTimeout(timeout))??;
        let sender = opened.sender.clone();
        *link = Some(opened);
        Ok(sender)
    }

    async fn open(&self) -> Result<Link, BoxError> {
        let io = self
            .inner
            .dial
            .dial()
            .await
            .map_err(TransportError::Connect)?;
        // hyper's client windows (tonic's channel had them): a large answer streams without
        // waiting for a window update every 64 KiB.
        let (sender, mut connection) = h2::client::Builder::new()
            .initial_window_size(2 * 1024 * 1024)
            .initial_connection_window_size(5 * 1024 * 1024)
            .handshake::<_, Bytes>(io)
            .await?;
        let open = Arc::new(AtomicBool::new(true));
        let pings = connection.ping_pong();
        let (interval, timeout) = (
            self.inner.settings.keepalive_interval,
            self.inner.settings.keepalive_timeout,
        );
        let closed = open.clone();
        tokio::spawn(async move {
            tokio::select! {
                ended = connection => if let Err(e) = ended {
                    tracing::debug!(error = %e, "connection to a provider server ended");
                },
                () = keep_alive(pings, interval, timeout) => {
                    tracing::debug!("a provider server did not answer a ping; closing its connection");
                }
            }
            closed.store(false, Ordering::Release);
        });
        Ok(Link { sender, open })
    }

    async fn call(&self, request: http::Request<tonic::body::Body>) -> Result<Response, BoxError> {
        let sender = self.sender().await?;
        // A connection that ended since the check fails here, unsent; `sender` dials again on
        // the next call, once the connection's task has marked it closed.
        let mut sender = sender.ready().await?;
        let (mut parts, body) = request.into_parts();
        let mut uri = std::mem::take(&mut parts.uri).into_parts();
        uri.scheme = Some(self.inner.scheme.clone());
        uri.authority = Some(self.inner.authority.clone());
        parts.uri = http::Uri::from_parts(uri)?;
        let head = http::Request::from_parts(parts, ());
        let (answer, stream) = sender.send_request(head, false)?;
        send_body(body, stream).await;
        let answer = answer.await?;
        Ok(answer.map(|stream| ResponseBody {
            stream,
            data_done: false,
        }))
    }
}

/// Pings every `interval` and returns when one goes unanswered for `timeout`.
async fn keep_alive(pings: Option<h2::PingPong>, interval: Duration, timeout: Duration) {
    let Some(mut pings) = pings else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(interval).await;
        match tokio::time::timeout(timeout, pings.ping(h2::Ping::opaque())).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) | Err(_) => return,
        }
    }
}

/// Queues the request's messages on the stream. A unary request's one message is ready at once
/// and goes with END_STREAM, in the same flush as the HEADERS; a stream whose next message is
/// not ready yet is fed from a task of its own, so an answer can arrive meanwhile.
async fn send_body(mut body: tonic::body::Body, mut stream: h2::SendStream<Bytes>) {
    enum Next {
        Later,
        End,
        Frame(Result<Frame<Bytes>, tonic::Status>),
    }
    // The last message seen, sent once we know whether another follows (then without
    // END_STREAM) or not (then with it).
    let mut held: Option<Bytes> = None;
    loop {
        let next = std::future::poll_fn(|cx| {
            Poll::Ready(match Pin::new(&mut body).poll_frame(cx) {
                Poll::Pending => Next::Later,
                Poll::Ready(None) => Next::End,
                Poll::Ready(Some(frame)) => Next::Frame(frame),
            })
        })
        .await;
        match next {
            Next::Later => {
                if let Some(data) = held.take() {
                    let _ = stream.send_data(data, false);
                }
                tokio::spawn(pipe(body, stream));
                return;
            }
            Next::End => {
                let _ = stream.send_data(held.take().unwrap_or_default(), true);
                return;
            }
            Next::Frame(Err(e)) => {
                tracing::debug!(error = %e, "a request body failed");
                stream.send_reset(h2::Reason::CANCEL);
                return;
            }
            Next::Frame(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    if let Some(before) = held.replace(data) {
                        let _ = stream.send_data(before, false);
                    }
                }
                Err(frame) => {
                    if let Some(data) = held.take() {
                        let _ = stream.send_data(data, false);
                    }
                    if let Ok(trailers) = frame.into_trailers() {
                        let _ = stream.send_trailers(trailers);
                        return;
                    }
                }
            },
        }
    }
}

/// The rest of a streaming request, message by message as they come.
async fn pipe(mut body: tonic::body::Body, mut stream: h2::SendStream<Bytes>) {
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let Ok(frame) = frame else {
            stream.send_reset(h2::Reason::CANCEL);
            return;
        };
        match frame.into_data() {
            Ok(data) => {
                if stream.send_data(data, false).is_err() {
                    return;
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    let _ = stream.send_trailers(trailers);
                    return;
                }
            }
        }
    }
    let _ = stream.send_data(Bytes::new(), true);
}

type Response = http::Response<ResponseBody>;

/// An answer's messages and then its trailers (where gRPC puts the status).
pub struct ResponseBody {
    stream: h2::RecvStream,
    data_done: bool,
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        if !self.data_done {
            match self.stream.poll_data(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(data))) => {
                    // The window opens again as soon as a message is taken.
                    let _ = self.stream.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => self.data_done = true,
            }
        }
        match self.stream.poll_trailers(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(Some(trailers))) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Poll::Ready(Ok(None)) => Poll::Ready(None),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.stream.is_end_stream()
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
        // the connection's: a class's `spec.callTimeout` is the one that counts.
        let deadline = grpc_timeout(request.headers()).unwrap_or(this.inner.settings.deadline);
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

/// A `grpc-timeout` header's value: digits and a unit (gRPC over HTTP/2).
fn grpc_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_are_read_in_every_unit() {
        let timeout = |v: &str| {
            let mut headers = http::HeaderMap::new();
            headers.insert("grpc-timeout", v.parse().unwrap());
            grpc_timeout(&headers)
        };
        assert_eq!(timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(timeout("3M"), Some(Duration::from_secs(180)));
        assert_eq!(timeout("30S"), Some(Duration::from_secs(30)));
        assert_eq!(timeout("1m"), Some(Duration::from_millis(1)));
        assert_eq!(timeout("250u"), Some(Duration::from_micros(250)));
        assert_eq!(timeout("99n"), Some(Duration::from_nanos(99)));
        assert_eq!(timeout("5x"), None);
        assert_eq!(timeout("m"), None);
        assert_eq!(grpc_timeout(&http::HeaderMap::new()), None);
    }
}
