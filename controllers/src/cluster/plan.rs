//! What a cluster object wants, decided without the cluster: which namespaces it selects, where
//! its child is to be written or deleted, and the status that reports it. Everything here reads
//! values the API layer took from its watch caches.

use std::collections::{BTreeMap, BTreeSet};

use api::cluster_secrets::NamespaceFailure;
use api::conditions::{Condition, ConditionStatus, READY};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

/// ESO's message when any namespace failed; kept word for word, since alerts match on it.
pub const NAMESPACES_FAILED: &str = "one or more namespaces failed";

/// Which namespaces a cluster object selects: any selector, or any name.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// With the field each came from, for the error that names it.
    pub selectors: Vec<(String, LabelSelector)>,
    pub names: Vec<String>,
}

/// A namespace as the namespace watch shows it.
#[derive(Clone, Debug)]
pub struct NamespaceView<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub terminating: bool,
}

/// What a namespace holds under the child's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Existing {
    Absent,
    /// Ours; `current` when it already is what we would write.
    Ours {
        current: bool,
    },
    /// Someone else's; never touched.
    Foreign,
}

/// The writes one reconcile makes, and what its status will say if they succeed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Namespaces whose child is to be (re)written.
    pub apply: Vec<String>,
    /// Children of ours to delete, as (namespace, name).
    pub delete: Vec<(String, String)>,
    pub provisioned: BTreeSet<String>,
    /// Namespace → reason.
    pub failed: BTreeMap<String, String>,
}

impl Selection {
    fn compiled(&self) -> Result<Vec<Selector>, String> {
        self.selectors
            .iter()
            .map(|(field, s)| Selector::try_from(s.clone()).map_err(|e| format!("{field}: {e}")))
            .collect()
    }
}

/// The namespaces `selection` picks among `namespaces`, in their order; an invalid selector is
/// an error naming its field.
pub fn selected<'a>(
    selection: &Selection,
    namespaces: impl IntoIterator<Item = NamespaceView<'a>>,
) -> Result<Vec<NamespaceView<'a>>, String> {
    let selectors = selection.compiled()?;
    Ok(namespaces
        .into_iter()
        .filter(|ns| {
            selection.names.iter().any(|n| n == ns.name)
                || selectors.iter().any(|s| s.matches(ns.labels))
        })
        .collect())
}

/// The plan for a cluster object whose child is `child_name`.
///
/// `owned` lists every child it owns now, as (namespace, name), whatever its name; `existing`
/// says what a namespace holds under `child_name`; `refused` gives the reason a store the child
/// would read refuses the namespace. A refused namespace is reported as failed and gets no new
/// child, but one already there is kept and kept current: deleting it would take its Secret.
pub fn plan<'a>(
    child_kind: &str,
    child_name: &str,
    targets: impl IntoIterator<Item = NamespaceView<'a>>,
    owned: &[(String, String)],
    existing: impl Fn(&str) -> Existing,
    refused: impl Fn(&NamespaceView<'a>) -> Option<String>,
) -> Plan {
    let mut plan = Plan::default();
    let mut kept = BTreeSet::new();
    for ns in targets {
        let name = ns.name.to_owned();
        // A namespace being deleted takes its children with it.
        if ns.terminating {
            kept.insert(name);
            continue;
        }
        let here = existing(ns.name);
        if here == Existing::Foreign {
            plan.failed.insert(
                name,
                format!(
                    "an {child_kind} named {child_name:?} that this object does not own already exists in the namespace"
                ),
            );
            continue;
        }
        kept.insert(name.clone());
        if let Some(reason) = refused(&ns) {
            if let Existing::Ours { current: false } = here {
                plan.apply.push(name.clone());
            }
            plan.failed.insert(name, reason);
            continue;
        }
        if here != (Existing::Ours { current: true }) {
            plan.apply.push(name.clone());
        }
        plan.provisioned.insert(name);
    }
    plan.delete = owned
        .iter()
        .filter(|(ns, name)| name != child_name || !kept.contains(ns))
        .cloned()
        .collect();
    plan.apply.sort();
    plan.delete.sort();
    plan
}

/// Where a write that failed leaves the plan: that namespace failed with the error.
pub fn write_failed(plan: &mut Plan, namespace: &str, error: String) {
    plan.provisioned.remove(namespace);
    plan.failed.insert(namespace.to_owned(), error);
}

/// The parts of the status every cluster kind reports, as ESO writes them: a bare Ready
/// condition (a Go ESO status then reads back unchanged, so a takeover writes nothing).
pub struct Reported {
    pub provisioned: Vec<String>,
    pub failed: Vec<NamespaceFailure>,
    pub conditions: Vec<Condition>,
}

/// How many failed namespaces a warning names; the status lists them all.
const NAMED_FAILURES: usize = 5;

impl Reported {
    pub fn ready(&self) -> ConditionStatus {
        self.conditions
            .iter()
            .find(|c| c.type_ == READY)
            .map_or(ConditionStatus::Unknown, |c| c.status)
    }

    fn failure(&self) -> Option<String> {
        if self.ready() != ConditionStatus::False {
            return None;
        }
        if self.failed.is_empty() {
            return self
                .conditions
                .iter()
                .find(|c| c.type_ == READY)
                .and_then(|c| c.message.clone());
        }
        let mut named: Vec<String> = self
            .failed
            .iter()
            .take(NAMED_FAILURES)
            .map(|f| {
                format!(
                    "{}: {}",
                    f.namespace,
                    f.reason.as_deref().unwrap_or("failed")
                )
            })
            .collect();
        if self.failed.len() > NAMED_FAILURES {
            named.push(format!("and {} more", self.failed.len() - NAMED_FAILURES));
        }
        Some(format!(
            "{} of the selected namespaces failed: {}",
            self.failed.len(),
            named.join("; ")
        ))
    }

    /// The note of a Warning event, when this report fails and the one before did not, or
    /// failed otherwise: one event per new failure, not one per reconcile.
    pub fn warning_after(&self, before: &Reported) -> Option<String> {
        let now = self.failure()?;
        (before.failure().as_ref() != Some(&now)).then_some(now)
    }
}

pub fn report(plan: &Plan) -> Reported {
    let failed: Vec<_> = plan
        .failed
        .iter()
        .map(|(namespace, reason)| NamespaceFailure {
            namespace: namespace.clone(),
            reason: Some(reason.clone()),
        })
        .collect();
    let condition = if failed.is_empty() {
        bare(ConditionStatus::True, None)
    } else {
        bare(ConditionStatus::False, Some(NAMESPACES_FAILED.to_owned()))
    };
    Reported {
        provisioned: plan.provisioned.iter().cloned().collect(),
        failed,
        conditions: vec![condition],
    }
}

/// Ready=False naming what made the whole object unusable (an invalid selector, say); the
/// children it has are left as they are, and still reported.
pub fn invalid(message: String, owned: &[(String, String)], child_name: &str) -> Reported {
    let mut provisioned: Vec<String> = owned
        .iter()
        .filter(|(_, name)| name == child_name)
        .map(|(ns, _)| ns.clone())
        .collect();
    provisioned.sort();
    Reported {
        provisioned,
        failed: Vec::new(),
        conditions: vec![bare(ConditionStatus::False, Some(message))],
    }
}

fn bare(status: ConditionStatus, message: Option<String>) -> Condition {
    Condition {
        type_: READY.to_owned(),
        status,
        reason: None,
        message,
        last_transition_time: None,
    }
}
