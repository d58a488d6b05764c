//! ClusterExternalSecret and ClusterPushSecret on the real control plane: which namespaces get
//! a child, what happens to children the cluster object does not own, to relabelled namespaces,
//! spec changes and deletion, and that a steady state makes no write.
//!
//! Each trial selects namespaces by a label of its own (`cluster-trial: <id>`), so trials running
//! side by side never select each other's namespaces.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow, ensure};
use api::cluster_secrets::{ClusterExternalSecret, ClusterPushSecret};
use api::external_secret::ExternalSecret;
use api::push_secret::PushSecret;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use libtest_mimic::Trial;
use serde_json::{Value, json};

use crate::operator::TIMEOUT;
use crate::sync::{STORE, wait_secret};
use crate::{Env, trial};

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial(
            "cluster::external_secrets_by_selectors_expressions_and_names",
            env,
            by_selectors,
        ),
        trial(
            "cluster::a_relabelled_namespace_gains_and_loses_its_external_secret_at_once",
            env,
            relabelled,
        ),
        trial(
            "cluster::an_external_secret_it_does_not_own_is_left_alone",
            env,
            conflicting,
        ),
        trial(
            "cluster::a_spec_change_reaches_every_child_and_a_steady_state_writes_nothing",
            env,
            spec_change_and_steady_state,
        ),
        trial(
            "cluster::deleting_it_deletes_its_external_secrets",
            env,
            deletion,
        ),
        trial(
            "cluster::namespaces_a_cluster_store_refuses_show_as_failed",
            env,
            refused_by_store,
        ),
        trial(
            "cluster::an_invalid_selector_is_named",
            env,
            invalid_selector,
        ),
        trial(
            "cluster::push_secrets_per_namespace_with_the_same_rules",
            env,
            push_secrets,
        ),
    ]
}

const LABEL: &str = "cluster-trial";
const ALICE: &[(&str, &[u8])] = &[("user", b"alice")];

fn data(pairs: &[(&str, &[u8])]) -> BTreeMap<String, Vec<u8>> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.to_vec()))
        .collect()
}

/// A ClusterSecretStore with the Fake provider inline, named `name`, with `conditions` if any.
async fn cluster_store(client: &Client, name: &str, conditions: &str) -> Result<()> {
    let yaml = format!(
        "apiVersion: external-secrets.io/v1\nkind: ClusterSecretStore\nmetadata: {{name: {name}}}\nspec:\n{conditions}  provider:\n    fake:\n      data:\n      - {{key: user, value: alice}}\n      - {{key: user2, value: bob}}\n"
    );
    testenv::apply_yaml(client, &yaml, true).await?;
    Ok(())
}

/// A namespace with `labels`.
async fn namespace(client: &Client, prefix: &str, labels: &[(&str, &str)]) -> Result<String> {
    let ns = testenv::create_namespace(client, prefix).await?;
    label(client, &ns, labels).await?;
    Ok(ns)
}

/// Sets (or with `None` values, removes) labels of a namespace.
async fn relabel(client: &Client, ns: &str, labels: &[(&str, Option<&str>)]) -> Result<()> {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.map_or(Value::Null, |v| json!(v))))
        .collect();
    Api::<Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await?;
    Ok(())
}

async fn label(client: &Client, ns: &str, labels: &[(&str, &str)]) -> Result<()> {
    let labels: Vec<_> = labels.iter().map(|(k, v)| (*k, Some(*v))).collect();
    relabel(client, ns, &labels).await
}

/// The namespaces holding an ExternalSecret `name` controlled by the ClusterExternalSecret `owner`.
async fn children_of<K>(
    client: &Client,
    name: &str,
    owner: &str,
    owner_kind: &str,
) -> Result<BTreeSet<String>>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let all: Api<K> = Api::all(client.clone());
    Ok(all
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|c| {
            c.name_any() == name
                && c.owner_references()
                    .iter()
                    .any(|o| o.kind == owner_kind && o.name == owner && o.controller == Some(true))
        })
        .filter_map(|c| c.namespace())
        .collect())
}

