//! Both adapters together: the operator's `RemoteClient` (providers/remote) calling the real
//! server over mTLS answers exactly what the provider's own client answers in process, for
//! every method, and every provider error comes back as itself. The pool shares one connection
//! and reconnects after the server is back.

mod support;

use std::time::Duration;

use provider::{
    Error, FindRequest, PushRemoteRef, PushRequest, RemoteRef, SecretsClient, Validation,
};
use provider_remote::{Pool, PoolMetrics, RemoteClient, Settings, TlsMaterial};
use support::*;

fn material(server: &Running) -> TlsMaterial {
    TlsMaterial {
        ca: server.ca.pem().into_bytes(),
        cert: server.client.cert.clone().into_bytes(),
        key: server.client.key.clone().into_bytes(),
    }
}

fn remote_client(pool: &Pool, server: &Running, name: &str) -> RemoteClient {
    let connection = pool
        .get(&server.addr.to_string(), Some(&material(server)))
        .expect("the TLS material is good");
    RemoteClient::new(
        connection,
        reference(name).expect("a reference"),
        NAMESPACE.into(),
    )
}

fn pool() -> Pool {
    Pool::new(Settings::default(), PoolMetrics::default())
}

#[tokio::test]
async fn every_method_answers_as_the_provider_does_in_process() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let server = Running::start().await;
    let pool = pool();
    let remote = remote_client(&pool, &server, "fake");
    // The same Fake, asked in process.
    let local = fake_client().await;

    let refs = [
        RemoteRef {
            key: "plain".into(),
            ..Default::default()
        },
        RemoteRef {
            key: "plain".into(),
            version: Some("1".into()),
            ..Default::default()
        },
        RemoteRef {
            key: "db".into(),
            property: Some("user".into()),
            ..Default::default()
        },
        RemoteRef {
            key: "absent".into(),
            ..Default::default()
        },
    ];
    for r in &refs {
        assert_eq!(
            format!("{:?}", remote.get_secret(r).await),
            format!("{:?}", local.get_secret(r).await),
            "GetSecret {r:?}"
        );
    }
    let db = RemoteRef {
        key: "db".into(),
        ..Default::default()
    };
    assert_eq!(
        remote.get_secret_map(&db).await.unwrap(),
        local.get_secret_map(&db).await.unwrap()
    );
    let find = FindRequest {
        name_regexp: Some("^db".into()),
        ..Default::default()
    };
    assert_eq!(
        remote.get_all_secrets(&find).await.unwrap(),
        local.get_all_secrets(&find).await.unwrap()
    );
    let at = PushRemoteRef {
        remote_key: "pushed".into(),
        property: None,
    };
    assert!(!remote.secret_exists(&at).await.unwrap());
    remote
        .push_secret(&PushRequest {
            remote: at.clone(),
            secret_key: Some("k".into()),
            value: b"pushed value".to_vec(),
            metadata: None,
            source: Default::default(),
        })
        .await
        .unwrap();
    assert!(remote.secret_exists(&at).await.unwrap());
    assert_eq!(
        remote
            .get_secret(&RemoteRef {
                key: "pushed".into(),
                ..Default::default()
            })
            .await
            .unwrap(),
        b"pushed value"
    );
    remote.delete_secret(&at).await.unwrap();
    assert!(!remote.secret_exists(&at).await.unwrap());
    assert_eq!(remote.validate().await.unwrap(), Validation::Ready);
    assert_eq!(
        remote_client(&pool, &server, "fake-unknown")
            .validate()
            .await
            .unwrap(),
        Validation::Unknown
    );
    assert_eq!(
        remote.capabilities().await.unwrap(),
        api::provider_kinds::Capabilities::ReadWrite
    );
}

#[tokio::test]
async fn every_provider_error_comes_back_as_itself_from_every_method() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let server = Running::start().await;
    let pool = pool();
    for (name, error) in every_error() {
        let remote = remote_client(&pool, &server, &format!("error-{name}"));
        let any = RemoteRef::default();
        let at = PushRemoteRef::default();
        let push = PushRequest {
            remote: at.clone(),
            secret_key: Some("k".into()),
            value: b"v".to_vec(),
            metadata: None,
            source: Default::default(),
        };
        let got: Vec<Error> = vec![
            remote.get_secret(&any).await.unwrap_err(),
            remote.get_secret_map(&any).await.unwrap_err(),
            remote
                .get_all_secrets(&FindRequest::default())
                .await
                .unwrap_err(),
            remote.push_secret(&push).await.unwrap_err(),
            remote.delete_secret(&at).await.unwrap_err(),
            remote.secret_exists(&at).await.unwrap_err(),
            remote.validate().await.unwrap_err(),
        ];
        for back in got {
            assert_eq!(
                std::mem::discriminant(&back),
                std::mem::discriminant(&error),
                "{name}: {back:?}"
            );
            if !matches!(error, Error::Unavailable(_)) {
                assert_eq!(back.to_string(), error.to_string(), "{name}");
            } else {
                // Names the server, since a condition is all the user sees.
                assert!(
                    back.to_string().contains(&server.addr.to_string()),
                    "{back}"
                );
            }
        }
    }
}

