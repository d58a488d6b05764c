//! Cache metrics of the client manager.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
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
        m
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
