//! The conversion webhook of the provider kinds that have more than one version.
//!
//! - [`review`]: a `apiextensions.k8s.io/v1` ConversionReview in, the response out; pure.
//! - [`server`]: `POST /convert` over HTTPS, with a certificate swapped without a restart.
//! - [`certs`]: a CA and serving certificate in one Secret shared by every replica, rotated
//!   in two steps so that the API server always trusts the certificate it meets.
//! - [`inject`]: the CA bundle into exactly the CRDs the [`Converters`] say need conversion.
//! - [`provider_tls`]: the same certificate code keeping a provider server's mutual-TLS Secret
//!   (ESO's layout) issued and rotated.
//! - [`run`] / [`serve`]: all of it, until shutdown; [`lifecycle`]: beside the controllers.
//!
//! The webhook knows no provider: it dispatches to a [`Converters`], which the binary builds
//! from the provider descriptors.

pub mod certs;
pub mod inject;
pub mod lifecycle;
mod metrics;
pub mod namespace_tls;
pub mod provider_tls;
mod providers;
pub mod review;
pub mod server;

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, ResourceExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use crd_watch::Followed;
pub use metrics::{Counted, Metrics};
pub use providers::ProviderConverters;
pub use review::review;

/// The field manager of every write: the Secret and the CRDs' `caBundle`.
pub const FIELD_MANAGER: &str = "external-secrets-webhook";
/// The Service the generated CRDs' `clientConfig` names.
pub const SERVICE_NAME: &str = "external-secrets-webhook";
/// The Secret holding the CA and serving certificate, in the operator's namespace.
pub const SECRET_NAME: &str = "external-secrets-webhook-tls";

/// What the webhook converts, and for which CRDs.
pub trait Converters: Send + Sync + 'static {
    /// `object`, a whole object of `kind` in `group` at any served version, at
    /// `to_api_version` (`group/version`). The error says why, for the API server's message.
    fn convert(
        &self,
        group: &str,
        kind: &str,
        object: serde_json::Value,
        to_api_version: &str,
    ) -> Result<serde_json::Value, String>;

    /// Whether the CRD `crd_name` (`<plural>.<group>`) converts through this webhook, and so
    /// gets its CA bundle.
    fn needs_conversion(&self, crd_name: &str) -> bool;
}

#[derive(Clone, Debug)]
pub struct Settings {
    /// Where `POST /convert` is served (the Service's target port).
    pub listen: SocketAddr,
    /// The operator's namespace: the Secret's and the Service's.
    pub namespace: String,
    pub service_name: String,
    pub secret_name: String,
    /// Adds `localhost` and `127.0.0.1` to the certificate, for an API server that calls the
    /// webhook at `https://127.0.0.1:<port>` (tests, local clusters).
    pub loopback: bool,
    /// Where the API server calls the webhook when that is not the Service (a control plane
    /// on this machine, with the operator outside any cluster): written into the CRDs'
    /// `clientConfig.url` in place of the Service.
    pub url: Option<String>,
    /// Validity of each certificate; it is replaced when less than a third is left.
    pub lifetime: Duration,
    /// How often the Secret is read again (rotations by other replicas are seen this late at
    /// most) and the CRDs' bundles checked.
    pub check_interval: Duration,
    /// How long every CRD must have trusted a new CA before the certificate it signed is
    /// served: time for the API server to rebuild its webhook clients.
    pub settle: Duration,
    /// The Secret is written by another issuer (cert-manager), which also fills the CRDs' CA
    /// bundle: serve its certificate, follow its rotations, write nothing.
    pub external_certificate: bool,
}

