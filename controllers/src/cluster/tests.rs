use std::collections::BTreeMap;

use api::conditions::ConditionStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use super::plan::{self, Existing, NamespaceView, Selection};

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn matching(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels(pairs)),
        match_expressions: None,
    }
}

fn names(views: &[NamespaceView]) -> Vec<String> {
    views.iter().map(|v| v.name.to_owned()).collect()
}

struct Cluster(Vec<(String, BTreeMap<String, String>, bool)>);

impl Cluster {
    fn new(namespaces: &[(&str, &[(&str, &str)])]) -> Self {
        Self(
            namespaces
                .iter()
                .map(|(n, l)| ((*n).to_owned(), labels(l), false))
                .collect(),
        )
    }

    fn views(&self) -> Vec<NamespaceView<'_>> {
        self.0
            .iter()
            .map(|(name, labels, terminating)| NamespaceView {
                name,
                labels,
                terminating: *terminating,
            })
            .collect()
    }
}

#[test]
fn selectors_names_and_expressions_are_ored() {
    let cluster = Cluster::new(&[
        ("a", &[("team", "a")]),
        ("b", &[("team", "b"), ("env", "prod")]),
        ("c", &[("env", "dev")]),
        ("d", &[]),
    ]);
    let selection = Selection {
        selectors: vec![
            (
                "spec.namespaceSelectors[0]".into(),
                matching(&[("team", "a")]),
            ),
            (
                "spec.namespaceSelectors[1]".into(),
                LabelSelector {
                    match_labels: None,
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: "env".into(),
                        operator: "In".into(),
                        values: Some(vec!["prod".into()]),
                    }]),
                },
            ),
        ],
        names: vec!["d".into()],
    };
    let picked = plan::selected(&selection, cluster.views()).unwrap();
    assert_eq!(names(&picked), ["a", "b", "d"]);
    // No selector and no name selects nothing, as in ESO.
    assert!(
        plan::selected(&Selection::default(), cluster.views())
            .unwrap()
            .is_empty()
    );
}

#[test]
fn an_invalid_selector_is_an_error_naming_its_field() {
    let selection = Selection {
        selectors: vec![(
            "spec.namespaceSelectors[0]".into(),
            LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "env".into(),
                    operator: "Near".into(),
                    values: None,
                }]),
            },
        )],
        names: vec![],
    };
    let err = plan::selected(&selection, Cluster::new(&[]).views()).unwrap_err();
    assert!(err.starts_with("spec.namespaceSelectors[0]: "), "{err}");
    let owned = [("a".to_owned(), "es".to_owned())];
    let reported = plan::invalid(err, &owned, "es");
    assert_eq!(reported.provisioned, ["a"]);
    assert_eq!(reported.conditions[0].status, ConditionStatus::False);
}

#[test]
fn writes_only_what_differs_and_deletes_what_is_no_longer_selected() {
    let cluster = Cluster::new(&[("new", &[]), ("same", &[]), ("stale", &[])]);
    let owned = vec![
        ("same".to_owned(), "es".to_owned()),
        ("stale".to_owned(), "es".to_owned()),
        ("gone".to_owned(), "es".to_owned()),
        // Renamed: the old name goes everywhere.
        ("same".to_owned(), "old".to_owned()),
    ];
    let existing = |ns: &str| match ns {
        "same" => Existing::Ours { current: true },
        "stale" => Existing::Ours { current: false },
        _ => Existing::Absent,
    };
    let plan = plan::plan(
        "ExternalSecret",
        "es",
        cluster.views(),
        &owned,
        existing,
        |_| None,
    );
    assert_eq!(plan.apply, ["new", "stale"]);
    assert_eq!(
        plan.delete,
        [
            ("gone".to_owned(), "es".to_owned()),
            ("same".to_owned(), "old".to_owned())
        ]
    );
    assert_eq!(
        plan.provisioned.iter().collect::<Vec<_>>(),
        ["new", "same", "stale"]
    );
    let reported = plan::report(&plan);
    assert_eq!(reported.conditions[0].status, ConditionStatus::True);
    assert_eq!(reported.conditions[0].message, None, "ESO's bare condition");
}