async fn wait_children<K>(
    client: &Client,
    name: &str,
    owner: &str,
    owner_kind: &str,
    want: &[&String],
) -> Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let want: BTreeSet<String> = want.iter().map(|s| (*s).clone()).collect();
    testenv::wait_for(
        TIMEOUT,
        &format!("{owner_kind} {owner}'s children in {want:?}"),
        || async {
            let have = children_of::<K>(client, name, owner, owner_kind).await?;
            if have == want {
                Ok(())
            } else {
                Err(anyhow!("children in {have:?}"))
            }
        },
    )
    .await
}

async fn wait_es(client: &Client, name: &str, owner: &str, want: &[&String]) -> Result<()> {
    wait_children::<ExternalSecret>(client, name, owner, "ClusterExternalSecret", want).await
}

/// Waits for the ClusterExternalSecret's status to show these namespaces provisioned and failed.
async fn wait_status(
    client: &Client,
    kind_plural: &str,
    name: &str,
    provisioned: &[&String],
    failed: &[&String],
) -> Result<Value> {
    let mut want_provisioned: Vec<String> = provisioned.iter().map(|s| (*s).clone()).collect();
    want_provisioned.sort();
    let mut want_failed: Vec<String> = failed.iter().map(|s| (*s).clone()).collect();
    want_failed.sort();
    let ready = if failed.is_empty() { "True" } else { "False" };
    testenv::wait_for(TIMEOUT, &format!("{name}'s status"), || async {
        let status = status_of(client, kind_plural, name).await?;
        let list = |field: &str| -> Vec<String> {
            status[field]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| v["namespace"].as_str().unwrap_or_default().to_owned())
                })
                .collect()
        };
        let condition = status["conditions"][0]["status"]
            .as_str()
            .unwrap_or_default();
        if list("provisionedNamespaces") == want_provisioned
            && list("failedNamespaces") == want_failed
            && condition == ready
        {
            Ok(status)
        } else {
            Err(anyhow!("status {status}"))
        }
    })
    .await
}

async fn status_of(client: &Client, kind_plural: &str, name: &str) -> Result<Value> {
    let object = match kind_plural {
        "clusterexternalsecrets" => serde_json::to_value(
            Api::<ClusterExternalSecret>::all(client.clone())
                .get(name)
                .await?,
        )?,
        _ => serde_json::to_value(
            Api::<ClusterPushSecret>::all(client.clone())
                .get(name)
                .await?,
        )?,
    };
    Ok(object["status"].clone())
}

fn ces(name: &str, store: &str, selection: &str, extra: &str) -> String {
    format!(
        "apiVersion: external-secrets.io/v1\nkind: ClusterExternalSecret\nmetadata: {{name: {name}}}\nspec:\n{selection}{extra}  externalSecretSpec:\n    refreshInterval: 1h\n    secretStoreRef: {{name: {store}, kind: ClusterSecretStore}}\n    data: [{{secretKey: user, remoteRef: {{key: user}}}}]\n"
    )
}

/// A trial's id: its names and label value.
fn id(ns: &str) -> String {
    ns.rsplit('-').next().unwrap_or(ns).to_owned()
}

