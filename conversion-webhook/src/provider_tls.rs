//! A provider server's TLS Secret in ESO's layout (`ca.crt`, `tls.crt`, `tls.key`, `client.crt`,
//! `client.key`), issued and rotated by the operator with the webhook's certificate code
//! ([`certs`], [`certs::Purpose::ProviderServer`]). The server mounts `ca.crt`, `tls.crt` and
//! `tls.key` and reads them again when they change; the operator's clients of that server read
//! `ca.crt`, `client.crt` and `client.key` from the Secret (a ClusterProviderClass's
//! `tlsSecretRef`). Each namespaced ProviderClass of the server gets a Secret of its own, with a
//! client certificate of its namespace ([`crate::namespace_tls`]).
//!
//! A rotation takes [`certs`]' two steps: the next CA joins `ca.crt` first, and the next
//! certificates are used only once the server had [`Settings::settle`] to read the new bundle
//! from its files (a kubelet updates a mounted Secret within a minute or two), so that neither
//! side ever meets a certificate the other does not trust yet.

use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::Error;
use crate::certs::{self, Material, Purpose, Target};

/// One provider server's Secret, and how it is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub namespace: String,
    pub secret_name: String,
    /// The server's Service, in `namespace`: its DNS names go into the server certificate.
    pub service: String,
    /// Further names or IP addresses the server certificate is valid for.
    pub extra_hosts: Vec<String>,
    /// Validity of each certificate; they are replaced when less than a third is left.
    pub lifetime: Duration,
    /// How often the Secret is read again and checked.
    pub check_interval: Duration,
    /// How long the next CA is trusted in `ca.crt` before the next certificates are used.
    pub settle: Duration,
}

impl Settings {
    pub fn new(
        namespace: impl Into<String>,
        secret_name: impl Into<String>,
        service: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            secret_name: secret_name.into(),
            service: service.into(),
            extra_hosts: Vec::new(),
            lifetime: Duration::from_secs(365 * 24 * 3600),
            check_interval: Duration::from_secs(60),
            settle: Duration::from_secs(5 * 60),
        }
    }

    /// `NAMESPACE/SECRET=SERVICE[,HOST...]`, the controller's `--provider-tls-secret`.
    pub fn parse(flag: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{flag:?}: expected NAMESPACE/SECRET=SERVICE[,HOST...], e.g. external-secrets/provider-vault-tls=provider-vault"
            )
        };
        let (secret, hosts) = flag.split_once('=').ok_or_else(bad)?;
        let (namespace, secret_name) = secret.split_once('/').ok_or_else(bad)?;
        let mut hosts = hosts.split(',').map(str::trim);
        let service = hosts.next().unwrap_or_default();
        if [namespace, secret_name, service]
            .iter()
            .any(|part| part.is_empty() || part.contains(['/', '=', ',']))
        {
            return Err(bad());
        }
        let mut settings = Self::new(namespace, secret_name, service);
        settings.extra_hosts = hosts.filter(|h| !h.is_empty()).map(str::to_owned).collect();
        Ok(settings)
    }

    /// The Service's names (`<service>.<namespace>.svc` first, as a ClusterProviderClass's
    /// address names it), then the extra ones.
    pub fn hosts(&self) -> Vec<String> {
        let (svc, ns) = (&self.service, &self.namespace);
        let mut hosts = vec![
            format!("{svc}.{ns}.svc"),
            format!("{svc}.{ns}.svc.cluster.local"),
            format!("{svc}.{ns}"),
            svc.clone(),
        ];
        hosts.extend(self.extra_hosts.iter().cloned());
        hosts
    }

    pub fn target(&self) -> Target {
        Target {
            purpose: Purpose::ProviderServer,
            namespace: self.namespace.clone(),
            secret_name: self.secret_name.clone(),
            hosts: self.hosts(),
            lifetime: self.lifetime,
        }
    }
}