#[tokio::test]
async fn clients_share_one_connection_and_reconnect_after_an_outage() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let mut server = Running::start().await;
    let metrics = PoolMetrics::default();
    let pool = Pool::new(
        Settings {
            deadline: Duration::from_secs(5),
            ..Settings::default()
        },
        metrics.clone(),
    );
    let address = server.addr.to_string();
    let a = remote_client(&pool, &server, "fake");
    let b = remote_client(&pool, &server, "fake");
    let plain = RemoteRef {
        key: "plain".into(),
        ..Default::default()
    };
    for _ in 0..50 {
        a.get_secret(&plain).await.unwrap();
        b.get_secret(&plain).await.unwrap();
    }
    assert_eq!(
        metrics.opened(&address),
        1,
        "one connection for both clients"
    );

    // The server goes away: calls fail as Unavailable, naming it, and nothing hangs.
    server.stop();
    let _ = server.task.await;
    let down = a.get_secret(&plain).await.unwrap_err();
    assert!(matches!(down, Error::Unavailable(_)), "{down:?}");
    assert!(down.to_string().contains(&address), "{down}");

    // Back on the same address with the same certificates: the same client reconnects on its
    // next call.
    let certs = server.dir.path().to_owned();
    let _back = Running::start_with(|o| {
        o.grpc = server.addr;
        o.tls = Some(external_secrets_provider_server::TlsFiles::in_dir(&certs));
    })
    .await;
    assert_eq!(a.get_secret(&plain).await.unwrap(), b"v0");
    assert_eq!(metrics.opened(&address), 2);
}

/// A slow GetSecret through `remote`, the server let to answer `after` it started, and how long
/// the call took.
async fn slow_get(
    server: &mut Running,
    remote: RemoteClient,
    after: Duration,
) -> (provider::Result<Vec<u8>>, Duration) {
    let started = std::time::Instant::now();
    let call = tokio::spawn(async move { remote.get_secret(&RemoteRef::default()).await });
    server.slow.started.recv().await.unwrap();
    let release = server.slow.release.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        release.add_permits(1);
    });
    (call.await.unwrap(), started.elapsed())
}

/// A class's `spec.callTimeout` is each call's deadline: a short one fails a slow call when it
/// passes (as the server being unavailable, naming it), the default (30 s) waits for it.
#[tokio::test]
async fn a_short_call_deadline_fails_a_slow_call_at_it_and_the_default_does_not() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let mut server = Running::start().await;
    let pool = pool();
    let short = Duration::from_millis(300);
    let remote = remote_client(&pool, &server, "slow").with_deadline(short);
    let (answer, took) = slow_get(&mut server, remote, Duration::from_secs(2)).await;
    let error = answer.unwrap_err();
    assert!(matches!(error, Error::Unavailable(_)), "{error:?}");
    assert!(
        error.to_string().contains(&server.addr.to_string()),
        "{error}"
    );
    assert!(
        took >= short && took < Duration::from_secs(2),
        "failed after {took:?}"
    );
    // The call the deadline gave up on no longer counts against its endpoint: counted for good,
    // it would turn calls away from that endpoint for as long as it resolves.
    let transport = pool
        .get(&server.addr.to_string(), Some(&material(&server)))
        .expect("the TLS material is good")
        .transport();
    assert_eq!(transport.outstanding(), [(server.addr, 0)]);

    let remote = remote_client(&pool, &server, "slow")
        .with_deadline(api::provider_class::DEFAULT_CALL_TIMEOUT);
    let (answer, took) = slow_get(&mut server, remote, Duration::from_secs(1)).await;
    assert_eq!(answer.unwrap(), b"slow", "answered after {took:?}");
}

/// The connection's own deadline does not cap a class's longer one.
#[tokio::test]
async fn a_call_deadline_longer_than_the_connections_counts() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let mut server = Running::start().await;
    let pool = Pool::new(
        Settings {
            deadline: Duration::from_millis(200),
            ..Settings::default()
        },
        PoolMetrics::default(),
    );
    let remote = remote_client(&pool, &server, "slow").with_deadline(Duration::from_secs(10));
    let (answer, took) = slow_get(&mut server, remote, Duration::from_millis(800)).await;
    assert_eq!(
        answer.map_err(|e| e.to_string()),
        Ok(b"slow".to_vec()),
        "after {took:?}"
    );
}
