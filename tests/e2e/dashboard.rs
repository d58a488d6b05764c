//! The chart's Grafana dashboard (`charts/external-secrets/files/dashboard.json`) against the
//! operator's real `/metrics`: every metric a query names is exported, with every label the
//! query matches or groups by. The trial first makes the operator produce a series of each
//! metric (a store, ExternalSecrets that sync and fail, a ClusterSecretStore, a PushSecret, a
//! conversion, a Vault login, a provider server reached and one that cannot be), since a label
//! shows only on a series.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, ensure};
use libtest_mimic::Trial;
use serde_json::Value;
use testenv::TokenOptions;

use crate::operator::{TIMEOUT, scrape};
use crate::{Env, trial};

pub const DASHBOARD: &str = "charts/external-secrets/files/dashboard.json";

/// Labels Prometheus adds to every series it scrapes, which the dashboard may use too.
const TARGET_LABELS: [&str; 2] = ["job", "instance"];

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial(
            "dashboard::every_query_reads_exported_metrics_and_labels",
            env,
            every_query,
        ),
        trial(
            "dashboard::workqueue_series_count_every_reconcile_and_empty_when_idle",
            env,
            workqueue,
        ),
        Trial::test("dashboard::the_query_reader_finds_names_and_labels", || {
            reader().map_err(|e| crate::chain(&e).into())
        }),
    ]
}

/// What one PromQL expression reads: metric names, and labels it matches or groups by.
#[derive(Debug, Default, PartialEq)]
pub struct Reads {
    pub metrics: BTreeSet<String>,
    pub labels: BTreeSet<String>,
}

/// Clauses followed by a list of labels.
const GROUPING: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Other words that are never metric names: aggregations (which may be followed by `by (...)`
/// rather than their parenthesis) and operators.
const KEYWORDS: [&str; 18] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
];

/// The metric names and labels of a PromQL expression (as the dashboard writes them: selectors,
/// functions, aggregations with `by`/`without`, binary operators, ranges and numbers), or of a
/// Grafana `label_values(metric, label)` variable query.
pub fn reads(expr: &str) -> Result<Reads> {
    let mut reads = Reads::default();
    if let Some(args) = expr
        .trim()
        .strip_prefix("label_values(")
        .and_then(|r| r.strip_suffix(')'))
    {
        let (metric, label) = args
            .split_once(',')
            .with_context(|| format!("label_values without a label: {expr}"))?;
        reads.extend(&reads_of_selector(metric.trim())?);
        reads.labels.insert(label.trim().to_owned());
        return Ok(reads);
    }
    reads.extend(&reads_of_selector(expr)?);
    Ok(reads)
}

impl Reads {
    fn extend(&mut self, other: &Reads) {
        self.metrics.extend(other.metrics.iter().cloned());
        self.labels.extend(other.labels.iter().cloned());
    }
}

fn reads_of_selector(expr: &str) -> Result<Reads> {
    let chars: Vec<char> = expr.chars().collect();
    let mut reads = Reads::default();
    let ident_start = |c: char| c.is_ascii_alphabetic() || c == '_' || c == ':';
    let ident_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let skip_space = |mut i: usize| {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        i
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' {
            i = skip_string(&chars, i)?;
        } else if c == '[' {
            // A range or subquery: durations and Grafana variables, no names.
            i = chars[i..]
                .iter()
                .position(|&c| c == ']')
                .map(|p| i + p + 1)
                .with_context(|| format!("unclosed [ in {expr}"))?;
        } else if c == '$' {
            // A Grafana variable outside a string ($__rate_interval and such).
            i += 1;
            while i < chars.len() && ident_char(chars[i]) {
                i += 1;
            }
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // A number, with an exponent such as 1e9.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if ident_start(c) {
            let start = i;
            while i < chars.len() && ident_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = skip_space(i);
            let follows = chars.get(next).copied();
            if GROUPING.contains(&word.as_str()) {
                if follows == Some('(') {
                    let close = chars[next..]
                        .iter()
                        .position(|&c| c == ')')
                        .map(|p| next + p)
                        .with_context(|| format!("unclosed {word}( in {expr}"))?;
                    let list: String = chars[next + 1..close].iter().collect();
                    reads.labels.extend(
                        list.split(',')
                            .map(str::trim)
                            .filter(|l| !l.is_empty())
                            .map(str::to_owned),
                    );
                    i = close + 1;
                }
            } else if KEYWORDS.contains(&word.as_str()) || follows == Some('(') {
                // An operator, or a function or aggregation: what follows is read on.
            } else {
                reads.metrics.insert(word);
                if follows == Some('{') {
                    let (labels, end) = matchers(&chars, next)?;
                    reads.labels.extend(labels);
                    i = end;
                }
            }
        } else if c == '{' {
            // A selector without a metric name.
            let (labels, end) = matchers(&chars, i)?;
            reads.labels.extend(labels);
            i = end;
        } else {
            i += 1;
        }
    }
    Ok(reads)
}