async fn by_selectors(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let first = namespace(&client, "ces-sel", &[]).await?;
    let id = id(&first);
    let by_labels = namespace(&client, "ces-sel-labels", &[(LABEL, &id), ("team", "a")]).await?;
    let by_expression =
        namespace(&client, "ces-sel-expr", &[(LABEL, &id), ("tier", "gold")]).await?;
    let by_deprecated = namespace(&client, "ces-sel-old", &[("old-trial", &id)]).await?;
    let unselected = namespace(&client, "ces-sel-not", &[(LABEL, &id), ("team", "b")]).await?;
    let store = format!("ces-{id}");
    cluster_store(&client, &store, "").await?;
    let name = format!("ces-sel-{id}");
    let selection = format!(
        "  namespaceSelectors:\n  - matchLabels: {{{LABEL}: {id}, team: a}}\n  - matchExpressions: [{{key: tier, operator: In, values: [gold, silver]}}, {{key: {LABEL}, operator: Exists}}]\n  namespaceSelector: {{matchLabels: {{old-trial: {id}}}}}\n  namespaces: [{first}]\n"
    );
    let extra = "  externalSecretName: app\n  externalSecretMetadata:\n    labels: {app: billing}\n    annotations: {owner: platform}\n  refreshTime: 1h\n";
    testenv::apply_yaml(&client, &ces(&name, &store, &selection, extra), true).await?;
    let want = [&first, &by_labels, &by_expression, &by_deprecated];
    wait_es(&client, "app", &name, &want).await?;
    for ns in want {
        wait_secret(&client, ns, "app", &data(ALICE)).await?;
        let es = Api::<ExternalSecret>::namespaced(client.clone(), ns)
            .get("app")
            .await?;
        ensure!(
            es.labels().get("app").map(String::as_str) == Some("billing")
                && es.annotations().get("owner").map(String::as_str) == Some("platform"),
            "metadata of {ns}/app: {:?}",
            es.metadata
        );
        let owner = &es.owner_references()[0];
        ensure!(
            owner.api_version == "external-secrets.io/v1"
                && owner.block_owner_deletion == Some(true),
            "owner: {owner:?}"
        );
    }
    let status = wait_status(&client, "clusterexternalsecrets", &name, &want, &[]).await?;
    ensure!(status["externalSecretName"] == "app", "status {status}");
    ensure!(
        Api::<ExternalSecret>::namespaced(client.clone(), &unselected)
            .get_opt("app")
            .await?
            .is_none(),
        "{unselected} matches no selector"
    );
    Ok(())
}

async fn relabelled(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let a = namespace(&client, "ces-relabel", &[]).await?;
    let id = id(&a);
    label(&client, &a, &[(LABEL, &id)]).await?;
    let b = namespace(&client, "ces-relabel-b", &[]).await?;
    let store = format!("ces-{id}");
    cluster_store(&client, &store, "").await?;
    let name = format!("ces-relabel-{id}");
    let selection = format!("  namespaceSelectors: [{{matchLabels: {{{LABEL}: {id}}}}}]\n");
    // A refreshTime far away: what follows is the namespace watch's doing.
    testenv::apply_yaml(
        &client,
        &ces(&name, &store, &selection, "  refreshTime: 1h\n"),
        true,
    )
    .await?;
    wait_es(&client, &name, &name, &[&a]).await?;
    wait_secret(&client, &a, &name, &data(ALICE)).await?;

    label(&client, &b, &[(LABEL, &id)]).await?;
    let quick = Duration::from_secs(20);
    testenv::wait_for(
        quick,
        "the relabelled namespace's ExternalSecret",
        || async {
            let have =
                children_of::<ExternalSecret>(&client, &name, &name, "ClusterExternalSecret")
                    .await?;
            ensure!(have.contains(&b), "children in {have:?}");
            Ok(())
        },
    )
    .await?;
    wait_secret(&client, &b, &name, &data(ALICE)).await?;
    wait_status(&client, "clusterexternalsecrets", &name, &[&a, &b], &[]).await?;

    relabel(&client, &a, &[(LABEL, None)]).await?;
    testenv::wait_for(
        quick,
        "the unlabelled namespace's ExternalSecret to go",
        || async {
            let have =
                children_of::<ExternalSecret>(&client, &name, &name, "ClusterExternalSecret")
                    .await?;
            ensure!(!have.contains(&a), "children in {have:?}");
            Ok(())
        },
    )
    .await?;
    // Its Secret (creationPolicy Owner) goes with it.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &a);
    testenv::wait_for(
        TIMEOUT,
        "the unlabelled namespace's Secret to go",
        || async {
            match secrets.get_opt(&name).await? {
                None => Ok(()),
                Some(_) => Err(anyhow!("still there")),
            }
        },
    )
    .await?;
    wait_status(&client, "clusterexternalsecrets", &name, &[&b], &[]).await?;
    Ok(())
}

