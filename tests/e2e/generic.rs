//! Generic targets (`spec.target.manifest`): ConfigMaps and custom resources written from ESO's
//! documented manifests, hand edits reverted, Merge over what others wrote, and the switch that
//! keeps the feature off.

use std::sync::Arc;

use anyhow::{Result, anyhow, ensure};
use api::external_secret::ExternalSecret;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use libtest_mimic::Trial;
use serde_json::{Value, json};

use crate::operator::{TIMEOUT, wait_ready};
use crate::{Env, trial};

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial("generic::configmaps_as_eso_documents_them", env, configmaps),
        trial(
            "generic::custom_resources_with_paths_and_merge",
            env,
            custom_resources,
        ),
        trial("generic::off_unless_the_operator_allows_it", env, disabled),
        trial(
            "generic::a_refused_value_stays_out_of_status_and_events",
            env,
            refused_value,
        ),
    ]
}

const STORE: &str = r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: vault-backend}
spec:
  provider:
    fake:
      data:
      - {key: config/database/host, value: db.internal}
      - {key: config/api/endpoint, value: "https://api.internal"}
      - {key: features/new-ui, value: "true"}
      - {key: features/beta-api, value: "false"}
      - {key: database/host, value: db.internal}
      - {key: database/port, value: "5432"}
      - {key: database/username, value: app}
      - {key: database/password, value: s3cret}
      - {key: database/hostname, value: db.internal}
      - {key: database/name, value: app}
      - key: argocd/applications/my-app
        value: '{"project": "default", "repoURL": "https://git.example.com/app.git"}'
"#;

/// ESO's ConfigMap examples (basic, templated, with metadata), as documented.
async fn configmaps(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "generic-cm").await?;
    testenv::apply_yaml_in(&client, &ns, STORE, true).await?;
    let manifests = [
        include_str!("../eso-docs/manifest-basic-configmap.yaml"),
        include_str!("../eso-docs/manifest-labeled-configmap.yaml"),
        include_str!("../eso-docs/manifest-templated-configmap.yaml"),
    ]
    .join("---\n");
    testenv::apply_yaml_in(&client, &ns, &manifests, true).await?;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let basic = json!({"database-host": "db.internal", "api-endpoint": "https://api.internal"});
    let cm = wait_data(&config_maps, "app-config", &basic).await?;
    ensure!(
        cm.labels().get("reconcile.external-secrets.io/managed") == Some(&"true".to_owned()),
        "labels: {:?}",
        cm.labels()
    );
    ensure!(
        cm.annotations()
            .contains_key("reconcile.external-secrets.io/data-hash"),
        "annotations: {:?}",
        cm.annotations()
    );
    ensure!(
        cm.owner_references()
            .iter()
            .any(|o| o.kind == "ExternalSecret" && o.name == "application-config"),
        "owners: {:?}",
        cm.owner_references()
    );
    let es: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    wait_ready(
        "ExternalSecret application-config",
        "True",
        "ResourceSynced",
        || async { Ok(serde_json::to_value(es.get("application-config").await?)?) },
    )
    .await?;
    let labeled = wait_data(
        &config_maps,
        "labeled-configmap",
        &json!({"config.json": "{\n  \"feature_flags\": {\n    \"new_ui\": true,\n    \"beta_api\": false\n  }\n}\n"}),
    )
    .await?;
    ensure!(
        labeled.labels().get("app") == Some(&"myapp".to_owned())
            && labeled.labels().get("environment") == Some(&"production".to_owned())
            && labeled.annotations().get("description")
                == Some(&"Managed by External Secrets Operator".to_owned()),
        "metadata: {:?}",
        labeled.metadata
    );

    wait_data(
        &config_maps,
        "database-config",
        &json!({"database.yaml": "host: db.internal\nport: 5432\ndatabase: app\nconnection_string: \"postgresql://user:s3cret@db.internal:5432/app\"\n"}),
    )
    .await?;

    // Drift detection: a hand edit is reverted without waiting for the refresh interval.
    config_maps
        .patch(
            "app-config",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"database-host": "evil.example.com"}})),
        )
        .await?;
    wait_data(&config_maps, "app-config", &basic).await?;
    Ok(())
}

/// Ours beside the documented ones: no template, and CreateOrMerge over fields of others.
const OURS: &str = r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata:
  name: plain
spec:
  secretStoreRef: {name: vault-backend}
  target:
    name: plain
    manifest: {apiVersion: config.example.com/v1, kind: AppConfig}
  data:
  - secretKey: host
    remoteRef: {key: database/host}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata:
  name: merger
spec:
  secretStoreRef: {name: vault-backend}
  target:
    name: shared
    creationPolicy: CreateOrMerge
    manifest: {apiVersion: config.example.com/v1, kind: AppConfig}
    template:
      templateFrom:
      - literal: 'host: {{ .host }}'
        target: spec.database
  data:
  - secretKey: host
    remoteRef: {key: database/host}