#[test]
fn steady_state_plans_no_write() {
    let cluster = Cluster::new(&[("a", &[]), ("b", &[])]);
    let owned = vec![
        ("a".to_owned(), "es".to_owned()),
        ("b".to_owned(), "es".to_owned()),
    ];
    let plan = plan::plan(
        "ExternalSecret",
        "es",
        cluster.views(),
        &owned,
        |_| Existing::Ours { current: true },
        |_| None,
    );
    assert!(plan.apply.is_empty() && plan.delete.is_empty());
}

#[test]
fn a_child_it_does_not_own_is_never_touched_and_its_namespace_fails() {
    let cluster = Cluster::new(&[("theirs", &[]), ("ours", &[])]);
    let plan = plan::plan(
        "ExternalSecret",
        "es",
        cluster.views(),
        &[],
        |ns| {
            if ns == "theirs" {
                Existing::Foreign
            } else {
                Existing::Absent
            }
        },
        |_| None,
    );
    assert_eq!(plan.apply, ["ours"]);
    assert!(plan.delete.is_empty());
    let reported = plan::report(&plan);
    assert_eq!(reported.provisioned, ["ours"]);
    assert_eq!(reported.failed.len(), 1);
    assert_eq!(reported.failed[0].namespace, "theirs");
    assert!(
        reported.failed[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("does not own"),
        "{:?}",
        reported.failed
    );
    assert_eq!(reported.conditions[0].status, ConditionStatus::False);
    assert_eq!(
        reported.conditions[0].message.as_deref(),
        Some(plan::NAMESPACES_FAILED)
    );
}

#[test]
fn a_refused_namespace_fails_gets_no_new_child_and_keeps_the_one_it_has() {
    let cluster = Cluster::new(&[("refused-new", &[]), ("refused-old", &[]), ("ok", &[])]);
    let owned = vec![("refused-old".to_owned(), "es".to_owned())];
    let plan = plan::plan(
        "ExternalSecret",
        "es",
        cluster.views(),
        &owned,
        |ns| {
            if ns == "refused-old" {
                Existing::Ours { current: false }
            } else {
                Existing::Absent
            }
        },
        |ns| ns.name.starts_with("refused").then(|| "no".to_owned()),
    );
    assert_eq!(plan.apply, ["ok", "refused-old"]);
    assert!(plan.delete.is_empty(), "its Secret would go with it");
    assert_eq!(plan.provisioned.iter().collect::<Vec<_>>(), ["ok"]);
    assert_eq!(
        plan.failed.keys().collect::<Vec<_>>(),
        ["refused-new", "refused-old"]
    );
}

#[test]
fn a_terminating_namespace_is_left_to_its_deletion() {
    let mut cluster = Cluster::new(&[("going", &[])]);
    cluster.0[0].2 = true;
    let owned = vec![("going".to_owned(), "es".to_owned())];
    let plan = plan::plan(
        "ExternalSecret",
        "es",
        cluster.views(),
        &owned,
        |_| Existing::Ours { current: false },
        |_| None,
    );
    assert!(plan.apply.is_empty() && plan.delete.is_empty() && plan.provisioned.is_empty());
}

#[test]
fn a_failed_write_moves_the_namespace_to_failed() {
    let cluster = Cluster::new(&[("a", &[])]);
    let mut plan = plan::plan(
        "PushSecret",
        "ps",
        cluster.views(),
        &[],
        |_| Existing::Absent,
        |_| None,
    );
    plan::write_failed(&mut plan, "a", "denied".into());
    let reported = plan::report(&plan);
    assert!(reported.provisioned.is_empty());
    assert_eq!(reported.failed[0].reason.as_deref(), Some("denied"));
}

#[test]
fn a_warning_is_raised_once_per_new_failure_and_names_the_namespaces() {
    let names: Vec<String> = (0..7).map(|i| format!("n{i}")).collect();
    let cluster = Cluster(
        names
            .iter()
            .map(|n| (n.clone(), BTreeMap::new(), false))
            .collect(),
    );
    let reported = |failing: &[&str]| {
        let mut plan = plan::plan(
            "ExternalSecret",
            "es",
            cluster.views(),
            &[],
            |_| Existing::Absent,
            |_| None,
        );
        for ns in failing {
            plan::write_failed(&mut plan, ns, format!("denied in {ns}"));
        }
        plan::report(&plan)
    };
    let healthy = reported(&[]);
    assert_eq!(healthy.ready(), ConditionStatus::True);
    assert_eq!(healthy.warning_after(&healthy), None);

    let one = reported(&["n1"]);
    assert_eq!(one.ready(), ConditionStatus::False);
    let note = one.warning_after(&healthy).expect("a new failure");
    assert_eq!(
        note,
        "1 of the selected namespaces failed: n1: denied in n1"
    );
    assert_eq!(one.warning_after(&one), None, "the same failure again");
    assert!(
        reported(&["n1", "n2"]).warning_after(&one).is_some(),
        "another namespace failing"
    );
    assert_eq!(healthy.warning_after(&one), None, "recovered");

    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let note = reported(&all).warning_after(&healthy).unwrap();
    assert!(
        note.starts_with("7 of the selected namespaces failed: n0: "),
        "{note}"
    );
    assert!(note.ends_with("; and 2 more"), "{note}");

    let invalid = plan::invalid("spec.namespaceSelectors[0]: bad".into(), &[], "es");
    assert_eq!(
        invalid.warning_after(&healthy).as_deref(),
        Some("spec.namespaceSelectors[0]: bad")
    );
}

/// A reconcile on a watch cache that does not show its own last status write yet comes back
/// shortly instead of acting on the older status: it neither writes that status again nor
/// takes the failure it reported for a new one (another Warning).
#[tokio::test]
async fn a_reconcile_on_a_cache_behind_its_last_status_write_comes_back_for_it() {
    use std::sync::Arc;

    use api::cluster_secrets::ClusterExternalSecret;
    use http::Method;
    use kube::runtime::controller::Action;
    use serde_json::json;

    let object = |rv: &str, status: serde_json::Value| -> ClusterExternalSecret {
        serde_json::from_value(json!({
            "apiVersion": "external-secrets.io/v1",
            "kind": "ClusterExternalSecret",
            "metadata": {"name": "shared", "uid": "ces-uid", "generation": 1,
                         "resourceVersion": rv},
            "spec": {
                "namespaceSelectors": [{"matchExpressions": [
                    {"key": "env", "operator": "Near"}]}],
                "externalSecretSpec": {"secretStoreRef": {"name": "fake"}},
            },
            "status": status,
        }))
        .unwrap()
    };
    let (client, requests) = crate::standin::client(move |request| {
        if request.is(Method::PATCH, "/clusterexternalsecrets/shared/status") {
            let mut written = serde_json::to_value(object("2", json!(null))).unwrap();
            written["status"] = request.body["status"].clone();
            return (200, written);
        }
        if request.method == Method::POST && request.path.contains("/events") {
            return (201, request.body.clone());
        }
        crate::standin::status(404, "NotFound")
    });
    let state = Arc::new(super::State {
        ctx: crate::standin::context(client),
        children: Arc::new(super::children::children().0),
        namespaces: kube::runtime::reflector::store().0,
    });
    let status_writes = || crate::standin::status_writes(&requests, "/status");

    super::reconcile(Arc::new(object("1", json!(null))), state.clone())
        .await
        .unwrap();
    let written = status_writes();
    assert_eq!(written.len(), 1, "the invalid selector was reported");
    assert_eq!(written[0]["conditions"][0]["status"], "False");

    let again = super::reconcile(Arc::new(object("1", json!(null))), state.clone()).await;
    assert_eq!(
        again.unwrap(),
        Action::requeue(crate::status::CATCH_UP_RETRY)
    );
    assert_eq!(status_writes().len(), 1, "written again on a lagging cache");

    let caught_up = object("2", written[0].clone());
    let action = super::reconcile(Arc::new(caught_up), state).await;
    assert_eq!(action.unwrap(), Action::await_change());
    assert_eq!(status_writes().len(), 1, "nothing new to report");
}
