//! The conformance run, in process, against our own servers: the Fake provider through the real
//! server passes every check; servers broken on purpose (a client that answers NOT_FOUND for
//! everything, one that leaks a value into an error message, a bare server that is lax about
//! health, reflection, capabilities and namespaces, one that serves a call at a time) fail the
//! checks that describe what they break, and only those.

// The server's test support names the server crate by its package name.
extern crate provider_server as external_secrets_provider_server;

#[path = "../../server/tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use external_secrets_provider_conformance::{
    Options, Outcome, Read, Report, TlsMaterial, names, run, tls_from_dir,
};
use external_secrets_provider_server::{
    GrpcMetrics, ProviderService, Resolved, Resolver, ServeOptions, Server, TlsFiles,
};
use provider::{
    Error, FindRequest, PushRemoteRef, PushRequest, RemoteRef, SecretsClient, Validation,
};
use provider_protocol::v1;
use provider_protocol::v1::secret_store_provider_server::{
    SecretStoreProvider, SecretStoreProviderServer,
};
use support::{Ca, NAMESPACE, Running, StaticResolver, fake_client, fake_spec, reference};
use tokio::sync::oneshot;
use tonic::{Request, Response, Status};

fn install_crypto() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// What the Fake of `support::fake_spec` holds.
fn fake_reads() -> Vec<Read> {
    vec![
        Read {
            key: "plain".into(),
            value: b"v0".to_vec(),
        },
        Read {
            key: "db".into(),
            value: br#"{"user":"alice","port":"5432"}"#.to_vec(),
        },
    ]
}

fn options(address: SocketAddr, tls: Option<TlsMaterial>, name: &str) -> Options {
    let mut options = Options::new(
        address.to_string(),
        tls,
        reference(name).expect("a reference"),
    );
    options.reads = fake_reads();
    options.deadline = Duration::from_secs(5);
    options
}

fn material(ca: &Ca, client: &support::Issued) -> TlsMaterial {
    TlsMaterial {
        ca: ca.pem().into_bytes(),
        cert: client.cert.clone().into_bytes(),
        key: client.key.clone().into_bytes(),
    }
}

/// The maximum connection age of the server the full run checks, short so that the GOAWAY
/// check is over soon.
const AGE: Duration = Duration::from_secs(1);

/// Every check a run with read keys and `max_connection_age` makes, in order.
const ALL: [&str; 21] = [
    names::HEALTH,
    names::REFLECTION,
    names::VALIDATE,
    names::CAPABILITIES,
    names::NOT_FOUND,
    names::ERROR_DETAILS,
    "get-secret:plain",
    "get-secret:db",
    names::GET_SECRET_MAP,
    names::GET_ALL_SECRETS,
    names::PUSH,
    names::UNKNOWN_PROVIDER_REF,
    names::ERRORS_AS_STATUS,
    names::DELETE,
    names::SOURCE_NAMESPACE,
    names::CLIENT_CERTIFICATE_REQUIRED,
    names::NAMESPACE_CLAIMS,
    names::CONCURRENCY,
    names::DEADLINE,
    names::GOAWAY,
    names::NO_SECRET_IN_ERRORS,
];

fn names_of(report: &Report) -> Vec<&str> {
    report.checks.iter().map(|c| c.name.as_str()).collect()
}

fn detail<'a>(report: &'a Report, name: &str) -> &'a str {
    &report
        .get(name)
        .unwrap_or_else(|| panic!("no check {name} in\n{report}"))
        .detail
}

// ---------------------------------------------------------------------------------------------
// Our server, as it is

