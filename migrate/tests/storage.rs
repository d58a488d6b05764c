//! `migrate storage` against a real kube-apiserver and etcd. Vault's second version is not
//! needed: a CRD of this test's own with two schema-compatible versions and `conversion: None`
//! goes through the same storage flip (v1 storage, objects written, v2 made storage), and etcd
//! is read directly to see the version each object is stored at.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use external_secrets_migrate::storage::{Counts, Outcome, migrate_storage};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use testenv::ControlPlane;

const GROUP: &str = "storage-test.example.com";
const TIMEOUT: Duration = Duration::from_secs(30);

#[test]
fn storage_flip_rewrites_every_object_and_trims_stored_versions() -> Result<()> {
    let cp = ControlPlane::start()?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let client = cp.client().await;
            let mut out = String::new();
            let outcome = migrate_storage(
                &client,
                "vaults.providers.external-secrets.io",
                false,
                &mut out,
            )
            .await?;
            ensure!(outcome == Outcome::NotInstalled, "{outcome:?}");
            ensure!(out.contains("not installed"), "{out}");
            // Both scopes: the provider kinds come in a namespaced and a cluster-scoped group.
            flip(&cp, &client, "Namespaced")
                .await
                .context("Namespaced")?;
            flip(&cp, &client, "Cluster").await.context("Cluster")
        })
}

/// A CRD named after `scope`: `v1` alone and storage, or `v1` served and `v2` storage.
fn crd(scope: &str, flipped: bool) -> Value {
    let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"x": {"type": "string"}}},
    }}});
    let mut versions =
        vec![json!({"name": "v1", "served": true, "storage": !flipped, "schema": schema})];
    if flipped {
        versions.push(json!({"name": "v2", "served": true, "storage": true, "schema": schema}));
    }
    let kind = format!("{scope}Widget");
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name(scope)},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {"kind": kind, "plural": plural(scope), "singular": kind.to_lowercase()},
            "conversion": {"strategy": "None"},
            "versions": versions,
        },
    })
}

fn plural(scope: &str) -> String {
    format!("{}widgets", scope.to_lowercase())
}

fn crd_name(scope: &str) -> String {
    format!("{}.{GROUP}", plural(scope))
}

fn resource(scope: &str, version: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: version.into(),
        api_version: format!("{GROUP}/{version}"),
        kind: format!("{scope}Widget"),
        plural: plural(scope),
    }
}

async fn apply_crd(client: &Client, scope: &str, flipped: bool) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        &crd_name(scope),
        &PatchParams::apply("storage-test").force(),
        &Patch::Apply(crd(scope, flipped)),
    )
    .await?;
    testenv::wait_for_crd_established(client, &crd_name(scope), TIMEOUT).await
}

async fn stored_versions(client: &Client, scope: &str) -> Result<Vec<String>> {
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get(&crd_name(scope))
        .await?;
    Ok(crd
        .status
        .and_then(|s| s.stored_versions)
        .unwrap_or_default())
}

/// `(namespace, name)` of every object the test wrote.
type Key = (Option<String>, String);

/// Every object of the kind read at `version`, by key.
async fn objects(
    client: &Client,
    scope: &str,
    version: &str,
) -> Result<BTreeMap<Key, DynamicObject>> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(scope, version));
    Ok(api
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .map(|o| ((o.namespace(), o.name_any()), o))
        .collect())
}

/// The apiVersion etcd holds the object at, from the raw value the API server wrote (custom
/// resources are stored as JSON).
fn etcd_api_version(cp: &ControlPlane, scope: &str, key: &Key) -> Result<String> {
    let path = match &key.0 {
        Some(ns) => format!("/registry/{GROUP}/{}/{ns}/{}", plural(scope), key.1),
        None => format!("/registry/{GROUP}/{}/{}", plural(scope), key.1),
    };
    let raw = cp
        .etcd_get(&path)?
        .with_context(|| format!("etcd has no key {path}"))?;
    let stored: Value = serde_json::from_slice(&raw)
        .with_context(|| format!("{path} is not JSON: {}", String::from_utf8_lossy(&raw)))?;
    Ok(stored["apiVersion"].as_str().unwrap_or_default().to_owned())
}

fn etcd_versions(
    cp: &ControlPlane,
    scope: &str,
    keys: impl IntoIterator<Item = Key>,
) -> Result<BTreeMap<Key, String>> {
    keys.into_iter()
        .map(|k| Ok((k.clone(), etcd_api_version(cp, scope, &k)?)))
        .collect()
}

