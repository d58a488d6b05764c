//! The webhook's life beside the controllers, or alone: started with the process, stopped when
//! the controllers stop. A failure is logged, not fatal: the single-version kinds and every core
//! kind work without it.

use std::future::Future;
use std::sync::Arc;

use crd_watch::{CrdWatch, Followed};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::{Converters, Counted, Error, Metrics, ProviderConverters, Settings};

/// Serves the provider kinds' conversions until `shutdown`, counting them in `metrics`, on a
/// watch of CRDs of its own (the webhook alone in its process); an error ends it with a log
/// line.
pub async fn serve_logged(
    client: kube::Client,
    settings: Settings,
    metrics: Metrics,
    shutdown: impl Future<Output = ()> + Send,
) {
    let converters = counted(metrics);
    let crd_events = Followed::alone(client.clone(), crate::converting(converters.clone()));
    logged(crate::run(
        client, settings, converters, crd_events, shutdown,
    ))
    .await;
}

fn counted(metrics: Metrics) -> Arc<dyn Converters> {
    Arc::new(Counted::new(ProviderConverters, metrics))
}

async fn logged(serving: impl Future<Output = Result<(), Error>>) {
    if let Err(e) = serving.await {
        tracing::error!(error = %e, "the conversion webhook stopped");
    }
}

/// The webhook beside the controllers, on a task of its own, until [`Background::stop`].
pub struct Background {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Background {
    /// Follows the converting CRDs on `crds`, the process's watch, which must run for the
    /// CA bundles to be kept.
    pub fn spawn(
        client: kube::Client,
        settings: Settings,
        metrics: Metrics,
        crds: &mut CrdWatch,
    ) -> Self {
        let converters = counted(metrics);
        let crd_events = crds.follow(crate::converting(converters.clone()));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(logged(crate::run(
            client,
            settings,
            converters,
            crd_events,
            async {
                let _ = stopped.await;
            },
        )));
        Self { stop, task }
    }

    /// Stops accepting conversions and returns once the requests under way are answered (or at
    /// once, when the webhook had already failed).
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, SocketAddr};
    use std::time::Duration;

    use super::*;

    /// A client for an API server that is not there: the webhook keeps retrying its certificate.
    fn unreachable_client() -> kube::Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    fn settings(listen: SocketAddr) -> Settings {
        let mut settings = Settings::new("external-secrets");
        settings.listen = listen;
        settings
    }

    #[tokio::test]
    async fn stop_ends_a_webhook_still_waiting_for_its_api_server() {
        let _ = crate::crypto_provider().install_default();
        let webhook = Background::spawn(
            unreachable_client(),
            settings(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))),
            Metrics::default(),
            &mut CrdWatch::new(unreachable_client()),
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!webhook.task.is_finished(), "it gave up on its own");
        tokio::time::timeout(Duration::from_secs(5), webhook.stop())
            .await
            .expect("stopped within 5 s");
    }

    #[tokio::test]
    async fn a_webhook_that_cannot_listen_fails_alone_and_stops_at_once() {
        let _ = crate::crypto_provider().install_default();
        let taken = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let webhook = Background::spawn(
            unreachable_client(),
            settings(taken.local_addr().unwrap()),
            Metrics::default(),
            &mut CrdWatch::new(unreachable_client()),
        );
        tokio::time::timeout(Duration::from_secs(5), async {
            while !webhook.task.is_finished() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the bind failure ends the task, and the process goes on");
        tokio::time::timeout(Duration::from_secs(1), webhook.stop())
            .await
            .expect("stopped at once");
    }
}
