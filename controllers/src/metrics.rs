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
/// duration (ExternalSecrets keep theirs in `series.rs`).
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
    /// ESO's per-ExternalSecret series.
    pub es: crate::series::ExternalSecretSeries,
    /// A gauge that only grows: ESO's name has no `_total` suffix, which the OpenMetrics encoder
    /// would add to a counter.
    pub provider_calls: Family<ProviderCallLabels, Gauge>,
    pub ss_condition: ConditionGauge,
    pub ss_reconcile_duration: Family<ObjectLabels, Gauge>,
    pub css_condition: ConditionGauge,
    pub css_reconcile_duration: Family<ObjectLabels, Gauge>,
    pub ps_condition: ConditionGauge,
    pub ps_reconcile_duration: Family<ObjectLabels, Gauge>,
    pub ces_condition: ConditionGauge,
    pub ces_reconcile_duration: Family<ObjectLabels, Gauge>,
    pub cps_condition: ConditionGauge,
    pub cps_reconcile_duration: Family<ObjectLabels, Gauge>,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    /// 1 once this replica reconciles (it holds the Lease, or leader election is off), 0 while
    /// it stands by.
    pub leader: Gauge,
    /// Events not published because the background sender was too far behind.
    pub events_dropped: Counter,
    pub workqueues: crate::workqueue::Workqueues,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: &'static str,
    pub error: &'static str,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register_collector(Box::new(m.es.clone()));
        registry.register(
            "externalsecret_provider_api_calls_count",
            "Number of API calls made to a provider",
            m.provider_calls.clone(),
        );
        // ESO's two series per kind, named after the kind (ExternalSecrets' are in `es`).
        let kinds = [
            (
                "secretstore",
                "SecretStore",
                &m.ss_condition,
                &m.ss_reconcile_duration,
            ),
            (
                "clustersecretstore",
                "ClusterSecretStore",
                &m.css_condition,
                &m.css_reconcile_duration,
            ),
            (
                "pushsecret",
                "PushSecret",
                &m.ps_condition,
                &m.ps_reconcile_duration,
            ),
            (
                "clusterexternalsecret",
                "ClusterExternalSecret",
                &m.ces_condition,
                &m.ces_reconcile_duration,
            ),
            (
                "clusterpushsecret",
                "ClusterPushSecret",
                &m.cps_condition,
                &m.cps_reconcile_duration,
            ),
        ];
        for (prefix, kind, condition, duration) in kinds {
            registry.register(
                format!("{prefix}_status_condition"),
                format!("The status condition of a specific {kind}"),
                condition.0.clone(),
            );
            registry.register(
                format!("{prefix}_reconcile_duration"),
                format!("The duration of the last {kind} reconcile in nanoseconds"),
                duration.clone(),
            );
        }
        registry.register(
            "external_secrets_reconcile_errors",
            "Reconcile failures by controller and error kind",
            m.reconcile_errors.clone(),
        );
        registry.register(
            "external_secrets_leader",
            "1 when this replica runs the controllers (it holds the Lease, or leader election is off), 0 while it stands by",
            m.leader.clone(),
        );
        registry.register(
            "external_secrets_events_dropped",
            "Events not published because too many were waiting to be sent",
            m.events_dropped.clone(),
        );
        registry.register_collector(Box::new(Process));
        m.workqueues.register(registry);
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

/// The process's memory and CPU under the names Go's and Prometheus' client libraries use
/// (ESO's dashboards read them), from `/proc/self` at each scrape; nothing on other systems.
#[derive(Debug)]
struct Process;

/// What `/proc/self/stat` counts CPU time in: USER_HZ, 100 on every Linux architecture.
const TICKS_PER_SECOND: f64 = 100.0;

impl Process {
    /// Resident bytes and CPU seconds (user and system) of this process.
    fn read() -> Option<(i64, f64)> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let rss_kb: i64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()?;
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The command name, field 2, may hold spaces and parentheses: count from its end.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks = |i: usize| fields.get(i)?.parse::<f64>().ok();
        // utime and stime are fields 14 and 15 of the whole line, 11 and 12 after the name.
        let cpu = (ticks(11)? + ticks(12)?) / TICKS_PER_SECOND;
        Some((rss_kb * 1024, cpu))
    }
}

impl prometheus_client::collector::Collector for Process {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let Some((rss, cpu)) = Self::read() else {
            return Ok(());
        };
        let memory = ConstGauge::new(rss);
        memory.encode(encoder.encode_descriptor(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            None,
            memory.metric_type(),
        )?)?;
        let cpu = ConstCounter::new(cpu);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        Ok(())
    }
}

/// What `/metrics` would say of `registry`.
#[cfg(test)]
pub(crate) fn text(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_reports_its_memory_and_cpu() {
        let mut registry = Registry::default();
        Metrics::register(&mut registry);
        // Some CPU time to count.
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let text = text(&registry);
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("no {name} in\n{text}"))
                .parse()
                .unwrap()
        };
        let rss = value("process_resident_memory_bytes");
        assert!(rss > 1e6, "resident memory {rss}");
        assert!(
            text.contains("# TYPE process_cpu_seconds counter"),
            "{text}"
        );
        let cpu = value("process_cpu_seconds_total");
        assert!(cpu > 0.0, "cpu seconds {cpu}");
    }
}
