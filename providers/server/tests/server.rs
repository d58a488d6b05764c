//! The real server on 127.0.0.1 with mTLS, called with the generated tonic client: every method,
//! every error's code, request checks, health, reflection, mTLS refusals, certificate reloads,
//! metrics and draining shutdown. No cluster: a static resolver hands out the Fake provider's
//! client and scripted ones.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use external_secrets_provider_server::ServeOptions;
use provider_protocol::v1;
use provider_protocol::v1::secret_store_provider_client::SecretStoreProviderClient;
use provider_protocol::{error_from_status, error_to_status};
use support::*;
use tonic::Code;

fn remote(key: &str) -> Option<v1::ExternalSecretDataRemoteRef> {
    Some(v1::ExternalSecretDataRemoteRef {
        key: key.into(),
        ..Default::default()
    })
}

fn push_remote(key: &str) -> Option<v1::PushSecretRemoteRef> {
    Some(v1::PushSecretRemoteRef {
        remote_key: key.into(),
        property: String::new(),
    })
}

type Client = SecretStoreProviderClient<tonic::transport::Channel>;

/// Whether the Fake has `key`, by SecretExists.
async fn exists(c: &mut Client, key: &str) -> bool {
    c.secret_exists(v1::SecretExistsRequest {
        provider_ref: reference("fake"),
        remote_ref: push_remote(key),
        source_namespace: NAMESPACE.into(),
    })
    .await
    .unwrap()
    .into_inner()
    .exists
}

/// Validate of the provider object `name` for a caller in `ns`.
async fn validate(c: &mut Client, name: &str, ns: &str) -> v1::ValidateResponse {
    c.validate(v1::ValidateRequest {
        provider_ref: reference(name),
        source_namespace: ns.into(),
    })
    .await
    .unwrap()
    .into_inner()
}

/// Each data call about `key` with `provider_ref` and `source_namespace` as given: its method
/// and how it ended.
async fn data_calls(
    c: &mut Client,
    r: Option<v1::ProviderReference>,
    ns: &str,
    key: &str,
) -> Vec<(&'static str, Result<(), tonic::Status>)> {
    // `name` and how `method` ended, called with a `Request` of `fields`, the reference and the
    // namespace.
    macro_rules! call {
        ($name:literal, $method:ident: $request:ident { $($fields:tt)* }) => {
            (
                $name,
                c.$method(v1::$request {
                    provider_ref: r.clone(),
                    source_namespace: ns.to_owned(),
                    $($fields)*
                })
                .await
                .map(drop),
            )
        };
    }
    let find = Some(v1::ExternalSecretFind::default());
    let push_secret_data = Some(v1::PushSecretData {
        secret_key: key.into(),
        remote_key: key.into(),
        ..Default::default()
    });
    let secret_data = HashMap::from([(key.to_owned(), b"v".to_vec())]);
    vec![
        call!("GetSecret", get_secret: GetSecretRequest { remote_ref: remote(key) }),
        call!("GetSecretMap", get_secret_map: GetSecretMapRequest { remote_ref: remote(key) }),
        call!("GetAllSecrets", get_all_secrets: GetAllSecretsRequest { find }),
        call!("PushSecret", push_secret: PushSecretRequest {
            secret_data,
            push_secret_data,
            ..Default::default()
        }),
        call!("DeleteSecret", delete_secret: DeleteSecretRequest { remote_ref: push_remote(key) }),
        call!("SecretExists", secret_exists: SecretExistsRequest { remote_ref: push_remote(key) }),
    ]
}