impl Settings {
    pub fn new(namespace: impl Into<String>) -> Self {
        Self {
            listen: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 10250)),
            namespace: namespace.into(),
            service_name: SERVICE_NAME.to_owned(),
            secret_name: SECRET_NAME.to_owned(),
            loopback: false,
            url: None,
            lifetime: Duration::from_secs(365 * 24 * 3600),
            check_interval: Duration::from_secs(60),
            settle: Duration::from_secs(60),
            external_certificate: false,
        }
    }

    /// The names the certificate is valid for: the Service's (the API server calls
    /// `<service>.<namespace>.svc`), then the loopback ones if asked.
    pub fn hosts(&self) -> Vec<String> {
        let (svc, ns) = (&self.service_name, &self.namespace);
        let mut hosts = vec![
            format!("{svc}.{ns}.svc"),
            format!("{svc}.{ns}.svc.cluster.local"),
            format!("{svc}.{ns}"),
            svc.clone(),
        ];
        if self.loopback {
            hosts.extend(["localhost".to_owned(), "127.0.0.1".to_owned()]);
        }
        hosts
    }

    pub fn secret_ref(&self) -> String {
        self.target().secret_ref()
    }

    /// The Secret the certificate code keeps for the webhook.
    pub fn target(&self) -> certs::Target {
        certs::Target {
            purpose: certs::Purpose::Webhook,
            namespace: self.namespace.clone(),
            secret_name: self.secret_name.clone(),
            hosts: self.hosts(),
            lifetime: self.lifetime,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("binding the conversion webhook to {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("serving the conversion webhook: {0}")]
    Serve(std::io::Error),
    #[error("the conversion webhook server stopped: {0}")]
    Stopped(String),
    #[error("{0} {1}: {2}")]
    Kube(&'static str, String, kube::Error),
    #[error("issuing {0}: {1}")]
    Issue(&'static str, rcgen::Error),
    #[error("{0} kept changing while it was being written")]
    Contended(String),
    #[error("the serving certificate in {0} is unusable: {1}")]
    Unusable(String, String),
}

/// The one rustls provider of the workspace.
pub(crate) fn crypto_provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
}

/// Binds `settings.listen` and [`serve`]s.
pub async fn run(
    client: kube::Client,
    settings: Settings,
    converters: Arc<dyn Converters>,
    crd_events: Followed,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let listener = TcpListener::bind(settings.listen)
        .await
        .map_err(|e| Error::Bind(settings.listen, e))?;
    serve(client, settings, converters, listener, crd_events, shutdown).await
}

/// Which CRDs' events [`serve`] follows: those that convert through it, whose CA bundle and
/// URL it keeps.
pub fn converting(
    converters: Arc<dyn Converters>,
) -> impl Fn(&CustomResourceDefinition) -> bool + Send + Sync + 'static {
    move |crd| converters.needs_conversion(&crd.name_any())
}

/// Loads (or creates) the certificates, serves conversions on `listener`, keeps the CRDs'
/// CA bundle and the certificates current, until `shutdown` completes; then stops accepting
/// connections and returns once the requests under way are answered. `crd_events` are those
/// of the CRDs [`converting`] names, from the watch's start.
pub async fn serve(
    client: kube::Client,
    settings: Settings,
    converters: Arc<dyn Converters>,
    listener: TcpListener,
    crd_events: Followed,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    tokio::pin!(shutdown);
    let secrets = Api::<Secret>::namespaced(client.clone(), &settings.namespace);

    // The API server may not be reachable yet, or RBAC not applied yet: keep trying.
    let mut backoff = Duration::from_millis(500);
    let (key, source) = loop {
        let attempt = tokio::select! {
            () = &mut shutdown => return Ok(()),
            attempt = Source::load(&secrets, &settings) => attempt,
        };
        match attempt {
            Ok(loaded) => break loaded,
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "loading the webhook's certificate");
                tokio::select! {
                    () = &mut shutdown => return Ok(()),
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    };
    let resolver = Arc::new(server::CertResolver::new(key));
    let (stop, stopped) = watch::channel(false);
    let mut server = tokio::spawn(server::serve(
        listener,
        resolver.clone(),
        converters,
        stopped,
    ));

    let mut ticks = tokio::time::interval(settings.check_interval);
    let mut keeper = match source {
        Source::Own(stored) => Keepers::Own(Keeper {
            client,
            settings,
            secrets,
            resolver,
            stored,
            fresh: true,
            next_trusted_since: None,
        }),
        Source::External(version) => Keepers::External(ExternalKeeper {
            settings,
            secrets,
            resolver,
            version,
        }),
    };
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // An issuer's certificate needs no CRD: nothing to wait for.
    let watching = matches!(keeper, Keepers::Own(_));
    let mut crd_events = if watching {
        crd_events.left_stream()
    } else {
        drop(crd_events);
        futures::stream::pending().right_stream()
    };
    let mut crds = inject::Crds::default();
    let mut retry = Retry::default();
    let early_end = loop {
        let retry_at = retry.at.map(tokio::time::Instant::from_std);
        let listed = !watching || crds.listed();
        let (checked, retried) = tokio::select! {
            () = &mut shutdown => break None,
            ended = &mut server => break Some(ended),
            // A converting CRD installed or replaced later (a Helm upgrade enabling a
            // provider) trusts the webhook at once rather than at the next tick.
            Some(event) = crd_events.next() => {
                // A list or an upgrade brings several at once: one check serves them all.
                let mut due = crds.apply(event);
                while let Some(Some(event)) = crd_events.next().now_or_never() {
                    due |= crds.apply(event);
                }
                if !due {
                    continue;
                }
                (keeper.check(&mut crds).await, false)
            }
            () = async { tokio::time::sleep_until(retry_at.unwrap_or_else(tokio::time::Instant::now)).await }, if retry_at.is_some() && listed => (keeper.check(&mut crds).await, true),
            _ = ticks.tick(), if listed => (keeper.check(&mut crds).await, false),
        };
        // The next periodic check is a whole interval after any check.
        ticks.reset();
        match checked {
            Ok(complete) => retry.after(complete, retried, Instant::now()),
            Err(e) => {
                tracing::warn!(error = %e, "keeping the webhook's certificate and CA bundle current");
                retry = Retry::default();
            }
        }
    };
    let ended = match early_end {
        Some(ended) => ended,
        None => {
            let _ = stop.send(true);
            server.await
        }
    };
    match ended {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::Serve(e)),
        Err(e) => Err(Error::Stopped(e.to_string())),
    }
}

/// How soon a CRD that could not be given the CA bundle is tried again: a Helm upgrade applies
/// a new CRD moments before the RBAC that lets the operator patch it.
const INJECT_RETRY: Duration = Duration::from_secs(2);

/// When to check again while some CRD lacks the bundle (not yet patchable, say): soon, then
/// less and less often. Only the retries' own failures make the wait longer: a Helm upgrade
/// applies several CRDs at once, and each one's event failing before the RBAC arrives once
/// pushed the next retry 30 s out (a chart test waited 20 s for the bundle).
#[derive(Debug, PartialEq)]
struct Retry {
    at: Option<Instant>,
    delay: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            at: None,
            delay: INJECT_RETRY,
        }
    }
}

