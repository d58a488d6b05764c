//! Vault's HTTP API for the secret operations (KV v1 and v2, token lookup, mount check), on our
//! own client rather than vaultrs', because read-after-write consistency (`readYourWrites`)
//! needs every response's `X-Vault-Index` and every request to carry the states seen so far.
//! vaultrs keeps the logins (session.rs), which need neither.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use reqwest::{Method, StatusCode};
use serde_json::Value;

const INDEX: &str = "X-Vault-Index";

/// How a Vault call failed: the status Vault answered with its messages, or no answer at all.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    #[error("Vault answered {code}: {}", errors.join("; "))]
    Status { code: u16, errors: Vec<String> },
    #[error("Vault: {0}")]
    Transport(String),
}

impl From<vaultrs::error::ClientError> for CallError {
    fn from(e: vaultrs::error::ClientError) -> Self {
        match e {
            vaultrs::error::ClientError::APIError { code, errors } => Self::Status { code, errors },
            other => Self::Transport(other.to_string()),
        }
    }
}

/// The server, the HTTP client (CA, client certificate, extra headers) and the namespace.
#[derive(Clone)]
pub(crate) struct Rest {
    base: reqwest::Url,
    http: reqwest::Client,
    namespace: Option<String>,
    /// With readYourWrites: the replication states seen, shared by every call of this client.
    states: Option<Arc<ReplicationStates>>,
}

impl Rest {
    pub(crate) fn new(
        base: reqwest::Url,
        http: reqwest::Client,
        namespace: Option<String>,
        read_your_writes: bool,
    ) -> Self {
        Self {
            base,
            http,
            namespace,
            states: read_your_writes.then(Arc::default),
        }
    }

    pub(crate) fn with_token(&self, token: &str) -> Authed {
        Authed {
            rest: self.clone(),
            token: token.to_owned(),
        }
    }
}

/// Calls made with one token.
#[derive(Clone)]
pub(crate) struct Authed {
    rest: Rest,
    token: String,
}

/// `parts` joined into an API path, each without its outer slashes; an empty last part asks
/// for a trailing slash (a listing of a mount's root).
pub(crate) fn path(parts: &[&str]) -> String {
    let mut joined: Vec<&str> = parts
        .iter()
        .map(|p| p.trim_matches('/'))
        .filter(|p| !p.is_empty())
        .collect();
    if parts.last().is_some_and(|p| p.trim_matches('/').is_empty()) {
        joined.push("");
    }
    joined.join("/")
}

