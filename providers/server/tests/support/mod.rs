//! What the server tests share: certificates, a resolver without a cluster, a running server and
//! clients of it.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use external_secrets_provider_server::{
    Resolved, Resolver, ServeError, ServeOptions, Server, TlsFiles,
};
use provider::{
    ClientRequest, Error, FindRequest, ProviderIdentity, ProviderRuntime, PushRemoteRef,
    PushRequest, RemoteRef, SecretsClient, StaticCredentials, Validation,
};
use provider_protocol::v1;
use provider_protocol::v1::secret_store_provider_client::SecretStoreProviderClient;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

// ---------------------------------------------------------------------------------------------
// Certificates

/// A certificate and its key, PEM.
#[derive(Clone)]
pub struct Issued {
    pub cert: String,
    pub key: String,
}

pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

fn name(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

impl Ca {
    pub fn new(cn: &str) -> Self {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(cn);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Self { issuer }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    fn issue(&self, params: CertificateParams) -> Issued {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// ESO's server certificate shape, for `localhost`, 127.0.0.1 and ::1.
    pub fn server(&self) -> Issued {
        let mut params = CertificateParams::default();
        params.distinguished_name = name("external-secrets-provider");
        params.subject_alt_names = vec![
            SanType::DnsName("localhost".try_into().unwrap()),
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            SanType::IpAddress(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)),
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params)
    }

    pub fn client(&self) -> Issued {
        let mut params = CertificateParams::default();
        params.distinguished_name = name("external-secrets-controller");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params)
    }

    /// A client certificate naming `namespace` as the operator issues one per namespaced
    /// ProviderClass.
    pub fn namespace_client(&self, namespace: &str) -> Issued {
        let mut params = CertificateParams::default();
        params.distinguished_name = name("external-secrets-controller");
        params.subject_alt_names = vec![SanType::URI(
            api::caller_identity::namespace_uri(namespace)
                .try_into()
                .unwrap(),
        )];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params)
    }

    pub fn expired_client(&self) -> Issued {
        let mut params = CertificateParams::default();
        params.distinguished_name = name("external-secrets-controller");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        self.issue(params)
    }
}

/// Writes the server's files in ESO's layout.
pub fn write_server_files(dir: &Path, ca: &Ca, server: &Issued) {
    std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
    std::fs::write(dir.join("tls.crt"), &server.cert).unwrap();
    std::fs::write(dir.join("tls.key"), &server.key).unwrap();
}

// ---------------------------------------------------------------------------------------------
// A resolver without a cluster

pub const NAMESPACE: &str = "team-a";

/// Every provider error, by name.
pub fn every_error() -> Vec<(&'static str, Error)> {
    vec![
        ("NoSecret", Error::NoSecret),
        (
            "InvalidSpec",
            Error::InvalidSpec("spec.data[0].key: required".into()),
        ),
        (
            "Credentials",
            Error::Credentials {
                reference: "Secret team-a/token".into(),
                reason: "key \"t\" not found".into(),
            },
        ),
        ("Backend", Error::Backend("the backend said no".into())),
        (
            "Unavailable",
            Error::Unavailable("connection refused".into()),
        ),
        (
            "Conflict",
            Error::Conflict("not managed by external-secrets".into()),
        ),
        (
            "Unsupported",
            Error::Unsupported {
                provider: "Scripted".into(),
                operation: "GetAllSecrets".into(),
            },
        ),
    ]
}

pub fn error(name: &str) -> Error {
    every_error()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, e)| e)
        .unwrap_or_else(|| panic!("no error named {name}"))
}