impl Retry {
    /// After a check (`retried`: the one this asked for) found every CRD trusting the
    /// webhook, or not.
    fn after(&mut self, complete: bool, retried: bool, now: Instant) {
        if complete {
            *self = Self::default();
        } else if retried || self.at.is_none() {
            self.at = Some(now + self.delay);
            self.delay = (self.delay * 2).min(Duration::from_secs(30));
        }
    }
}

/// Where the serving certificate comes from: the Secret this webhook writes and rotates
/// itself, or one another issuer writes (its resourceVersion as last read).
// One value per webhook, made once and moved once: boxing the large variant would save nothing.
#[allow(clippy::large_enum_variant)]
enum Source {
    Own(certs::Stored),
    External(String),
}

impl Source {
    async fn load(
        secrets: &Api<Secret>,
        settings: &Settings,
    ) -> Result<(rustls::sign::CertifiedKey, Self), Error> {
        if settings.external_certificate {
            let (version, key) = certs::load_external(secrets, settings).await?;
            return Ok((key, Self::External(version)));
        }
        let stored = certs::load_or_create(secrets, &settings.target()).await?;
        let key = stored
            .material
            .serving
            .certified_key()
            .map_err(|e| Error::Unusable(settings.secret_ref(), e))?;
        Ok((key, Self::Own(stored)))
    }
}

// As for `Source`: one per webhook, for its whole life.
#[allow(clippy::large_enum_variant)]
enum Keepers {
    Own(Keeper),
    External(ExternalKeeper),
}

impl Keepers {
    /// Whether every converting CRD trusts the webhook now (always, for an issuer's certificate).
    async fn check(&mut self, crds: &mut inject::Crds) -> Result<bool, Error> {
        match self {
            Self::Own(keeper) => keeper.check(crds).await,
            Self::External(keeper) => keeper.check().await,
        }
    }
}

/// Follows the rotations of a certificate another issuer writes.
struct ExternalKeeper {
    settings: Settings,
    secrets: Api<Secret>,
    resolver: Arc<server::CertResolver>,
    version: String,
}

impl ExternalKeeper {
    async fn check(&mut self) -> Result<bool, Error> {
        let (version, key) = certs::load_external(&self.secrets, &self.settings).await?;
        if version != self.version {
            self.resolver.set(key);
            self.version = version;
            tracing::info!(secret = %self.settings.secret_ref(), "serving the issuer's rotated certificate");
        }
        Ok(true)
    }
}