/// Keeps the Secret filled and its certificates current until `shutdown`. Every replica of the
/// operator may run it: a write names the resourceVersion it read, so of two replicas only one
/// rotates. Failures are logged and retried, sooner and sooner up to `check_interval`.
pub async fn keep(client: kube::Client, settings: Settings, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    let secrets = Api::<Secret>::namespaced(client.clone(), &settings.namespace);
    let mut keeper = Keeper {
        client,
        target: settings.target(),
        settings,
        secrets,
        next_seen: None,
    };
    let classes = crate::namespace_tls::class_changes(keeper.client.clone());
    tokio::pin!(classes);
    let mut retry = Duration::from_secs(1);
    loop {
        let wait = match keeper.check(SystemTime::now()).await {
            Ok(material) => {
                crate::namespace_tls::keep(&keeper.client, &keeper.settings, &material).await;
                retry = Duration::from_secs(1);
                keeper.settings.check_interval
            }
            Err(e) => {
                tracing::warn!(secret = %keeper.target.secret_ref(), error = %e, retry_in = ?retry, "keeping the provider server's TLS Secret");
                let wait = retry;
                retry = (retry * 2).min(keeper.settings.check_interval);
                wait
            }
        };
        tokio::select! {
            () = &mut shutdown => return,
            () = tokio::time::sleep(wait) => {}
            Some(()) = classes.next() => {}
        }
    }
}

struct Keeper {
    client: kube::Client,
    settings: Settings,
    target: Target,
    secrets: Api<Secret>,
    /// The pending certificate, and since when this replica has seen it in `ca.crt`.
    next_seen: Option<(Vec<u8>, Instant)>,
}

impl Keeper {
    /// Brings the Secret up to date; what it holds now.
    async fn check(&mut self, now: SystemTime) -> Result<Material, Error> {
        let target = &self.target;
        let stored = match certs::reload(&self.secrets, target).await? {
            Some(stored) => stored,
            None => certs::load_or_create(&self.secrets, target).await?,
        };
        let material = &stored.material;
        let mut in_use = material.clone();
        if let Some(next) = &material.next {
            let since = match &self.next_seen {
                Some((cert, since)) if *cert == next.cert_der => *since,
                _ => Instant::now(),
            };
            self.next_seen = Some((next.cert_der.clone(), since));
            // An expired certificate fails every handshake already; nothing to wait for.
            let settled =
                since.elapsed() >= self.settings.settle || material.serving.not_after <= now;
            if settled
                && let Some(promoted) = material.promote()
                && let Some(written) =
                    certs::update(&self.secrets, target, &stored, promoted).await?
            {
                in_use = written.material;
                self.next_seen = None;
                tracing::info!(secret = %target.secret_ref(), "the provider server's next certificates are in use");
            }
        } else if material.rotation_due(target, now) {
            let prepared = material.prepare(target, now)?;
            let next = prepared.next.as_ref().map(|n| n.cert_der.clone());
            if let Some(written) = certs::update(&self.secrets, target, &stored, prepared).await? {
                in_use = written.material;
                self.next_seen = next.map(|cert| (cert, Instant::now()));
                tracing::info!(secret = %target.secret_ref(), settle = ?self.settings.settle, "issued the provider server's next certificates; ca.crt trusts their CA before they are used");
            }
        }
        Ok(in_use)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_names_the_secret_the_service_and_extra_hosts() {
        let s =
            Settings::parse("external-secrets/es-provider-vault-tls=es-provider-vault").unwrap();
        assert_eq!(
            (
                s.namespace.as_str(),
                s.secret_name.as_str(),
                s.service.as_str()
            ),
            (
                "external-secrets",
                "es-provider-vault-tls",
                "es-provider-vault"
            )
        );
        assert_eq!(
            s.hosts(),
            [
                "es-provider-vault.external-secrets.svc",
                "es-provider-vault.external-secrets.svc.cluster.local",
                "es-provider-vault.external-secrets",
                "es-provider-vault",
            ]
        );
        let s = Settings::parse("ns/tls=svc,127.0.0.1,provider.example.com").unwrap();
        assert_eq!(s.extra_hosts, ["127.0.0.1", "provider.example.com"]);
        assert_eq!(s.target().purpose, Purpose::ProviderServer);
        assert_eq!(s.target().hosts[0], "svc.ns.svc");
        for bad in [
            "ns/tls",
            "tls=svc",
            "/tls=svc",
            "ns/=svc",
            "ns/tls=",
            "a/b/c=svc",
        ] {
            assert!(Settings::parse(bad).is_err(), "{bad}");
        }
    }
}