#[tokio::test]
async fn every_method_answers() {
    let server = Running::start().await;
    let mut c = server.connect().await;
    let ns = || NAMESPACE.to_owned();

    let value = c
        .get_secret(v1::GetSecretRequest {
            remote_ref: Some(v1::ExternalSecretDataRemoteRef {
                key: "plain".into(),
                version: "1".into(),
                ..Default::default()
            }),
            provider_ref: reference("fake"),
            source_namespace: ns(),
        })
        .await
        .unwrap()
        .into_inner()
        .value;
    assert_eq!(value, b"v1");

    let map = c
        .get_secret_map(v1::GetSecretMapRequest {
            remote_ref: remote("db"),
            provider_ref: reference("fake"),
            source_namespace: ns(),
        })
        .await
        .unwrap()
        .into_inner()
        .secrets;
    assert_eq!(
        map,
        HashMap::from([
            ("user".to_owned(), b"alice".to_vec()),
            ("port".to_owned(), b"5432".to_vec())
        ])
    );

    let all = c
        .get_all_secrets(v1::GetAllSecretsRequest {
            provider_ref: reference("fake"),
            find: Some(v1::ExternalSecretFind {
                name: Some(v1::FindName {
                    regexp: "^db".into(),
                }),
                ..Default::default()
            }),
            source_namespace: ns(),
        })
        .await
        .unwrap()
        .into_inner()
        .secrets;
    let mut keys: Vec<_> = all.keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["db", "db-other"]);

    c.push_secret(v1::PushSecretRequest {
        provider_ref: reference("fake"),
        secret_data: HashMap::from([("password".to_owned(), b"hunter2".to_vec())]),
        push_secret_data: Some(v1::PushSecretData {
            secret_key: "password".into(),
            remote_key: "pushed".into(),
            ..Default::default()
        }),
        source_namespace: ns(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(exists(&mut c, "pushed").await);
    assert_eq!(
        c.get_secret(get_secret("fake", "pushed"))
            .await
            .unwrap()
            .into_inner()
            .value,
        b"hunter2"
    );
    c.delete_secret(v1::DeleteSecretRequest {
        provider_ref: reference("fake"),
        remote_ref: push_remote("pushed"),
        source_namespace: ns(),
    })
    .await
    .unwrap();
    assert!(!exists(&mut c, "pushed").await);

    let validated = validate(&mut c, "fake", NAMESPACE).await;
    assert!(validated.valid && !validated.unknown, "{validated:?}");
    // A store's validation may come without a caller.
    let unknown = validate(&mut c, "fake-unknown", "").await;
    assert!(unknown.valid && unknown.unknown, "{unknown:?}");

    let capabilities = c
        .capabilities(v1::CapabilitiesRequest {
            provider_ref: reference("fake"),
            source_namespace: ns(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        capabilities.capabilities(),
        v1::SecretStoreCapabilities::ReadWrite
    );

    // A secret that is not there is NOT_FOUND, which only ever means that.
    let missing = c.get_secret(get_secret("fake", "nope")).await.unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
}

/// The README's table, which `provider_protocol` implements.
const DOCUMENTED: [(&str, Code); 7] = [
    ("NoSecret", Code::NotFound),
    ("InvalidSpec", Code::InvalidArgument),
    ("Credentials", Code::PermissionDenied),
    ("Backend", Code::Unknown),
    ("Unavailable", Code::Unavailable),
    ("Conflict", Code::FailedPrecondition),
    ("Unsupported", Code::Unimplemented),
];

#[tokio::test]
async fn each_provider_error_comes_back_with_its_documented_code_from_every_method() {
    let server = Running::start().await;
    let mut c = server.connect().await;
    for (variant, code) in DOCUMENTED {
        let name = format!("error-{variant}");
        let statuses = data_calls(&mut c, reference(&name), NAMESPACE, "k").await;
        let sent = error(variant);
        assert_eq!(error_to_status(&sent).code(), code, "{variant}");
        for (method, result) in statuses {
            let status = result.expect_err(method);
            assert_eq!(status.code(), code, "{variant} from {method}: {status:?}");
            // The client adapter reads the same variant, with the same words, back.
            let back = error_from_status(&status, method);
            assert_eq!(
                std::mem::discriminant(&back),
                std::mem::discriminant(&sent),
                "{variant} from {method} came back as {back:?}"
            );
            assert_eq!(
                back.to_string(),
                sent.to_string(),
                "{variant} from {method}"
            );
        }
    }
    // The resolver's own failure takes the same road.
    let status = c.get_secret(get_secret("absent", "k")).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("no provider object absent"),
        "{status:?}"
    );
}

/// ESO's servers answer a failed check `valid: false` with the error's text, which ESO's core
/// reads; ours add the error's kind, which our client reads back as the variant it was.
#[tokio::test]
async fn a_failed_validation_is_answered_not_valid_with_its_error_and_kind() {
    let server = Running::start().await;
    let mut c = server.connect().await;
    for (variant, _) in DOCUMENTED {
        let sent = error(variant);
        let answer = validate(&mut c, &format!("error-{variant}"), NAMESPACE).await;
        assert!(!answer.valid, "{variant}: {answer:?}");
        assert_eq!(answer.error, sent.to_string(), "{variant}");
        let failure = answer.failure.expect("the failure's kind");
        assert_eq!(failure.code, variant);
        let back = provider_protocol::error_from_wire(failure, "Validate");
        assert_eq!(format!("{back:?}"), format!("{sent:?}"));
    }
    // A provider object that cannot be loaded is a failed call, as ESO's servers fail it.
    let status = c
        .validate(v1::ValidateRequest {
            provider_ref: reference("absent"),
            source_namespace: NAMESPACE.into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
}

#[tokio::test]
async fn data_calls_refuse_an_empty_source_namespace_and_a_missing_reference() {
    let server = Running::start().await;
    let mut c = server.connect().await;
    for ns in ["", NAMESPACE] {
        // With a namespace, the reference is what is missing.
        let r = if ns.is_empty() {
            reference("fake")
        } else {
            None
        };
        let field = if ns.is_empty() {
            "source_namespace"
        } else {
            "provider_ref"
        };
        for (method, result) in data_calls(&mut c, r, ns, "x").await {
            let status = result.expect_err("refused");
            assert_eq!(status.code(), Code::InvalidArgument, "{method}: {status:?}");
            assert!(status.message().contains(field), "{method}: {status:?}");
        }
    }
    // Validate and Capabilities need the reference too.
    let status = c
        .validate(v1::ValidateRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("provider_ref"));
    // A request missing its own part says which.
    let status = c
        .get_secret(v1::GetSecretRequest {
            remote_ref: None,
            provider_ref: reference("fake"),
            source_namespace: NAMESPACE.into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("remote_ref"), "{status:?}");
}

#[tokio::test]
async fn health_is_serving_and_reflection_lists_the_service() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let server = Running::start().await;
    let channel = connect(server.addr, &server.ca.pem(), Some(&server.client))
        .await
        .unwrap();
    let mut health = HealthClient::new(channel.clone());
    for service in ["", provider_protocol::SERVICE] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status();
        assert_eq!(status, ServingStatus::Serving, "{service:?}");
    }

    let mut reflection = ServerReflectionClient::new(channel);
    let mut answers = reflection
        .server_reflection_info(futures::stream::iter([ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        }]))
        .await
        .unwrap()
        .into_inner();
    let answer = answers.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("not a list of services: {answer:?}");
    };
    let names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.iter().any(|n| n == provider_protocol::SERVICE),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n == "grpc.health.v1.Health"),
        "{names:?}"
    );
}

