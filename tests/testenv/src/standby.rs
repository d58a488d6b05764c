//! What Vault Enterprise adds on the wire, which the open-source server cannot show: a
//! performance standby in front of the dev server. Every write answers with a replication
//! state (`X-Vault-Index`), and a request that requires a state the standby has not replicated
//! yet is answered 412 once, after which the standby has caught up. Namespaces are recorded and
//! taken off before the dev server sees them (it has none). The server under test is real; only
//! the Enterprise headers are played here. It can also play a sealed Vault, answering 503.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Response, StatusCode};
use base64::Engine;

const INDEX: &str = "x-vault-index";
const NAMESPACE: &str = "x-vault-namespace";
const INCONSISTENT: &str = "x-vault-inconsistent";

/// One request as the standby saw it.
#[derive(Clone, Debug)]
pub struct SeenRequest {
    pub method: String,
    /// Without `/v1/`.
    pub path: String,
    /// The replication states it required.
    pub index: Vec<String>,
    pub namespace: Option<String>,
    pub inconsistent: Option<String>,
    pub status: u16,
}

#[derive(Default)]
struct Replication {
    /// The local index of the newest write.
    written: u64,
    /// How far this standby has caught up.
    replicated: u64,
    seen: Vec<SeenRequest>,
}

struct Shared {
    /// Answering 503, as a sealed Vault does, to everything.
    down: std::sync::atomic::AtomicBool,
    upstream: String,
    http: reqwest::Client,
    replication: Mutex<Replication>,
}

pub struct VaultStandby {
    address: SocketAddr,
    shared: Arc<Shared>,
}

/// The state a write at local index `n` returns: `v1:<cluster>:<local>:<replicated>:<hmac>`.
pub fn replication_state(n: u64) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("v1:standby:{n}:0:00"))
}

fn local_index(state: &str) -> Option<u64> {
    let text = base64::engine::general_purpose::STANDARD
        .decode(state)
        .ok()?;
    String::from_utf8(text)
        .ok()?
        .split(':')
        .nth(2)?
        .parse()
        .ok()
}

impl VaultStandby {
    /// Serves on a free 127.0.0.1 port until the process ends, forwarding to `upstream`.
    pub async fn start(upstream: &str) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the standby's port")?;
        let address = listener.local_addr()?;
        let shared = Arc::new(Shared {
            down: Default::default(),
            upstream: upstream.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
            replication: Mutex::default(),
        });
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(shared.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { address, shared })
    }

    pub fn address(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Sealed (`true`) or serving again.
    pub fn set_down(&self, down: bool) {
        self.shared
            .down
            .store(down, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn seen(&self) -> Vec<SeenRequest> {
        self.shared
            .replication
            .lock()
            .expect("standby state poisoned")
            .seen
            .clone()
    }
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let header_values = |name: &str| -> Vec<String> {
        parts
            .headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect()
    };
    let index = header_values(INDEX);
    let mut seen = SeenRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().trim_start_matches("/v1/").to_owned(),
        namespace: header_values(NAMESPACE).into_iter().next(),
        inconsistent: header_values(INCONSISTENT).into_iter().next(),
        index: index.clone(),
        status: 0,
    };
    if shared.down.load(std::sync::atomic::Ordering::SeqCst) {
        seen.status = 503;
        shared
            .replication
            .lock()
            .expect("standby state poisoned")
            .seen
            .push(seen);
        let mut response = Response::new(Body::from(r#"{"errors":["Vault is sealed"]}"#));
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        return response;
    }
    let required = index
        .iter()
        .filter_map(|s| local_index(s))
        .max()
        .unwrap_or(0);
    {
        let mut replication = shared.replication.lock().expect("standby state poisoned");
        if required > replication.replicated {
            // Not there yet; by the next attempt it is.
            replication.replicated = required;
            seen.status = 412;
            replication.seen.push(seen);
            return status(StatusCode::PRECONDITION_FAILED);
        }
    }
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(_) => return status(StatusCode::BAD_REQUEST),
    };
    let url = format!(
        "{}{}",
        shared.upstream,
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let mut upstream = shared.http.request(parts.method.clone(), url).body(body);
    for (name, value) in &parts.headers {
        if ![INDEX, NAMESPACE, INCONSISTENT, "host"].contains(&name.as_str()) {
            upstream = upstream.header(name, value);
        }
    }
    let answer = match upstream.send().await {
        Ok(a) => a,
        Err(_) => return status(StatusCode::BAD_GATEWAY),
    };
    let code = answer.status();
    let headers = answer.headers().clone();
    let bytes = answer.bytes().await.unwrap_or_default();
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = code;
    for (name, value) in &headers {
        if name != "content-length" && name != "transfer-encoding" {
            response.headers_mut().append(name, value.clone());
        }
    }
    let mut replication = shared.replication.lock().expect("standby state poisoned");
    let writes = matches!(parts.method.as_str(), "POST" | "PUT" | "DELETE")
        && !seen.path.starts_with("auth/");
    if writes && code.is_success() {
        // The active node applied it; this standby replicates it a moment later.
        replication.written += 1;
        let state = replication_state(replication.written);
        response.headers_mut().insert(
            INDEX,
            HeaderValue::from_str(&state).expect("base64 is a valid header value"),
        );
    }
    seen.status = code.as_u16();
    replication.seen.push(seen);
    response
}

fn status(code: StatusCode) -> Response<Body> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = code;
    response
}