"#;

/// A namespaced kind `kind` (plural `plural`) in `group`, version v1alpha1 or v1, whose spec
/// holds anything: what a generic target needs of a custom resource.
struct Kind {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
}

const APP_CONFIG: Kind = Kind {
    group: "config.example.com",
    version: "v1",
    kind: "AppConfig",
    plural: "appconfigs",
};
const APPLICATION: Kind = Kind {
    group: "argoproj.io",
    version: "v1alpha1",
    kind: "Application",
    plural: "applications",
};

impl Kind {
    async fn install(&self, client: &Client) -> Result<()> {
        let Kind {
            group,
            version,
            kind,
            plural,
        } = self;
        let crd = format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: {plural}.{group}}}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{kind: {kind}, plural: {plural}}}\n  versions:\n  - name: {version}\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n"
        );
        testenv::apply_yaml(client, &crd, true).await?;
        testenv::wait_for_crd_established(client, &format!("{plural}.{group}"), TIMEOUT).await
    }

    fn api(&self, client: &Client, ns: &str) -> Api<DynamicObject> {
        let resource = ApiResource {
            group: self.group.into(),
            version: self.version.into(),
            api_version: format!("{}/{}", self.group, self.version),
            kind: self.kind.into(),
            plural: self.plural.into(),
        };
        Api::namespaced_with(client.clone(), ns, &resource)
    }
}

/// ESO's "Advanced Path Targeting" and Argo CD Application examples, a custom resource without
/// a template (values under `spec.data`), and CreateOrMerge into one that holds fields of its own.
async fn custom_resources(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    APP_CONFIG.install(&client).await?;
    APPLICATION.install(&client).await?;
    let ns = testenv::create_namespace(&client, "generic-cr").await?;
    testenv::apply_yaml_in(&client, &ns, STORE, true).await?;
    let theirs = "apiVersion: config.example.com/v1\nkind: AppConfig\nmetadata: {name: shared}\nspec: {replicas: 3, database: {pool: 10}}\n";
    testenv::apply_yaml_in(&client, &ns, theirs, true).await?;
    let manifests = format!(
        "{}---\n{}---\n{OURS}",
        include_str!("../eso-docs/manifest-advanced-path.yaml"),
        include_str!("../eso-docs/manifest-argocd-app.yaml"),
    );
    testenv::apply_yaml_in(&client, &ns, &manifests, true).await?;
    let api = APP_CONFIG.api(&client, &ns);
    wait_spec(
        &api,
        "app-settings",
        &json!({
            "database": {"host": "db.internal", "port": 5432,
                         "credentials": {"username": "app", "password": "s3cret"}},
            "logging": {"level": "info", "format": "json"},
        }),
    )
    .await?;
    // Without a template, ESO puts the values under spec.data, an Argo CD Application too.
    wait_spec(
        &APPLICATION.api(&client, &ns),
        "my-application",
        &json!({"data": {"project": "default", "repoURL": "https://git.example.com/app.git"}}),
    )
    .await?;
    wait_spec(&api, "plain", &json!({"data": {"host": "db.internal"}})).await?;
    let shared = wait_spec(
        &api,
        "shared",
        &json!({"replicas": 3, "database": {"pool": 10, "host": "db.internal"}}),
    )
    .await?;
    ensure!(
        shared.owner_references().is_empty(),
        "CreateOrMerge took ownership: {:?}",
        shared.owner_references()
    );

    // In sync: a further reconcile (forced by a label on the ExternalSecret) writes nothing.
    let before = api.get("app-settings").await?.resource_version();
    let es: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    es.patch(
        "custom-resource-config",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
    )
    .await?;
    testenv::wait_for(TIMEOUT, "the label to be synced", || async {
        let status = serde_json::to_value(es.get("custom-resource-config").await?)?;
        let version = status["status"]["syncedResourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let current = es.get("custom-resource-config").await?;
        let want = controllers::externalsecret::desired::synced_resource_version(&current);
        if version == want {
            Ok(())
        } else {
            Err(anyhow!("synced {version}, want {want}"))
        }
    })
    .await?;
    let after = api.get("app-settings").await?.resource_version();
    ensure!(before == after, "an unchanged target was rewritten");
    Ok(())
}

/// A target whose schema refuses the rendered value: the API server quotes the value in its
/// answer, and the condition and the event repeat the field and why, not the value.
async fn refused_value(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: pins.config.example.com}\nspec:\n  group: config.example.com\n  scope: Namespaced\n  names: {kind: Pin, plural: pins}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            properties:\n              pin: {type: string, pattern: '^[0-9]+$'}\n";
    testenv::apply_yaml(&client, crd, true).await?;
    testenv::wait_for_crd_established(&client, "pins.config.example.com", TIMEOUT).await?;
    let ns = testenv::create_namespace(&client, "generic-refused").await?;
    testenv::apply_yaml_in(&client, &ns, STORE, true).await?;
    let es = "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {name: pin}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {name: vault-backend}\n  target:\n    manifest: {apiVersion: config.example.com/v1, kind: Pin}\n    template:\n      templateFrom:\n      - literal: 'pin: {{ .password }}'\n        target: spec\n  data:\n  - secretKey: password\n    remoteRef: {key: database/password}\n";
    testenv::apply_yaml_in(&client, &ns, es, true).await?;
    let api: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    // The store turns Ready meanwhile; until then the condition says that.
    let message = testenv::wait_for(TIMEOUT, "the target to be refused", || async {
        let es = serde_json::to_value(api.get("pin").await?)?;
        let ready = crate::operator::ready(&es);
        ready
            .as_ref()
            .and_then(|c| c.message.clone())
            .filter(|m| m.contains("is invalid"))
            .ok_or_else(|| anyhow!("Ready condition is {ready:?}"))
    })
    .await?;
    ensure!(
        message.contains("spec.pin: Invalid value: <redacted>: spec.pin in body should match")
            && !message.contains("s3cret"),
        "condition: {message}"
    );
    // An earlier UpdateFailed may say the store was not Ready yet.
    let note = testenv::wait_for(TIMEOUT, "the refusal's UpdateFailed event", || async {
        crate::operator::events(&client, &ns, "pin")
            .await?
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("UpdateFailed"))
            .filter_map(|e| e.message)
            .find(|m| m.contains("is invalid"))
            .ok_or_else(|| anyhow!("no UpdateFailed event of the refusal yet"))
    })
    .await?;
    ensure!(
        note.contains("Invalid value: <redacted>") && !note.contains("s3cret"),
        "event: {note}"
    );
    Ok(())
}