#[tokio::test]
async fn the_fake_through_the_real_server_passes_every_check() {
    install_crypto();
    let server = Running::start_with(|o| o.max_connection_age = AGE).await;
    // The files as the command reads them: the keys of a namespaced ProviderClass's TLS Secret,
    // whose certificate names its namespace.
    let tenant = server.ca.namespace_client(NAMESPACE);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.crt"), server.ca.pem()).unwrap();
    std::fs::write(dir.path().join("client.crt"), &tenant.cert).unwrap();
    std::fs::write(dir.path().join("client.key"), &tenant.key).unwrap();
    let tls = tls_from_dir(dir.path()).expect("the files are good");

    let mut aged = options(server.addr, Some(tls.clone()), "fake");
    aged.max_connection_age = Some(AGE);
    let report = run(aged).await;
    println!("{report}");
    assert_eq!(names_of(&report), ALL);
    assert_eq!(
        report.with(Outcome::Pass),
        ALL,
        "every check passes, none with a warning:\n{report}"
    );
    assert!(report.passed());
    assert_eq!(detail(&report, names::CAPABILITIES), "READ_WRITE");
    assert!(
        detail(&report, names::CONCURRENCY).contains("100 GetSecret calls at once"),
        "{report}"
    );
    assert!(
        detail(&report, names::CLIENT_CERTIFICATE_REQUIRED).contains("CertificateRequired"),
        "{report}"
    );
    assert_eq!(
        detail(&report, names::NAMESPACE_CLAIMS),
        "PERMISSION_DENIED for 4 claims outside namespace \"team-a\", to GetSecret and Validate"
    );
    // The report shows no secret value.
    let text = report.to_string();
    assert!(
        !text.contains("alice") && !text.contains("\"v0\""),
        "{text}"
    );

    // Without read keys the checks that need one are skipped, and the run still passes.
    let mut bare = options(server.addr, Some(tls), "fake");
    bare.reads.clear();
    let report = run(bare).await;
    println!("{report}");
    assert!(report.passed(), "{report}");
    assert_eq!(
        report.with(Outcome::Skip),
        [names::GET_SECRET_MAP, names::GET_ALL_SECRETS, names::GOAWAY]
    );
    assert!(report.with(Outcome::Warn).is_empty(), "{report}");
    assert!(report.get("get-secret:plain").is_none());
}

/// The certificate checks dial the address themselves: an IPv6 one, `[::1]:port`, is checked as
/// `::1`, and the handshake without a client certificate is what refuses (before, the brackets
/// made the name invalid, that client-side error passed the check, and so would have a server
/// that was down).
#[tokio::test]
async fn an_ipv6_address_is_checked_by_the_handshake() {
    install_crypto();
    let server = Running::start_with(|o| o.grpc = "[::1]:0".parse().unwrap()).await;
    let report = run(options(
        server.addr,
        Some(material(&server.ca, &server.ca.namespace_client(NAMESPACE))),
        "fake",
    ))
    .await;
    println!("{report}");
    assert!(report.passed(), "{report}");
    assert!(
        detail(&report, names::CLIENT_CERTIFICATE_REQUIRED).contains("CertificateRequired"),
        "{report}"
    );
}

/// A server said to have a maximum connection age that keeps its connections for good fails the
/// GOAWAY check, and only it.
#[tokio::test]
async fn a_server_keeping_its_connections_past_the_age_given_fails_goaway() {
    install_crypto();
    let server = Running::start().await;
    let mut said = options(
        server.addr,
        Some(material(&server.ca, &server.ca.namespace_client(NAMESPACE))),
        "fake",
    );
    said.max_connection_age = Some(AGE);
    let report = run(said).await;
    println!("{report}");
    assert_eq!(report.failed(), [names::GOAWAY], "{report}");
    assert!(
        detail(&report, names::GOAWAY).contains("kept the connection"),
        "{report}"
    );
}

#[tokio::test]
async fn a_server_that_cannot_be_reached_fails_health_and_runs_nothing_else() {
    install_crypto();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let ca = Ca::new("nobody");
    let report = run(options(addr, Some(material(&ca, &ca.client())), "fake")).await;
    println!("{report}");
    assert_eq!(names_of(&report), [names::HEALTH, names::NOT_RUN]);
    assert_eq!(report.failed(), [names::HEALTH]);
    assert!(
        detail(&report, names::HEALTH).contains("cannot reach"),
        "{report}"
    );

    // A server whose certificate our CA did not sign is as unreachable, and says why.
    let server = Running::start().await;
    let stranger = Ca::new("stranger");
    let report = run(options(
        server.addr,
        Some(material(&stranger, &stranger.client())),
        "fake",
    ))
    .await;
    println!("{report}");
    assert_eq!(report.failed(), [names::HEALTH]);
    assert!(
        detail(&report, names::HEALTH)
            .to_lowercase()
            .contains("certificate"),
        "{report}"
    );

    // TLS material that is not PEM is refused before any call.
    let bad = TlsMaterial {
        ca: b"not PEM".to_vec(),
        cert: Vec::new(),
        key: Vec::new(),
    };
    let report = run(options(server.addr, Some(bad), "fake")).await;
    assert_eq!(names_of(&report), [names::CONNECTION]);
    assert!(!report.passed());
}