#[tokio::test]
async fn mtls_refuses_clients_without_a_certificate_from_its_ca() {
    let server = Running::start().await;
    let ca = server.ca.pem();
    assert!(can_call(server.addr, &ca, Some(&server.client)).await);
    // Each refused by the server, with the TLS alert that says why.
    let why = refusal(server.addr, &ca, None).await;
    assert!(why.contains("CertificateRequired"), "{why}");
    let other = Ca::new("another-ca").client();
    let why = refusal(server.addr, &ca, Some(&other)).await;
    assert!(why.contains("UnknownCA"), "{why}");
    let expired = server.ca.expired_client();
    let why = refusal(server.addr, &ca, Some(&expired)).await;
    assert!(why.contains("CertificateExpired"), "{why}");
    // And the server is still fine.
    assert!(can_call(server.addr, &ca, Some(&server.client)).await);
}

/// The reference to the Fake with `store_ref_kind` and `namespace` as given.
fn claiming(store_ref_kind: &str, namespace: &str) -> Option<v1::ProviderReference> {
    reference("fake").map(|r| v1::ProviderReference {
        store_ref_kind: store_ref_kind.into(),
        namespace: namespace.into(),
        ..r
    })
}

/// Each method called with `r` and `ns` over `c`: its name and how it ended.
async fn every_call(
    c: &mut Client,
    r: Option<v1::ProviderReference>,
    ns: &str,
) -> Vec<(&'static str, Result<(), tonic::Status>)> {
    let mut calls = data_calls(c, r.clone(), ns, "tenant").await;
    calls.push((
        "Validate",
        c.validate(v1::ValidateRequest {
            provider_ref: r.clone(),
            source_namespace: ns.into(),
        })
        .await
        .map(drop),
    ));
    calls.push((
        "Capabilities",
        c.capabilities(v1::CapabilitiesRequest {
            provider_ref: r,
            source_namespace: ns.into(),
        })
        .await
        .map(drop),
    ));
    calls
}

