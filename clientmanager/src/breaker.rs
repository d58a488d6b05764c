//! One client's calls held back while its provider is unavailable. Every ExternalSecret and
//! PushSecret retries on its own backoff; without this, N of them on a store whose provider is
//! down ask it N times per backoff step. After an `Unavailable` answer the client answers the
//! same error itself, without asking, until a wait that doubles from 1 s to a minute has
//! passed; then one call goes through (the others are still answered for it, however many
//! retry at that moment), and the first answer that is not `Unavailable` ends the outage. One
//! call per wait also keeps the wait from growing by as many failures as calls were in flight,
//! which a slower path to the backend (a provider out of process) would otherwise see.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::metrics::BreakerMetrics;
use async_trait::async_trait;
use provider::{
    Error, FindRequest, PushRemoteRef, PushRequest, RemoteRef, Result, SecretsClient, Validation,
};

const FIRST_WAIT: Duration = Duration::from_secs(1);
const LONGEST_WAIT: Duration = Duration::from_secs(60);
/// A probe not answered in this long was lost (its caller gave up): another call may ask.
const LOST_PROBE: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Outage {
    failures: u32,
    until: Option<Instant>,
    /// What the provider last answered: repeated as it was, so that the ExternalSecrets'
    /// status and events see one failure, not a new one per wait.
    message: String,
    /// When the call that asks after the wait started, while it has not answered.
    probing: Option<Instant>,
}

pub(crate) struct Guarded {
    inner: Box<dyn SecretsClient>,
    outage: Mutex<Outage>,
    metrics: BreakerMetrics,
    /// Called when an outage ends: what was held back need not wait out its own backoff.
    recovered: Box<dyn Fn() + Send + Sync>,
}

