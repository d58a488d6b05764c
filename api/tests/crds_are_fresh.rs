//! `crds/` and the chart's CRD templates are generated from the types; this fails when someone
//! changed a type and did not run `cargo run -- crds`, or edited a generated file by hand.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// The `.yaml`/`.tpl` files of `dir` named relative to `base`, keeping only those `keep` wants.
fn committed(base: &Path, dir: &Path, keep: impl Fn(&str) -> bool) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path
            .strip_prefix(base)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if path.is_file() && keep(&name) {
            files.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
    files
}

fn stale(
    generated: &BTreeMap<String, String>,
    committed: &BTreeMap<String, String>,
) -> Vec<String> {
    generated
        .iter()
        .filter(|(name, text)| committed.get(*name) != Some(*text))
        .map(|(name, _)| name.clone())
        .chain(
            committed
                .keys()
                .filter(|n| !generated.contains_key(*n))
                .cloned(),
        )
        .collect()
}

const REGENERATE: &str = "regenerate with: rm crds/*.yaml charts/external-secrets/templates/crds/*.yaml && cargo run -- crds";

#[test]
fn committed_crds_match_the_types() {
    let dir = repo("crds");
    let generated = external_secrets_api::crds::files()
        .unwrap()
        .into_iter()
        .collect();
    let committed = committed(&dir, &dir, |n| n.ends_with(".yaml"));
    let stale = stale(&generated, &committed);
    assert!(stale.is_empty(), "crds/ is stale ({stale:?}); {REGENERATE}");
}

#[test]
fn committed_chart_templates_match_the_types() {
    let chart = repo("charts/external-secrets");
    let generated: BTreeMap<String, String> = external_secrets_api::chart::files()
        .unwrap()
        .into_iter()
        .collect();
    let mut committed = committed(&chart, &chart.join("templates/crds"), |_| true);
    committed.extend(committed_helper(&chart));
    let stale = stale(&generated, &committed);
    assert!(
        stale.is_empty(),
        "the chart's generated templates are stale ({stale:?}); {REGENERATE}"
    );
}

fn committed_helper(chart: &Path) -> BTreeMap<String, String> {
    let name = external_secrets_api::chart::PROVIDERS_HELPER;
    std::fs::read_to_string(chart.join(name))
        .map(|text| BTreeMap::from([(name.to_owned(), text)]))
        .unwrap_or_default()
}

/// values.yaml and values.schema.json offer exactly the provider kinds the API defines.
#[test]
fn chart_values_list_every_provider() {
    let chart = repo("charts/external-secrets");
    let keys: Vec<&str> = external_secrets_api::providers::ALL
        .iter()
        .map(|d| d.store_key)
        .collect();
    let values: serde_json::Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart.join("values.yaml")).unwrap()).unwrap();
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(chart.join("values.schema.json")).unwrap())
            .unwrap();
    let listed = |v: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = v
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        k.sort();
        k
    };
    let mut expected: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    expected.sort();
    assert_eq!(
        listed(&values["providers"]),
        expected,
        "values.yaml providers"
    );
    assert_eq!(
        listed(&schema["properties"]["providers"]["properties"]),
        expected,
        "values.schema.json providers"
    );
}
