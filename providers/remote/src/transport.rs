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
//!
//! One [`Channel`] is one connection to one endpoint (an address the class's host resolved to);
//! [`crate::balance`] picks a channel per call and makes a refused call again elsewhere, so a
//! failed call here says whether the server could have seen it ([`Failure`]).

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
    /// How often the address's host is resolved again, to find replicas added or gone (also
    /// at once when a connection is lost).
    pub resolve_interval: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            keepalive_interval: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(5),
            idle: Duration::from_secs(5 * 60),
            resolve_interval: Duration::from_secs(30),
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
    #[error("resolving {0}: {1}")]
    Resolve(String, std::io::Error),
    #[error("{0} resolves to no address")]
    NoEndpoint(String),
}

/// The HTTP/2 connection to one endpoint, dialled when a call needs it.
pub(crate) struct Channel {
    inner: Inner,
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
    /// Cleared by the connection's task when the connection ends, and by a call the server
    /// refused (GOAWAY): the connection drains the calls it took, new ones dial again.
    open: Arc<AtomicBool>,
}

impl Link {
    fn close(&self) {
        self.open.store(false, Ordering::Release);
    }
}

/// Why a call through a [`Channel`] failed, as far as retrying it elsewhere goes.
#[derive(Debug)]
pub(crate) enum Failure {
    /// No connection could be made: the endpoint is down.
    Unreached(BoxError),
    /// The server took no part of the call: the connection was going away (GOAWAY) before the
    /// stream opened, or the server refused the stream (REFUSED_STREAM, or an id above its
    /// GOAWAY's last). Any call may be made again.
    Refused(BoxError),
    /// The call may have reached the server (the connection broke mid-call, say).
    Lost(BoxError),
}

impl Failure {
    pub(crate) fn into_error(self) -> BoxError {
        match self {
            Self::Unreached(e) | Self::Refused(e) | Self::Lost(e) => e,
        }
    }
}

/// Whether the server says it never processed the stream that failed with `e`.
fn refused(e: &h2::Error) -> bool {
    e.is_remote() && (e.is_go_away() || e.reason() == Some(h2::Reason::REFUSED_STREAM))
}

impl Channel {
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
            inner: Inner {
                dial,
                scheme,
                authority,
                settings,
                link: Default::default(),
            },
        }
    }

    /// The open connection, dialled first if there is none; callers arriving while it is
    /// dialled wait for that one rather than dial their own.
    async fn link(&self) -> Result<Link, BoxError> {
        let mut link = self.inner.link.lock().await;
        if let Some(open) = link.as_ref().filter(|l| l.open.load(Ordering::Acquire)) {
            return Ok(open.clone());
        }
        let timeout = self.inner.settings.connect_timeout;
        let opened = tokio::time::timeout(timeout, self.open())
            .await
            .map_err(|_| TransportError::ConnectTimeout(timeout))??;
        *link = Some(opened.clone());
        Ok(opened)
    }

    /// Dials unless connected; whether the endpoint can be reached.
    pub(crate) async fn connect(&self) -> bool {
        self.link().await.is_ok()
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

    pub(crate) async fn call(
        &self,
        request: http::Request<tonic::body::Body>,
    ) -> Result<Response, Failure> {
        let link = self.link().await.map_err(Failure::Unreached)?;
        // A connection that ended or is going away fails here, unsent; the next call dials
        // again.
        let unsent = |e: h2::Error| {
            link.close();
            Failure::Refused(e.into())
        };
        let mut sender = link.sender.clone().ready().await.map_err(unsent)?;
        let (mut parts, body) = request.into_parts();
        let mut uri = std::mem::take(&mut parts.uri).into_parts();
        uri.scheme = Some(self.inner.scheme.clone());
        uri.authority = Some(self.inner.authority.clone());
        parts.uri = http::Uri::from_parts(uri).map_err(|e| Failure::Lost(e.into()))?;
        let head = http::Request::from_parts(parts, ());
        let (answer, stream) = sender.send_request(head, false).map_err(unsent)?;
        send_body(body, stream).await;
        match answer.await {
            Ok(answer) => Ok(answer.map(|stream| ResponseBody {
                stream,
                data_done: false,
            })),
            Err(e) if refused(&e) => Err(unsent(e)),
            Err(e) => Err(Failure::Lost(e.into())),
        }
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

pub(crate) type Response = http::Response<ResponseBody>;

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

/// A `grpc-timeout` header's value: digits and a unit (gRPC over HTTP/2).
pub(crate) fn grpc_timeout(headers: &http::HeaderMap) -> Option<Duration> {
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