/// Issue 40, item 4: a tenant holding its namespace's client certificate calls the server
/// directly, as a ClusterSecretStore or for another namespace, to read other teams' stores.
#[tokio::test]
async fn a_namespace_certificate_may_claim_only_a_secret_store_of_its_namespace() {
    let server = Running::start().await;
    let ca = server.ca.pem();
    let tenant = server.ca.namespace_client(NAMESPACE);
    let mut c = Client::new(connect(server.addr, &ca, Some(&tenant)).await.unwrap());

    let other = "team-b";
    let attacks = [
        ("ClusterSecretStore", NAMESPACE, NAMESPACE),
        ("ClusterSecretStore", other, other),
        ("SecretStore", other, other),
        ("SecretStore", NAMESPACE, other),
        ("SecretStore", other, NAMESPACE),
    ];
    for (kind, ns, provider_ns) in attacks {
        for (method, result) in every_call(&mut c, claiming(kind, provider_ns), ns).await {
            let status = result.expect_err("refused");
            assert_eq!(
                status.code(),
                Code::PermissionDenied,
                "{method} as {kind} for {ns}/{provider_ns}: {status:?}"
            );
            assert!(
                status.message().contains(
                    "may claim only store_ref_kind SecretStore with source_namespace and provider_ref.namespace \"team-a\""
                ),
                "{method}: {status:?}"
            );
        }
    }

    // Its own namespace's SecretStore is served, every method (the Fake has no key `tenant`:
    // NOT_FOUND is the store's answer).
    for (method, result) in every_call(&mut c, claiming("SecretStore", NAMESPACE), NAMESPACE).await
    {
        assert!(past_the_caller_check(&result), "{method}: {result:?}");
    }
    assert_eq!(read_plain(&mut c, "SecretStore", NAMESPACE).await, b"v0");

    // The operator's certificate (no namespace in it, ESO's) claims what it needs.
    let mut operator = server.connect().await;
    for (kind, ns, provider_ns) in attacks {
        for (method, result) in every_call(&mut operator, claiming(kind, provider_ns), ns).await {
            assert!(
                past_the_caller_check(&result),
                "{method} as {kind} for {ns}: {result:?}"
            );
        }
    }
    assert_eq!(
        read_plain(&mut operator, "ClusterSecretStore", other).await,
        b"v0"
    );
}

/// Whether a call got past the check of its caller: answered, or refused by the store.
fn past_the_caller_check(result: &Result<(), tonic::Status>) -> bool {
    !matches!(result, Err(status) if status.code() == Code::PermissionDenied)
}

/// The Fake's `plain`, read as `store_ref_kind` of namespace `ns`.
async fn read_plain(c: &mut Client, store_ref_kind: &str, ns: &str) -> Vec<u8> {
    c.get_secret(v1::GetSecretRequest {
        remote_ref: remote("plain"),
        provider_ref: claiming(store_ref_kind, ns),
        source_namespace: ns.into(),
    })
    .await
    .unwrap()
    .into_inner()
    .value
}

type InFlight =
    tokio::task::JoinHandle<Result<tonic::Response<v1::GetSecretResponse>, tonic::Status>>;

/// A GetSecret of the `slow` client over `c`, in flight once this returns.
async fn slow_call(server: &mut Running, mut c: Client) -> InFlight {
    let in_flight = tokio::spawn(async move { c.get_secret(get_secret("slow", "k")).await });
    server.slow.started.recv().await.unwrap();
    in_flight
}