/// The end of the string starting at `i` (past its closing quote).
fn skip_string(chars: &[char], i: usize) -> Result<usize> {
    let quote = chars[i];
    let mut j = i + 1;
    while j < chars.len() {
        match chars[j] {
            '\\' => j += 2,
            c if c == quote => return Ok(j + 1),
            _ => j += 1,
        }
    }
    Err(anyhow!(
        "unclosed string in {}",
        chars.iter().collect::<String>()
    ))
}

/// The label names of `{name op "value", ...}` starting at `open`, and where it ends.
fn matchers(chars: &[char], open: usize) -> Result<(Vec<String>, usize)> {
    let mut labels = Vec::new();
    let mut i = open + 1;
    let mut name = String::new();
    while i < chars.len() {
        match chars[i] {
            '}' => return Ok((labels, i + 1)),
            '"' | '\'' => i = skip_string(chars, i)?,
            '=' | '!' | '~' => {
                if !name.is_empty() {
                    labels.push(std::mem::take(&mut name));
                }
                i += 1;
            }
            ',' => {
                name.clear();
                i += 1;
            }
            c if c.is_whitespace() => i += 1,
            c => {
                name.push(c);
                i += 1;
            }
        }
    }
    Err(anyhow!(
        "unclosed {{ in {}",
        chars.iter().collect::<String>()
    ))
}

/// Every query of the dashboard: panels' targets and the variables' queries.
pub fn queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    while let Some(panel) = panels.pop() {
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                let title = panel["title"].as_str().unwrap_or_default();
                out.push((format!("panel {title:?}"), expr.to_owned()));
            }
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let query = variable["query"]["query"]
            .as_str()
            .or_else(|| variable["query"].as_str());
        if variable["type"] == "query"
            && let Some(query) = query
        {
            let name = variable["name"].as_str().unwrap_or_default();
            out.push((format!("variable ${name}"), query.to_owned()));
        }
    }
    out
}

/// Series names in a `/metrics` text and the labels seen on each; a family without a series
/// yet is listed under the names its samples will have, with no labels.
pub fn exported(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut names: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let samples: Vec<String> = match kind {
                "counter" => vec![format!("{name}_total")],
                "histogram" => ["_bucket", "_sum", "_count"]
                    .iter()
                    .map(|s| format!("{name}{s}"))
                    .collect(),
                _ => vec![name.to_owned()],
            };
            for sample in samples {
                names.entry(sample).or_default();
            }
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let labels = names.entry(line[..name_end].to_owned()).or_default();
            if line[name_end..].starts_with('{') {
                let chars: Vec<char> = line[name_end..].chars().collect();
                if let Ok((found, _)) = matchers(&chars, 0) {
                    labels.extend(found);
                }
            }
        }
    }
    names
}

/// What the dashboard reads that `text` does not export, one a line.
pub fn missing(dashboard: &Value, text: &str) -> Result<Vec<String>> {
    let exported = exported(text);
    let mut missing = Vec::new();
    for (where_, expr) in queries(dashboard) {
        let reads = reads(&expr).with_context(|| format!("{where_}: {expr}"))?;
        ensure!(
            !reads.metrics.is_empty(),
            "{where_}: no metric found in {expr}"
        );
        for metric in &reads.metrics {
            let Some(labels) = exported.get(metric) else {
                missing.push(format!("{where_}: metric {metric} is not exported"));
                continue;
            };
            for label in &reads.labels {
                if !labels.contains(label) && !TARGET_LABELS.contains(&label.as_str()) {
                    missing.push(format!(
                        "{where_}: no series of {metric} has label {label} (seen: {labels:?})"
                    ));
                }
            }
        }
    }
    Ok(missing)
}

