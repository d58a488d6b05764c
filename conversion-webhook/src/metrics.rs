//! Conversions the webhook answered, for the operator's `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::Converters;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConversionLabels {
    kind: String,
    /// The apiVersion asked for.
    to: String,
    result: &'static str,
}

/// `conversion_webhook_conversions_total{kind, to, result}`.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    conversions: Family<ConversionLabels, Counter>,
}

impl Metrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "conversion_webhook_conversions",
            "Objects the conversion webhook was asked to convert, by kind, target apiVersion and result",
            self.conversions.clone(),
        );
    }
}

/// Converters whose every conversion is counted in [`Metrics`].
pub struct Counted<C> {
    inner: C,
    metrics: Metrics,
}

impl<C: Converters> Counted<C> {
    pub fn new(inner: C, metrics: Metrics) -> Self {
        Self { inner, metrics }
    }
}

impl<C: Converters> Converters for Counted<C> {
    fn convert(
        &self,
        group: &str,
        kind: &str,
        object: serde_json::Value,
        to_api_version: &str,
    ) -> Result<serde_json::Value, String> {
        let converted = self.inner.convert(group, kind, object, to_api_version);
        self.metrics
            .conversions
            .get_or_create(&ConversionLabels {
                kind: kind.to_owned(),
                to: to_api_version.to_owned(),
                result: if converted.is_ok() {
                    "success"
                } else {
                    "error"
                },
            })
            .inc();
        converted
    }

    fn needs_conversion(&self, crd_name: &str) -> bool {
        self.inner.needs_conversion(crd_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct OnlyToV2;

    impl Converters for OnlyToV2 {
        fn convert(
            &self,
            _: &str,
            _: &str,
            object: serde_json::Value,
            to: &str,
        ) -> Result<serde_json::Value, String> {
            if to.ends_with("/v2") {
                Ok(object)
            } else {
                Err(format!("cannot convert to {to}"))
            }
        }

        fn needs_conversion(&self, crd_name: &str) -> bool {
            crd_name == "things.example.com"
        }
    }

    #[test]
    fn every_conversion_is_counted_by_kind_version_and_result() {
        let metrics = Metrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let counted = Counted::new(OnlyToV2, metrics);
        for to in ["example.com/v2", "example.com/v2", "example.com/v3"] {
            let _ = counted.convert("example.com", "Thing", serde_json::json!({}), to);
        }
        assert!(counted.needs_conversion("things.example.com"));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"conversion_webhook_conversions_total{kind="Thing",to="example.com/v2",result="success"} 2"#,
            r#"conversion_webhook_conversions_total{kind="Thing",to="example.com/v3",result="error"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
        }
    }
}