async fn conflicting(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ours = namespace(&client, "ces-conflict", &[]).await?;
    let id = id(&ours);
    label(&client, &ours, &[(LABEL, &id)]).await?;
    let theirs = namespace(&client, "ces-conflict-theirs", &[(LABEL, &id)]).await?;
    testenv::apply_yaml_in(&client, &theirs, STORE, true).await?;
    let name = format!("ces-conflict-{id}");
    // Someone's own ExternalSecret of the same name, reading their own store.
    let foreign = format!(
        "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: {name}, labels: {{mine: 'yes'}}}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{name: fake}}\n  data: [{{secretKey: mine, remoteRef: {{key: user}}}}]\n"
    );
    testenv::apply_yaml_in(&client, &theirs, &foreign, true).await?;
    let theirs_api: Api<ExternalSecret> = Api::namespaced(client.clone(), &theirs);
    wait_secret(&client, &theirs, &name, &data(&[("mine", b"alice")])).await?;
    // Its own sync writes its status after the Secret: the snapshot is taken after both, so
    // that a later change can only be the ClusterExternalSecret's (failed once on that race).
    let before = testenv::wait_for(
        TIMEOUT,
        "the foreign ExternalSecret's Ready status",
        || async {
            let es = theirs_api.get(&name).await?;
            let ready = es.status.as_ref().is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == "Ready" && c.status == api::conditions::ConditionStatus::True
                })
            });
            ensure!(ready, "status: {:?}", es.status);
            Ok(es)
        },
    )
    .await?;

    let store = format!("ces-{id}");
    cluster_store(&client, &store, "").await?;
    let selection = format!("  namespaceSelectors: [{{matchLabels: {{{LABEL}: {id}}}}}]\n");
    testenv::apply_yaml(&client, &ces(&name, &store, &selection, ""), true).await?;
    let status = wait_status(
        &client,
        "clusterexternalsecrets",
        &name,
        &[&ours],
        &[&theirs],
    )
    .await?;
    let reason = status["failedNamespaces"][0]["reason"]
        .as_str()
        .unwrap_or_default();
    ensure!(reason.contains("does not own"), "reason: {reason}");
    ensure!(
        status["conditions"][0]["message"] == "one or more namespaces failed",
        "status {status}"
    );
    wait_secret(&client, &ours, &name, &data(ALICE)).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = theirs_api.get(&name).await?;
    // Not written at all: neither by the ClusterExternalSecret nor by a second sync of its own
    // (one came, under the whole suite's load, on a watch cache that did not yet show the first).
    ensure!(
        after.metadata.resource_version == before.metadata.resource_version
            && after.owner_references().is_empty(),
        "the foreign ExternalSecret was written: {:?} with status {:?}, Ready with {:?}",
        after.metadata,
        after.status,
        before.status
    );
    // Once theirs is gone, the namespace is ours to provision.
    theirs_api.delete(&name, &DeleteParams::default()).await?;
    wait_status(
        &client,
        "clusterexternalsecrets",
        &name,
        &[&ours, &theirs],
        &[],
    )
    .await?;
    wait_es(&client, &name, &name, &[&ours, &theirs]).await?;
    Ok(())
}

