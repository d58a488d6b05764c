//! ESO v2.9's documented ExternalSecret, PushSecret, ClusterExternalSecret and ClusterPushSecret
//! manifests, kept in `tests/eso-docs/` as the docs show them (the first line of each names its
//! page and says what, if anything, had to be filled in), on Fake stores holding data that makes
//! them meaningful. A cluster object selects the trial's namespace only. Each ExternalSecret
//! becomes Ready and writes exactly the Secret ESO's documentation says ESO writes; each
//! PushSecret becomes Ready and its store then holds exactly what the documentation says it
//! pushes.
//!
//! The expectations follow the documentation, written for real providers, where ESO's own Fake
//! provider departs from it: ESO's Fake converts found keys (`/` to `_`) before `rewrite` runs, so
//! `rewrite` sources written with `/` do not match there, and stores an empty value for a push of
//! the whole Secret, which the docs say is pushed as one JSON object.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, ensure};
use api::cluster_secrets::ClusterExternalSecret;
use api::external_secret::ExternalSecret;
use api::push_secret::PushSecret;
use libtest_mimic::Trial;
use serde_json::{Value, json};

use crate::operator::wait_ready;
use crate::sync::{bytes, value, wait_secret};
use crate::{Env, trial};

/// A documented manifest and what it should do.
struct Doc {
    /// The file's stem in `tests/eso-docs/`; names the trial.
    name: &'static str,
    yaml: &'static str,
    store: Store,
    /// Objects the manifest reads that its page leaves out (source Secrets, template ConfigMaps).
    given: &'static str,
    expect: Expect,
}

/// The Fake stores the manifest reads through.
enum Store {
    /// Every store the manifest names, as a Fake store holding these keys and values.
    Fake(&'static [(&'static str, &'static str)]),
    /// Store manifests applied as they are.
    Manifest(&'static str),
}

enum Expect {
    /// The ExternalSecret's target: its type and all of its data.
    Secret {
        type_: &'static str,
        data: &'static [(&'static str, &'static str)],
    },
    /// Everything the PushSecret's store holds afterwards: remote key and value.
    Pushed(&'static [(&'static str, &'static str)]),
    /// A ClusterExternalSecret's ExternalSecret, in the namespace its selector picks, with its
    /// documented name and the cluster object's spec, listed as provisioned.
    Fanned,
}

macro_rules! manifest {
    ($name:literal) => {
        ($name, include_str!(concat!("../eso-docs/", $name, ".yaml")))
    };
}

macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!("../../template/src/eso/testdata/", $name))
    };
}

const OPAQUE: &str = "Opaque";
const TLS: &str = "kubernetes.io/tls";
const DOCKER: &str = "kubernetes.io/dockerconfigjson";

const GRAFANA: &[(&str, &str)] = &[
    ("/grafana/user", "grafana-admin"),
    ("/grafana/password", "s3cr3t"),
    ("/database/url", "postgres://db:5432/app"),
];

const CREDENTIALS: &[(&str, &str)] = &[("/credentials", "hunter2")];

const USER: &[(&str, &str)] = &[("user", "alice")];

/// The source Secret of the dataTo snippets, which leave it out.
const DATA_TO_SOURCE: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: source-secret}\nstringData: {db-host: db.internal, db-port: '5432', api-key: k3y}\n";

const POKEDEX: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: pokedex-credentials}\nstringData: {best-pokemon: Pikachu, worst-pokemon: Magikarp}\n";

/// The version-pinned entry the getting-started manifest reads needs a store written out.
const BASIC_STORE: &str = r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: secretstore-sample}
spec:
  provider:
    fake:
      data:
      - {key: provider-key, version: provider-key-version, value: '{"provider-key-property": "managed-value"}'}
      - {key: remote-key-in-the-provider, value: '{"username": "admin", "password": "p4ss"}'}
"#;