/// One replica's view of the Secret, and the rotation steps it takes when they are due.
struct Keeper {
    client: kube::Client,
    settings: Settings,
    secrets: Api<Secret>,
    resolver: Arc<server::CertResolver>,
    stored: certs::Stored,
    /// `stored` was just loaded, at the start.
    fresh: bool,
    /// The pending certificate, and since when every CRD has trusted its CA (this replica's
    /// clock, so other replicas' clocks do not matter).
    next_trusted_since: Option<(Vec<u8>, Instant)>,
}

impl Keeper {
    async fn check(&mut self, crds: &mut inject::Crds) -> Result<bool, Error> {
        let target = self.settings.target();
        // At the first check the Secret was read moments ago, at the start.
        if !std::mem::take(&mut self.fresh) {
            let stored = match certs::reload(&self.secrets, &target).await? {
                Some(stored) => stored,
                None => certs::load_or_create(&self.secrets, &target).await?,
            };
            self.adopt(stored);
        }
        let injected = self.inject(crds).await;

        let now = SystemTime::now();
        let material = &self.stored.material;
        if let Some(next) = &material.next {
            // The settle time counts from when every CRD trusted the new CA, as seen here.
            let trusted_since = match &self.next_trusted_since {
                _ if !injected => None,
                Some((cert, since)) if *cert == next.cert_der => Some(*since),
                _ => Some(Instant::now()),
            };
            self.next_trusted_since = trusted_since.map(|since| (next.cert_der.clone(), since));
            // An expired certificate fails every handshake already; nothing to wait for.
            let settled = trusted_since.is_some_and(|s| s.elapsed() >= self.settings.settle)
                || material.serving.not_after <= now;
            if injected
                && settled
                && let Some(promoted) = material.promote()
                && self.write(promoted).await?
            {
                tracing::info!(secret = %self.settings.secret_ref(), "serving the rotated certificate");
            }
        } else if material.rotation_due(&target, now) {
            let prepared = material.prepare(&target, now)?;
            if self.write(prepared).await? {
                tracing::info!(secret = %self.settings.secret_ref(), "issued the next certificate; its CA goes into the CRDs first");
                return Ok(self.inject(crds).await);
            }
        }
        Ok(injected)
    }

    /// Whether every CRD that needs conversion trusts the required CAs now.
    async fn inject(&self, crds: &mut inject::Crds) -> bool {
        let injected = inject::ensure(
            &self.client,
            crds,
            &self.stored.material,
            self.settings.url.as_deref(),
        )
        .await;
        injected.complete()
    }

    /// Serves the Secret's certificate if it changed.
    fn adopt(&mut self, stored: certs::Stored) {
        if stored.material.serving != self.stored.material.serving {
            match stored.material.serving.certified_key() {
                Ok(key) => self.resolver.set(key),
                Err(e) => {
                    tracing::warn!(secret = %self.settings.secret_ref(), error = %e, "not serving the new certificate");
                    return;
                }
            }
        }
        self.stored = stored;
    }

    /// `false` when another replica changed the Secret first; the next check reads theirs.
    async fn write(&mut self, material: certs::Material) -> Result<bool, Error> {
        match certs::update(
            &self.secrets,
            &self.settings.target(),
            &self.stored,
            material,
        )
        .await?
        {
            Some(stored) => {
                self.adopt(stored);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Six CRD events failing in a row (a Helm upgrade's CRDs before its RBAC) leave the next
    /// retry where the first put it; the retries' own failures wait longer each time, to 30 s.
    #[test]
    fn only_the_retries_own_failures_lengthen_the_wait() {
        let t0 = Instant::now();
        let mut retry = Retry::default();
        for _ in 0..6 {
            retry.after(false, false, t0);
        }
        assert_eq!(retry.at, Some(t0 + INJECT_RETRY));
        let mut at = t0 + INJECT_RETRY;
        let mut waits = Vec::new();
        for _ in 0..6 {
            retry.after(false, true, at);
            let next = retry.at.unwrap();
            waits.push((next - at).as_secs());
            at = next;
        }
        assert_eq!(waits, [4, 8, 16, 30, 30, 30]);
        retry.after(true, false, at);
        assert_eq!(retry, Retry::default());
    }
}