/// Write requests (create, update, patch, delete) to the ESO kinds since audit log line `mark`,
/// in `namespaces` or, for cluster-scoped objects, of the names in `names`, as
/// `verb resource[/subresource] namespace/name`.
pub fn writes_since(
    env: &Env,
    mark: usize,
    namespaces: &[&String],
    names: &[&str],
) -> Result<Vec<String>> {
    let log = std::fs::read_to_string(env.control_plane().audit_log_path())?;
    let mut writes = Vec::new();
    for line in log.lines().skip(mark).filter(|l| !l.trim().is_empty()) {
        let event: Value = serde_json::from_str(line)?;
        let verb = event["verb"].as_str().unwrap_or_default();
        if !["create", "update", "patch", "delete"].contains(&verb) {
            continue;
        }
        let object = &event["objectRef"];
        let resource = object["resource"].as_str().unwrap_or_default();
        let in_scope = match object["namespace"].as_str() {
            Some(ns) => namespaces.iter().any(|n| n.as_str() == ns),
            None => names.contains(&object["name"].as_str().unwrap_or_default()),
        };
        if in_scope
            && [
                "externalsecrets",
                "pushsecrets",
                "clusterexternalsecrets",
                "clusterpushsecrets",
            ]
            .contains(&resource)
        {
            let subresource = object["subresource"]
                .as_str()
                .map(|s| format!("/{s}"))
                .unwrap_or_default();
            writes.push(format!(
                "{verb} {resource}{subresource} {}/{}",
                object["namespace"].as_str().unwrap_or_default(),
                object["name"].as_str().unwrap_or_default()
            ));
        }
    }
    Ok(writes)
}

pub fn audit_mark(env: &Env) -> Result<usize> {
    Ok(
        std::fs::read_to_string(env.control_plane().audit_log_path())?
            .lines()
            .count(),
    )
}

async fn spec_change_and_steady_state(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let a = namespace(&client, "ces-change", &[]).await?;
    let id = id(&a);
    label(&client, &a, &[(LABEL, &id)]).await?;
    let b = namespace(&client, "ces-change-b", &[(LABEL, &id)]).await?;
    let store = format!("ces-{id}");
    cluster_store(&client, &store, "").await?;
    let name = format!("ces-change-{id}");
    let selection = format!("  namespaceSelectors: [{{matchLabels: {{{LABEL}: {id}}}}}]\n");
    // Re-checked every second: a steady state must still write nothing.
    let extra =
        "  refreshTime: 1s\n  externalSecretMetadata: {labels: {version: one, dropped: soon}}\n";
    testenv::apply_yaml(&client, &ces(&name, &store, &selection, extra), true).await?;
    for ns in [&a, &b] {
        wait_secret(&client, ns, &name, &data(ALICE)).await?;
    }
    wait_status(&client, "clusterexternalsecrets", &name, &[&a, &b], &[]).await?;

    let changed = ces(
        &name,
        &store,
        &selection,
        "  refreshTime: 1s\n  externalSecretMetadata: {labels: {version: two}}\n",
    )
    .replace(
        "{secretKey: user, remoteRef: {key: user}}",
        "{secretKey: user, remoteRef: {key: user2}}",
    );
    testenv::apply_yaml(&client, &changed, true).await?;
    for ns in [&a, &b] {
        wait_secret(&client, ns, &name, &data(&[("user", b"bob")])).await?;
        let es = Api::<ExternalSecret>::namespaced(client.clone(), ns)
            .get(&name)
            .await?;
        // The label dropped from the metadata is gone too.
        ensure!(
            es.labels().get("version").map(String::as_str) == Some("two")
                && !es.labels().contains_key("dropped"),
            "labels of {ns}/{name}: {:?}",
            es.labels()
        );
    }
    // A hand edit of a child is undone.
    let children: Api<ExternalSecret> = Api::namespaced(client.clone(), &a);
    children
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"refreshInterval": "5h"}})),
        )
        .await?;
    testenv::wait_for(TIMEOUT, "the hand edit to be undone", || async {
        let es = children.get(&name).await?;
        ensure!(
            es.spec.refresh_interval.as_deref() == Some("1h"),
            "refreshInterval {:?}",
            es.spec.refresh_interval
        );
        Ok(())
    })
    .await?;
    // Settled: nothing more is written, through several refreshTimes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mark = audit_mark(&env)?;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let writes = writes_since(&env, mark, &[&a, &b], &[&name])?;
    ensure!(writes.is_empty(), "steady state wrote: {writes:?}");
    Ok(())
}