/// The store, ExternalSecrets, PushSecret and provider classes that make a series of every
/// metric the dashboard reads.
async fn produce_series(env: &Env) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "dashboard").await?;
    let store = "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {name: fake}\nspec:\n  provider:\n    fake:\n      data: [{key: user, value: alice}]\n";
    testenv::apply_yaml_in(
        &client,
        &ns,
        &format!(
            "{store}---\napiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: synced}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{name: fake}}\n  data: [{{secretKey: user, remoteRef: {{key: user}}}}]\n---\napiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: failing}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{name: fake}}\n  data: [{{secretKey: x, remoteRef: {{key: no-such-key}}}}]\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: src}}\nstringData: {{token: t}}\n---\napiVersion: external-secrets.io/v1alpha1\nkind: PushSecret\nmetadata: {{name: push}}\nspec:\n  refreshInterval: 1h\n  secretStoreRefs: [{{name: fake, kind: SecretStore}}]\n  selector: {{secret: {{name: src}}}}\n  data: [{{match: {{secretKey: token, remoteRef: {{remoteKey: pushed}}}}}}]\n---\napiVersion: external-secrets.io/v1\nkind: ClusterSecretStore\nmetadata: {{name: {ns}}}\nspec:\n  provider:\n    fake:\n      data: [{{key: user, value: alice}}]\n"
        ),
        true,
    )
    .await?;
    crate::sync::wait_secret(
        &client,
        &ns,
        "synced",
        &crate::sync::bytes(&[("user", "alice")]),
    )
    .await?;
    // A changed store evicts its client.
    testenv::apply_yaml_in(&client, &ns, &store.replace("alice", "bob"), true).await?;

    // A conversion: a Vault object written at v1beta1, stored at v1alpha1.
    testenv::apply_yaml_in(
        &client,
        &ns,
        "apiVersion: providers.external-secrets.io/v1beta1\nkind: Vault\nmetadata: {name: converted}\nspec:\n  server: https://vault.example:8200\n  kv: {mountPath: secret, version: 2}\n  auth: {tokenSecretRef: {name: vault-token, key: token}}\n",
        true,
    )
    .await?;

    // A Vault login.
    let vault = env.vault()?;
    let role_id =
        crate::vault::approle_for(vault, &client, &ns, TokenOptions::policies(&[ns.as_str()]))
            .await?;
    testenv::apply_yaml_in(
        &client,
        &ns,
        &crate::vault::approle_store(vault, "vault", &role_id, "v2"),
        true,
    )
    .await?;

    // A provider server reached, and a class whose address nothing listens on.
    let server = crate::out_of_process::start_server(env, &["Fake"])?;
    crate::out_of_process::provider_class_at(
        &client,
        &ns,
        "served",
        &server.address,
        &server.pki(),
    )
    .await?;
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    crate::out_of_process::provider_class_at(
        &client,
        &ns,
        "nobody",
        &closed.to_string(),
        &server.pki(),
    )
    .await?;
    for (name, class) in [("served", "served"), ("nobody", "nobody")] {
        testenv::apply_yaml_in(
            &client,
            &ns,
            &format!(
                "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {{name: {name}}}\nspec:\n  runtimeRef: {{name: {class}}}\n  providerRef: {{apiVersion: providers.external-secrets.io/v1alpha1, kind: Fake, name: fake}}\n"
            ),
            true,
        )
        .await?;
    }
    // The server stays up until the operator has connected to it.
    let metrics = env.metrics_addr();
    testenv::wait_for(TIMEOUT, "a connection to the provider server", || async {
        let text = scrape(metrics).await?;
        if text.contains(&format!("address=\"{}\"", server.address)) {
            Ok(())
        } else {
            Err(anyhow!("no provider_connections_opened series for it yet"))
        }
    })
    .await?;
    Ok(())
}

async fn every_query(env: Arc<Env>) -> Result<()> {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(Env::path(DASHBOARD)).context("reading the dashboard")?,
    )?;
    let queries = queries(&dashboard);
    ensure!(queries.len() >= 20, "the dashboard's queries: {queries:?}");
    produce_series(&env).await?;
    let metrics = env.metrics_addr();
    let text = testenv::wait_for(
        TIMEOUT,
        "a series of every metric and label the dashboard reads",
        || async {
            let text = scrape(metrics).await?;
            let missing = missing(&dashboard, &text)?;
            if missing.is_empty() {
                Ok(text)
            } else {
                Err(anyhow!("{}", missing.join("\n")))
            }
        },
    )
    .await?;

    // The check fails on a renamed metric or label (so a rename in the operator fails it too).
    let renamed_metric: Value = serde_json::from_str(&serde_json::to_string(&dashboard)?.replace(
        "externalsecret_sync_calls_total",
        "externalsecret_sync_call_total",
    ))?;
    let found = missing(&renamed_metric, &text)?;
    ensure!(
        found
            .iter()
            .any(|m| m.contains("externalsecret_sync_call_total is not exported")),
        "a renamed metric went unnoticed: {found:?}"
    );
    let renamed_label: Value = serde_json::from_str(
        &serde_json::to_string(&dashboard)?.replace("by (provider, call)", "by (provider, method)"),
    )?;
    let found = missing(&renamed_label, &text)?;
    ensure!(
        found.iter().any(|m| m.contains("has label method")),
        "a renamed label went unnoticed: {found:?}"
    );
    Ok(())
}