/// Lets the slow call finish; it answers.
async fn finish_slow_call(server: &Running, in_flight: InFlight) {
    server.slow.release.add_permits(1);
    let answer = in_flight
        .await
        .unwrap()
        .expect("the call in flight completes");
    assert_eq!(answer.into_inner().value, b"slow");
}

#[tokio::test]
async fn rewritten_certificates_are_used_without_a_restart_while_calls_in_flight_finish() {
    let mut server = Running::start().await;
    let (old_ca, old_client) = (server.ca.pem(), server.client.clone());

    // A call in flight on a connection made with the old certificates.
    let c = server.connect().await;
    let in_flight = slow_call(&mut server, c).await;

    let new_ca = Ca::new("rotated-ca");
    let (new_client, new_ca_pem) = (new_ca.client(), new_ca.pem());
    write_server_files(server.dir.path(), &new_ca, &new_ca.server());
    assert!(
        eventually(Duration::from_secs(10), || can_call(
            server.addr,
            &new_ca_pem,
            Some(&new_client)
        ))
        .await,
        "the new certificates were not picked up"
    );
    // The old CA no longer vouches for the server, nor the server for its clients.
    let why = refusal(server.addr, &old_ca, Some(&old_client)).await;
    assert!(why.contains("UnknownIssuer"), "{why}");
    let why = refusal(server.addr, &new_ca_pem, Some(&old_client)).await;
    assert!(why.contains("UnknownCA"), "{why}");

    // A file that does not load keeps what works.
    std::fs::write(server.dir.path().join("tls.key"), "not a key").unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(can_call(server.addr, &new_ca.pem(), Some(&new_client)).await);

    finish_slow_call(&server, in_flight).await;
    server.stop();
    server.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn metrics_count_calls_by_method_and_code() {
    let server = Running::start().await;
    let mut c = server.connect().await;
    c.get_secret(get_secret("fake", "plain")).await.unwrap();
    c.get_secret(get_secret("fake", "nope")).await.unwrap_err();
    let body = http_get(server.metrics, "/metrics").await;
    for line in [
        r#"grpc_server_handled_total{method="GetSecret",code="OK"} 1"#,
        r#"grpc_server_handled_total{method="GetSecret",code="NotFound"} 1"#,
        r#"grpc_server_handling_seconds_count{method="GetSecret"} 2"#,
        r#"grpc_server_in_flight{method="GetSecret"} 0"#,
    ] {
        assert!(body.contains(line), "{line} missing from:\n{body}");
    }
    assert!(
        http_get(server.metrics, "/readyz")
            .await
            .starts_with("HTTP/1.1 200")
    );
}

#[tokio::test]
async fn shutdown_drains_calls_in_flight_and_stops_accepting() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

    let mut server = Running::start().await;
    let channel = connect(server.addr, &server.ca.pem(), Some(&server.client))
        .await
        .unwrap();
    let mut health = HealthClient::new(channel.clone())
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let status = |m: Option<tonic_health::pb::HealthCheckResponse>| m.unwrap().status();
    assert_eq!(
        status(health.message().await.unwrap()),
        ServingStatus::Serving
    );
    let in_flight = slow_call(&mut server, Client::new(channel)).await;

    server.stop();
    // Who watches health hears it first; probes over HTTP too.
    assert_eq!(
        status(health.message().await.unwrap()),
        ServingStatus::NotServing
    );
    drop(health);
    assert!(
        http_get(server.metrics, "/readyz")
            .await
            .starts_with("HTTP/1.1 503")
    );
    let ca = server.ca.pem();
    assert!(
        eventually(Duration::from_secs(5), || async {
            tokio::net::TcpStream::connect(server.addr).await.is_err()
        })
        .await,
        "still accepting connections after shutdown began"
    );
    assert!(!can_call(server.addr, &ca, Some(&server.client)).await);
    assert!(
        !server.task.is_finished(),
        "stopped before the call in flight finished"
    );

    finish_slow_call(&server, in_flight).await;
    tokio::time::timeout(Duration::from_secs(5), server.task)
        .await
        .expect("stops once drained")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn shutdown_serves_on_for_the_delay_while_not_serving() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

    let delay = Duration::from_secs(2);
    let mut server = Running::start_with(|o: &mut ServeOptions| o.shutdown_delay = delay).await;
    let channel = connect(server.addr, &server.ca.pem(), Some(&server.client))
        .await
        .unwrap();
    let stopped_at = tokio::time::Instant::now();
    server.stop();
    // Endpoints learn it is going (health and /readyz) while it still serves new connections
    // and calls.
    let health = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .status();
    assert_eq!(health, ServingStatus::NotServing);
    assert!(
        http_get(server.metrics, "/readyz")
            .await
            .starts_with("HTTP/1.1 503")
    );
    let ca = server.ca.pem();
    assert!(can_call(server.addr, &ca, Some(&server.client)).await);
    assert!(
        stopped_at.elapsed() < delay,
        "the checks took longer than the delay"
    );
    // Then it stops accepting.
    assert!(
        eventually(delay * 2, || async {
            tokio::net::TcpStream::connect(server.addr).await.is_err()
        })
        .await,
        "still accepting connections after the delay"
    );
    assert!(
        stopped_at.elapsed() >= delay,
        "stopped accepting before the delay"
    );
    tokio::time::timeout(Duration::from_secs(5), server.task)
        .await
        .expect("stops once drained")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn shutdown_waits_no_longer_than_the_grace_period() {
    let mut server = Running::start_with(|o: &mut ServeOptions| {
        o.grace_period = Duration::from_millis(300);
    })
    .await;
    let c = server.connect().await;
    let in_flight = slow_call(&mut server, c).await;
    server.stop();
    tokio::time::timeout(Duration::from_secs(5), server.task)
        .await
        .expect("stops after the grace period")
        .unwrap()
        .unwrap();
    in_flight.abort();
}

#[tokio::test]
async fn plaintext_when_tls_is_off() {
    let server = Running::start_with(|o: &mut ServeOptions| o.tls = None).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let value = v1::secret_store_provider_client::SecretStoreProviderClient::new(channel)
        .get_secret(get_secret("fake", "plain"))
        .await
        .unwrap()
        .into_inner()
        .value;
    assert_eq!(value, b"v0");
}

/// Calls whose deadlines expire together (a burst of short deadlines, or a backend slow for
/// every store at once) reset their streams together, often before the server has taken them
/// up. hyper answers more than 20 such resets with GOAWAY ENHANCE_YOUR_CALM ("too many resets"),
/// which would end every other call on the one connection an operator shares between all its
/// stores. The peer is authenticated, so that guard is loosened; the connection must keep
/// serving.
#[tokio::test]
async fn a_burst_of_cancelled_calls_keeps_the_connection() {
    let server = Running::start_with(|o| o.tls = None).await;
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    let ended = tokio::spawn(connection);
    let health = || {
        http::Request::post(format!(
            "http://{}/grpc.health.v1.Health/Check",
            server.addr
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
    };
    let mut client = client.ready().await.unwrap();
    for _ in 0..100 {
        let (_, mut stream) = client.send_request(health(), false).unwrap();
        stream.send_reset(h2::Reason::CANCEL);
        client = client.ready().await.unwrap();
    }
    // A health check (an empty HealthCheckRequest: the 5-byte frame header alone) on the same
    // connection after the burst.
    let (answer, mut stream) = client
        .send_request(health(), false)
        .expect("the connection takes a call after the burst");
    stream
        .send_data(bytes::Bytes::from_static(&[0; 5]), true)
        .unwrap();
    let mut body = tokio::time::timeout(Duration::from_secs(10), answer)
        .await
        .expect("an answer within 10 s")
        .unwrap_or_else(|e| panic!("the call after the burst failed: {e}"))
        .into_body();
    while body.data().await.is_some() {}
    let trailers = body.trailers().await.unwrap().unwrap_or_default();
    assert_eq!(
        trailers.get("grpc-status").map(|v| v.to_str().unwrap()),
        Some("0"),
        "{trailers:?}"
    );
    assert!(!ended.is_finished(), "the server closed the connection");
}