// ---------------------------------------------------------------------------------------------
// Broken behind the real server: scripted clients

/// Serves `resolver` with the real server over mTLS.
struct Served {
    addr: SocketAddr,
    tls: TlsMaterial,
    _dir: tempfile::TempDir,
    _stop: oneshot::Sender<()>,
}

async fn serve_resolver(resolver: Arc<dyn Resolver>) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("conformance-ca");
    support::write_server_files(dir.path(), &ca, &ca.server());
    let options = ServeOptions::new(
        "127.0.0.1:0".parse().unwrap(),
        None,
        Some(TlsFiles::in_dir(dir.path())),
    );
    let server = Server::bind(options, resolver, Default::default())
        .await
        .unwrap();
    let addr = server.grpc_addr();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    Served {
        addr,
        tls: material(&ca, &ca.client()),
        _dir: dir,
        _stop: stop,
    }
}

/// Resolves `fake` to `client` (with the Fake's schema); any other name is `missing`.
struct OneClient {
    client: Arc<dyn SecretsClient>,
    missing: fn() -> Error,
}

#[async_trait]
impl Resolver for OneClient {
    async fn resolve(
        &self,
        reference: &v1::ProviderReference,
        _source_namespace: &str,
    ) -> Result<Resolved, Error> {
        if reference.name != "fake" {
            return Err((self.missing)());
        }
        Ok(Resolved {
            client: self.client.clone(),
            provider: Arc::new(provider_fake::Fake::default()),
            spec: fake_spec(),
        })
    }
}

/// The run (printed) against the real server serving `client` as `fake`; any other name is
/// `missing`.
async fn run_serving(client: Arc<dyn SecretsClient>, missing: fn() -> Error) -> Report {
    install_crypto();
    let served = serve_resolver(Arc::new(OneClient { client, missing })).await;
    let report = run(options(served.addr, Some(served.tls.clone()), "fake")).await;
    println!("{report}");
    report
}

/// Answers "the secret does not exist" to everything but validation.
struct NotFoundForEverything;

