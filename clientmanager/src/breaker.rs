//! One client's calls held back while its provider is unavailable. Every ExternalSecret and
//! PushSecret retries on its own backoff; without this, N of them on a store whose provider is
//! down ask it N times per backoff step. After an `Unavailable` answer the client answers the
//! same error itself, without asking, until a wait that doubles from 1 s to a minute has
//! passed; then one call goes through (the others are still answered for it, however many
//! retry at that moment), and the first answer that is not `Unavailable` ends the outage. One
//! call per wait also keeps the wait from growing by as many failures as calls were in flight,
//! which a slower path to the backend (a provider out of process) would otherwise see.
//!
//! The breaker also asks by itself (`validate`) when a wait ends and no caller has: callers'
//! backoffs grow to minutes and jitter apart from the waits, so an outage would otherwise end
//! whenever the next caller happened to retry, up to an ExternalSecret's longest backoff after
//! the provider came back. The end of an outage wakes the callers held back.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;

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
    /// The task that asks when a wait ends, while the outage lasts.
    prober: Option<AbortHandle>,
}

/// Whether a call may go to the provider.
enum Admission {
    /// No outage.
    Open,
    /// The wait is over: this call asks for everyone.
    Probe,
    /// Answered for the provider with its last error.
    Held(String),
}

/// Cheap to clone; the clones share one outage.
#[derive(Clone)]
pub(crate) struct Guarded(Arc<State>);

struct State {
    inner: Box<dyn SecretsClient>,
    outage: Mutex<Outage>,
    metrics: BreakerMetrics,
    /// Called with `false` when an outage starts (what reports the provider's state need not
    /// wait for its next check) and with `true` when it ends (what was held back need not wait
    /// out its own backoff).
    available: Box<dyn Fn(bool) + Send + Sync>,
}

impl Guarded {
    pub(crate) fn new(
        inner: Box<dyn SecretsClient>,
        metrics: BreakerMetrics,
        available: impl Fn(bool) + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(State {
            inner,
            outage: Mutex::default(),
            metrics,
            available: Box::new(available),
        }))
    }

    /// `call`, unless the outage holds it back; its answer counts as any call's.
    pub(crate) async fn call<T>(
        &self,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let probe = match self.0.admit(Instant::now()) {
            Admission::Held(message) => {
                self.0.metrics.held.inc();
                return Err(Error::Unavailable(message));
            }
            Admission::Open => false,
            Admission::Probe => true,
        };
        let result = call.await;
        self.0.record(&result, Instant::now(), probe);
        result
    }

    #[cfg(test)]
    fn lock(&self) -> std::sync::MutexGuard<'_, Outage> {
        self.0.lock()
    }
}

impl State {
    fn lock(&self) -> std::sync::MutexGuard<'_, Outage> {
        self.outage.lock().expect("outage state poisoned")
    }

    fn admit(&self, now: Instant) -> Admission {
        let mut outage = self.lock();
        let Some(until) = outage.until else {
            return Admission::Open;
        };
        let asking = outage
            .probing
            .is_some_and(|started| now.duration_since(started) < LOST_PROBE);
        if now < until || asking {
            return Admission::Held(outage.message.clone());
        }
        outage.probing = Some(now);
        Admission::Probe
    }

    /// `probe`: the call was let through after a wait. Calls let through before the outage
    /// began that fail after it did were in flight together with the one that began it: one
    /// failure, not one each, else the wait grows by as many doublings as calls overlapped.
    fn record<T>(self: &Arc<Self>, result: &Result<T>, now: Instant, probe: bool) {
        let (started, ended) = {
            let mut outage = self.lock();
            match result {
                Err(Error::Unavailable(_)) if outage.failures > 0 && !probe => (false, false),
                Err(Error::Unavailable(message)) => {
                    let started = outage.failures == 0;
                    if started {
                        self.metrics.open.inc();
                    }
                    outage.failures = outage.failures.saturating_add(1);
                    let wait = FIRST_WAIT
                        .saturating_mul(1 << outage.failures.saturating_sub(1).min(16))
                        .min(LONGEST_WAIT);
                    outage.until = Some(now + wait);
                    outage.message = message.clone();
                    outage.probing = None;
                    if outage.prober.is_none()
                        && let Ok(runtime) = tokio::runtime::Handle::try_current()
                    {
                        let task = runtime.spawn(ask_after_waits(Arc::downgrade(self)));
                        outage.prober = Some(task.abort_handle());
                    }
                    (started, false)
                }
                _ => {
                    let over = std::mem::take(&mut *outage);
                    if let Some(prober) = over.prober {
                        prober.abort();
                    }
                    (false, over.failures > 0)
                }
            }
        };
        if started {
            (self.available)(false);
        }
        if ended {
            self.metrics.open.dec();
            (self.available)(true);
        }
    }
}

