//! Go's `time.ParseDuration` (`api::duration`), the format of every interval in ESO's API, and a
//! store's `refreshInterval`, which may also be seconds.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub use api::duration::parse;

/// A store's `refreshInterval`: seconds as an integer, or a duration string.
pub fn int_or_string(v: &IntOrString) -> Result<Duration, String> {
    match v {
        IntOrString::Int(n) => u64::try_from(*n)
            .map(Duration::from_secs)
            .map_err(|_| format!("negative refreshInterval {n}")),
        IntOrString::String(s) => parse(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_intervals() {
        assert_eq!(
            int_or_string(&IntOrString::Int(30)).unwrap(),
            Duration::from_secs(30)
        );
        assert_eq!(
            int_or_string(&IntOrString::String("2m".into())).unwrap(),
            Duration::from_secs(120)
        );
        assert!(int_or_string(&IntOrString::Int(-1)).is_err());
    }
}