#[async_trait]
impl SecretsClient for NotFoundForEverything {
    async fn get_secret(&self, _: &RemoteRef) -> provider::Result<Vec<u8>> {
        Err(Error::NoSecret)
    }
    async fn get_secret_map(&self, _: &RemoteRef) -> provider::Result<BTreeMap<String, Vec<u8>>> {
        Err(Error::NoSecret)
    }
    async fn get_all_secrets(
        &self,
        _: &FindRequest,
    ) -> provider::Result<BTreeMap<String, Vec<u8>>> {
        Err(Error::NoSecret)
    }
    async fn push_secret(&self, _: &PushRequest) -> provider::Result<()> {
        Err(Error::NoSecret)
    }
    async fn delete_secret(&self, _: &PushRemoteRef) -> provider::Result<()> {
        Err(Error::NoSecret)
    }
    async fn secret_exists(&self, _: &PushRemoteRef) -> provider::Result<bool> {
        Err(Error::NoSecret)
    }
    async fn validate(&self) -> provider::Result<Validation> {
        Ok(Validation::Ready)
    }
    async fn close(&self) -> provider::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_server_answering_not_found_for_everything_fails_what_that_breaks() {
    let report = run_serving(Arc::new(NotFoundForEverything), || Error::NoSecret).await;
    assert_eq!(
        report.failed(),
        [
            "get-secret:plain",
            "get-secret:db",
            names::GET_SECRET_MAP,
            names::GET_ALL_SECRETS,
            names::PUSH,
            names::UNKNOWN_PROVIDER_REF,
            names::ERRORS_AS_STATUS,
        ]
    );
    // NOT_FOUND for a key that does not exist is right, even from this server.
    assert_eq!(report.outcome(names::NOT_FOUND), Some(Outcome::Pass));
    assert_eq!(report.outcome(names::DELETE), Some(Outcome::Skip));
    assert!(
        detail(&report, names::PUSH).starts_with("SecretExists of conformance-")
            && detail(&report, names::PUSH).contains("which does not exist: NOT_FOUND"),
        "{report}"
    );
    assert!(
        detail(&report, names::ERRORS_AS_STATUS).contains("answered NOT_FOUND"),
        "{report}"
    );
    assert!(
        detail(&report, names::UNKNOWN_PROVIDER_REF).contains("does not exist, answered NOT_FOUND"),
        "{report}"
    );
}

/// The Fake, except that a missing property's error quotes the whole value.
struct Leaky(Arc<dyn SecretsClient>);

#[async_trait]
impl SecretsClient for Leaky {
    async fn get_secret(&self, remote: &RemoteRef) -> provider::Result<Vec<u8>> {
        match (self.0.get_secret(remote).await, &remote.property) {
            (Err(Error::NoSecret), Some(property)) => {
                let whole = RemoteRef {
                    property: None,
                    ..remote.clone()
                };
                let value = self.0.get_secret(&whole).await?;
                Err(Error::Backend(format!(
                    "no property {property:?} in {}",
                    String::from_utf8_lossy(&value)
                )))
            }
            (answer, _) => answer,
        }
    }
    async fn get_secret_map(
        &self,
        remote: &RemoteRef,
    ) -> provider::Result<BTreeMap<String, Vec<u8>>> {
        self.0.get_secret_map(remote).await
    }
    async fn get_all_secrets(
        &self,
        find: &FindRequest,
    ) -> provider::Result<BTreeMap<String, Vec<u8>>> {
        self.0.get_all_secrets(find).await
    }
    async fn push_secret(&self, push: &PushRequest) -> provider::Result<()> {
        self.0.push_secret(push).await
    }
    async fn delete_secret(&self, remote: &PushRemoteRef) -> provider::Result<()> {
        self.0.delete_secret(remote).await
    }
    async fn secret_exists(&self, remote: &PushRemoteRef) -> provider::Result<bool> {
        self.0.secret_exists(remote).await
    }
    async fn validate(&self) -> provider::Result<Validation> {
        self.0.validate().await
    }
    async fn close(&self) -> provider::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_server_leaking_a_value_into_an_error_message_fails_only_that() {
    let report = run_serving(Arc::new(Leaky(fake_client().await)), || {
        Error::InvalidSpec("no such provider object".into())
    })
    .await;
    assert_eq!(report.failed(), [names::NO_SECRET_IN_ERRORS]);
    assert_eq!(
        detail(&report, names::NO_SECRET_IN_ERRORS),
        "GetSecret with a missing property (UNKNOWN) carries the value this run pushed"
    );
}

// ---------------------------------------------------------------------------------------------
// Broken in the service itself: a bare tonic server around our service

/// Our service, with its contract loosened on purpose.
#[derive(Default)]
struct Loosened {
    /// Takes an empty source_namespace for the test namespace.
    any_namespace: bool,
    /// Claims READ_ONLY, yet writes.
    claims_read_only: bool,
    /// GetAllSecrets is UNIMPLEMENTED.
    no_find: bool,
    /// Serves one GetSecret at a time, each taking this long.
    one_at_a_time: Option<Duration>,
    /// Puts a bare `provider.v1.Error` in the status details, as our servers once did.
    bare_error_details: bool,
}

struct LooseService {
    inner: ProviderService,
    loose: Loosened,
    lock: tokio::sync::Mutex<()>,
}

impl LooseService {
    /// What the loosened service does before ours serves `method`: refuses GetAllSecrets when
    /// `no_find`, takes an empty `source_namespace` (which `field` reaches) for the test
    /// namespace when `any_namespace`, and holds GetSecret behind the one before it when
    /// `one_at_a_time` (the guard it hands back is kept until the answer).
    async fn loosen<T>(
        &self,
        method: &str,
        request: Request<T>,
        field: impl FnOnce(&mut T) -> &mut String,
    ) -> Result<(Request<T>, Option<tokio::sync::MutexGuard<'_, ()>>), Status> {
        if self.loose.no_find && method == "get_all_secrets" {
            return Err(Status::unimplemented("GetAllSecrets is not served here"));
        }
        let mut r = request.into_inner();
        let namespace = field(&mut r);
        if self.loose.any_namespace && namespace.is_empty() {
            *namespace = NAMESPACE.into();
        }
        let one = match self.loose.one_at_a_time {
            Some(pause) if method == "get_secret" => {
                let guard = self.lock.lock().await;
                tokio::time::sleep(pause).await;
                Some(guard)
            }
            _ => None,
        };
        Ok((Request::new(r), one))
    }
}

impl LooseService {
    /// The status as the loosened service sends it.
    fn reshape(&self, status: Status) -> Status {
        if !self.loose.bare_error_details {
            return status;
        }
        let bare = provider_protocol::error_in_details(status.details()).unwrap_or_default();
        Status::with_details(
            status.code(),
            status.message().to_owned(),
            prost::Message::encode_to_vec(&bare).into(),
        )
    }
}

/// The service: each data method (`method(Request) -> Response;`) loosened, then ours.
macro_rules! loose_service {
    ($($method:ident($request:ident) -> $response:ident;)*) => {
        #[async_trait]
        impl SecretStoreProvider for LooseService {
            $(
                async fn $method(
                    &self,
                    request: Request<v1::$request>,
                ) -> Result<Response<v1::$response>, Status> {
                    let (request, _one) = self
                        .loosen(stringify!($method), request, |r| &mut r.source_namespace)
                        .await?;
                    self.inner.$method(request).await.map_err(|s| self.reshape(s))
                }
            )*

            async fn validate(
                &self,
                request: Request<v1::ValidateRequest>,
            ) -> Result<Response<v1::ValidateResponse>, Status> {
                self.inner.validate(request).await
            }

            async fn capabilities(
                &self,
                request: Request<v1::CapabilitiesRequest>,
            ) -> Result<Response<v1::CapabilitiesResponse>, Status> {
                if self.loose.claims_read_only {
                    return Ok(Response::new(v1::CapabilitiesResponse {
                        capabilities: v1::SecretStoreCapabilities::ReadOnly.into(),
                    }));
                }
                self.inner.capabilities(request).await
            }
        }
    };
}

loose_service! {
    get_secret(GetSecretRequest) -> GetSecretResponse;
    get_secret_map(GetSecretMapRequest) -> GetSecretMapResponse;
    push_secret(PushSecretRequest) -> PushSecretResponse;
    delete_secret(DeleteSecretRequest) -> DeleteSecretResponse;
    secret_exists(SecretExistsRequest) -> SecretExistsResponse;
    get_all_secrets(GetAllSecretsRequest) -> GetAllSecretsResponse;
}

/// A server of the loosened service over the static resolver (the Fake as `fake`), with gRPC
/// health when `health`, and no reflection; plaintext, or with `tls` tonic's own TLS (which
/// checks a client certificate's chain, if it asks for one, and nothing else; the loosened
/// service does not see the certificate).
async fn serve_loose(
    loose: Loosened,
    health: bool,
    tls: Option<tonic::transport::ServerTlsConfig>,
) -> SocketAddr {
    let (resolver, _slow) = StaticResolver::new().await;
    let mut registry = Default::default();
    let service = LooseService {
        inner: ProviderService::new(resolver, GrpcMetrics::register(&mut registry)),
        loose,
        lock: Default::default(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls).unwrap();
    }
    let provider = SecretStoreProviderServer::new(service);
    let router = if health {
        let (_reporter, health) = tonic_health::server::health_reporter();
        builder.add_service(health).add_service(provider)
    } else {
        builder.add_service(provider)
    };
    tokio::spawn(router.serve_with_incoming(incoming));
    addr
}

#[tokio::test]
async fn a_lax_bare_server_fails_health_capabilities_and_namespaces() {
    let addr = serve_loose(
        Loosened {
            any_namespace: true,
            claims_read_only: true,
            no_find: true,
            ..Default::default()
        },
        false,
        None,
    )
    .await;
    let report = run(options(addr, None, "fake")).await;
    println!("{report}");
    assert_eq!(
        report.failed(),
        [
            names::HEALTH,
            names::PUSH,
            names::DELETE,
            names::SOURCE_NAMESPACE
        ]
    );
    assert_eq!(
        report.with(Outcome::Warn),
        [names::REFLECTION, names::GET_ALL_SECRETS]
    );
    assert!(
        detail(&report, names::HEALTH).contains("UNIMPLEMENTED"),
        "{report}"
    );
    assert_eq!(detail(&report, names::CAPABILITIES), "READ_ONLY");
    assert!(
        detail(&report, names::PUSH).starts_with("READ_ONLY, but PushSecret of conformance-"),
        "{report}"
    );
    assert!(
        detail(&report, names::GET_ALL_SECRETS).starts_with("not supported (UNIMPLEMENTED"),
        "{report}"
    );
    let namespaces = detail(&report, names::SOURCE_NAMESPACE);
    for method in [
        "GetSecret",
        "GetSecretMap",
        "PushSecret",
        "DeleteSecret",
        "SecretExists",
    ] {
        assert!(
            namespaces.contains(&format!("{method} answered")),
            "{report}"
        );
    }
    // A server without GetAllSecrets cannot be asked to check anything there.
    assert!(!namespaces.contains("GetAllSecrets"), "{report}");
}

#[tokio::test]
async fn a_server_serving_one_call_at_a_time_fails_concurrency() {
    let addr = serve_loose(
        Loosened {
            one_at_a_time: Some(Duration::from_millis(30)),
            ..Default::default()
        },
        true,
        None,
    )
    .await;
    let mut options = options(addr, None, "fake");
    // 100 calls of 30 ms each, one after the other, take 3 s.
    options.deadline = Duration::from_millis(1500);
    let report = run(options).await;
    println!("{report}");
    assert_eq!(report.failed(), [names::CONCURRENCY]);
    assert!(
        detail(&report, names::CONCURRENCY)
            .contains("of 100 GetSecret calls at once got no answer"),
        "{report}"
    );
    // No reflection here: a warning, not a failure.
    assert_eq!(report.with(Outcome::Warn), [names::REFLECTION]);
}

/// What our servers sent before: grpc-go finds no code in such details (it reads code 0), and
/// turns the NOT_FOUND into INTERNAL.
#[tokio::test]
async fn a_server_sending_a_bare_provider_error_as_details_fails_error_details() {
    let addr = serve_loose(
        Loosened {
            bare_error_details: true,
            ..Default::default()
        },
        true,
        None,
    )
    .await;
    let report = run(options(addr, None, "fake")).await;
    println!("{report}");
    assert_eq!(report.failed(), [names::ERROR_DETAILS]);
    assert!(
        detail(&report, names::ERROR_DETAILS).contains("are not a google.rpc.Status")
            && detail(&report, names::ERROR_DETAILS).contains("turns into INTERNAL"),
        "{report}"
    );
}

/// Issue 40, item 4: a server that checks the client's chain only (as ESO's draft does) believes
/// whatever a caller claims, so a tenant with its namespace's certificate reads other teams'
/// stores: `namespace-claims` fails there. A server that asks for no client certificate fails
/// `client-certificate-required`.
#[tokio::test]
async fn a_server_believing_every_claim_fails_namespace_claims() {
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    install_crypto();
    let ca = Ca::new("claims-ca");
    let issued = ca.server();
    let identity = || Identity::from_pem(&issued.cert, &issued.key);
    let chain_only = ServerTlsConfig::new()
        .identity(identity())
        .client_ca_root(Certificate::from_pem(ca.pem()));
    let addr = serve_loose(Loosened::default(), true, Some(chain_only)).await;

    let tenant = material(&ca, &ca.namespace_client(NAMESPACE));
    let report = run(options(addr, Some(tenant), "fake")).await;
    println!("{report}");
    assert_eq!(report.failed(), [names::NAMESPACE_CLAIMS]);
    let claims = detail(&report, names::NAMESPACE_CLAIMS);
    assert!(
        claims.starts_with(
            "a certificate of namespace \"team-a\" was not refused with PERMISSION_DENIED: GetSecret as ClusterSecretStore with source_namespace \"team-a\""
        ),
        "{report}"
    );
    assert_eq!(
        report.outcome(names::CLIENT_CERTIFICATE_REQUIRED),
        Some(Outcome::Pass)
    );

    // The operator's certificate may claim anything: nothing to check with it.
    let operator = material(&ca, &ca.client());
    let report = run(options(addr, Some(operator.clone()), "fake")).await;
    assert!(report.passed(), "{report}");
    assert_eq!(report.outcome(names::NAMESPACE_CLAIMS), Some(Outcome::Skip));

    let no_client_auth = ServerTlsConfig::new().identity(identity());
    let addr = serve_loose(Loosened::default(), true, Some(no_client_auth)).await;
    let report = run(options(addr, Some(operator), "fake")).await;
    println!("{report}");
    assert_eq!(report.failed(), [names::CLIENT_CERTIFICATE_REQUIRED]);
    assert!(
        detail(&report, names::CLIENT_CERTIFICATE_REQUIRED)
            .starts_with("a caller without a client certificate was served: NOT_FOUND"),
        "{report}"
    );
}