const NGINX: &[(&str, &str)] = &[
    (
        "productA/nginx/site-a",
        r#"{"cert": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==", "description": "certificate encoded as base64"}"#,
    ),
    ("productA/nginx/site-b", r#"{"cert": "c2l0ZS1i"}"#),
    ("productB/nginx/site-c", r#"{"cert": "c2l0ZS1j"}"#),
];

fn docs() -> Vec<Doc> {
    let doc = |(name, yaml): (&'static str, &'static str), store, given, expect| Doc {
        name,
        yaml,
        store,
        given,
        expect,
    };
    let secret = |type_, data| Expect::Secret { type_, data };
    vec![
        doc(
            manifest!("basic-external-secret"),
            Store::Manifest(BASIC_STORE),
            "",
            secret(
                OPAQUE,
                &[
                    ("secret-key-to-be-managed", "managed-value"),
                    ("username", "admin"),
                    ("password", "p4ss"),
                ],
            ),
        ),
        // The page shows the Secret this writes.
        doc(
            manifest!("fake-provider-es"),
            Store::Manifest(include_str!("../eso-docs/fake-provider-store.yaml")),
            "",
            secret(OPAQUE, &[("foo_bar", "HELLO1"), ("john", "doe")]),
        ),
        doc(
            manifest!("datafrom-rewrite-remove-path"),
            Store::Fake(&[
                ("path/to/my/secrets/username", "admin"),
                ("path/to/my/secrets/password", "p4ss"),
                ("path/to/other/token", "t0k"),
            ]),
            "",
            secret(OPAQUE, &[("username", "admin"), ("password", "p4ss")]),
        ),
        // The page shows `dev_password`, but the manifest's target is `dev-$1`.
        doc(
            manifest!("datafrom-rewrite-conflict"),
            Store::Fake(&[
                ("my-secrets-dev", r#"{"password": "bar"}"#),
                ("my-secrets-prod", r#"{"password": "safebar"}"#),
            ]),
            "",
            secret(
                OPAQUE,
                &[("dev-password", "bar"), ("prod-password", "safebar")],
            ),
        ),
        doc(
            manifest!("datafrom-rewrite-invalid-characters"),
            Store::Fake(&[("development", r#"{"foo/bar": "1111", "foo$baz": "2222"}"#)]),
            "",
            secret(OPAQUE, &[("foo_bar", "1111"), ("foo_baz", "2222")]),
        ),
        doc(
            manifest!("datafrom-rewrite-merge-empty"),
            Store::Fake(&[
                (
                    "path/to/secrets/object-storage-credentials",
                    r#"{"ACCESS_KEY": "XXXX", "SECRET_KEY": "YYYY"}"#,
                ),
                (
                    "path/to/secrets/mongo-credentials",
                    r#"{"USERNAME": "XXXX", "PASSWORD": "YYYY"}"#,
                ),
                ("path/to/secrets/unrelated", "not JSON"),
            ]),
            "",
            secret(
                OPAQUE,
                &[
                    ("ACCESS_KEY", "XXXX"),
                    ("SECRET_KEY", "YYYY"),
                    ("USERNAME", "XXXX"),
                    ("PASSWORD", "YYYY"),
                ],
            ),
        ),
        doc(
            manifest!("datafrom-rewrite-transform"),
            Store::Fake(&[
                ("foo-nut-bar", "HELLO1"),
                ("foo-naz-bar", "HELLO2"),
                ("foo-bar-baz", r#"{"john": "doe"}"#),
            ]),
            "",
            secret(
                OPAQUE,
                &[
                    ("ENV_FOO_BAR_BAZ", r#"{"john": "doe"}"#),
                    ("ENV_FOO_NAZ_BAR", "HELLO2"),
                    ("ENV_FOO_NUT_BAR", "HELLO1"),
                ],
            ),
        ),
        doc(
            manifest!("getallsecrets-find-by-name"),
            Store::Fake(&[
                ("/path/key1", "\n"),
                ("key2/path", "\n"),
                ("path/to/keyring", "\n"),
                ("other", "x"),
            ]),
            "",
            secret(
                OPAQUE,
                &[
                    ("_path_key1", "\n"),
                    ("key2_path", "\n"),
                    ("path_to_keyring", "\n"),
                ],
            ),
        ),
        doc(
            manifest!("decoding-strategy-auto"),
            Store::Fake(&[(
                "my-secret",
                r#"{"name": "Gustavo", "surname": "Fring", "address": "aGFwcHkgc3RyZWV0"}"#,
            )]),
            "",
            secret(
                OPAQUE,
                &[
                    ("name", "Gustavo"),
                    ("surname", "Fring"),
                    ("address", "happy street"),
                ],
            ),
        ),
        doc(
            manifest!("externalsecret-refresh-created-once"),
            Store::Fake(USER),
            "",
            secret(OPAQUE, &[("user", "alice")]),
        ),
        doc(
            manifest!("externalsecret-refresh-periodic"),
            Store::Fake(USER),
            "",
            secret(OPAQUE, &[("user", "alice")]),
        ),
        doc(
            manifest!("externalsecret-refresh-on-change"),
            Store::Fake(USER),
            "",
            secret(OPAQUE, &[("user", "alice")]),
        ),
        // Applied without Helm, the escaped template is the text ESO writes.
        doc(
            manifest!("helm-template-v2-escape-sequence"),
            Store::Fake(CREDENTIALS),
            "",
            secret(
                OPAQUE,
                &[("name", "admin"), ("password", "{{ .mysecret }}")],
            ),
        ),
        doc(
            manifest!("multikey-template-v2-external-secret"),
            Store::Fake(CREDENTIALS),
            "",
            secret(OPAQUE, &[("name", "admin"), ("password", "hunter2")]),
        ),
        doc(
            manifest!("multiline-template-v2-external-secret"),
            Store::Fake(GRAFANA),
            "",
            secret(
                OPAQUE,
                &[
                    (
                        "config",
                        "datasources:\n- name: Graphite\n  type: graphite\n  access: proxy\n  url: http://localhost:8080\n  password: \"s3cr3t\"\n  user: \"grafana-admin\"\n",
                    ),
                    ("connection", "postgresql://db:5432/app"),
                ],
            ),
        ),
        doc(
            manifest!("merge-template-v2-external-secret"),
            Store::Fake(&[
                ("/credentials/password", "c3VwZXJzZWNyZXQ="),
                ("/credentials/username", "root"),
            ]),
            "",
            secret(
                OPAQUE,
                &[
                    ("name", "admin"),
                    ("password", "supersecret"),
                    ("username", "root"),
                ],
            ),
        ),
        // Without engineVersion, which the v1 API refuses, the v1 page's template is a v2 one.
        doc(
            manifest!("template-v1-from-secret"),
            Store::Fake(GRAFANA),
            "",
            secret(
                OPAQUE,
                &[(
                    "config.yaml",
                    "datasources:\n  - name: Graphite\n    type: graphite\n    access: proxy\n    url: http://localhost:8080\n    password: \"s3cr3t\" # <-- convert []byte to string\n    user: \"grafana-admin\"         # <-- convert []byte to string\n",
                )],
            ),
        ),
        doc(
            manifest!("templating-nginx-certs"),
            Store::Fake(NGINX),
            "",
            secret(
                OPAQUE,
                &[
                    ("site-a", "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="),
                    ("site-b", "c2l0ZS1i"),
                ],
            ),
        ),
        doc(
            manifest!("templating-nginx-certs-base64"),
            Store::Fake(NGINX),
            "",
            secret(
                OPAQUE,
                &[
                    ("site-a", "-----BEGIN CERTIFICATE-----\n"),
                    ("site-b", "site-b"),
                ],
            ),
        ),
        // The fixtures' expected outputs are what ESO v2.9's own functions printed for them.
        doc(
            manifest!("filterpem-template-v2-external-secret"),
            Store::Fake(&[(
                "mysecret",
                concat!(fixture!("leaf.key"), fixture!("leaf.crt")),
            )]),
            "",
            secret(
                TLS,
                &[
                    ("tls.crt", fixture!("leaf.crt")),
                    ("tls.key", fixture!("leaf.key")),
                ],
            ),
        ),
        doc(
            manifest!("filtercertchain-template-v2-external-secret"),
            Store::Fake(&[(
                "mysecret",
                concat!(fixture!("leaf.key"), fixture!("chain.pem")),
            )]),
            "",
            secret(
                TLS,
                &[
                    ("ca.crt", fixture!("expected/chain-intermediate")),
                    ("tls.crt", fixture!("expected/chain-leaf")),
                    ("tls.key", fixture!("leaf.key")),
                ],
            ),
        ),
        doc(
            manifest!("certsans-template-v2-external-secret"),
            Store::Fake(&[("certificate", fixture!("chain.pem"))]),
            "",
            secret(
                OPAQUE,
                &[
                    (
                        "sans",
                        "app.example.com,*.app.example.com,10.0.0.1,2001:db8::1,192.0.2.7,ops@example.com,spiffe://example.org/app",
                    ),
                    ("primary-domain", "app.example.com"),
                    ("sans-json", fixture!("expected/leaf.sans")),
                ],
            ),
        ),
        // The page reads `username` and `surname` from the extracted JSON.
        doc(
            manifest!("gcpsm-data-from-external-secret"),
            Store::Fake(&[(
                "all-keys-example-secret",
                r#"{"username": "walter", "surname": "white"}"#,
            )]),
            "",
            secret(OPAQUE, &[("username", "walter"), ("surname", "white")]),
        ),
        doc(
            manifest!("gcpsm-docker-config-externalsecret"),
            Store::Fake(&[(
                "docker-config-example",
                r#"{"auths":{"registry.example.com":{"auth":"dXNlcjpwYXNz"}}}"#,
            )]),
            "",
            secret(
                DOCKER,
                &[(
                    ".dockerconfigjson",
                    r#"{"auths":{"registry.example.com":{"auth":"dXNlcjpwYXNz"}}}"#,
                )],
            ),
        ),
        doc(
            manifest!("common-k8s-secret-types-registry"),
            Store::Fake(&[
                ("secret/docker-registry-name", "myRegistry"),
                ("secret/docker-registry-host", "docker.io"),
                ("secret/docker-registry-password", "s3cr3t"),
            ]),
            "",
            secret(
                DOCKER,
                &[(
                    ".dockerconfigjson",
                    r#"{"auths":{"myregistry.docker.io":{"username":"myRegistry","password":"s3cr3t","auth":"bXlSZWdpc3RyeTpzM2NyM3Q="}}}"#,
                )],
            ),
        ),
        // ESO's reference of every field: its ExternalSecret reads a store and a ConfigMap it
        // leaves out, and merges into a Secret it assumes, through a template reading `.data`,
        // which ESO's v2 engine does not give; what is checked is the fan-out.
        doc(
            manifest!("full-cluster-external-secret"),
            Store::Fake(&[]),
            "",
            Expect::Fanned,
        ),
        // Its PushSecret, in the selected namespace, pushes what the PushSecret snippet does.
        doc(
            manifest!("full-cluster-push-secret"),
            Store::Fake(&[]),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: application-config-tmpl}\ndata: {config.yml: 'pokedex: {{ index . \"best-pokemon-src\" }}'}\n",
            Expect::Pushed(&[("destination-secret", "PIKACHU is the really best!")]),
        ),
        // The snippet's own Secret is not the one its selector names.
        doc(
            manifest!("full-pushsecret"),
            Store::Fake(&[]),
            "apiVersion: v1\nkind: Secret\nmetadata: {name: pokedex-credentials}\nstringData: {best-pokemon-src: Pikachu}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: application-config-tmpl}\ndata: {config.yml: 'pokedex: {{ index . \"best-pokemon-src\" }}'}\n",
            Expect::Pushed(&[("destination-secret", "PIKACHU is the really best!")]),
        ),
        doc(
            manifest!("full-pushsecret-no-key-no-property"),
            Store::Fake(&[]),
            POKEDEX,
            Expect::Pushed(&[(
                "my-first-parameter",
                r#"{"best-pokemon":"Pikachu","worst-pokemon":"Magikarp"}"#,
            )]),
        ),
        // Despite its name, the snippet names a secretKey.
        doc(
            manifest!("full-pushsecret-no-key-with-property"),
            Store::Fake(&[]),
            POKEDEX,
            Expect::Pushed(&[("my-first-parameter", "Pikachu")]),
        ),
        doc(
            manifest!("pushsecret-datato-basic"),
            Store::Fake(&[]),
            DATA_TO_SOURCE,
            Expect::Pushed(&[
                ("db-host", "db.internal"),
                ("db-port", "5432"),
                ("api-key", "k3y"),
            ]),
        ),
        doc(
            manifest!("pushsecret-datato-regex"),
            Store::Fake(&[]),
            DATA_TO_SOURCE,
            Expect::Pushed(&[("db-host", "db.internal"), ("db-port", "5432")]),
        ),
        doc(
            manifest!("pushsecret-datato-rewrite"),
            Store::Fake(&[]),
            DATA_TO_SOURCE,
            Expect::Pushed(&[
                ("myapp/database/host", "db.internal"),
                ("myapp/database/port", "5432"),
            ]),
        ),
        doc(
            manifest!("pushsecret-datato-chained"),
            Store::Fake(&[]),
            DATA_TO_SOURCE,
            Expect::Pushed(&[("prod/host", "db.internal"), ("prod/port", "5432")]),
        ),
        doc(
            manifest!("pushsecret-datato-override"),
            Store::Fake(&[]),
            DATA_TO_SOURCE,
            Expect::Pushed(&[
                ("custom/database/hostname", "db.internal"),
                ("custom/api/secret-key", "k3y"),
                ("db-port", "5432"),
            ]),
        ),
        doc(
            manifest!("pushsecret-datato-template"),
            Store::Fake(&[]),
            DATA_TO_SOURCE,
            Expect::Pushed(&[
                ("secrets/DB-HOST", "db.internal"),
                ("secrets/DB-PORT", "5432"),
                ("secrets/API-KEY", "k3y"),
            ]),
        ),
        // The page shows what esoctl renders for `token: token`.
        doc(
            manifest!("esoctl-tool-push-secret-snippet"),
            Store::Fake(&[]),
            "apiVersion: v1\nkind: Secret\nmetadata: {name: git-sync-secret}\nstringData: {token: token}\n",
            Expect::Pushed(&[("git-sync-secret-copy-templated", "TOKEN was templated")]),
        ),
        // The examples page lists what each of these pushes.
        doc(
            manifest!("examples-pushsecret-datato-basic-database-credentials"),
            Store::Fake(&[]),
            "",
            Expect::Pushed(&[
                ("myapp/production/database/host", "prod-db.example.com"),
                ("myapp/production/database/port", "5432"),
                ("myapp/production/database/username", "app_user"),
                (
                    "myapp/production/database/password",
                    "super-secret-password",
                ),
                ("myapp/production/database/database", "myapp_db"),
                ("myapp/production/database/ssl-mode", "require"),
            ]),
        ),
        doc(
            manifest!("examples-pushsecret-datato-organizing-by-category"),
            Store::Fake(&[]),
            "",
            Expect::Pushed(&[
                ("config/database/host", "database.local"),
                ("config/database/password", "dbpass"),
                ("config/api/github-token", "ghp_xxx"),
                ("config/api/stripe-key", "sk_live_xxx"),
                ("config/tls/cert", "-----BEGIN CERTIFICATE-----"),
                ("config/tls/key", "-----BEGIN PRIVATE KEY-----"),
            ]),
        ),
        doc(
            manifest!("examples-pushsecret-datato-template-transformation"),
            Store::Fake(&[]),
            "",
            Expect::Pushed(&[
                ("services/PAYMENT_GATEWAY_KEY", "pk_xxx"),
                ("services/EMAIL_SERVICE_KEY", "es_xxx"),
                ("services/STORAGE_SERVICE_KEY", "ss_xxx"),
            ]),
        ),
        doc(
            manifest!("examples-pushsecret-datato-chained-transformations"),
            Store::Fake(&[]),
            "",
            Expect::Pushed(&[
                ("migrated/db/primary/host", "db1.old.local"),
                ("migrated/db/replica/host", "db2.old.local"),
                ("migrated/cache/redis/url", "redis://old-cache:6379"),
            ]),
        ),
        doc(
            manifest!("examples-pushsecret-datato-override-specific-keys"),
            Store::Fake(&[]),
            "",
            Expect::Pushed(&[
                ("app/database/host", "database.local"),
                ("app/database/port", "5432"),
                ("app/database/user", "app"),
                ("app/database/password", "secret123"),
                ("admin/database/password", "admin-secret"),
            ]),
        ),
    ]
}

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    docs()
        .into_iter()
        .map(|doc| trial(format!("eso_docs::{}", doc.name), env, |env| run(env, doc)))
        .collect()
}

async fn run(env: Arc<Env>, doc: Doc) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "eso-docs").await?;
    let objects = placed(doc.yaml, &ns).with_context(|| format!("{}.yaml", doc.name))?;
    match doc.store {
        Store::Manifest(yaml) => {
            for store in placed(yaml, &ns)? {
                apply(&client, &ns, &store).await?;
            }
        }
        Store::Fake(entries) => {
            let data: Vec<Value> = entries
                .iter()
                .map(|(key, value)| json!({"key": key, "value": value}))
                .collect();
            for (kind, name) in store_refs(&objects) {
                let store = json!({
                    "apiVersion": "external-secrets.io/v1", "kind": kind,
                    "metadata": {"name": name},
                    "spec": {"provider": {"fake": {"data": data}}},
                });
                apply(&client, &ns, &store).await?;
            }
        }
    }
    testenv::apply_yaml_in(&client, &ns, doc.given, true).await?;
    label_selected(&client, &ns, &objects).await?;
    for object in &objects {
        apply(&client, &ns, object).await?;
    }
    // A cluster object's child stands for the namespaced object of its kind.
    let named = |kind: &str| {
        objects
            .iter()
            .find_map(|o| match o["kind"].as_str() {
                Some(k) if k == kind => o["metadata"]["name"].as_str(),
                Some("ClusterPushSecret") if kind == "PushSecret" => {
                    o["spec"]["pushSecretName"].as_str()
                }
                _ => None,
            })
            .ok_or_else(|| anyhow!("{} holds no {kind}", doc.name))
    };
    match doc.expect {
        Expect::Secret { type_, data } => {
            let name = named("ExternalSecret")?;
            let externalsecrets = kube::Api::<ExternalSecret>::namespaced(client.clone(), &ns);
            let es = wait_ready(
                &format!("ExternalSecret {name}"),
                "True",
                "SecretSynced",
                || value(&externalsecrets, name),
            )
            .await?;
            let target = es["spec"]["target"]["name"].as_str().unwrap_or(name);
            let secret = wait_secret(&client, &ns, target, &bytes(data)).await?;
            ensure!(
                secret.type_.as_deref() == Some(type_),
                "Secret {target} has type {:?}",
                secret.type_
            );
        }
        Expect::Pushed(pushed) => {
            let name = named("PushSecret")?;
            let pushes = kube::Api::<PushSecret>::namespaced(client.clone(), &ns);
            wait_ready(&format!("PushSecret {name}"), "True", "Synced", || {
                value(&pushes, name)
            })
            .await?;
            let (kind, store) = store_refs(&objects)
                .into_iter()
                .next()
                .ok_or_else(|| anyhow!("PushSecret {name} names no store"))?;
            // Everything the store holds, its keys as a find converts them.
            let reader = json!({
                "apiVersion": "external-secrets.io/v1", "kind": "ExternalSecret",
                "metadata": {"name": "eso-docs-reader"},
                "spec": {
                    "refreshInterval": "1h",
                    "secretStoreRef": {"kind": kind, "name": store},
                    "dataFrom": [{"find": {"name": {"regexp": ".*"}}}],
                },
            });
            apply(&client, &ns, &reader).await?;
            let want: BTreeMap<String, Vec<u8>> = pushed
                .iter()
                .map(|(key, v)| (found_key(key), v.as_bytes().to_vec()))
                .collect();
            wait_secret(&client, &ns, "eso-docs-reader", &want).await?;
        }
        Expect::Fanned => {
            let cluster = objects
                .iter()
                .find(|o| o["kind"] == "ClusterExternalSecret")
                .ok_or_else(|| anyhow!("{} holds no ClusterExternalSecret", doc.name))?;
            let owner = cluster["metadata"]["name"].as_str().unwrap_or_default();
            let name = cluster["spec"]["externalSecretName"]
                .as_str()
                .unwrap_or(owner);
            let externalsecrets = kube::Api::<ExternalSecret>::namespaced(client.clone(), &ns);
            let clusters = kube::Api::<ClusterExternalSecret>::all(client.clone());
            testenv::wait_for(
                crate::operator::TIMEOUT,
                &format!("ExternalSecret {name} of {owner}"),
                || async {
                    let es = externalsecrets.get(name).await?;
                    let parent = clusters.get(owner).await?;
                    ensure!(
                        es.spec == parent.spec.external_secret_spec
                            && es
                                .metadata
                                .owner_references
                                .iter()
                                .flatten()
                                .any(|o| o.name == owner),
                        "ExternalSecret {name} is not {owner}'s"
                    );
                    let provisioned = parent
                        .status
                        .map(|s| s.provisioned_namespaces)
                        .unwrap_or_default();
                    ensure!(provisioned == [ns.clone()], "provisioned: {provisioned:?}");
                    Ok(())
                },
            )
            .await?;
        }
    }
    Ok(())
}

/// Gives the trial's namespace the labels its cluster objects select by.
async fn label_selected(client: &kube::Client, ns: &str, objects: &[Value]) -> Result<()> {
    let mut labels = serde_json::Map::new();
    for object in objects {
        for selector in object["spec"]["namespaceSelectors"]
            .as_array()
            .into_iter()
            .flatten()
        {
            for (k, v) in selector["matchLabels"].as_object().into_iter().flatten() {
                if k != NAME_LABEL {
                    labels.insert(k.clone(), v.clone());
                }
            }
        }
    }
    if !labels.is_empty() {
        kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .patch(
                ns,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"metadata": {"labels": labels}})),
            )
            .await?;
    }
    Ok(())
}

/// The label every namespace carries with its name.
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The objects of `yaml` placed in this trial: no namespace of their own (the docs name
/// `default` or `myapp`), and ClusterSecretStores, which every trial shares, renamed for it.
fn placed(yaml: &str, ns: &str) -> Result<Vec<Value>> {
    let mut objects = testenv::parse_yaml(yaml)?;
    for object in &mut objects {
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("namespace");
        }
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        if [
            "ClusterSecretStore",
            "ClusterExternalSecret",
            "ClusterPushSecret",
        ]
        .contains(&kind.as_str())
        {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            object["metadata"]["name"] = cluster_name(ns, name).into();
        }
        // A cluster object's selectors also name this trial's namespace, so that trials side by
        // side select their own only.
        for selector in object
            .pointer_mut("/spec/namespaceSelectors")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            selector["matchLabels"][NAME_LABEL] = ns.into();
        }
        for store_ref in store_refs_mut(object) {
            if store_ref["kind"] == "ClusterSecretStore" {
                let name = store_ref["name"].as_str().unwrap_or_default();
                store_ref["name"] = cluster_name(ns, name).into();
            }
        }
    }
    Ok(objects)
}

fn cluster_name(ns: &str, name: &str) -> String {
    format!("{ns}-{name}")
}

/// The store references of an ExternalSecret or PushSecret, or of a cluster object's children.
fn store_refs_mut(object: &mut Value) -> Vec<&mut Value> {
    let spec = ["/spec/externalSecretSpec", "/spec/pushSecretSpec", "/spec"]
        .into_iter()
        .find(|p| object.pointer(p).is_some())
        .unwrap_or("/spec");
    match object.pointer_mut(spec) {
        Some(Value::Object(spec)) => spec
            .iter_mut()
            .flat_map(|(field, v)| match (field.as_str(), v) {
                ("secretStoreRef", r) => vec![r],
                ("secretStoreRefs", Value::Array(refs)) => refs.iter_mut().collect(),
                ("data" | "dataFrom", Value::Array(entries)) => entries
                    .iter_mut()
                    .filter_map(|e| e.pointer_mut("/sourceRef/storeRef"))
                    .collect(),
                ("dataTo", Value::Array(rules)) => rules
                    .iter_mut()
                    .filter_map(|r| r.get_mut("storeRef"))
                    .collect(),
                _ => Vec::new(),
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The stores `objects` name, as (kind, name), in order.
fn store_refs(objects: &[Value]) -> Vec<(String, String)> {
    let mut refs: Vec<(String, String)> = Vec::new();
    for object in objects {
        for r in store_refs_mut(&mut object.clone()) {
            let kind = r["kind"].as_str().unwrap_or("SecretStore").to_owned();
            if let Some(name) = r["name"].as_str() {
                let r = (kind, name.to_owned());
                if !refs.contains(&r) {
                    refs.push(r);
                }
            }
        }
    }
    refs
}

/// A remote key as a `find` writes it into a Secret: characters a Secret key cannot hold
/// become `_` (ESO's default conversionStrategy).
fn found_key(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-._".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Applies one object (JSON is YAML).
async fn apply(client: &kube::Client, ns: &str, object: &Value) -> Result<()> {
    testenv::apply_yaml_in(client, ns, &object.to_string(), true).await?;
    Ok(())
}