impl Authed {
    /// `GET`: the answer's body; 404 is an error like any other status.
    pub(crate) async fn read(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<Value, CallError> {
        self.send(Method::GET, path, query, None)
            .await
            .map(Option::unwrap_or_default)
    }

    pub(crate) async fn list(&self, path: &str) -> Result<Value, CallError> {
        let list = Method::from_bytes(b"LIST").expect("a valid method name");
        self.send(list, path, &[], None)
            .await
            .map(Option::unwrap_or_default)
    }

    pub(crate) async fn write(&self, path: &str, body: &Value) -> Result<(), CallError> {
        self.send(Method::POST, path, &[], Some(body))
            .await
            .map(drop)
    }

    pub(crate) async fn delete(&self, path: &str) -> Result<(), CallError> {
        self.send(Method::DELETE, path, &[], None).await.map(drop)
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<Option<Value>, CallError> {
        let mut url = self.rest.base.clone();
        {
            let mut segments = url.path_segments_mut().map_err(|()| {
                CallError::Transport("the server address cannot hold a path".into())
            })?;
            segments.pop_if_empty().push("v1");
            segments.extend(path.split('/'));
        }
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        // As Vault's Go client: a server that has not caught up with our writes answers 412,
        // and asking again a moment later succeeds.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut request = self
                .rest
                .http
                .request(method.clone(), url.clone())
                .header("X-Vault-Request", "true");
            if !self.token.is_empty() {
                request = request.header("X-Vault-Token", &self.token);
            }
            if let Some(ns) = &self.rest.namespace {
                request = request.header("X-Vault-Namespace", ns);
            }
            if let Some(states) = &self.rest.states {
                for state in states.current() {
                    request = request.header(INDEX, state);
                }
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            let answer = request
                .send()
                .await
                .map_err(|e| CallError::Transport(e.without_url().to_string()))?;
            if let Some(states) = &self.rest.states
                && let Some(state) = answer.headers().get(INDEX).and_then(|v| v.to_str().ok())
            {
                states.record(state);
            }
            let status = answer.status();
            if status == StatusCode::PRECONDITION_FAILED
                && self.rest.states.is_some()
                && attempts < 3
            {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            let bytes = answer
                .bytes()
                .await
                .map_err(|e| CallError::Transport(e.without_url().to_string()))?;
            let json: Option<Value> = serde_json::from_slice(&bytes).ok();
            if !status.is_success() {
                let errors = json
                    .as_ref()
                    .and_then(|j| j["errors"].as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(|e| e.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                return Err(CallError::Status {
                    code: status.as_u16(),
                    errors,
                });
            }
            return Ok(json);
        }
    }
}

/// Vault Enterprise's replication states (`X-Vault-Index`) as its Go client keeps them: per
/// cluster the newest, both when neither is newer.
#[derive(Debug, Default)]
pub(crate) struct ReplicationStates {
    states: Mutex<Vec<String>>,
}

/// A state's cluster and indexes: base64 of `v1:<cluster>:<local>:<replicated>:<hmac>`.
fn parse_state(raw: &str) -> Option<(String, u64, u64)> {
    let decoded = base64::engine::general_purpose::STANDARD.decode(raw).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (state, _hmac) = text.rsplit_once(':')?;
    let mut pieces = state.split(':');
    let (Some("v1"), Some(cluster), Some(local), Some(replicated), None) = (
        pieces.next(),
        pieces.next(),
        pieces.next(),
        pieces.next(),
        pieces.next(),
    ) else {
        return None;
    };
    if cluster.is_empty() {
        return None;
    }
    Some((
        cluster.to_owned(),
        local.parse().ok()?,
        replicated.parse().ok()?,
    ))
}

impl ReplicationStates {
    fn current(&self) -> Vec<String> {
        self.states
            .lock()
            .expect("replication states poisoned")
            .clone()
    }

    /// Go's `MergeReplicationStates`: an older state of the same cluster is dropped; states
    /// that cannot be compared (other cluster, unreadable) give way to the new one.
    fn record(&self, new: &str) {
        let mut states = self.states.lock().expect("replication states poisoned");
        let merged = if states.is_empty() || states.len() > 2 {
            vec![new.to_owned()]
        } else {
            let mut merged: Vec<String> = Vec::new();
            for old in states.iter() {
                match (parse_state(old), parse_state(new)) {
                    (Some((c1, l1, r1)), Some((c2, l2, r2))) if c1 == c2 => {
                        if l1 >= l2 && r1 >= r2 {
                            merged.push(old.clone());
                        } else if l1 <= l2 && r1 <= r2 {
                            merged.push(new.to_owned());
                        } else {
                            merged.push(old.clone());
                            merged.push(new.to_owned());
                        }
                    }
                    _ => {
                        merged = vec![new.to_owned()];
                        break;
                    }
                }
            }
            let mut seen = std::collections::HashSet::new();
            merged.retain(|s| seen.insert(s.clone()));
            merged
        };
        *states = merged;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(cluster: &str, local: u64, replicated: u64) -> String {
        base64::engine::general_purpose::STANDARD
            .encode(format!("v1:{cluster}:{local}:{replicated}:00ff"))
    }

    #[test]
    fn the_newest_state_of_a_cluster_is_kept() {
        let states = ReplicationStates::default();
        states.record(&state("a", 5, 1));
        states.record(&state("a", 7, 1));
        assert_eq!(states.current(), vec![state("a", 7, 1)]);
        states.record(&state("a", 6, 1));
        assert_eq!(states.current(), vec![state("a", 7, 1)], "an older one");
        // Neither newer: both are sent.
        states.record(&state("a", 6, 3));
        assert_eq!(states.current(), vec![state("a", 7, 1), state("a", 6, 3)]);
        states.record(&state("a", 8, 4));
        assert_eq!(states.current(), vec![state("a", 8, 4)]);
        // Another cluster, or something unreadable, starts over.
        states.record(&state("b", 1, 1));
        assert_eq!(states.current(), vec![state("b", 1, 1)]);
        states.record("garbage");
        assert_eq!(states.current(), vec!["garbage".to_owned()]);
    }

    #[test]
    fn paths_keep_their_slashes_inside() {
        assert_eq!(path(&["/secret/", "data", "a/b"]), "secret/data/a/b");
        assert_eq!(path(&["secret", "metadata", ""]), "secret/metadata/");
        assert_eq!(
            path(&["secret", "metadata", "dir", ""]),
            "secret/metadata/dir/"
        );
    }
}