/// The queue series of the ExternalSecret controller follow real reconciles: 20 new
/// ExternalSecrets are 20 adds, 20 waits and 20 reconciles at least (other trials share the
/// operator), and once they are synced nothing of theirs stays due.
async fn workqueue(env: Arc<Env>) -> Result<()> {
    const N: usize = 20;
    let client = env.client().await;
    let metrics = env.metrics_addr();
    let series =
        |name: &str| format!("{name}{{name=\"externalsecret\",controller=\"externalsecret\"}}");
    let read = |text: &str, name: &str| crate::operator::sample(text, &series(name)).unwrap_or(0.0);
    let counts = |text: &str| {
        [
            "workqueue_adds_total",
            "workqueue_queue_duration_seconds_count",
            "workqueue_work_duration_seconds_count",
        ]
        .map(|name| read(text, name))
    };
    let before = counts(&scrape(metrics).await?);

    let ns = testenv::create_namespace(&client, "workqueue").await?;
    let mut manifests = String::from(
        "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {name: fake}\nspec:\n  provider:\n    fake:\n      data: [{key: user, value: alice}]\n",
    );
    for i in 0..N {
        manifests.push_str(&format!(
            "---\napiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: es-{i}}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{name: fake}}\n  data: [{{secretKey: user, remoteRef: {{key: user}}}}]\n"
        ));
    }
    testenv::apply_yaml_in(&client, &ns, &manifests, true).await?;
    for i in 0..N {
        let want = crate::sync::bytes(&[("user", "alice")]);
        crate::sync::wait_secret(&client, &ns, &format!("es-{i}"), &want).await?;
    }

    let after = counts(&scrape(metrics).await?);
    for (i, name) in ["adds", "waits", "reconciles"].into_iter().enumerate() {
        ensure!(
            after[i] - before[i] >= N as f64,
            "{name} of the externalsecret queue grew by {} for {N} new ExternalSecrets",
            after[i] - before[i]
        );
    }
    testenv::wait_for(TIMEOUT, "an empty externalsecret queue", || async {
        let text = scrape(metrics).await?;
        let depth = crate::operator::sample(&text, &series("workqueue_depth"))
            .ok_or_else(|| anyhow!("no workqueue_depth series"))?;
        ensure!(depth == 0.0, "depth {depth}");
        Ok(())
    })
    .await?;
    Ok(())
}

/// The reader on expressions of the shapes the dashboard uses.
fn reader() -> Result<()> {
    let cases: [(&str, &[&str], &[&str]); 5] = [
        (
            r#"sum by (namespace, condition) (externalsecret_status_condition{condition="Ready",status!="True",namespace=~"$namespace"} == 1)"#,
            &["externalsecret_status_condition"],
            &["condition", "namespace", "status"],
        ),
        (
            "quantile(0.99, externalsecret_reconcile_duration{namespace=~\"a,b\"}) / 1e9",
            &["externalsecret_reconcile_duration"],
            &["namespace"],
        ),
        (
            "sum by (method) (increase(vault_logins_total[$__rate_interval]))",
            &["vault_logins_total"],
            &["method"],
        ),
        (
            "rate(a_total[5m]) / on (pod) group_left (node) b",
            &["a_total", "b"],
            &["node", "pod"],
        ),
        (
            "label_values(externalsecret_status_condition, namespace)",
            &["externalsecret_status_condition"],
            &["namespace"],
        ),
    ];
    for (expr, metrics, labels) in cases {
        let got = reads(expr)?;
        let want = Reads {
            metrics: metrics.iter().map(|m| m.to_string()).collect(),
            labels: labels.iter().map(|l| l.to_string()).collect(),
        };
        ensure!(got == want, "{expr}: read {got:?}, expected {want:?}");
    }
    let text = "# TYPE a counter\na_total{x=\"1\",y=\"a,b}\"} 3\n# TYPE h histogram\n# TYPE g gauge\ng 1\n";
    let seen = exported(text);
    ensure!(
        seen.get("a_total")
            .map(|l| l.iter().cloned().collect::<Vec<_>>())
            == Some(vec!["x".into(), "y".into()])
            && seen.contains_key("h_bucket")
            && seen.get("g").is_some_and(BTreeSet::is_empty),
        "exported: {seen:?}"
    );
    Ok(())
}