/// A client whose every call fails with one error.
struct Failing(&'static str);

#[async_trait]
impl SecretsClient for Failing {
    async fn get_secret(&self, _: &RemoteRef) -> provider::Result<Vec<u8>> {
        Err(error(self.0))
    }
    async fn get_secret_map(&self, _: &RemoteRef) -> provider::Result<BTreeMap<String, Vec<u8>>> {
        Err(error(self.0))
    }
    async fn get_all_secrets(
        &self,
        _: &FindRequest,
    ) -> provider::Result<BTreeMap<String, Vec<u8>>> {
        Err(error(self.0))
    }
    async fn push_secret(&self, _: &PushRequest) -> provider::Result<()> {
        Err(error(self.0))
    }
    async fn delete_secret(&self, _: &PushRemoteRef) -> provider::Result<()> {
        Err(error(self.0))
    }
    async fn secret_exists(&self, _: &PushRemoteRef) -> provider::Result<bool> {
        Err(error(self.0))
    }
    async fn validate(&self) -> provider::Result<Validation> {
        Err(error(self.0))
    }
    async fn close(&self) -> provider::Result<()> {
        Ok(())
    }
}

/// A client whose `get_secret` answers only once the test lets it.
struct Slow {
    started: mpsc::UnboundedSender<()>,
    release: Arc<Semaphore>,
}

#[async_trait]
impl SecretsClient for Slow {
    async fn get_secret(&self, _: &RemoteRef) -> provider::Result<Vec<u8>> {
        let _ = self.started.send(());
        self.release.acquire().await.unwrap().forget();
        Ok(b"slow".to_vec())
    }
    async fn get_secret_map(&self, _: &RemoteRef) -> provider::Result<BTreeMap<String, Vec<u8>>> {
        Ok(BTreeMap::new())
    }
    async fn get_all_secrets(
        &self,
        _: &FindRequest,
    ) -> provider::Result<BTreeMap<String, Vec<u8>>> {
        Ok(BTreeMap::new())
    }
    async fn push_secret(&self, _: &PushRequest) -> provider::Result<()> {
        Ok(())
    }
    async fn delete_secret(&self, _: &PushRemoteRef) -> provider::Result<()> {
        Ok(())
    }
    async fn secret_exists(&self, _: &PushRemoteRef) -> provider::Result<bool> {
        Ok(false)
    }
    async fn validate(&self) -> provider::Result<Validation> {
        Ok(Validation::Ready)
    }
    async fn close(&self) -> provider::Result<()> {
        Ok(())
    }
}

pub fn fake_spec() -> serde_json::Value {
    json!({"data": [
        {"key": "plain", "value": "v0"},
        {"key": "plain", "value": "v1", "version": "1"},
        {"key": "db", "value": r#"{"user":"alice","port":"5432"}"#},
        {"key": "db-other", "value": "o"},
    ]})
}

/// Hands out, by the reference's name: `fake` (the Fake provider's client for
/// [`fake_spec`]), `fake-unknown` (a Fake whose validation is Unknown), `slow` (a client that
/// waits for the test), `error-<Variant>` (a client failing with that error); any other name is
/// the resolver's own failure, InvalidSpec.
pub struct StaticResolver {
    fake: Resolved,
    fake_unknown: Resolved,
    started: mpsc::UnboundedSender<()>,
    release: Arc<Semaphore>,
}

/// Tells when a slow call is in flight, and lets it finish.
pub struct SlowCalls {
    pub started: mpsc::UnboundedReceiver<()>,
    pub release: Arc<Semaphore>,
}

async fn fake(spec: serde_json::Value) -> Resolved {
    let fake = Arc::new(provider_fake::Fake::default());
    let client = fake
        .new_client(
            ClientRequest {
                provider: ProviderIdentity {
                    kind: "Fake".into(),
                    namespace: Some(NAMESPACE.into()),
                    name: "fake".into(),
                },
                api_version: "providers.external-secrets.io/v1alpha1".into(),
                spec: spec.clone(),
                namespace: NAMESPACE.into(),
            },
            Arc::new(StaticCredentials::default()),
        )
        .await
        .unwrap();
    Resolved {
        client: Arc::from(client),
        provider: fake,
        spec,
    }
}

/// The Fake provider's own client for [`fake_spec`], in process.
pub async fn fake_client() -> Arc<dyn SecretsClient> {
    fake(fake_spec()).await.client
}

impl StaticResolver {
    pub async fn new() -> (Arc<Self>, SlowCalls) {
        let (started, started_rx) = mpsc::unbounded_channel();
        let release = Arc::new(Semaphore::new(0));
        let mut unknown = fake_spec();
        unknown["validationResult"] = json!(1);
        (
            Arc::new(Self {
                fake: fake(fake_spec()).await,
                fake_unknown: fake(unknown).await,
                started,
                release: release.clone(),
            }),
            SlowCalls {
                started: started_rx,
                release,
            },
        )
    }
}

#[async_trait]
impl Resolver for StaticResolver {
    async fn resolve(
        &self,
        reference: &v1::ProviderReference,
        _source_namespace: &str,
    ) -> Result<Resolved, Error> {
        let with = |client: Arc<dyn SecretsClient>| Resolved {
            client,
            ..self.fake.clone()
        };
        match reference.name.as_str() {
            "fake" => Ok(self.fake.clone()),
            "fake-unknown" => Ok(self.fake_unknown.clone()),
            "slow" => Ok(with(Arc::new(Slow {
                started: self.started.clone(),
                release: self.release.clone(),
            }))),
            name => match name.strip_prefix("error-") {
                Some(variant) => {
                    let (variant, _) = every_error()
                        .into_iter()
                        .find(|(n, _)| *n == variant)
                        .unwrap_or_else(|| panic!("no error named {variant}"));
                    Ok(with(Arc::new(Failing(variant))))
                }
                None => Err(Error::InvalidSpec(format!("no provider object {name}"))),
            },
        }
    }
}

pub fn reference(name: &str) -> Option<v1::ProviderReference> {
    Some(v1::ProviderReference {
        api_version: "providers.external-secrets.io/v1alpha1".into(),
        kind: "Fake".into(),
        name: name.into(),
        namespace: NAMESPACE.into(),
        store_ref_kind: "SecretStore".into(),
    })
}

// ---------------------------------------------------------------------------------------------
// A running server

pub struct Running {
    pub addr: SocketAddr,
    pub metrics: SocketAddr,
    pub dir: tempfile::TempDir,
    pub ca: Ca,
    pub client: Issued,
    pub slow: SlowCalls,
    stop: Option<oneshot::Sender<()>>,
    pub task: JoinHandle<Result<(), ServeError>>,
}

impl Running {
    /// A server with mTLS from a fresh CA, looking at its files every 100 ms.
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(adjust: impl FnOnce(&mut ServeOptions)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("provider-ca");
        write_server_files(dir.path(), &ca, &ca.server());
        let mut options = ServeOptions::new(
            "127.0.0.1:0".parse().unwrap(),
            Some("127.0.0.1:0".parse().unwrap()),
            Some(TlsFiles::in_dir(dir.path())),
        );
        options.reload_interval = Duration::from_millis(100);
        // Stopping at once unless a test is about the delay.
        options.shutdown_delay = Duration::ZERO;
        adjust(&mut options);
        let (resolver, slow) = StaticResolver::new().await;
        let server = Server::bind(options, resolver, Default::default())
            .await
            .unwrap();
        let (addr, metrics) = (server.grpc_addr(), server.metrics_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        let client = ca.client();
        Self {
            addr,
            metrics,
            dir,
            ca,
            client,
            slow,
            stop: Some(stop),
            task,
        }
    }

    /// A connection trusting this server's CA, with its client certificate.
    pub async fn connect(&self) -> SecretStoreProviderClient<Channel> {
        let channel = connect(self.addr, &self.ca.pem(), Some(&self.client))
            .await
            .expect("a client with a good certificate connects");
        SecretStoreProviderClient::new(channel)
    }

    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A channel to `addr` over TLS trusting `ca`, presenting `identity`.
pub async fn connect(
    addr: SocketAddr,
    ca: &str,
    identity: Option<&Issued>,
) -> Result<Channel, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("localhost");
    if let Some(id) = identity {
        tls = tls.identity(Identity::from_pem(&id.cert, &id.key));
    }
    Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(20))
        .tls_config(tls)?
        .connect()
        .await
}

/// Whether a connection to `addr` trusting `ca` with `identity` can make a call.
pub async fn can_call(addr: SocketAddr, ca: &str, identity: Option<&Issued>) -> bool {
    let Ok(channel) = connect(addr, ca, identity).await else {
        return false;
    };
    SecretStoreProviderClient::new(channel)
        .get_secret(get_secret("fake", "plain"))
        .await
        .is_ok()
}

/// Why a call over a new connection to `addr` trusting `ca` with `identity` failed (`Debug` of
/// the status, which carries the TLS alert); panics when it succeeds.
pub async fn refusal(addr: SocketAddr, ca: &str, identity: Option<&Issued>) -> String {
    let channel = match connect(addr, ca, identity).await {
        Ok(channel) => channel,
        Err(e) => return format!("{e:?}"),
    };
    match SecretStoreProviderClient::new(channel)
        .get_secret(get_secret("fake", "plain"))
        .await
    {
        Ok(_) => panic!("the call was served"),
        Err(status) => format!("{status:?}"),
    }
}

pub fn get_secret(name: &str, key: &str) -> v1::GetSecretRequest {
    v1::GetSecretRequest {
        remote_ref: Some(v1::ExternalSecretDataRemoteRef {
            key: key.into(),
            ..Default::default()
        }),
        provider_ref: reference(name),
        source_namespace: NAMESPACE.into(),
    }
}

/// The body of `GET <path>` on `addr`.
pub async fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

/// Waits until `check` holds, at most `within`.
pub async fn eventually<F: std::future::Future<Output = bool>>(
    within: Duration,
    mut check: impl FnMut() -> F,
) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
