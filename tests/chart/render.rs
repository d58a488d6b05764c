//! `helm lint` and `helm template` of each value set in `tests/chart/values`, compared with
//! `tests/chart/golden` (`UPDATE_GOLDEN=1` rewrites those after a deliberate change).

use anyhow::{Context, Result, bail, ensure};
use libtest_mimic::Trial;

use crate::{CHART, chain, repo};

/// Release name and namespace of every render.
pub const RELEASE: &str = "es";
pub const NAMESPACE: &str = "external-secrets";

pub fn value_sets() -> Vec<String> {
    let mut sets: Vec<String> = std::fs::read_dir(repo("tests/chart/values"))
        .expect("tests/chart/values")
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            Some(name.strip_suffix(".yaml")?.to_owned())
        })
        .collect();
    sets.sort();
    sets
}

pub fn values_file(set: &str) -> String {
    repo(format!("tests/chart/values/{set}.yaml"))
        .to_string_lossy()
        .into_owned()
}

pub fn trials() -> Vec<Trial> {
    let size = Trial::test("render::store_crd_of_fake_and_vault_stays_small", || {
        store_crd_size().map_err(|e| chain(&e).into())
    });
    let classes = Trial::test("render::no_object_of_a_kind_the_release_installs", || {
        no_object_of_a_kind_the_release_installs().map_err(|e| chain(&e).into())
    });
    let dashboard = Trial::test(
        "render::grafana_dashboard_configmap_holds_the_dashboard",
        || dashboard_configmap().map_err(|e| chain(&e).into()),
    );
    let replicas = Trial::test(
        "render::provider_server_replicas_get_a_disruption_budget_and_spread",
        || provider_server_replicas().map_err(|e| chain(&e).into()),
    );
    value_sets()
        .into_iter()
        .flat_map(|set| {
            let lint_set = set.clone();
            [
                Trial::test(format!("render::lint::{set}"), move || {
                    lint(&lint_set).map_err(|e| chain(&e).into())
                }),
                Trial::test(format!("render::golden::{set}"), move || {
                    golden(&set).map_err(|e| chain(&e).into())
                }),
            ]
        })
        .chain([size, classes, dashboard, replicas])
        .collect()
}

/// With `grafanaDashboard.enabled` (the production set), one ConfigMap carries Grafana's sidecar
/// label and `files/dashboard.json` as it is; without (the defaults), none.
fn dashboard_configmap() -> Result<()> {
    let dashboards = |set: &str| -> Result<Vec<serde_json::Value>> {
        Ok(render(set)?
            .split("\n---\n")
            .filter_map(|d| serde_yaml::from_str::<serde_json::Value>(d).ok())
            .filter(|v| {
                v["kind"] == "ConfigMap" && !v["metadata"]["labels"]["grafana_dashboard"].is_null()
            })
            .collect())
    };
    ensure!(
        dashboards("default")?.is_empty(),
        "the defaults render a dashboard"
    );
    let found = dashboards("production")?;
    let [configmap] = found.as_slice() else {
        bail!(
            "the production set renders {} dashboard ConfigMaps",
            found.len()
        );
    };
    ensure!(
        configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
            && configmap["metadata"]["labels"]["team"] == "a",
        "labels: {}",
        configmap["metadata"]["labels"]
    );
    let shipped: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(repo(
        "charts/external-secrets/files/dashboard.json",
    ))?)?;
    let rendered: serde_json::Value = serde_json::from_str(
        configmap["data"]["external-secrets.json"]
            .as_str()
            .unwrap_or_default(),
    )?;
    ensure!(
        rendered == shipped,
        "the ConfigMap's dashboard is not files/dashboard.json"
    );
    Ok(())
}

/// ESO's all-providers SecretStore CRD is 690 KB; ours carries only the enabled providers.
const STORE_CRD_BUDGET: usize = 100 * 1024;