async fn deletion(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let a = namespace(&client, "ces-delete", &[]).await?;
    let id = id(&a);
    label(&client, &a, &[(LABEL, &id)]).await?;
    let b = namespace(&client, "ces-delete-b", &[(LABEL, &id)]).await?;
    let store = format!("ces-{id}");
    cluster_store(&client, &store, "").await?;
    let name = format!("ces-delete-{id}");
    let selection = format!("  namespaceSelectors: [{{matchLabels: {{{LABEL}: {id}}}}}]\n");
    testenv::apply_yaml(&client, &ces(&name, &store, &selection, ""), true).await?;
    for ns in [&a, &b] {
        wait_secret(&client, ns, &name, &data(ALICE)).await?;
    }
    let mark = audit_mark(&env)?;
    Api::<ClusterExternalSecret>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await?;
    wait_es(&client, &name, &name, &[]).await?;
    for ns in [&a, &b] {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
        testenv::wait_for(TIMEOUT, &format!("{ns}/{name} Secret to go"), || async {
            match secrets.get_opt(&name).await? {
                None => Ok(()),
                Some(_) => Err(anyhow!("still there")),
            }
        })
        .await?;
    }
    // Garbage collection (in kube-controller-manager) deleted them, not the operator one by one.
    let log = std::fs::read_to_string(env.control_plane().audit_log_path())?;
    let deleted_by: Vec<String> = log
        .lines()
        .skip(mark)
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["verb"] == "delete"
                && e["objectRef"]["resource"] == "externalsecrets"
                && [&a, &b]
                    .iter()
                    .any(|ns| e["objectRef"]["namespace"].as_str() == Some(ns.as_str()))
        })
        .map(|e| e["userAgent"].as_str().unwrap_or_default().to_owned())
        .collect();
    ensure!(
        !deleted_by.is_empty()
            && deleted_by
                .iter()
                .all(|agent| agent.starts_with("kube-controller-manager")),
        "deleted by {deleted_by:?}"
    );
    Ok(())
}

/// Waits until ESO's condition gauge of the cluster object reads 1 for Ready=`status`.
async fn wait_condition_metric(env: &Env, kind: &str, name: &str, status: &str) -> Result<()> {
    let series = format!(
        "{kind}_status_condition{{name=\"{name}\",namespace=\"\",condition=\"Ready\",status=\"{status}\"}}"
    );
    testenv::wait_for(TIMEOUT, "the condition metric", || async {
        let metrics = crate::operator::scrape(env.metrics_addr()).await?;
        crate::operator::sample(&metrics, &series)
            .filter(|v| *v == 1.0)
            .ok_or_else(|| anyhow!("no {series} = 1"))
    })
    .await
    .map(drop)
}

/// Waits for a Warning event `Errored` about the cluster object (recorded in `default`, as for
/// any cluster-scoped object) whose note names every namespace in `failed`.
async fn wait_errored_event(client: &Client, name: &str, failed: &[&String]) -> Result<()> {
    testenv::wait_for(TIMEOUT, "the Errored event", || async {
        let events = crate::operator::events(client, "default", name).await?;
        let notes: Vec<String> = events
            .into_iter()
            .filter(|e| {
                e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some("Errored")
            })
            .filter_map(|e| e.message)
            .collect();
        ensure!(
            notes
                .iter()
                .any(|n| failed.iter().all(|ns| n.contains(&format!("{ns}: ")))),
            "Errored events: {notes:?}"
        );
        Ok(())
    })
    .await
}