impl Guarded {
    pub(crate) fn new(
        inner: Box<dyn SecretsClient>,
        metrics: BreakerMetrics,
        recovered: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        Self {
            inner,
            outage: Mutex::default(),
            metrics,
            recovered: Box::new(recovered),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Outage> {
        self.outage.lock().expect("outage state poisoned")
    }

    /// The error to answer without asking, while the wait lasts or another call is asking.
    fn held(&self, now: Instant) -> Option<Error> {
        let mut outage = self.lock();
        let until = outage.until?;
        let asking = outage
            .probing
            .is_some_and(|started| now.duration_since(started) < LOST_PROBE);
        if now < until || asking {
            self.metrics.held.inc();
            return Some(Error::Unavailable(outage.message.clone()));
        }
        outage.probing = Some(now);
        None
    }

    fn record<T>(&self, result: &Result<T>, now: Instant) {
        let ended = {
            let mut outage = self.lock();
            match result {
                Err(Error::Unavailable(message)) => {
                    if outage.failures == 0 {
                        self.metrics.open.inc();
                    }
                    outage.failures = outage.failures.saturating_add(1);
                    let wait = FIRST_WAIT
                        .saturating_mul(1 << outage.failures.saturating_sub(1).min(16))
                        .min(LONGEST_WAIT);
                    outage.until = Some(now + wait);
                    outage.message = message.clone();
                    outage.probing = None;
                    false
                }
                _ => std::mem::take(&mut *outage).failures > 0,
            }
        };
        if ended {
            self.metrics.open.dec();
            (self.recovered)();
        }
    }

    async fn call<T>(&self, call: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        if let Some(e) = self.held(Instant::now()) {
            return Err(e);
        }
        let result = call.await;
        self.record(&result, Instant::now());
        result
    }
}

impl Drop for Guarded {
    /// A client closed during an outage no longer counts as open.
    fn drop(&mut self) {
        if self.lock().failures > 0 {
            self.metrics.open.dec();
        }
    }
}

#[async_trait]
impl SecretsClient for Guarded {
    async fn get_secret(&self, remote: &RemoteRef) -> Result<Vec<u8>> {
        self.call(self.inner.get_secret(remote)).await
    }

    async fn get_secret_map(&self, remote: &RemoteRef) -> Result<BTreeMap<String, Vec<u8>>> {
        self.call(self.inner.get_secret_map(remote)).await
    }

    async fn get_all_secrets(&self, find: &FindRequest) -> Result<BTreeMap<String, Vec<u8>>> {
        self.call(self.inner.get_all_secrets(find)).await
    }

    async fn push_secret(&self, push: &PushRequest) -> Result<()> {
        self.call(self.inner.push_secret(push)).await
    }

    async fn delete_secret(&self, remote: &PushRemoteRef) -> Result<()> {
        self.call(self.inner.delete_secret(remote)).await
    }

    async fn secret_exists(&self, remote: &PushRemoteRef) -> Result<bool> {
        self.call(self.inner.secret_exists(remote)).await
    }

    async fn validate(&self) -> Result<Validation> {
        self.call(self.inner.validate()).await
    }
    fn validation_warnings(&self) -> Vec<String> {
        self.inner.validation_warnings()
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// Answers `Unavailable` while `down`, counting the calls that reach it.
    struct Flaky {
        down: Arc<std::sync::atomic::AtomicBool>,
        asked: Arc<AtomicU32>,
    }

    #[async_trait]
    impl SecretsClient for Flaky {
        async fn get_secret(&self, _: &RemoteRef) -> Result<Vec<u8>> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                Err(Error::Unavailable("Vault: connection refused".into()))
            } else {
                Ok(b"v".to_vec())
            }
        }
        async fn get_secret_map(&self, _: &RemoteRef) -> Result<BTreeMap<String, Vec<u8>>> {
            Err(Error::NoSecret)
        }
        async fn get_all_secrets(&self, _: &FindRequest) -> Result<BTreeMap<String, Vec<u8>>> {
            Err(Error::NoSecret)
        }
        async fn push_secret(&self, _: &PushRequest) -> Result<()> {
            Ok(())
        }
        async fn delete_secret(&self, _: &PushRemoteRef) -> Result<()> {
            Ok(())
        }
        async fn secret_exists(&self, _: &PushRemoteRef) -> Result<bool> {
            Ok(false)
        }
        async fn validate(&self) -> Result<Validation> {
            Ok(Validation::Ready)
        }
        async fn close(&self) -> Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn an_unavailable_provider_is_asked_once_per_wait() {
        let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let asked = Arc::new(AtomicU32::new(0));
        let recoveries = Arc::new(AtomicU32::new(0));
        let counted = recoveries.clone();
        let metrics = BreakerMetrics::default();
        let client = Guarded::new(
            Box::new(Flaky {
                down: down.clone(),
                asked: asked.clone(),
            }),
            metrics.clone(),
            move || {
                counted.fetch_add(1, Ordering::SeqCst);
            },
        );
        let remote = RemoteRef {
            key: "k".into(),
            ..RemoteRef::default()
        };
        for _ in 0..100 {
            let e = client.get_secret(&remote).await.unwrap_err();
            assert_eq!(
                e.to_string(),
                "Vault: connection refused",
                "the same failure"
            );
        }
        assert_eq!(
            asked.load(Ordering::SeqCst),
            1,
            "asked once while the wait lasts"
        );
        assert_eq!(
            (metrics.open.get(), metrics.held.get()),
            (1, 99),
            "one breaker open, 99 calls held"
        );
        // The waits double.
        let now = Instant::now();
        client.record::<()>(&Err(Error::Unavailable("x".into())), now);
        assert_eq!(client.lock().until, Some(now + Duration::from_secs(2)));
        for _ in 0..10 {
            client.record::<()>(&Err(Error::Unavailable("x".into())), now);
        }
        assert_eq!(client.lock().until, Some(now + LONGEST_WAIT));
        // Back: once the wait is over the call goes through, and the outage ends.
        down.store(false, Ordering::SeqCst);
        client.lock().until = Some(Instant::now());
        assert_eq!(recoveries.load(Ordering::SeqCst), 0);
        assert_eq!(client.get_secret(&remote).await.unwrap(), b"v");
        assert!(client.lock().until.is_none());
        assert_eq!(
            recoveries.load(Ordering::SeqCst),
            1,
            "the end of the outage is told"
        );
        assert_eq!(metrics.open.get(), 0, "closed again");
        client.get_secret(&remote).await.unwrap();
        assert_eq!(recoveries.load(Ordering::SeqCst), 1, "once");
        // After a wait, one call asks; the others are answered for it meanwhile.
        down.store(true, Ordering::SeqCst);
        client.record::<()>(
            &Err(Error::Unavailable("down again".into())),
            Instant::now(),
        );
        client.lock().until = Some(Instant::now());
        let now = Instant::now();
        assert!(
            client.held(now).is_none(),
            "the first call after the wait asks"
        );
        assert!(client.held(now).is_some(), "the next is held while it asks");
        client.record::<()>(&Err(Error::Unavailable("still".into())), now);
        assert!(client.lock().probing.is_none());
        assert_eq!(
            client.lock().until,
            Some(now + FIRST_WAIT * 2),
            "the wait doubles once per failed probe"
        );
        // A probe that never answers does not hold calls forever.
        client.lock().until = Some(now);
        assert!(client.held(now).is_none());
        assert!(
            client.held(now + LOST_PROBE).is_none(),
            "a lost probe is replaced"
        );
        // Any other answer is not an outage.
        client.record::<()>(&Err(Error::NoSecret), Instant::now());
        assert!(client.held(Instant::now()).is_none());
        assert_eq!(metrics.open.get(), 0);
        // A client dropped in an outage leaves no breaker counted open.
        client.record::<()>(&Err(Error::Unavailable("gone".into())), Instant::now());
        assert_eq!(metrics.open.get(), 1);
        drop(client);
        assert_eq!(metrics.open.get(), 0);
    }
}