/// Asks the provider when each wait of an outage ends, unless a caller is asking; holds the
/// client only while it asks, so a client let go in an outage is dropped.
async fn ask_after_waits(state: Weak<State>) {
    loop {
        let Some(until) = state.upgrade().and_then(|s| s.lock().until) else {
            return;
        };
        tokio::time::sleep_until(until).await;
        let Some(state) = state.upgrade() else {
            return;
        };
        match state.admit(Instant::now()) {
            Admission::Open => return,
            // A caller is asking; its answer sets the next wait or ends the outage.
            Admission::Held(_) => tokio::time::sleep(FIRST_WAIT).await,
            Admission::Probe => {
                let answer = state.inner.validate().await;
                if let Ok(Validation::Unknown) = answer {
                    // Nothing was asked: the next caller's request asks instead.
                    let mut outage = state.lock();
                    outage.probing = None;
                    outage.prober = None;
                    return;
                }
                state.record(&answer, Instant::now(), true);
            }
        }
    }
}

impl Drop for State {
    /// A client closed during an outage no longer counts as open.
    fn drop(&mut self) {
        let outage = self.lock();
        if outage.failures > 0 {
            self.metrics.open.dec();
        }
        if let Some(prober) = &outage.prober {
            prober.abort();
        }
    }
}

#[async_trait]
impl SecretsClient for Guarded {
    async fn get_secret(&self, remote: &RemoteRef) -> Result<Vec<u8>> {
        self.call(self.0.inner.get_secret(remote)).await
    }

    async fn get_secret_map(&self, remote: &RemoteRef) -> Result<BTreeMap<String, Vec<u8>>> {
        self.call(self.0.inner.get_secret_map(remote)).await
    }

    async fn get_all_secrets(&self, find: &FindRequest) -> Result<BTreeMap<String, Vec<u8>>> {
        self.call(self.0.inner.get_all_secrets(find)).await
    }

    async fn push_secret(&self, push: &PushRequest) -> Result<()> {
        self.call(self.0.inner.push_secret(push)).await
    }

    async fn delete_secret(&self, remote: &PushRemoteRef) -> Result<()> {
        self.call(self.0.inner.delete_secret(remote)).await
    }

    async fn secret_exists(&self, remote: &PushRemoteRef) -> Result<bool> {
        self.call(self.0.inner.secret_exists(remote)).await
    }

    async fn validate(&self) -> Result<Validation> {
        self.call(self.0.inner.validate()).await
    }
    fn validation_warnings(&self) -> Vec<String> {
        self.0.inner.validation_warnings()
    }

    async fn close(&self) -> Result<()> {
        self.0.inner.close().await
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
        /// What `validate` answers while up: `Unknown` is a provider that cannot be asked.
        validation: Validation,
    }

