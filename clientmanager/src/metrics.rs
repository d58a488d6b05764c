//! Cache metrics of the client manager.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EvictionLabels {
    provider: String,
    reason: &'static str,
}

#[derive(Clone, Default)]
pub struct Metrics {
    hits: Family<ProviderLabels, Counter>,
    misses: Family<ProviderLabels, Counter>,
    evictions: Family<EvictionLabels, Counter>,
    breakers_open: Family<ProviderLabels, Gauge>,
    held_calls: Family<ProviderLabels, Counter>,
}

/// One client's breaker's share of the metrics (breaker.rs).
#[derive(Clone, Debug, Default)]
pub(crate) struct BreakerMetrics {
    pub(crate) open: Gauge,
    pub(crate) held: Counter,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "clientmanager_cache_hits",
            "Secrets clients reused from the cache",
            m.hits.clone(),
        );
        registry.register(
            "clientmanager_cache_misses",
            "Secrets clients built because none was cached",
            m.misses.clone(),
        );
        registry.register(
            "clientmanager_cache_evictions",
            "Cached secrets clients closed because their provider object, caller or credentials changed",
            m.evictions.clone(),
        );
        registry.register(
            "provider_breaker_open",
            "Secrets clients whose provider is unavailable, answering calls themselves until their wait has passed",
            m.breakers_open.clone(),
        );
        registry.register(
            "provider_breaker_held_calls",
            "Calls a client's breaker answered without asking the unavailable provider",
            m.held_calls.clone(),
        );
        m
    }

    /// The series a breaker of a `provider` client counts in.
    pub(crate) fn breaker(&self, provider: &str) -> BreakerMetrics {
        let labels = ProviderLabels {
            provider: provider.to_owned(),
        };
        BreakerMetrics {
            open: self.breakers_open.get_or_create(&labels).clone(),
            held: self.held_calls.get_or_create(&labels).clone(),
        }
    }

    pub(crate) fn hit(&self, provider: &str) {
        self.hits
            .get_or_create(&ProviderLabels {
                provider: provider.to_owned(),
            })
            .inc();
    }

    pub(crate) fn miss(&self, provider: &str) {
        self.misses
            .get_or_create(&ProviderLabels {
                provider: provider.to_owned(),
            })
            .inc();
    }

    pub(crate) fn evicted(&self, provider: &str, reason: &'static str) {
        self.evictions
            .get_or_create(&EvictionLabels {
                provider: provider.to_owned(),
                reason,
            })
            .inc();
    }
}