/// An operator without `--unsafe-allow-generic-targets` refuses the target by name.
async fn disabled(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "generic-off").await?;
    let class = crate::operator::start_scoped(&env, &ns)?;
    let manifests = format!(
        "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {{name: classy}}\nspec:\n  controller: {class}\n  provider: {{fake: {{data: [{{key: k, value: v}}]}}}}\n---\napiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: generic, finalizers: [externalsecrets.external-secrets.io/externalsecret-cleanup]}}\nspec:\n  secretStoreRef: {{name: classy}}\n  target: {{manifest: {{apiVersion: v1, kind: ConfigMap}}}}\n  data: [{{secretKey: k, remoteRef: {{key: k}}}}]\n"
    );
    testenv::apply_yaml_in(&client, &ns, &manifests, true).await?;
    let es: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let status = wait_ready(
        "ExternalSecret generic",
        "False",
        "ResourceSyncedError",
        || async { Ok(serde_json::to_value(es.get("generic").await?)?) },
    )
    .await?;
    let message = status["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default();
    ensure!(
        message.contains("spec.target.manifest")
            && message.contains("--unsafe-allow-generic-targets"),
        "message: {message}"
    );
    ensure!(
        Api::<ConfigMap>::namespaced(client.clone(), &ns)
            .get_opt("generic")
            .await?
            .is_none(),
        "a ConfigMap was written"
    );
    // Left by Go ESO, its finalizer does not keep the ExternalSecret: there is nothing to
    // clean up.
    es.delete("generic", &Default::default()).await?;
    testenv::wait_for(TIMEOUT, "the ExternalSecret to be deleted", || async {
        match es.get_opt("generic").await? {
            None => Ok(()),
            Some(_) => Err(anyhow!("still there")),
        }
    })
    .await
}

async fn wait_data(api: &Api<ConfigMap>, name: &str, want: &Value) -> Result<ConfigMap> {
    testenv::wait_for(
        TIMEOUT,
        &format!("ConfigMap {name} to hold the expected data"),
        || async {
            let cm = api.get(name).await?;
            let have = serde_json::to_value(&cm.data)?;
            if &have == want {
                Ok(cm)
            } else {
                Err(anyhow!(
                    "holds keys {:?}",
                    cm.data.as_ref().map(|d| d.keys().collect::<Vec<_>>())
                ))
            }
        },
    )
    .await
}

async fn wait_spec(api: &Api<DynamicObject>, name: &str, want: &Value) -> Result<DynamicObject> {
    testenv::wait_for(
        TIMEOUT,
        &format!("AppConfig {name} to hold the expected spec"),
        || async {
            let object = api.get(name).await?;
            if &object.data["spec"] == want {
                Ok(object)
            } else {
                Err(anyhow!(
                    "spec has fields {:?}",
                    object.data["spec"]
                        .as_object()
                        .map(|m| m.keys().collect::<Vec<_>>())
                ))
            }
        },
    )
    .await
}
