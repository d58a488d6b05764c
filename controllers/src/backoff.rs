//! Per-object exponential backoff with jitter. kube's `error_policy` is synchronous and never
//! told about successes, so failures are counted here by object and reset from the stream of
//! reconcile outcomes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<Failures>,
}

/// Failures in a row by object, and when each last failed: an object deleted while failing
/// never succeeds, so its entry goes once it is older than any retry could be.
#[derive(Default)]
struct Failures {
    by_object: HashMap<String, (u32, Instant)>,
    swept: Option<Instant>,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Mutex::default(),
        }
    }

    /// Records a failure of `object` and returns how long to wait: base·2ⁿ capped at max, with up
    /// to ±25 % jitter so that objects failing together do not retry together.
    pub fn failed(&self, object: &str) -> Duration {
        let now = Instant::now();
        let n = {
            let mut failures = self.lock_swept(now);
            let (n, last) = failures
                .by_object
                .entry(object.to_owned())
                .or_insert((0, now));
            *n = n.saturating_add(1);
            *last = now;
            *n
        };
        let exp = self.base.saturating_mul(1u32 << (n - 1).min(20));
        let delay = exp.min(self.max);
        let jitter = rand::rng().random_range(0.75..1.25);
        delay.mul_f64(jitter).min(self.max)
    }

    pub fn succeeded(&self, object: &str) {
        self.lock_swept(Instant::now()).by_object.remove(object);
    }

    /// The failures, without those of objects that stopped failing long ago. Swept at successes
    /// too: where nothing else fails, the entries of objects deleted while failing stayed.
    fn lock_swept(&self, now: Instant) -> std::sync::MutexGuard<'_, Failures> {
        let mut failures = self.failures.lock().expect("backoff lock poisoned");
        // A live failing object fails again within `max` (+25 % jitter).
        let forgotten = self.max * 2;
        if failures
            .swept
            .is_none_or(|swept| now.duration_since(swept) >= forgotten)
        {
            failures
                .by_object
                .retain(|_, (_, last)| now.duration_since(*last) < forgotten);
            failures.swept = Some(now);
        }
        failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_then_caps_and_resets() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        let d: Vec<_> = (0..8).map(|_| b.failed("a")).collect();
        assert!(d[0] >= Duration::from_millis(750) && d[0] <= Duration::from_millis(1250));
        assert!(d[3] >= Duration::from_secs(6) && d[3] <= Duration::from_secs(10));
        assert!(d[7] <= Duration::from_secs(60) && d[7] >= Duration::from_secs(45));
        assert!(b.failed("other") <= Duration::from_millis(1250));
        b.succeeded("a");
        assert!(b.failed("a") <= Duration::from_millis(1250));
    }

    #[tokio::test(start_paused = true)]
    async fn objects_that_stopped_failing_are_forgotten() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        for i in 0..1000 {
            b.failed(&format!("deleted-{i}"));
        }
        for _ in 0..3 {
            b.failed("live");
            tokio::time::advance(Duration::from_secs(60)).await;
        }
        b.failed("live");
        let failures = b.failures.lock().unwrap();
        assert_eq!(failures.by_object.keys().collect::<Vec<_>>(), ["live"]);
        assert_eq!(
            failures.by_object["live"].0, 4,
            "a live object keeps its count"
        );
    }

    /// Objects deleted while failing are forgotten where nothing fails any more, as long as
    /// something still succeeds (a periodic refresh).
    #[tokio::test(start_paused = true)]
    async fn objects_deleted_while_failing_are_forgotten_when_nothing_else_fails() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        for i in 0..1000 {
            b.failed(&format!("deleted-{i}"));
        }
        tokio::time::advance(Duration::from_secs(121)).await;
        b.succeeded("live");
        assert!(b.failures.lock().unwrap().by_object.is_empty());
    }
}