async fn refused_by_store(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let allowed = namespace(&client, "ces-allowed", &[]).await?;
    let id = id(&allowed);
    label(&client, &allowed, &[(LABEL, &id), ("access", "granted")]).await?;
    let refused = namespace(&client, "ces-refused", &[(LABEL, &id)]).await?;
    let by_name = namespace(&client, "ces-refused-by-name", &[(LABEL, &id)]).await?;
    let store = format!("ces-{id}");
    let granted = "  conditions: [{namespaceSelector: {matchLabels: {access: granted}}}]\n";
    cluster_store(&client, &store, granted).await?;
    let name = format!("ces-refused-{id}");
    let selection = format!("  namespaceSelectors: [{{matchLabels: {{{LABEL}: {id}}}}}]\n");
    testenv::apply_yaml(&client, &ces(&name, &store, &selection, ""), true).await?;
    let status = wait_status(
        &client,
        "clusterexternalsecrets",
        &name,
        &[&allowed],
        &[&refused, &by_name],
    )
    .await?;
    let reason = status["failedNamespaces"][0]["reason"]
        .as_str()
        .unwrap_or_default();
    ensure!(
        reason.contains(&store) && reason.contains("spec.conditions"),
        "reason: {reason}"
    );
    wait_errored_event(&client, &name, &[&refused, &by_name]).await?;
    wait_condition_metric(&env, "clusterexternalsecret", &name, "False").await?;
    wait_secret(&client, &allowed, &name, &data(ALICE)).await?;
    ensure!(
        Api::<ExternalSecret>::namespaced(client.clone(), &refused)
            .get_opt(&name)
            .await?
            .is_none(),
        "a refused namespace gets no ExternalSecret"
    );
    // Granted access, it is provisioned at once.
    label(&client, &refused, &[("access", "granted")]).await?;
    wait_status(
        &client,
        "clusterexternalsecrets",
        &name,
        &[&allowed, &refused],
        &[&by_name],
    )
    .await?;
    wait_secret(&client, &refused, &name, &data(ALICE)).await?;
    // The store's conditions changed: with a refreshTime of an hour, still at once.
    let by_names = format!(
        "  conditions: [{{namespaceSelector: {{matchLabels: {{access: granted}}}}}}, {{namespaces: [{by_name}]}}]\n"
    );
    cluster_store(&client, &store, &by_names).await?;
    wait_status(
        &client,
        "clusterexternalsecrets",
        &name,
        &[&allowed, &refused, &by_name],
        &[],
    )
    .await?;
    wait_secret(&client, &by_name, &name, &data(ALICE)).await?;
    wait_condition_metric(&env, "clusterexternalsecret", &name, "True").await?;
    Ok(())
}

