//! Leader election for several replicas, and what losing the Lease means: this process stops
//! reconciling at once and exits with an error (another replica now reconciles, and a restart
//! starts this one over as a candidate); stopping normally hands the Lease over.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A future the work is handed: when it leads, when it must stop. `Sync` because the operator
/// shares its shutdown among its controllers.
pub type Signal = Pin<Box<dyn Future<Output = ()> + Send + Sync + 'static>>;

/// The field manager of the Lease's writes.
const FIELD_MANAGER: &str = "external-secrets-leader-election";

/// Which Lease, and how long it lasts.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    /// The Lease's name.
    pub name: String,
    pub namespace: String,
    /// Who holds it, as the Lease records it.
    pub identity: String,
    /// How long a leader that stopped renewing keeps the Lease.
    pub duration: Duration,
    /// How long before the Lease expires the leader renews it.
    pub renew_deadline: Duration,
}

impl LeaseSettings {
    /// `namespace` or $POD_NAMESPACE or `default`; $POD_NAME, or the host name and process id,
    /// as the identity.
    pub fn new(
        name: String,
        namespace: Option<String>,
        duration: Duration,
        renew_deadline: Duration,
    ) -> Self {
        let namespace = namespace
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".to_owned());
        let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
            let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
            format!("{}-{}", host.trim(), std::process::id())
        });
        Self {
            name,
            namespace,
            identity,
            duration,
            renew_deadline,
        }
    }
}

/// The Lease could not be competed for.
#[derive(Debug, thiserror::Error)]
#[error("setting up leader election")]
pub struct ElectionError(#[source] pub kube_lease_manager::LeaseManagerError);

/// The Lease was held, then lost, while the work ran.
#[derive(Debug, thiserror::Error)]
#[error("lost the leader election Lease {0}")]
pub struct LeaseLost(pub String);

/// A candidacy for the Lease, competing from [`Election::start`] on.
pub struct Election {
    name: String,
    leading: watch::Receiver<bool>,
    task: JoinHandle<kube_lease_manager::Result<LeaseManager>>,
}

impl Election {
    /// Starts competing for the Lease.
    pub async fn start(
        client: &kube::Client,
        settings: &LeaseSettings,
    ) -> Result<Self, ElectionError> {
        let grace = settings.duration.saturating_sub(settings.renew_deadline);
        let manager = LeaseManagerBuilder::new(client.clone(), &settings.name)
            .with_namespace(&settings.namespace)
            .with_identity(&settings.identity)
            .with_duration(settings.duration.as_secs().max(1))
            .with_grace(grace.as_secs().max(1))
            .with_field_manager(FIELD_MANAGER)
            .build()
            .await
            .map_err(ElectionError)?;
        tracing::info!(lease = %settings.name, namespace = %settings.namespace,
            identity = %settings.identity, "competing for the leader Lease");
        let (leading, task) = manager.watch().await;
        Ok(Self {
            name: settings.name.clone(),
            leading,
            task,
        })
    }

    /// Runs `work(leadership, shutdown)` under [`Terms`], then hands the Lease over rather than
    /// make a standby wait out its duration. A Lease lost on the way is the error.
    pub async fn run<W>(
        self,
        stop: impl Future<Output = ()> + Send + Sync + 'static,
        work: impl FnOnce(Signal, Signal) -> W,
    ) -> Result<(), LeaseLost>
    where
        W: Future<Output = ()>,
    {
        let terms = Terms::new(self.leading, stop);
        let lost = terms.lost.clone();
        work(terms.leadership, terms.shutdown).await;
        // The watch channels went with the futures, which ends the lease task.
        if let Ok(Ok(manager)) = self.task.await
            && let Err(e) = manager.release().await
        {
            tracing::warn!(error = %e, "could not release the leader Lease");
        }
        if lost.load(Ordering::Relaxed) {
            return Err(LeaseLost(self.name));
        }
        Ok(())
    }
}

/// Runs `work(leadership, shutdown)` under `election`'s terms ([`Election::run`]), or, without
/// one, at once until `stop`.
pub async fn run<W>(
    election: Option<Election>,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
    work: impl FnOnce(Signal, Signal) -> W,
) -> Result<(), LeaseLost>
where
    W: Future<Output = ()>,
{
    match election {
        Some(election) => election.run(stop, work).await,
        None => {
            work(Box::pin(std::future::ready(())), Box::pin(stop)).await;
            Ok(())
        }
    }
}

/// The lease-loss policy, over whether this process holds the Lease: `leadership` completes once
/// it leads; `shutdown` completes on `stop`, or once a Lease it held is gone, which `lost`
/// records. Not leading yet is no loss: a standby waits.
pub struct Terms {
    pub leadership: Signal,
    pub shutdown: Signal,
    pub lost: Arc<AtomicBool>,
}

impl Terms {
    pub fn new(
        leading: watch::Receiver<bool>,
        stop: impl Future<Output = ()> + Send + Sync + 'static,
    ) -> Self {
        let lost = Arc::new(AtomicBool::new(false));
        let mut acquired = leading.clone();
        let mut watching = leading;
        let lost_flag = lost.clone();
        Self {
            leadership: Box::pin(async move {
                let _ = acquired.wait_for(|leader| *leader).await;
            }),
            shutdown: Box::pin(async move {
                tokio::select! {
                    () = stop => {}
                    _ = async {
                        let _ = watching.wait_for(|leader| *leader).await;
                        let _ = watching.wait_for(|leader| !*leader).await;
                    } => lost_flag.store(true, Ordering::Relaxed),
                }
            }),
            lost,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt;
    use tokio::sync::{oneshot, watch};

    use super::*;

    fn stop_channel() -> (
        oneshot::Sender<()>,
        impl Future<Output = ()> + Send + 'static,
    ) {
        let (tx, rx) = oneshot::channel::<()>();
        (tx, async move {
            let _ = rx.await;
        })
    }

    async fn settle() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    #[tokio::test]
    async fn a_lease_held_then_lost_shuts_down_and_counts_as_lost() {
        let (leading, watched) = watch::channel(false);
        let (_stop, stop) = stop_channel();
        let mut terms = Terms::new(watched, stop);
        settle().await;
        assert!((&mut terms.leadership).now_or_never().is_none());
        leading.send_replace(true);
        terms.leadership.await;
        assert!((&mut terms.shutdown).now_or_never().is_none());
        leading.send_replace(false);
        terms.shutdown.await;
        assert!(terms.lost.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn a_standby_that_never_led_waits_and_stops_without_a_loss() {
        let (leading, watched) = watch::channel(false);
        let (stop_tx, stop) = stop_channel();
        let mut terms = Terms::new(watched, stop);
        // Told again that it does not lead: still a standby, nothing lost.
        leading.send_replace(false);
        settle().await;
        assert!((&mut terms.shutdown).now_or_never().is_none());
        assert!((&mut terms.leadership).now_or_never().is_none());
        stop_tx.send(()).unwrap();
        terms.shutdown.await;
        assert!(!terms.lost.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn a_leader_stopped_normally_has_lost_nothing() {
        let (leading, watched) = watch::channel(true);
        let (stop_tx, stop) = stop_channel();
        let terms = Terms::new(watched, stop);
        terms.leadership.await;
        stop_tx.send(()).unwrap();
        terms.shutdown.await;
        assert!(!terms.lost.load(Ordering::Relaxed));
        drop(leading);
    }
}
