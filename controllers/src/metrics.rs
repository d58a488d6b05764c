//! ESO's metric names, so existing dashboards and alerts keep working.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use api::conditions::ConditionStatus;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectLabels {
    pub name: String,
    pub namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    pub name: String,
    pub namespace: String,
    pub condition: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderCallLabels {
    pub provider: String,
    pub call: &'static str,
    pub status: &'static str,
}

/// Removes the series a deleted object leaves behind: its Ready condition and reconcile
/// duration (ExternalSecrets have more, see `externalsecret::forget`).
pub fn forget(
    condition: &ConditionGauge,
    duration: &Family<ObjectLabels, Gauge>,
    name: &str,
    namespace: &str,
) {
    condition.remove(name, namespace, api::conditions::READY);
    duration.remove(&labels(name, namespace));
}

/// A family of ESO's condition gauges: 1 for the current status, 0 for the others.
#[derive(Clone, Default)]
pub struct ConditionGauge(Family<ConditionLabels, Gauge>);

impl ConditionGauge {
    /// ESO keeps a series per status; the current one reads 1, the others 0.
    pub fn set(&self, name: &str, namespace: &str, condition: &str, status: ConditionStatus) {
        for (labels, s) in Self::series(name, namespace, condition) {
            self.0.get_or_create(&labels).set(i64::from(s == status));
        }
    }

    pub fn remove(&self, name: &str, namespace: &str, condition: &str) {
        for (labels, _) in Self::series(name, namespace, condition) {
            self.0.remove(&labels);
        }
    }

    fn series(
        name: &str,
        namespace: &str,
        condition: &str,
    ) -> impl Iterator<Item = (ConditionLabels, ConditionStatus)> {
        let (name, namespace, condition) =
            (name.to_owned(), namespace.to_owned(), condition.to_owned());
        [
            ConditionStatus::True,
            ConditionStatus::False,
            ConditionStatus::Unknown,
        ]
        .into_iter()
        .map(move |s| {
            let labels = ConditionLabels {
                name: name.clone(),
                namespace: namespace.clone(),
                condition: condition.clone(),
                status: s.as_str().to_owned(),
            };
            (labels, s)
        })
    }
}

#[derive(Clone, Default)]
pub struct Metrics {
    pub es_sync_calls: Family<ObjectLabels, Counter>,
    /// A gauge that only grows: ESO's name has no `_total` suffix, which the OpenMetrics encoder
    /// would add to a counter.
    pub es_sync_errors: Family<ObjectLabels, Gauge>,
    pub es_condition: ConditionGauge,
    /// Nanoseconds, as ESO reports a Go `time.Duration`.
    pub es_reconcile_duration: Family<ObjectLabels, Gauge>,
    /// Same reason as `es_sync_errors` for being a gauge.
    pub provider_calls: Family<ProviderCallLabels, Gauge>,
    pub ss_condition: ConditionGauge,
    pub ss_reconcile_duration: Family<ObjectLabels, Gauge>,
    pub css_condition: ConditionGauge,
    pub css_reconcile_duration: Family<ObjectLabels, Gauge>,
    pub ps_condition: ConditionGauge,
    pub ps_reconcile_duration: Family<ObjectLabels, Gauge>,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: &'static str,
    pub error: &'static str,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "externalsecret_sync_calls",
            "Total number of ExternalSecret reconciles",
            m.es_sync_calls.clone(),
        );
        registry.register(
            "externalsecret_sync_calls_error",
            "Total number of ExternalSecret reconcile errors",
            m.es_sync_errors.clone(),
        );
        registry.register(
            "externalsecret_status_condition",
            "The status condition of a specific ExternalSecret",
            m.es_condition.0.clone(),
        );
        registry.register(
            "externalsecret_reconcile_duration",
            "The duration of the last ExternalSecret reconcile in nanoseconds",
            m.es_reconcile_duration.clone(),
        );
        registry.register(
            "externalsecret_provider_api_calls_count",
            "Number of API calls made to a provider",
            m.provider_calls.clone(),
        );
        registry.register(
            "secretstore_status_condition",
            "The status condition of a specific SecretStore",
            m.ss_condition.0.clone(),
        );
        registry.register(
            "secretstore_reconcile_duration",
            "The duration of the last SecretStore reconcile in nanoseconds",
            m.ss_reconcile_duration.clone(),
        );
        registry.register(
            "clustersecretstore_status_condition",
            "The status condition of a specific ClusterSecretStore",
            m.css_condition.0.clone(),
        );
        registry.register(
            "clustersecretstore_reconcile_duration",
            "The duration of the last ClusterSecretStore reconcile in nanoseconds",
            m.css_reconcile_duration.clone(),
        );
        registry.register(
            "pushsecret_status_condition",
            "The status condition of a specific PushSecret",
            m.ps_condition.0.clone(),
        );
        registry.register(
            "pushsecret_reconcile_duration",
            "The duration of the last PushSecret reconcile in nanoseconds",
            m.ps_reconcile_duration.clone(),
        );
        registry.register(
            "external_secrets_reconcile_errors",
            "Reconcile failures by controller and error kind",
            m.reconcile_errors.clone(),
        );
        m
    }

    pub fn provider_call(&self, provider: &str, call: &'static str, ok: bool) {
        self.provider_calls
            .get_or_create(&ProviderCallLabels {
                provider: provider.to_owned(),
                call,
                status: if ok { "success" } else { "error" },
            })
            .inc();
    }
}

pub fn labels(name: &str, namespace: &str) -> ObjectLabels {
    ObjectLabels {
        name: name.to_owned(),
        namespace: namespace.to_owned(),
    }
}