async fn invalid_selector(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = namespace(&client, "ces-invalid", &[]).await?;
    let id = id(&ns);
    let name = format!("ces-invalid-{id}");
    let selection = "  namespaceSelectors: [{matchExpressions: [{key: tier, operator: Near}]}]\n";
    testenv::apply_yaml(&client, &ces(&name, "none", selection, ""), true).await?;
    testenv::wait_for(TIMEOUT, "the invalid selector to be named", || async {
        let status = status_of(&client, "clusterexternalsecrets", &name).await?;
        let condition = &status["conditions"][0];
        ensure!(
            condition["status"] == "False"
                && condition["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("spec.namespaceSelectors[0]")),
            "status {status}"
        );
        Ok(())
    })
    .await
}

async fn push_secrets(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let a = namespace(&client, "cps", &[]).await?;
    let id = id(&a);
    label(&client, &a, &[(LABEL, &id)]).await?;
    let b = namespace(&client, "cps-b", &[(LABEL, &id)]).await?;
    let theirs = namespace(&client, "cps-theirs", &[(LABEL, &id)]).await?;
    let source = "apiVersion: v1\nkind: Secret\nmetadata: {name: src}\nstringData: {token: t0k}\n";
    for ns in [&a, &b, &theirs] {
        testenv::apply_yaml_in(&client, ns, STORE, true).await?;
        testenv::apply_yaml_in(&client, ns, source, true).await?;
    }
    let name = format!("cps-{id}");
    let spec = |remote: &str| {
        format!(
            "apiVersion: external-secrets.io/v1alpha1\nkind: ClusterPushSecret\nmetadata: {{name: {name}}}\nspec:\n  pushSecretMetadata: {{labels: {{pushed: 'yes'}}}}\n  namespaceSelectors: [{{matchLabels: {{{LABEL}: {id}}}}}]\n  pushSecretSpec:\n    refreshInterval: 1h\n    secretStoreRefs: [{{name: fake, kind: SecretStore}}]\n    selector: {{secret: {{name: src}}}}\n    data: [{{match: {{secretKey: token, remoteRef: {{remoteKey: {remote}}}}}}}]\n"
        )
    };
    let foreign = format!(
        "apiVersion: external-secrets.io/v1alpha1\nkind: PushSecret\nmetadata: {{name: {name}}}\nspec:\n  secretStoreRefs: [{{name: fake, kind: SecretStore}}]\n  selector: {{secret: {{name: src}}}}\n  data: [{{match: {{secretKey: token, remoteRef: {{remoteKey: mine}}}}}}]\n"
    );
    testenv::apply_yaml_in(&client, &theirs, &foreign, true).await?;
    testenv::apply_yaml(&client, &spec("first"), true).await?;
    wait_children::<PushSecret>(&client, &name, &name, "ClusterPushSecret", &[&a, &b]).await?;
    let status = wait_status(&client, "clusterpushsecrets", &name, &[&a, &b], &[&theirs]).await?;
    ensure!(status["pushSecretName"] == name.as_str(), "status {status}");
    wait_errored_event(&client, &name, &[&theirs]).await?;
    wait_condition_metric(&env, "clusterpushsecret", &name, "False").await?;
    for ns in [&a, &b] {
        let pushes: Api<PushSecret> = Api::namespaced(client.clone(), ns);
        crate::operator::wait_ready("PushSecret child", "True", "Synced", || async {
            Ok(serde_json::to_value(pushes.get(&name).await?)?)
        })
        .await?;
        let ps = pushes.get(&name).await?;
        ensure!(
            ps.labels().get("pushed").map(String::as_str) == Some("yes"),
            "{:?}",
            ps.metadata
        );
    }
    let foreign_now = Api::<PushSecret>::namespaced(client.clone(), &theirs)
        .get(&name)
        .await?;
    ensure!(
        foreign_now.owner_references().is_empty(),
        "the foreign PushSecret was taken"
    );
    // A spec change reaches both; an unlabelled namespace loses its PushSecret.
    testenv::apply_yaml(&client, &spec("second"), true).await?;
    for ns in [&a, &b] {
        let pushes: Api<PushSecret> = Api::namespaced(client.clone(), ns);
        testenv::wait_for(TIMEOUT, "the new remote key", || async {
            let ps = pushes.get(&name).await?;
            ensure!(
                serde_json::to_string(&ps.spec.data)?.contains("second"),
                "data {:?}",
                ps.spec.data
            );
            Ok(())
        })
        .await?;
    }
    relabel(&client, &b, &[(LABEL, None)]).await?;
    wait_children::<PushSecret>(&client, &name, &name, "ClusterPushSecret", &[&a]).await?;
    wait_status(&client, "clusterpushsecrets", &name, &[&a], &[&theirs]).await?;
    Api::<ClusterPushSecret>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await?;
    wait_children::<PushSecret>(&client, &name, &name, "ClusterPushSecret", &[]).await?;
    testenv::wait_for(TIMEOUT, "the deleted object's series to go", || async {
        let metrics = crate::operator::scrape(env.metrics_addr()).await?;
        let left: Vec<&str> = metrics
            .lines()
            .filter(|l| {
                l.starts_with("clusterpushsecret_") && l.contains(&format!("name=\"{name}\""))
            })
            .collect();
        ensure!(left.is_empty(), "series left: {left:?}");
        Ok(())
    })
    .await
}