    #[async_trait]
    impl SecretsClient for Flaky {
        async fn get_secret(&self, _: &RemoteRef) -> Result<Vec<u8>> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            // A round trip, so that calls made together are in flight together.
            tokio::time::sleep(Duration::from_millis(10)).await;
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
            self.asked.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                Err(Error::Unavailable("Vault: connection refused".into()))
            } else {
                Ok(self.validation)
            }
        }
        async fn close(&self) -> Result<()> {
            Ok(())
        }
    }

    /// A breaker over a provider that is down, with what it is asked, how often an outage
    /// started and how often it recovered.
    struct Rig {
        client: Guarded,
        down: Arc<std::sync::atomic::AtomicBool>,
        asked: Arc<AtomicU32>,
        outages: Arc<AtomicU32>,
        recoveries: Arc<AtomicU32>,
        metrics: BreakerMetrics,
    }

    fn rig(validation: Validation) -> Rig {
        let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let asked = Arc::new(AtomicU32::new(0));
        let outages = Arc::new(AtomicU32::new(0));
        let recoveries = Arc::new(AtomicU32::new(0));
        let counted = (outages.clone(), recoveries.clone());
        let metrics = BreakerMetrics::default();
        let client = Guarded::new(
            Box::new(Flaky {
                down: down.clone(),
                asked: asked.clone(),
                validation,
            }),
            metrics.clone(),
            move |available| {
                let count = if available { &counted.1 } else { &counted.0 };
                count.fetch_add(1, Ordering::SeqCst);
            },
        );
        Rig {
            client,
            down,
            asked,
            outages,
            recoveries,
            metrics,
        }
    }

    fn held(client: &Guarded, now: Instant) -> bool {
        matches!(client.0.admit(now), Admission::Held(_))
    }

    #[tokio::test(start_paused = true)]
    async fn an_unavailable_provider_is_asked_once_per_wait() {
        let Rig {
            client,
            down,
            asked,
            outages,
            recoveries,
            metrics,
        } = rig(Validation::Ready);
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
        client
            .0
            .record::<()>(&Err(Error::Unavailable("x".into())), now, true);
        assert_eq!(client.lock().until, Some(now + Duration::from_secs(2)));
        for _ in 0..10 {
            client
                .0
                .record::<()>(&Err(Error::Unavailable("x".into())), now, true);
        }
        assert_eq!(client.lock().until, Some(now + LONGEST_WAIT));
        assert_eq!(
            outages.load(Ordering::SeqCst),
            1,
            "the start of the outage is told once"
        );
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
        client.0.record::<()>(
            &Err(Error::Unavailable("down again".into())),
            Instant::now(),
            true,
        );
        assert_eq!(outages.load(Ordering::SeqCst), 2, "a new outage is told");
        client.lock().until = Some(Instant::now());
        let now = Instant::now();
        assert!(!held(&client, now), "the first call after the wait asks");
        assert!(held(&client, now), "the next is held while it asks");
        client
            .0
            .record::<()>(&Err(Error::Unavailable("still".into())), now, true);
        assert!(client.lock().probing.is_none());
        assert_eq!(
            client.lock().until,
            Some(now + FIRST_WAIT * 2),
            "the wait doubles once per failed probe"
        );
        // A probe that never answers does not hold calls forever.
        client.lock().until = Some(now);
        assert!(!held(&client, now));
        assert!(!held(&client, now + LOST_PROBE), "a lost probe is replaced");
        // Any other answer is not an outage.
        client
            .0
            .record::<()>(&Err(Error::NoSecret), Instant::now(), true);
        assert!(!held(&client, Instant::now()));
        assert_eq!(metrics.open.get(), 0);
        // A client dropped in an outage leaves no breaker counted open.
        client.0.record::<()>(
            &Err(Error::Unavailable("gone".into())),
            Instant::now(),
            true,
        );
        assert_eq!(metrics.open.get(), 1);
        drop(client);
        assert_eq!(metrics.open.get(), 0);
    }

    /// Calls already in flight when the provider goes down fail together; they are one failure,
    /// not one each: the wait is the first wait, not as many doublings as there were calls (out
    /// of process, where more calls overlap, they stretched the sealed-Vault trial's waits so
    /// that Vault was next asked 39 s after the unseal: CI failure).
    #[tokio::test(start_paused = true)]
    async fn calls_in_flight_when_an_outage_starts_are_one_failure() {
        let r = rig(Validation::Ready);
        let started = Instant::now();
        let remote = RemoteRef::default();
        let calls = (0..10).map(|_| r.client.get_secret(&remote));
        let answers = futures::future::join_all(calls).await;
        assert!(answers.iter().all(Result::is_err));
        assert_eq!(r.asked.load(Ordering::SeqCst), 10, "all were in flight");
        let until = r.client.lock().until.expect("an outage");
        assert!(
            until < started + FIRST_WAIT * 2,
            "the first wait, not a longer one: {:?}",
            until - started
        );
        assert!(r.client.lock().probing.is_none());
        // The first wait's question, and the next, double it once each.
        tokio::time::sleep_until(started + Duration::from_millis(3_500)).await;
        assert_eq!(r.asked.load(Ordering::SeqCst), 12, "asked at 1 s and 3 s");
        assert_eq!(r.outages.load(Ordering::SeqCst), 1, "one outage told");
    }

    /// A breaker whose callers all wait out long backoffs (an ExternalSecret's grows to minutes)
    /// asks the provider itself after each wait, so the outage ends when the provider is back,
    /// not when the next caller happens to retry.
    #[tokio::test(start_paused = true)]
    async fn the_breaker_asks_after_each_wait_without_callers() {
        let r = rig(Validation::Ready);
        let started = Instant::now();
        r.client
            .get_secret(&RemoteRef::default())
            .await
            .unwrap_err();
        // Asked again 1, 3, 7 and 15 s into the outage, by nobody's call.
        tokio::time::sleep_until(started + Duration::from_millis(15_500)).await;
        assert_eq!(r.asked.load(Ordering::SeqCst), 5, "one call and four waits");
        assert_eq!(r.metrics.held.get(), 0, "no call was held");
        r.down.store(false, Ordering::SeqCst);
        tokio::time::sleep_until(started + Duration::from_millis(30_500)).await;
        assert_eq!(
            r.recoveries.load(Ordering::SeqCst),
            0,
            "the next wait ends at 31 s"
        );
        tokio::time::sleep_until(started + Duration::from_millis(31_500)).await;
        assert_eq!(
            r.recoveries.load(Ordering::SeqCst),
            1,
            "the outage ended at the first wait's end after the provider came back"
        );
        assert_eq!(r.metrics.open.get(), 0);
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(
            r.asked.load(Ordering::SeqCst),
            6,
            "nothing asked once it is over"
        );
    }

    /// A provider that cannot be asked without a caller's request (referent credentials answer
    /// `Unknown`) is not taken as back: the next caller's request asks, as before.
    #[tokio::test(start_paused = true)]
    async fn a_provider_that_cannot_be_validated_waits_for_a_caller() {
        let r = rig(Validation::Unknown);
        r.client
            .get_secret(&RemoteRef::default())
            .await
            .unwrap_err();
        r.down.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(r.asked.load(Ordering::SeqCst), 2, "asked once by itself");
        assert_eq!(
            r.recoveries.load(Ordering::SeqCst),
            0,
            "Unknown is not an answer"
        );
        r.client.get_secret(&RemoteRef::default()).await.unwrap();
        assert_eq!(r.recoveries.load(Ordering::SeqCst), 1);
    }
}
