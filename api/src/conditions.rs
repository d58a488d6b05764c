//! Status conditions in the Kubernetes shape, shared by every kind.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The condition type every kind reports.
pub const READY: &str = "Ready";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

impl Condition {
    pub fn ready(status: ConditionStatus, reason: &str, message: impl Into<String>) -> Self {
        Self {
            type_: READY.to_owned(),
            status,
            reason: Some(reason.to_owned()),
            message: Some(message.into()),
            last_transition_time: None,
        }
    }
}

/// Puts `new` into `conditions`, replacing the condition of the same type. The transition time
/// moves only when the status flips, so a resync that changes nothing does not churn the object.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition, now: Timestamp) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            new.last_transition_time = if old.status == new.status {
                old.last_transition_time.clone()
            } else {
                Some(Time(now))
            };
            *old = new;
        }
        None => {
            new.last_transition_time = Some(Time(now));
            conditions.push(new);
        }
    }
}

/// The condition of type `type_`, if any.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether `conditions` already hold `condition` (type, status, reason and message): a failure
/// that repeats on every retry is news once, not an event per retry.
pub fn holds(conditions: &[Condition], condition: &Condition) -> bool {
    find(conditions, &condition.type_).is_some_and(|c| {
        c.status == condition.status
            && c.reason == condition.reason
            && c.message == condition.message
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_condition_is_held_and_a_changed_one_is_not() {
        let failed = Condition::ready(ConditionStatus::False, "SecretSyncedError", "down");
        let conditions = vec![failed.clone()];
        assert!(holds(&conditions, &failed));
        let other = Condition::ready(ConditionStatus::False, "SecretSyncedError", "refused");
        assert!(!holds(&conditions, &other));
        assert!(!holds(&[], &failed));
    }

    #[test]
    fn transition_time_moves_only_on_flip() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let t2: Timestamp = "2026-01-01T02:00:00Z".parse().unwrap();
        let mut conds = Vec::new();
        set_condition(
            &mut conds,
            Condition::ready(ConditionStatus::True, "Valid", "a"),
            t0,
        );
        set_condition(
            &mut conds,
            Condition::ready(ConditionStatus::True, "Valid", "b"),
            t1,
        );
        assert_eq!(conds[0].last_transition_time, Some(Time(t0)));
        assert_eq!(conds[0].message.as_deref(), Some("b"));
        set_condition(
            &mut conds,
            Condition::ready(ConditionStatus::False, "X", "c"),
            t2,
        );
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].last_transition_time, Some(Time(t2)));
    }
}
