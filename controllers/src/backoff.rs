//! Per-object exponential backoff with jitter. kube's `error_policy` is synchronous and never
//! told about successes, so failures are counted here by object and reset from the stream of
//! reconcile outcomes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rand::Rng;

pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
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
        let n = {
            let mut failures = self.failures.lock().expect("backoff lock poisoned");
            let n = failures.entry(object.to_owned()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        let exp = self.base.saturating_mul(1u32 << (n - 1).min(20));
        let delay = exp.min(self.max);
        let jitter = rand::rng().random_range(0.75..1.25);
        delay.mul_f64(jitter).min(self.max)
    }

    pub fn succeeded(&self, object: &str) {
        self.failures
            .lock()
            .expect("backoff lock poisoned")
            .remove(object);
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
}
