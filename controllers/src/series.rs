//! ESO's per-ExternalSecret series (`externalsecret_sync_calls`, `..._sync_calls_error`,
//! `..._status_condition`, `..._reconcile_duration`), kept as one small record per object and
//! written out at scrape time. As families of series they cost about 0.9 KiB an ExternalSecret
//! (six series, each with its own copies of the label strings), the largest per-object holder
//! after the watch caches and the indexes (hack/README.md, the heap profile).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use api::conditions::{ConditionStatus, READY};

#[derive(Clone, Debug, Default)]
pub struct ExternalSecretSeries(Arc<Mutex<Namespaces>>);

/// Records by namespace, then name: a namespace's name is kept once for all its objects.
type Namespaces = HashMap<Box<str>, HashMap<Box<str>, Record>>;

#[derive(Debug, Default)]
struct Record {
    calls: u64,
    /// `None` until the first error: ESO's series starts then.
    errors: Option<i64>,
    /// Of the last reconcile, in nanoseconds as ESO reports a Go `time.Duration`.
    duration: Option<i64>,
    ready: Option<ConditionStatus>,
}

const STATUSES: [ConditionStatus; 3] = [
    ConditionStatus::True,
    ConditionStatus::False,
    ConditionStatus::Unknown,
];

impl ExternalSecretSeries {
    fn with(&self, name: &str, namespace: &str, f: impl FnOnce(&mut Record)) {
        let mut namespaces = self.0.lock().expect("series poisoned");
        let names = match namespaces.get_mut(namespace) {
            Some(names) => names,
            None => namespaces.entry(namespace.into()).or_default(),
        };
        match names.get_mut(name) {
            Some(record) => f(record),
            None => f(names.entry(name.into()).or_default()),
        }
    }

    /// A reconcile ended after `took`.
    pub fn reconciled(&self, name: &str, namespace: &str, took: Duration, failed: bool) {
        self.with(name, namespace, |r| {
            r.calls += 1;
            r.duration = Some(took.as_nanos().try_into().unwrap_or(i64::MAX));
            if failed {
                *r.errors.get_or_insert(0) += 1;
            }
        });
    }

    /// Its Ready condition, as last written.
    pub fn ready(&self, name: &str, namespace: &str, status: ConditionStatus) {
        self.with(name, namespace, |r| r.ready = Some(status));
    }

    /// The object is gone: its series with it.
    pub fn forget(&self, name: &str, namespace: &str) {
        let mut namespaces = self.0.lock().expect("series poisoned");
        if let Some(names) = namespaces.get_mut(namespace) {
            names.remove(name);
            if names.is_empty() {
                namespaces.remove(namespace);
            }
        }
    }
}

impl prometheus_client::collector::Collector for ExternalSecretSeries {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let namespaces = self.0.lock().expect("series poisoned");
        let records = || {
            namespaces
                .iter()
                .flat_map(|(ns, names)| names.iter().map(move |(name, r)| (&**name, &**ns, r)))
        };
        let mut family = encoder.encode_descriptor(
            "externalsecret_sync_calls",
            "Total number of ExternalSecret reconciles",
            None,
            MetricType::Counter,
        )?;
        for (name, namespace, r) in records() {
            let labels = [("name", name), ("namespace", namespace)];
            ConstCounter::new(r.calls).encode(family.encode_family(&labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "externalsecret_sync_calls_error",
            "Total number of ExternalSecret reconcile errors",
            None,
            MetricType::Gauge,
        )?;
        for (name, namespace, r) in records() {
            if let Some(errors) = r.errors {
                let labels = [("name", name), ("namespace", namespace)];
                ConstGauge::new(errors).encode(family.encode_family(&labels)?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "externalsecret_status_condition",
            "The status condition of a specific ExternalSecret",
            None,
            MetricType::Gauge,
        )?;
        for (name, namespace, r) in records() {
            let Some(ready) = r.ready else { continue };
            // ESO keeps a series per status; the current one reads 1, the others 0.
            for status in STATUSES {
                let labels = [
                    ("name", name),
                    ("namespace", namespace),
                    ("condition", READY),
                    ("status", status.as_str()),
                ];
                let value = i64::from(status == ready);
                ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "externalsecret_reconcile_duration",
            "The duration of the last ExternalSecret reconcile in nanoseconds",
            None,
            MetricType::Gauge,
        )?;
        for (name, namespace, r) in records() {
            if let Some(duration) = r.duration {
                let labels = [("name", name), ("namespace", namespace)];
                ConstGauge::new(duration).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::text;
    use prometheus_client::registry::Registry;

    /// The text ESO's dashboards read: the same names, labels and values the families of
    /// series gave, and nothing left of a forgotten object.
    #[test]
    fn series_read_as_esos_and_leave_with_their_object() {
        let series = ExternalSecretSeries::default();
        let mut registry = Registry::default();
        registry.register_collector(Box::new(series.clone()));
        series.reconciled("db", "team-a", Duration::from_millis(3), false);
        series.ready("db", "team-a", ConditionStatus::True);
        series.reconciled("db", "team-a", Duration::from_millis(5), true);
        series.reconciled("db", "team-a", Duration::from_millis(2), true);
        series.ready("db", "team-a", ConditionStatus::False);
        series.reconciled("api", "team-b", Duration::from_millis(1), false);
        let t = text(&registry);
        for line in [
            "# TYPE externalsecret_sync_calls counter",
            r#"externalsecret_sync_calls_total{name="db",namespace="team-a"} 3"#,
            r#"externalsecret_sync_calls_total{name="api",namespace="team-b"} 1"#,
            r#"externalsecret_sync_calls_error{name="db",namespace="team-a"} 2"#,
            r#"externalsecret_status_condition{name="db",namespace="team-a",condition="Ready",status="True"} 0"#,
            r#"externalsecret_status_condition{name="db",namespace="team-a",condition="Ready",status="False"} 1"#,
            r#"externalsecret_status_condition{name="db",namespace="team-a",condition="Ready",status="Unknown"} 0"#,
            r#"externalsecret_reconcile_duration{name="db",namespace="team-a"} 2000000"#,
            r#"externalsecret_reconcile_duration{name="api",namespace="team-b"} 1000000"#,
        ] {
            assert!(t.lines().any(|l| l == line), "no {line} in\n{t}");
        }
        assert!(
            !t.contains(r#"externalsecret_sync_calls_error{name="api""#),
            "no error series before an error"
        );
        series.forget("db", "team-a");
        series.forget("api", "team-b");
        let t = text(&registry);
        assert!(!t.contains("name="), "{t}");
        assert!(series.0.lock().unwrap().is_empty());
    }
}