fn store_crd_size() -> Result<()> {
    let rendered = render("fake-vault")?;
    let mut sizes = Vec::new();
    for document in rendered.split("\n---\n") {
        let value: serde_json::Value = serde_yaml::from_str(document).unwrap_or_default();
        if value["kind"] == "CustomResourceDefinition" {
            sizes.push((
                value["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                document.len(),
            ));
        }
    }
    let total: usize = sizes.iter().map(|(_, n)| n).sum();
    eprintln!("CRDs of a Fake + Vault install: {total} bytes; {sizes:?}");
    for (name, bytes) in &sizes {
        if name.starts_with("secretstores.") && *bytes > STORE_CRD_BUDGET {
            bail!("{name} is {bytes} bytes with Fake and Vault, over {STORE_CRD_BUDGET}");
        }
    }
    if !sizes.iter().any(|(n, _)| n.starts_with("secretstores.")) {
        bail!("the render has no SecretStore CRD");
    }
    Ok(())
}

fn lint(set: &str) -> Result<()> {
    let chart = repo(CHART);
    let out = testenv::helm(
        None,
        &[
            "lint",
            "--strict",
            &chart.to_string_lossy(),
            "-f",
            &values_file(set),
        ],
    )?;
    if !out.contains("0 chart(s) failed") {
        bail!("helm lint: {out}");
    }
    Ok(())
}

/// `helm template` of `set`, as a user's `helm install` renders it.
pub fn render(set: &str) -> Result<String> {
    render_with(set, &[])
}

fn render_with(set: &str, extra: &[&str]) -> Result<String> {
    let chart = repo(CHART);
    let values = values_file(set);
    let mut args = vec![
        "template",
        RELEASE,
        chart.to_str().unwrap_or_default(),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        testenv::KUBERNETES_VERSION,
        "-f",
        values.as_str(),
    ];
    args.extend_from_slice(extra);
    testenv::helm(None, &args)
}

/// A provider server with `replicaCount > 1` gets a PodDisruptionBudget and a preferred
/// anti-affinity, one replica neither; each gets the headless Service its class dials.
fn provider_server_replicas() -> Result<()> {
    let vault = "es-external-secrets-provider-vault";
    for (count, spread) in [("1", false), ("3", true)] {
        let set = format!("providers.vault.outOfProcess.replicaCount={count}");
        let rendered = render_with("out-of-process", &["--set", &set])?;
        let named = |kind: &str, name: &str| {
            documents(&rendered).find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        };
        let budget = named("PodDisruptionBudget", vault);
        ensure!(
            budget.is_some() == spread,
            "replicaCount {count}: PodDisruptionBudget {budget:?}"
        );
        if let Some(budget) = budget {
            ensure!(budget["spec"]["maxUnavailable"] == 1, "{budget}");
        }
        let deployment = named("Deployment", vault).context("the Vault server's Deployment")?;
        let anti = &deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
        ensure!(
            anti.is_object() == spread,
            "replicaCount {count}: anti-affinity {anti}"
        );
        let headless = named("Service", &format!("{vault}-headless"))
            .context("the Vault server's headless Service")?;
        ensure!(headless["spec"]["clusterIP"] == "None", "{headless}");
    }
    Ok(())
}

/// Helm refuses an object of a kind whose CRD the same release creates ("ensure CRDs are
/// installed first"), so a first install would fail on one; the controller keeps the
/// ClusterProviderClasses (`--provider-class`) for that reason. Every value set, rendered as on a
/// cluster that already serves every kind of the chart's CRDs (where a template could be tempted
/// to render one).
fn no_object_of_a_kind_the_release_installs() -> Result<()> {
    let mut served = Vec::new();
    for crd in api::crds::all() {
        for version in &crd.spec.versions {
            served.push(format!(
                "{}/{}/{}",
                crd.spec.group, version.name, crd.spec.names.kind
            ));
        }
    }
    let mut args = Vec::new();
    for api in &served {
        args.extend(["--api-versions", api.as_str()]);
    }
    for set in value_sets() {
        let rendered = render_with(&set, &args)?;
        let installs: Vec<(String, String)> = documents(&rendered)
            .filter(|d| d["kind"] == "CustomResourceDefinition")
            .map(|d| {
                let group = d["spec"]["group"].as_str().unwrap_or_default();
                let kind = d["spec"]["names"]["kind"].as_str().unwrap_or_default();
                (group.to_owned(), kind.to_owned())
            })
            .collect();
        for document in documents(&rendered) {
            let api_version = document["apiVersion"].as_str().unwrap_or_default();
            let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
            let kind = document["kind"].as_str().unwrap_or_default();
            ensure!(
                !installs.contains(&(group.to_owned(), kind.to_owned())),
                "{set}: renders a {kind} ({}), whose CRD the same release installs",
                document["metadata"]["name"]
            );
        }
    }
    Ok(())
}

fn documents(rendered: &str) -> impl Iterator<Item = serde_json::Value> + '_ {
    rendered
        .split("\n---\n")
        .filter_map(|document| serde_yaml::from_str(document).ok())
}

/// The render with each CRD reduced to its name and, for the store CRDs, the inline providers
/// it offers: the CRDs' bodies are generated from the types (and checked by
/// `api/tests/crds_are_fresh.rs`); which of them a value set installs is what matters here.
fn summarized(rendered: &str) -> Result<String> {
    let mut out = Vec::new();
    for document in rendered.split("\n---\n") {
        let value: serde_json::Value = serde_yaml::from_str(document).unwrap_or_default();
        if value["kind"] != "CustomResourceDefinition" {
            out.push(document.to_owned());
            continue;
        }
        let name = value["metadata"]["name"].as_str().unwrap_or_default();
        let provider = &value["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["provider"];
        let mut line = format!("# CustomResourceDefinition {name}");
        if let Some(offered) = provider["properties"].as_object() {
            line += &format!(
                "\n#   inline providers: {}, rule: {}",
                offered.keys().cloned().collect::<Vec<_>>().join(", "),
                provider["x-kubernetes-validations"][0]["rule"]
            );
        }
        let service = &value["spec"]["conversion"]["webhook"]["clientConfig"]["service"];
        if !service.is_null() {
            line += &format!("\n#   conversion webhook: {service}");
        }
        line += &format!("\n#   metadata: {}", value["metadata"]);
        out.push(line);
    }
    Ok(out.join("\n---\n"))
}

fn golden(set: &str) -> Result<()> {
    let rendered = summarized(&render(set)?)?;
    let path = repo(format!("tests/chart/golden/{set}.yaml"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &rendered)?;
        return Ok(());
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    if expected != rendered {
        let first = expected
            .lines()
            .zip(rendered.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| expected.lines().count().min(rendered.lines().count()));
        bail!(
            "{} differs from the render at line {} (expected {:?}, rendered {:?}); after a deliberate change: UPDATE_GOLDEN=1 cargo test --test chart render::golden",
            path.display(),
            first + 1,
            expected.lines().nth(first).unwrap_or("<end>"),
            rendered.lines().nth(first).unwrap_or("<end>"),
        );
    }
    Ok(())
}