async fn flip(cp: &ControlPlane, client: &Client, scope: &str) -> Result<()> {
    apply_crd(client, scope, false).await?;
    let namespaces = if scope == "Namespaced" {
        vec![
            Some(testenv::create_namespace(client, "storage-a").await?),
            Some(testenv::create_namespace(client, "storage-b").await?),
        ]
    } else {
        vec![None]
    };
    let v1 = resource(scope, "v1");
    for ns in &namespaces {
        let api: Api<DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &v1),
            None => Api::all_with(client.clone(), &v1),
        };
        for i in 0..3 {
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": v1.api_version, "kind": v1.kind,
                "metadata": {"name": format!("w{i}"), "labels": {"n": i.to_string()}, "annotations": {"keep": "me"}},
                "spec": {"x": format!("value {i}")},
            }))?;
            // The kind's endpoint may lag a moment behind Established.
            let params = PostParams::default();
            testenv::wait_for(TIMEOUT, "creating a widget", || {
                api.create(&params, &object)
            })
            .await?;
        }
    }
    let before = objects(client, scope, "v1").await?;
    ensure!(
        before.len() == 3 * namespaces.len(),
        "{} objects written",
        before.len()
    );
    let at_v1 = etcd_versions(cp, scope, before.keys().cloned())?;
    ensure!(
        at_v1.values().all(|v| v == &v1.api_version),
        "before the flip etcd holds {at_v1:?}"
    );

    apply_crd(client, scope, true).await?;
    ensure!(stored_versions(client, scope).await? == ["v1", "v2"]);
    let crd = crd_name(scope);

    // Dry run: lists every object and the change, touches nothing.
    let mut out = String::new();
    let outcome = migrate_storage(client, &crd, true, &mut out).await?;
    eprintln!("dry run:\n{out}");
    ensure!(
        outcome == Outcome::WouldMigrate(before.len()),
        "dry run: {outcome:?}"
    );
    ensure!(
        out.contains("storedVersions [v1, v2] → [v2]") && out.contains("w2: would rewrite at v2"),
        "dry run said:\n{out}"
    );
    ensure!(stored_versions(client, scope).await? == ["v1", "v2"]);
    let after_dry_run = objects(client, scope, "v1").await?;
    for (key, object) in &before {
        ensure!(
            after_dry_run[key].resource_version() == object.resource_version(),
            "the dry run wrote {key:?}"
        );
    }
    ensure!(etcd_versions(cp, scope, before.keys().cloned())? == at_v1);

    // An earlier run that was interrupted after rewriting one object: the next run finds it
    // already at v2 (the update writes nothing) and rewrites the others.
    let first = before.keys().next().cloned().context("no objects")?;
    {
        let v2 = resource(scope, "v2");
        let api: Api<DynamicObject> = match &first.0 {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &v2),
            None => Api::all_with(client.clone(), &v2),
        };
        let object = api.get(&first.1).await?;
        api.replace(&first.1, &PostParams::default(), &object)
            .await?;
        ensure!(etcd_api_version(cp, scope, &first)? == v2.api_version);
    }
    let partly = objects(client, scope, "v2").await?;

    let mut out = String::new();
    let outcome = migrate_storage(client, &crd, false, &mut out).await?;
    eprintln!("run:\n{out}");
    let expected = Counts {
        rewritten: before.len() - 1,
        unchanged: 1,
        gone: 0,
    };
    ensure!(
        outcome == Outcome::Migrated(expected),
        "run: {outcome:?}\n{out}"
    );
    ensure!(stored_versions(client, scope).await? == ["v2"]);

    let after = objects(client, scope, "v2").await?;
    ensure!(after.len() == before.len());
    for (key, old) in &before {
        let new = &after[key];
        ensure!(
            new.data["spec"] == old.data["spec"],
            "{key:?}: spec changed"
        );
        ensure!(new.labels() == old.labels() && new.annotations() == old.annotations());
        ensure!(
            new.metadata.generation == old.metadata.generation,
            "{key:?}: generation"
        );
        ensure!(new.uid() == old.uid());
        if *key == first {
            ensure!(new.resource_version() == partly[key].resource_version());
        } else {
            ensure!(
                new.resource_version() != old.resource_version(),
                "{key:?} not written"
            );
        }
    }
    let at_v2 = etcd_versions(cp, scope, before.keys().cloned())?;
    ensure!(
        at_v2.values().all(|v| *v == format!("{GROUP}/v2")),
        "after the run etcd holds {at_v2:?}"
    );

    // Idempotent: nothing left to do, nothing read or written.
    let mut out = String::new();
    ensure!(migrate_storage(client, &crd, false, &mut out).await? == Outcome::UpToDate);
    ensure!(out.contains("nothing to do"), "second run said:\n{out}");
    let again = objects(client, scope, "v2").await?;
    for (key, object) in &after {
        ensure!(again[key].resource_version() == object.resource_version());
    }
    Ok(())
}
