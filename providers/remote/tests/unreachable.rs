//! A server that accepts connections and never answers (a hostile or wedged peer): calls end at
//! their deadline as `Unavailable` naming the server, so the breaker holds the others back and
//! the store's condition says where to look.

use std::time::{Duration, Instant};

use external_secrets_provider_remote::{Pool, PoolMetrics, RemoteClient, Settings};
use provider::{Error, RemoteRef, SecretsClient};
use provider_protocol::v1;

#[tokio::test]
async fn a_server_that_never_answers_is_unavailable_at_the_deadline() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    // Accepts and holds every connection, answering nothing.
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let pool = Pool::new(
        Settings {
            deadline: Duration::from_millis(500),
            connect_timeout: Duration::from_millis(500),
            ..Settings::default()
        },
        PoolMetrics::default(),
    );
    let client = RemoteClient::new(
        pool.get(&address, None).unwrap(),
        v1::ProviderReference::default(),
        "team-a".into(),
    );
    let started = Instant::now();
    let err = client
        .get_secret(&RemoteRef {
            key: "k".into(),
            ..RemoteRef::default()
        })
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded by the deadline"
    );
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    assert!(
        err.to_string().contains(&address),
        "names the server: {err}"
    );
    let err = client.validate().await.unwrap_err();
    assert!(
        matches!(err, Error::Unavailable(_)),
        "Validate too: {err:?}"
    );
}
