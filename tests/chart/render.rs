//! `helm lint` and `helm template` of each value set in `tests/chart/values`, compared with
//! `tests/chart/golden` (`UPDATE_GOLDEN=1` rewrites those after a deliberate change).

use anyhow::{Result, bail, ensure};
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
    let classes = Trial::test("render::provider_classes_wait_for_their_crd", || {
        classes_wait_for_their_crd().map_err(|e| chain(&e).into())
    });
    let dashboard = Trial::test(
        "render::grafana_dashboard_configmap_holds_the_dashboard",
        || dashboard_configmap().map_err(|e| chain(&e).into()),
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
        .chain([size, classes, dashboard])
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

/// The API a cluster serves once the chart's CRDs are installed, for what the chart renders only
/// then (Helm cannot create an object of a kind whose CRD the same release creates).
const CLASS_API: &str = "external-secrets.io/v1alpha1/ClusterProviderClass";

/// `helm template` of `set`, as a user's `helm install` would render it on a cluster that has
/// the chart's CRDs already (the first install of a fresh cluster leaves the
/// ClusterProviderClasses out: [`classes_wait_for_their_crd`]).
pub fn render(set: &str) -> Result<String> {
    render_with(set, &["--api-versions", CLASS_API])
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

/// The kinds and names of a render's objects.
fn objects(rendered: &str) -> Vec<(String, String)> {
    rendered
        .split("\n---\n")
        .filter_map(|document| {
            let value: serde_json::Value = serde_yaml::from_str(document).ok()?;
            Some((
                value["kind"].as_str()?.to_owned(),
                value["metadata"]["name"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// Vault out of process on a cluster without the chart's CRDs yet: everything but the
/// ClusterProviderClass, which Helm could not create in the release that creates its CRD; on a
/// cluster that serves the kind, the class too.
fn classes_wait_for_their_crd() -> Result<()> {
    let class = ("ClusterProviderClass".to_owned(), "vault".to_owned());
    let fresh = objects(&render_with("vault-out-of-process", &[])?);
    ensure!(
        !fresh.contains(&class),
        "the class is rendered before its CRD is served: {fresh:?}"
    );
    ensure!(
        fresh.contains(&(
            "Deployment".to_owned(),
            "es-external-secrets-provider-vault".to_owned()
        )),
        "no provider server Deployment in {fresh:?}"
    );
    let served = objects(&render("vault-out-of-process")?);
    ensure!(
        served.contains(&class),
        "no ClusterProviderClass vault once the API serves the kind: {served:?}"
    );
    Ok(())
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
