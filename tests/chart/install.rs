//! `helm install` with only the Fake and Vault providers, then `helm upgrade` enabling GitLab and
//! Kubernetes, then one serving every provider out of process, on a control plane of its
//! own. Pods do not run there (no kubelet), so the operator runs as a process with the
//! Deployment's own arguments and a token of the chart's ServiceAccount, and so does each
//! provider server under its own; the API server's audit log then shows that none was refused
//! anything and each used every
//! permission the chart grants it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use api::provider_kinds::Scope;
use base64::Engine;
use gitlab_standin::{GitlabStandin, Role as GitlabRole};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client};
use serde_json::{Value, json};
use testenv::{ControlPlane, KubernetesRole, KvVersion, TokenOptions, VaultServer};

use crate::audit;
use crate::render::{NAMESPACE, RELEASE, values_file};
use crate::{CHART, repo};

const TIMEOUT: Duration = Duration::from_secs(90);
/// The chart's full name for release `es`, hence its ServiceAccount's and Deployment's name.
const FULLNAME: &str = "es-external-secrets";
const APP: &str = "app";

/// Permissions the chart grants the controller that this test does not use, and why they stay.
pub const UNUSED_ON_PURPOSE: &[(&str, &str)] = &[
    (
        "get generators.external-secrets.io/passwords",
        "generators are driven by the e2e suite (generators::), not by this test's scenario",
    ),
    (
        "get generators.external-secrets.io/uuids",
        "generators are driven by the e2e suite (generators::), not by this test's scenario",
    ),
    (
        "get generators.external-secrets.io/fakes",
        "generators are driven by the e2e suite (generators::), not by this test's scenario",
    ),
    (
        "get generators.external-secrets.io/mfas",
        "generators are driven by the e2e suite (generators::), not by this test's scenario",
    ),
    (
        "get generators.external-secrets.io/clustergenerators",
        "generators are driven by the e2e suite (generators::), not by this test's scenario",
    ),
    (
        "get external-secrets.io/clusterproviderclasses",
        "read only when the watch cache has not seen a class yet (one created a moment ago)",
    ),
    (
        "get external-secrets.io/providerclasses",
        "read only when the watch cache has not seen a class yet (one created a moment ago)",
    ),
    (
        "get external-secrets.io/clustersecretstores",
        "read only when the watch cache has not seen a store yet (one created a moment ago)",
    ),
    (
        "get external-secrets.io/secretstores",
        "read only when the watch cache has not seen a store yet (one created a moment ago)",
    ),
];

pub async fn install_and_upgrade() -> Result<()> {
    let cp = ControlPlane::start()?;
    let vault = VaultServer::start()?;
    let gitlab = GitlabStandin::start()?;
    let admin = cp.client().await;
    let kubeconfig = cp.kubeconfig_path();
    let chart = repo(CHART).to_string_lossy().into_owned();

    testenv::helm(
        Some(&kubeconfig),
        &[
            "install",
            RELEASE,
            &chart,
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            "-f",
            &values_file("fake-vault"),
        ],
    )?;
    only_these_providers_installed(&admin, &["fake", "vault"]).await?;
    unusable_webhook_secret(&admin).await?;

    let mut operator = Process::controller(&cp, &admin, |arg| arg).await?;
    let result = async {
        let scenario = Scenario::new(&admin, &vault, &gitlab).await?;
        scenario.fake_and_template().await?;
        scenario.push().await?;
        scenario.push_deletion().await?;
        scenario.vault_kubernetes_login(&cp).await?;
        scenario.cluster_store().await?;
        scenario.deletion_policy_delete().await?;
        scenario.store_moves_to_provider_ref().await?;
        scenario.eso_finalizers().await?;
        scenario.cluster_kinds().await?;
        scenario.gitlab_not_installed().await?;
        no_requests_for(&cp, &["gitlabs", "kubernetes"])?;

        testenv::helm(
            Some(&kubeconfig),
            &[
                "upgrade",
                RELEASE,
                &chart,
                "--namespace",
                NAMESPACE,
                "-f",
                &values_file("fake-vault"),
                "--set",
                "providers.gitlab.enabled=true",
                "--set",
                "providers.kubernetes.enabled=true",
                "--set",
                "providers.aws.enabled=true",
            ],
        )?;
        only_these_providers_installed(&admin, &["fake", "vault", "gitlab", "kubernetes", "aws"])
            .await?;
        scenario.gitlab_after_upgrade().await?;
        scenario.kubernetes_after_upgrade().await?;
        scenario.every_kind_in_both_scopes().await?;
        operator.still_running()?;
        anyhow::Ok(scenario)
    }
    .await;
    let logs = operator.stop();
    let scenario = result.with_context(|| format!("operator log tail:\n{logs}"))?;

    // Every provider out of process: the controller's permissions before and after both count,
    // each used while it was granted; the requests after the upgrade must fit the new ones alone
    // (no 403) and not touch what moved to the provider servers.
    let in_process = controller_rules(&admin).await?;
    let mark = audit_lines(&cp)?;
    out_of_process(&cp, &admin, &scenario).await?;
    let out_of_process = controller_rules(&admin).await?;
    let mut granted = audit::permissions(&in_process);
    granted.extend(audit::permissions(&out_of_process));

    moved_to_the_server(&cp, mark)?;
    let controller = format!("system:serviceaccount:{NAMESPACE}:{FULLNAME}");
    rbac_is_minimal(&cp, &controller, &granted, UNUSED_ON_PURPOSE)?;
    for served in SERVED {
        let server_rules = Api::<ClusterRole>::all(admin.clone())
            .get(&served.server())
            .await?
            .rules
            .unwrap_or_default();
        let server = format!("system:serviceaccount:{NAMESPACE}:{}", served.server());
        let unused: Vec<(String, &str)> = [
            "providers.external-secrets.io",
            "cluster.providers.external-secrets.io",
        ]
        .into_iter()
        .map(|group| (format!("get {group}/{}", served.plural), CACHE_MISS_ONLY))
        .chain(
            served
                .unused_on_purpose
                .iter()
                .map(|(p, why)| (p.to_string(), *why)),
        )
        .collect();
        let unused: Vec<(&str, &str)> = unused.iter().map(|(p, w)| (p.as_str(), *w)).collect();
        rbac_is_minimal(&cp, &server, &audit::permissions(&server_rules), &unused)?;
    }
    Ok(())
}

/// The webhook's certificate Secret as a failed write or a hand edit could leave it: the
/// operator replaces it at start, as it does at each rotation (a year-long certificate rotates
/// too rarely for this test; the conversion webhook's own tests rotate it).
async fn unusable_webhook_secret(admin: &Client) -> Result<()> {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{FULLNAME}-webhook-tls")},
        "type": "Opaque",
        "stringData": {"tls.crt": "not a certificate", "tls.key": "not a key"},
    }))?;
    Api::<Secret>::namespaced(admin.clone(), NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await?;
    Ok(())
}

/// A provider the last upgrade serves out of process.
pub struct Served {
    /// Its key under `providers.` in the values, and its ClusterProviderClass's name.
    key: &'static str,
    /// Its provider kind, as `--out-of-process` names it.
    kind: &'static str,
    /// Its provider kinds' plural.
    plural: &'static str,
    /// Permissions of its server that this test does not use, and why they stay.
    pub unused_on_purpose: &'static [(&'static str, &'static str)],
}

impl Served {
    /// Its server's Deployment, Service, ServiceAccount and RBAC.
    fn server(&self) -> String {
        format!("{FULLNAME}-provider-{}", self.key)
    }

    /// Its server's TLS Secret, which the controller fills.
    fn tls(&self) -> String {
        format!("{}-tls", self.server())
    }
}

/// The grants of ESO's v2 kind `$plural` (served by the server of our kind of the same name)
/// that this test leaves unused: the release installs none of ESO's provider CRDs.
macro_rules! eso_v2_kind_unused {
    ($plural:literal) => {
        [
            (
                concat!("get provider.external-secrets.io/", $plural),
                "ESO's v2 kind is read per call only while its CRD is not installed; this release installs none",
            ),
            (
                concat!("list provider.external-secrets.io/", $plural),
                "watched only once ESO's v2 CRD is installed; this release installs none",
            ),
            (
                concat!("watch provider.external-secrets.io/", $plural),
                "watched only once ESO's v2 CRD is installed; this release installs none",
            ),
        ]
    };
}

pub const SERVED: [Served; 5] = [
    Served {
        key: "fake",
        kind: "Fake",
        plural: "fakes",
        unused_on_purpose: &eso_v2_kind_unused!("fakes"),
    },
    Served {
        key: "vault",
        kind: "Vault",
        plural: "vaults",
        unused_on_purpose: &[],
    },
    Served {
        key: "gitlab",
        kind: "Gitlab",
        plural: "gitlabs",
        unused_on_purpose: &[],
    },
    Served {
        key: "kubernetes",
        kind: "Kubernetes",
        plural: "kubernetes",
        unused_on_purpose: &eso_v2_kind_unused!("kubernetes"),
    },
    Served {
        key: "aws",
        kind: "AWS",
        plural: "aws",
        unused_on_purpose: &[
            (
                "create core/serviceaccounts/token",
                "IRSA (auth.jwt) logins; the e2e suite drives them on moto, this test's store uses keys",
            ),
            (
                "get core/serviceaccounts",
                "IRSA's role annotation; the e2e suite drives it on moto, this test's store uses keys",
            ),
            (
                "list core/serviceaccounts",
                "watched for IRSA logins; the e2e suite drives them on moto, this test's store uses keys",
            ),
            (
                "watch core/serviceaccounts",
                "watched for IRSA logins; the e2e suite drives them on moto, this test's store uses keys",
            ),
        ],
    },
];

/// The provider servers that request ServiceAccount tokens: Vault's kubernetes login, and the
/// Kubernetes provider's `serviceAccount` auth.
const TOKEN_REQUESTERS: [&str; 2] = [
    "es-external-secrets-provider-vault",
    "es-external-secrets-provider-kubernetes",
];

const CACHE_MISS_ONLY: &str =
    "read only when the watch cache has not seen the object a call names yet";

/// The chart's ClusterRole and Roles of the controller's ServiceAccount, as installed now.
async fn controller_rules(admin: &Client) -> Result<Vec<PolicyRule>> {
    let mut rules = Api::<ClusterRole>::all(admin.clone())
        .get(&format!("{FULLNAME}-controller"))
        .await?
        .rules
        .unwrap_or_default();
    let roles = Api::<Role>::namespaced(admin.clone(), NAMESPACE);
    for role in ["leader-election", "certificates"] {
        if let Some(role) = roles.get_opt(&format!("{FULLNAME}-{role}")).await? {
            rules.extend(role.rules.unwrap_or_default());
        }
    }
    Ok(rules)
}

fn audit_lines(cp: &ControlPlane) -> Result<usize> {
    Ok(std::fs::read_to_string(cp.audit_log_path())?
        .lines()
        .count())
}

/// After the upgrade the controller asked for no ServiceAccount and no token: the logins are
/// the provider servers' now (which each server's audit shows).
fn moved_to_the_server(cp: &ControlPlane, mark: usize) -> Result<()> {
    let log = std::fs::read_to_string(cp.audit_log_path())?;
    let after: Vec<&str> = log.lines().skip(mark).collect();
    let controller = format!("system:serviceaccount:{NAMESPACE}:{FULLNAME}");
    let asked: Vec<String> = audit::requests(&after.join("\n"), &controller)?
        .into_iter()
        .filter(|r| r.group.is_empty() && r.resource.starts_with("serviceaccounts"))
        .map(|r| r.to_string())
        .collect();
    ensure!(
        asked.is_empty(),
        "with every provider out of process the controller still asked for {asked:?}"
    );
    for requester in TOKEN_REQUESTERS {
        let server = format!("system:serviceaccount:{NAMESPACE}:{requester}");
        let logins = audit::requests(&after.join("\n"), &server)?
            .into_iter()
            .filter(|r| r.resource == "serviceaccounts/token" && r.code == Some(201))
            .count();
        ensure!(logins > 0, "provider server {requester} requested no token");
    }
    Ok(())
}

/// `helm upgrade` to every provider out of process, then the controller (restarted with the
/// Deployment's new arguments) and each provider server (its Deployment's arguments, under a
/// token of its own ServiceAccount) as processes. Overrides, because this machine has no cluster
/// network: the controller's `--provider-class` names each server's loopback port, and its
/// `--provider-tls-secret` gets `,127.0.0.1` so that each server's certificate names that
/// address; the servers read their Secret's files from folders this test writes them to, as a
/// kubelet would mount them.
async fn out_of_process(cp: &ControlPlane, admin: &Client, scenario: &Scenario<'_>) -> Result<()> {
    let kubeconfig = cp.kubeconfig_path();
    let chart = repo(CHART).to_string_lossy().into_owned();
    let upgrade = || {
        testenv::helm(
            Some(&kubeconfig),
            &[
                "upgrade",
                RELEASE,
                &chart,
                "--namespace",
                NAMESPACE,
                "-f",
                &values_file("out-of-process"),
            ],
        )
    };
    let notes = upgrade()?;
    for served in &SERVED {
        let line = format!(
            "{}: Deployment {}, ClusterProviderClass {}",
            served.kind,
            served.server(),
            served.key
        );
        ensure!(
            notes.contains(&line),
            "helm upgrade's notes lack {line:?}: {notes}"
        );
    }
    only_these_providers_installed(admin, &["fake", "vault", "gitlab", "kubernetes", "aws"])
        .await?;

    // Each provider server's two ports: gRPC, metrics.
    let ports = free_ports(2 * SERVED.len())?;
    let grpc = |i: usize| ports[2 * i];
    let mut controller = Process::controller(cp, admin, |arg| {
        if arg.starts_with("--provider-tls-secret=") {
            return format!("{arg},127.0.0.1");
        }
        for (i, served) in SERVED.iter().enumerate() {
            if arg.starts_with(&format!("--provider-class={}=", served.key)) {
                return format!(
                    "--provider-class={}={},{NAMESPACE}/{}",
                    served.key,
                    grpc(i),
                    served.tls()
                );
            }
        }
        arg
    })
    .await?;
    let result = async {
        let args = controller_args(admin).await?;
        let mut wanted = Vec::new();
        for served in &SERVED {
            let (server, tls) = (served.server(), served.tls());
            wanted.push(format!("--out-of-process={}={}", served.kind, served.key));
            // The class dials the headless Service, whose name the certificate covers too.
            let headless = format!("{server}-headless.{NAMESPACE}.svc");
            wanted.push(format!(
                "--provider-tls-secret={NAMESPACE}/{tls}={server},{headless}"
            ));
            wanted.push(format!(
                "--provider-class={}={headless}:8080,{NAMESPACE}/{tls}",
                served.key
            ));
        }
        for wanted in wanted {
            ensure!(
                args.contains(&wanted),
                "the controller's args lack {wanted}: {args:?}"
            );
        }
        // The controller created the classes the chart could not (their CRD comes with the
        // chart).
        let classes = Api::<DynamicObject>::all_with(
            admin.clone(),
            &core("v1alpha1", "ClusterProviderClass", "clusterproviderclasses"),
        );
        for (i, served) in SERVED.iter().enumerate() {
            let declared = json!({
                "address": grpc(i).to_string(),
                "tlsSecretRef": {"name": served.tls(), "namespace": NAMESPACE},
            });
            let class = testenv::wait_for(
                TIMEOUT,
                "the controller to create each ClusterProviderClass as --provider-class says",
                || async {
                    let class = classes.get(served.key).await?;
                    ensure!(
                        class.data["spec"] == declared,
                        "ClusterProviderClass {}: {}",
                        served.key,
                        class.data["spec"]
                    );
                    anyhow::Ok(class)
                },
            )
            .await?;
            ensure!(
                class
                    .metadata
                    .managed_fields
                    .iter()
                    .flatten()
                    .any(|f| f.manager.as_deref() == Some("external-secrets-provider-class")),
                "ClusterProviderClass {} was not applied by the controller: {:?}",
                served.key,
                class.metadata.managed_fields
            );
        }
        let mut servers = Vec::new();
        let mut issued = Vec::new();
        let dirs = SERVED
            .iter()
            .map(|_| tempfile::tempdir())
            .collect::<std::io::Result<Vec<_>>>()?;
        for (i, served) in SERVED.iter().enumerate() {
            let tls = issued_tls(admin, served).await?;
            let certs = dirs[i].path();
            let mount = write_mounted_files(admin, served, &tls, certs).await?;
            let (grpc, metrics) = (ports[2 * i], ports[2 * i + 1]);
            let server = Process::start(
                cp,
                admin,
                &served.server(),
                |arg| {
                    Ok(match arg.split_once('=') {
                        Some(("--port", _)) => format!("--port={}", grpc.port()),
                        Some(("--metrics-port", _)) => format!("--metrics-port={}", metrics.port()),
                        Some(("--tls-dir", dir)) => {
                            ensure!(
                                dir == mount,
                                "--tls-dir={dir}, but the TLS Secret is mounted at {mount}"
                            );
                            format!("--tls-dir={}", certs.display())
                        }
                        _ => arg,
                    })
                },
                &["--bind-address=127.0.0.1".to_owned()],
            )
            .await;
            match server {
                Ok(server) => servers.push(server),
                Err(e) => {
                    let logs: Vec<String> = servers.into_iter().map(Process::stop).collect();
                    return Err(e.context(logs.join("\n")));
                }
            }
            issued.push(tls);
        }
        let through = async {
            let resource = core("v1alpha1", "ClusterProviderClass", "clusterproviderclasses");
            for served in &SERVED {
                scenario.wait_ready(&resource, None, served.key).await?;
            }
            scenario.fake_through_the_server().await?;
            scenario
                .vault_through_the_server(&grpc(1).to_string(), &issued[1])
                .await?;
            scenario.gitlab_through_the_server().await?;
            scenario.kubernetes_through_the_server().await?;
            for server in &mut servers {
                server.still_running()?;
            }
            controller.still_running()
        }
        .await;
        let logs: Vec<String> = servers.into_iter().map(Process::stop).collect();
        through.with_context(|| format!("provider server log tails:\n{}", logs.join("\n")))?;
        anyhow::Ok(issued)
    }
    .await;
    let logs = controller.stop();
    let issued = result.with_context(|| format!("operator log tail:\n{logs}"))?;

    // What the controller issued is the release's from then on: an upgrade keeps it.
    upgrade()?;
    for (served, issued) in SERVED.iter().zip(&issued) {
        let kept = secret_data(admin, &served.tls()).await?;
        ensure!(
            &kept == issued,
            "helm upgrade changed the TLS Secret the controller filled for {}",
            served.key
        );
    }
    Ok(())
}

/// The controller Deployment's arguments.
async fn controller_args(admin: &Client) -> Result<Vec<String>> {
    let deployment = Api::<Deployment>::namespaced(admin.clone(), NAMESPACE)
        .get(FULLNAME)
        .await?;
    Ok(deployment
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|p| p.containers.into_iter().next())
        .and_then(|c| c.args)
        .unwrap_or_default())
}

async fn secret_data(admin: &Client, name: &str) -> Result<BTreeMap<String, Vec<u8>>> {
    let secret = Api::<Secret>::namespaced(admin.clone(), NAMESPACE)
        .get(name)
        .await?;
    Ok(secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect())
}

/// The TLS Secret once the controller filled it, in ESO's layout (`ca.key`: the CA issues the
/// namespaces' client certificates later; the server does not mount it).
async fn issued_tls(admin: &Client, served: &Served) -> Result<BTreeMap<String, Vec<u8>>> {
    testenv::wait_for(TIMEOUT, "the controller to fill the TLS Secret", || async {
        let data = secret_data(admin, &served.tls()).await?;
        let keys: Vec<&str> = data.keys().map(String::as_str).collect();
        ensure!(
            keys == [
                "ca.crt",
                "ca.key",
                "client.crt",
                "client.key",
                "tls.crt",
                "tls.key"
            ],
            "{} holds {keys:?}",
            served.tls()
        );
        anyhow::Ok(data)
    })
    .await
}

/// Writes the Secret's keys as the server's pod mounts them (its volume's items); the mount
/// path.
async fn write_mounted_files(
    admin: &Client,
    served: &Served,
    data: &BTreeMap<String, Vec<u8>>,
    dir: &std::path::Path,
) -> Result<String> {
    let deployment = Api::<Deployment>::namespaced(admin.clone(), NAMESPACE)
        .get(&served.server())
        .await?;
    let pod = deployment
        .spec
        .and_then(|s| s.template.spec)
        .context("the server's pod template")?;
    let volume = pod
        .volumes
        .unwrap_or_default()
        .into_iter()
        .find(|v| {
            v.secret
                .as_ref()
                .is_some_and(|s| s.secret_name.as_deref() == Some(served.tls().as_str()))
        })
        .context("the server's pod mounts its TLS Secret")?;
    let mount = pod
        .containers
        .iter()
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .find(|m| m.name == volume.name)
        .map(|m| m.mount_path.clone())
        .context("the server's container mounts the TLS volume")?;
    let items = volume.secret.and_then(|s| s.items).unwrap_or_default();
    let mut written: Vec<&str> = Vec::new();
    for item in &items {
        let value = data
            .get(&item.key)
            .with_context(|| format!("the TLS Secret has no {}", item.key))?;
        std::fs::write(dir.join(&item.path), value)?;
        written.push(&item.key);
    }
    // The client's key stays with the controller.
    ensure!(
        written == ["ca.crt", "tls.crt", "tls.key"],
        "the server's pod mounts {written:?}"
    );
    Ok(mount)
}

/// A provider that is not installed has no controller and no watch: the operator never asked
/// for its kinds.
fn no_requests_for(cp: &ControlPlane, plurals: &[&str]) -> Result<()> {
    let log = std::fs::read_to_string(cp.audit_log_path())?;
    let user = format!("system:serviceaccount:{NAMESPACE}:{FULLNAME}");
    let touched: Vec<String> = audit::requests(&log, &user)?
        .into_iter()
        .filter(|r| {
            [api::PROVIDERS_GROUP, api::CLUSTER_PROVIDERS_GROUP].contains(&r.group.as_str())
                && plurals
                    .iter()
                    .any(|p| r.resource.split('/').next() == Some(p))
        })
        .map(|r| r.to_string())
        .collect();
    ensure!(
        touched.is_empty(),
        "the operator used kinds of providers that are not installed: {touched:?}"
    );
    Ok(())
}

/// Exactly the providers `keys` have CRDs, and the store CRDs' inline schema offers exactly
/// them; an inline store of another provider is refused naming the chart value.
async fn only_these_providers_installed(client: &Client, keys: &[&str]) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for descriptor in api::providers::ALL {
        let wanted = keys.contains(&descriptor.store_key);
        for group in [api::PROVIDERS_GROUP, api::CLUSTER_PROVIDERS_GROUP] {
            let name = format!("{}.{group}", descriptor.plural);
            if wanted {
                testenv::wait_for_crd_established(client, &name, TIMEOUT).await?;
            } else {
                ensure!(
                    crds.get_opt(&name).await?.is_none(),
                    "CRD {name} is installed though providers.{}.enabled is false",
                    descriptor.store_key
                );
            }
        }
    }
    for store_crd in [
        "secretstores.external-secrets.io",
        "clustersecretstores.external-secrets.io",
    ] {
        let crd = crds.get(store_crd).await?;
        let schema = serde_json::to_value(&crd.spec.versions[0].schema)?;
        let provider = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["provider"];
        let mut offered: Vec<&str> = provider["properties"]
            .as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        offered.sort_unstable();
        let mut expected = keys.to_vec();
        expected.sort_unstable();
        ensure!(
            offered == expected,
            "{store_crd} offers inline providers {offered:?}, not {expected:?}"
        );
    }
    Ok(())
}

/// What a kubelet runs for a container of `image` with `args`: the image's entrypoint (as
/// `hack/build-images.sh` writes it; the binary is the one this test runs), then `args`, or the
/// image's command when there are none. The chart's images must be ones the project builds.
fn run_by_kubelet(image: &str, args: Vec<String>) -> Result<Vec<String>> {
    let name = image
        .rsplit('/')
        .next()
        .and_then(|n| n.split(':').next())
        .unwrap_or_default();
    let specs = image::specs(&image::PROVIDER_SERVERS.map(String::from));
    let spec = specs
        .iter()
        .find(|s| s.name == name)
        .with_context(|| format!("{image} is not an image hack/build-images.sh builds"))?;
    ensure!(
        spec.entrypoint.first().map(String::as_str) == Some(image::BINARY),
        "{image} runs {:?}",
        spec.entrypoint
    );
    let rest = if args.is_empty() {
        spec.cmd.clone()
    } else {
        args
    };
    Ok(spec.entrypoint[1..].iter().cloned().chain(rest).collect())
}

/// A Deployment the chart rendered, run as a process on this machine: the operator binary with
/// its image's entrypoint, the container's own arguments and environment, under a token of the pod's ServiceAccount.
/// `rewrite` changes what cannot be the same here (listen addresses move to free loopback ports,
/// a certificate folder to a temporary one) and `extra` adds the kubeconfig's flag and overrides
/// each caller names.
struct Process {
    child: Child,
    log: tempfile::NamedTempFile,
    what: String,
}

impl Process {
    async fn start(
        cp: &ControlPlane,
        admin: &Client,
        deployment: &str,
        mut rewrite: impl FnMut(String) -> Result<String>,
        extra: &[String],
    ) -> Result<Self> {
        let found = Api::<Deployment>::namespaced(admin.clone(), NAMESPACE)
            .get(deployment)
            .await?;
        let pod = found
            .spec
            .and_then(|s| s.template.spec)
            .context("the Deployment has a pod template")?;
        let account = pod
            .service_account_name
            .context("the pod names its ServiceAccount")?;
        let container = pod
            .containers
            .into_iter()
            .next()
            .context("the pod has a container")?;

        let token = testenv::service_account_token(
            admin,
            NAMESPACE,
            &account,
            &[],
            Duration::from_secs(3600),
        )
        .await?;
        let kubeconfig = tempfile::NamedTempFile::new()?;
        std::fs::write(kubeconfig.path(), token_kubeconfig(cp, &token)?)?;

        let image = container.image.clone().unwrap_or_default();
        let mut args = run_by_kubelet(&image, container.args.unwrap_or_default())?
            .into_iter()
            .map(&mut rewrite)
            .collect::<Result<Vec<_>>>()?;
        args.extend(extra.iter().cloned());
        // The kubeconfig file must outlive the process start only.
        args.push(format!("--kubeconfig={}", kubeconfig.path().display()));

        let env: BTreeMap<String, String> = container
            .env
            .unwrap_or_default()
            .into_iter()
            .map(|e| {
                let value = match (e.value, e.value_from) {
                    (Some(v), _) => v,
                    // The only fieldRef the chart uses: the pod's namespace.
                    (None, Some(_)) => NAMESPACE.to_owned(),
                    (None, None) => String::new(),
                };
                (e.name, value)
            })
            .collect();
        let log = tempfile::NamedTempFile::new()?;
        let child = Command::new(env!("CARGO_BIN_EXE_external-secrets"))
            .args(&args)
            .envs(&env)
            .stdout(log.reopen()?)
            .stderr(log.reopen()?)
            .spawn()
            .with_context(|| format!("starting {deployment}'s process"))?;
        // Give it time to read the kubeconfig before the file goes.
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(kubeconfig);
        Ok(Self {
            child,
            log,
            what: format!("{deployment} ({})", args[..2.min(args.len())].join(" ")),
        })
    }

    /// The controller of the chart's Deployment; its listen addresses on free loopback ports,
    /// and `rewrite` for anything else. The CRDs keep naming the webhook's Service, as in a
    /// cluster (this control plane cannot route to it, and nothing here needs a conversion:
    /// every object is read and written at its storage version).
    async fn controller(
        cp: &ControlPlane,
        admin: &Client,
        mut rewrite: impl FnMut(String) -> String,
    ) -> Result<Self> {
        // Chosen together, so that no two are the same port; free again before the start.
        let ports = free_ports(3)?;
        let process = Self::start(
            cp,
            admin,
            FULLNAME,
            |arg| {
                let moved = ["--metrics-addr=", "--live-addr=", "--webhook-addr="]
                    .into_iter()
                    .position(|flag| arg.starts_with(flag));
                Ok(match moved {
                    Some(i) => format!("{}{}", &arg[..=arg.find('=').unwrap_or(0)], ports[i]),
                    None => rewrite(arg),
                })
            },
            &[],
        )
        .await;
        let process = process?;
        ensure!(
            process.what.contains("(controller "),
            "the Deployment runs `external-secrets controller`: {}",
            process.what
        );
        Ok(process)
    }

    fn still_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => bail!("{} exited ({status})", self.what),
        }
    }

    /// Stops it; the tail of its log.
    fn stop(mut self) -> String {
        let stopped = testenv::terminate(&mut self.child, Duration::from_secs(30));
        let text = std::fs::read_to_string(self.log.path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        let tail = format!("{}:\n{tail}", self.what);
        match stopped {
            Ok(()) => tail,
            Err(e) => format!("{tail}\n(stopping it: {e})"),
        }
    }
}

/// `n` free loopback addresses, all different (each listener is held until all are chosen).
fn free_ports(n: usize) -> Result<Vec<SocketAddr>> {
    let held = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    Ok(held
        .iter()
        .map(TcpListener::local_addr)
        .collect::<std::io::Result<_>>()?)
}

fn token_kubeconfig(cp: &ControlPlane, token: &str) -> Result<String> {
    let b64 = base64::engine::general_purpose::STANDARD.encode(cp.ca_cert_pem());
    Ok(serde_yaml::to_string(&json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": cp.server_url(), "certificate-authority-data": b64}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "test", "user": "sa"}}],
        "current-context": "sa",
    }))?)
}

/// What the operator is asked to do, as an admin would ask it, in namespace `app`.
struct Scenario<'a> {
    client: Client,
    vault: &'a VaultServer,
    gitlab: &'a GitlabStandin,
}

impl<'a> Scenario<'a> {
    async fn new(
        client: &Client,
        vault: &'a VaultServer,
        gitlab: &'a GitlabStandin,
    ) -> Result<Self> {
        let this = Self {
            client: client.clone(),
            vault,
            gitlab,
        };
        this.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {APP}, labels: {{team: a}}}}\n"
        ))
        .await?;
        Ok(this)
    }

    async fn apply(&self, yaml: &str) -> Result<()> {
        testenv::apply_yaml_in(&self.client, APP, yaml, true).await?;
        Ok(())
    }

    async fn secret_value(&self, name: &str, key: &str) -> Result<Vec<u8>> {
        let secret = Api::<Secret>::namespaced(self.client.clone(), APP)
            .get(name)
            .await?;
        secret
            .data
            .and_then(|mut d| d.remove(key))
            .map(|b| b.0)
            .ok_or_else(|| anyhow!("Secret {name} has no key {key}"))
    }

    async fn wait_secret(&self, name: &str, key: &str, want: &[u8]) -> Result<()> {
        testenv::wait_for(TIMEOUT, &format!("Secret {name} key {key}"), || async {
            let got = self.secret_value(name, key).await?;
            ensure!(got == want, "Secret {name} key {key} holds other bytes");
            anyhow::Ok(())
        })
        .await
    }

    async fn condition(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value> {
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, resource),
            None => Api::all_with(self.client.clone(), resource),
        };
        let object = api.get(name).await?;
        object.data["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned())
            .ok_or_else(|| anyhow!("{} {name} has no Ready condition yet", resource.kind))
    }

    async fn wait_ready(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<()> {
        testenv::wait_for(
            TIMEOUT,
            &format!("{} {name} Ready", resource.kind),
            || async {
                let ready = self.condition(resource, namespace, name).await?;
                ensure!(
                    ready["status"] == "True",
                    "{} {name}: {ready}",
                    resource.kind
                );
                anyhow::Ok(())
            },
        )
        .await
    }

    /// An inline Fake store, an ExternalSecret rendered through a ConfigMap template.
    async fn fake_and_template(&self) -> Result<()> {
        self.apply(
            r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: tpl}
data:
  conn: "{{ .user }}:{{ .password }}"
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: fake}
spec:
  provider:
    fake:
      data:
        - {key: db, value: '{"user":"app","password":"pw"}'}
        - {key: token, value: t0k3n}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: db}
spec:
  refreshInterval: 1h
  secretStoreRef: {name: fake, kind: SecretStore}
  target:
    name: db
    template:
      templateFrom:
        - configMap: {name: tpl, items: [{key: conn}]}
  dataFrom:
    - extract: {key: db}
"#,
        )
        .await?;
        self.wait_secret("db", "conn", b"app:pw").await
    }

    /// A PushSecret of a Secret into the Fake store.
    async fn push(&self) -> Result<()> {
        self.apply(
            r#"
apiVersion: v1
kind: Secret
metadata: {name: to-push}
stringData: {k: pushed}
---
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {name: push}
spec:
  refreshInterval: 1h
  secretStoreRefs: [{name: fake, kind: SecretStore}]
  selector: {secret: {name: to-push}}
  data:
    - match: {secretKey: k, remoteRef: {remoteKey: pushed-key}}
"#,
        )
        .await?;
        self.wait_ready(
            &core("v1alpha1", "PushSecret", "pushsecrets"),
            Some(APP),
            "push",
        )
        .await
    }

    /// Vault's kubernetes auth: the operator requests a token of ServiceAccount `reader`.
    async fn vault_kubernetes_login(&self, cp: &ControlPlane) -> Result<()> {
        let vault = self.vault;
        vault.mount_kv("kv", KvVersion::V2).await?;
        vault
            .write_kv_v2("kv", "app/db", &json!({"password": "from-vault"}))
            .await?;
        vault
            .write_policy("app", r#"path "kv/data/app/*" { capabilities = ["read"] }"#)
            .await?;
        vault.enable_auth("kubernetes", "kubernetes").await?;
        vault.configure_kubernetes_auth("kubernetes", cp).await?;
        vault
            .create_kubernetes_role(
                "kubernetes",
                APP,
                &KubernetesRole {
                    service_account_names: vec!["reader".into()],
                    namespaces: vec![APP.into()],
                    audience: None,
                },
                &TokenOptions::policies(&["app"]),
            )
            .await?;
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), APP);
        accounts
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "reader"}}))?,
            )
            .await?;
        self.apply(&format!(
            r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {{name: vault}}
spec:
  provider:
    vault:
      server: {server}
      path: kv
      version: v2
      auth:
        kubernetes: {{mountPath: kubernetes, role: {APP}, serviceAccountRef: {{name: reader}}}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: from-vault}}
spec:
  refreshInterval: 1h
  secretStoreRef: {{name: vault, kind: SecretStore}}
  target: {{name: from-vault}}
  data:
    - {{secretKey: password, remoteRef: {{key: app/db, property: password}}}}
"#,
            server = vault.address()
        ))
        .await?;
        self.wait_secret("from-vault", "password", b"from-vault")
            .await
    }

    /// A ClusterSecretStore limited to namespaces labelled team=a.
    async fn cluster_store(&self) -> Result<()> {
        self.apply(
            r#"
apiVersion: external-secrets.io/v1
kind: ClusterSecretStore
metadata: {name: shared}
spec:
  conditions:
    - namespaceSelector: {matchLabels: {team: a}}
  provider:
    fake:
      data: [{key: shared, value: for-team-a}]
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: shared}
spec:
  refreshInterval: 1h
  secretStoreRef: {name: shared, kind: ClusterSecretStore}
  target: {name: shared}
  data: [{secretKey: v, remoteRef: {key: shared}}]
"#,
        )
        .await?;
        self.wait_secret("shared", "v", b"for-team-a").await
    }

    /// deletionPolicy Delete: the Secret goes when the provider no longer has the data.
    async fn deletion_policy_delete(&self) -> Result<()> {
        self.apply(
            r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: token}
spec:
  refreshInterval: 1s
  secretStoreRef: {name: fake, kind: SecretStore}
  target: {name: token, deletionPolicy: Delete}
  data: [{secretKey: t, remoteRef: {key: token}}]
"#,
        )
        .await?;
        self.wait_secret("token", "t", b"t0k3n").await?;
        self.apply(
            r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: fake}
spec:
  provider:
    fake:
      data:
        - {key: db, value: '{"user":"app","password":"pw"}'}
"#,
        )
        .await?;
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), APP);
        testenv::wait_for(TIMEOUT, "Secret token deleted", || async {
            ensure!(
                secrets.get_opt("token").await?.is_none(),
                "Secret token still exists"
            );
            anyhow::Ok(())
        })
        .await
    }

    /// The inline Fake store moves to a providerRef; its generated Fake goes.
    async fn store_moves_to_provider_ref(&self) -> Result<()> {
        let fakes = Api::<DynamicObject>::namespaced_with(
            self.client.clone(),
            APP,
            &api::providers::fake::DESCRIPTOR
                .storage_resource(api::provider_kinds::Scope::Namespaced),
        );
        ensure!(
            fakes.get_opt("fake").await?.is_some(),
            "the inline store's Fake exists"
        );
        self.apply(
            r#"
apiVersion: providers.external-secrets.io/v1alpha1
kind: Fake
metadata: {name: fake-ref}
spec:
  data:
    - {key: db, value: '{"user":"app","password":"pw"}'}
"#,
        )
        .await?;
        let stores = Api::<DynamicObject>::namespaced_with(
            self.client.clone(),
            APP,
            &core("v1", "SecretStore", "secretstores"),
        );
        stores
            .patch(
                "fake",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"provider": null, "providerRef": {
                    "apiVersion": "providers.external-secrets.io/v1alpha1",
                    "kind": "Fake", "name": "fake-ref"}}})),
            )
            .await?;
        testenv::wait_for(TIMEOUT, "the generated Fake deleted", || async {
            ensure!(
                fakes.get_opt("fake").await?.is_none(),
                "Fake fake still exists"
            );
            anyhow::Ok(())
        })
        .await?;
        self.wait_ready(
            &core("v1", "SecretStore", "secretstores"),
            Some(APP),
            "fake",
        )
        .await
    }

    /// Vault through the provider server, each credential kind it reads: a kubernetes login
    /// (the server requests the ServiceAccount token), a TLS listener whose CA comes from a
    /// ConfigMap with a token from a Secret, a ClusterSecretStore's cluster-scoped Vault, and a
    /// team's own ProviderClass (its copy of the client's TLS material) naming the same server.
    async fn vault_through_the_server(
        &self,
        address: &str,
        tls: &BTreeMap<String, Vec<u8>>,
    ) -> Result<()> {
        self.vault
            .write_kv_v2("kv", "app/db", &json!({"password": "through-the-server"}))
            .await?;
        let text = |key: &str| String::from_utf8_lossy(&tls[key]).into_owned();
        let external_secret = |name: &str, store: &str, kind: &str| {
            json!({
                "apiVersion": "external-secrets.io/v1", "kind": "ExternalSecret",
                "metadata": {"name": name},
                "spec": {
                    "refreshInterval": "1h",
                    "secretStoreRef": {"name": store, "kind": kind},
                    "target": {"name": name},
                    "data": [{"secretKey": "password",
                              "remoteRef": {"key": "app/db", "property": "password"}}],
                },
            })
        };
        let objects = [
            json!({
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "vault-ca"},
                "data": {"ca.crt": self.vault.ca_pem()},
            }),
            json!({
                "apiVersion": "external-secrets.io/v1", "kind": "SecretStore",
                "metadata": {"name": "vault-tls"},
                "spec": {"provider": {"vault": {
                    "server": self.vault.tls_address(), "path": "kv", "version": "v2",
                    "caProvider": {"type": "ConfigMap", "name": "vault-ca", "key": "ca.crt"},
                    "auth": {"tokenSecretRef": {"name": "vault-token", "key": "token"}},
                }}},
            }),
            json!({
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "team-provider-tls"},
                "stringData": {
                    "ca.crt": text("ca.crt"),
                    "client.crt": text("client.crt"),
                    "client.key": text("client.key"),
                },
            }),
            json!({
                "apiVersion": "external-secrets.io/v1alpha1", "kind": "ProviderClass",
                "metadata": {"name": "team-vault"},
                "spec": {"address": address, "tlsSecretRef": {"name": "team-provider-tls"}},
            }),
            json!({
                "apiVersion": "external-secrets.io/v1", "kind": "SecretStore",
                "metadata": {"name": "team-vault"},
                "spec": {
                    "providerRef": {"apiVersion": "providers.external-secrets.io/v1alpha1",
                                    "kind": "Vault", "name": "vault-every-ref"},
                    "runtimeRef": {"kind": "ProviderClass", "name": "team-vault"},
                },
            }),
            // The store of the kubernetes login, routed to the server since the upgrade.
            external_secret("through-login", "vault", "SecretStore"),
            external_secret("through-tls", "vault-tls", "SecretStore"),
            external_secret("through-cluster-store", "vault-every", "ClusterSecretStore"),
            external_secret("through-team-class", "team-vault", "SecretStore"),
        ];
        let yaml = objects
            .iter()
            .map(serde_yaml::to_string)
            .collect::<Result<Vec<_>, _>>()?
            .join("---\n");
        self.apply(&yaml).await?;
        self.wait_ready(
            &core("v1alpha1", "ProviderClass", "providerclasses"),
            Some(APP),
            "team-vault",
        )
        .await?;
        for name in [
            "through-login",
            "through-tls",
            "through-cluster-store",
            "through-team-class",
        ] {
            self.wait_secret(name, "password", b"through-the-server")
                .await?;
        }
        Ok(())
    }

    /// A Fake store, read through its server.
    async fn fake_through_the_server(&self) -> Result<()> {
        self.apply(
            r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: fake-through}
spec:
  provider:
    fake:
      data: [{key: token, value: through-the-fake-server}]
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: through-fake}
spec:
  refreshInterval: 1h
  secretStoreRef: {name: fake-through, kind: SecretStore}
  data: [{secretKey: token, remoteRef: {key: token}}]
"#,
        )
        .await?;
        self.wait_secret("through-fake", "token", b"through-the-fake-server")
            .await
    }

    /// A GitLab store with its CA in a ConfigMap (the server reads both kinds of credential;
    /// the CA is any valid one, since the stand-in speaks plain HTTP), read through its server.
    async fn gitlab_through_the_server(&self) -> Result<()> {
        self.gitlab.add_project_variable(
            "acme/app",
            gitlab_standin::Variable::new("THROUGH", "the-gitlab-server"),
        )?;
        let ca = json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gitlab-ca"},
            "data": {"ca.crt": self.vault.ca_pem()},
        });
        let store = self.gitlab_inline_store("gl-ca").replace(
            "      auth:",
            "      caProvider: {type: ConfigMap, name: gitlab-ca, key: ca.crt}\n      auth:",
        );
        self.apply(&format!(
            r#"{ca}
---
{store}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: through-gitlab}}
spec:
  refreshInterval: 1h
  secretStoreRef: {{name: gl-ca, kind: SecretStore}}
  data: [{{secretKey: value, remoteRef: {{key: THROUGH}}}}]
"#,
            ca = serde_yaml::to_string(&ca)?,
        ))
        .await?;
        self.wait_secret("through-gitlab", "value", b"the-gitlab-server")
            .await
    }

    /// Before GitLab is enabled: an inline GitLab store is refused by the API server, and a
    /// store referencing a Gitlab says which CRD and which chart value are missing.
    async fn gitlab_not_installed(&self) -> Result<()> {
        // kubectl's strict field validation names the unknown field.
        let strict = self
            .apply(&self.gitlab_inline_store("gl-inline"))
            .await
            .expect_err("an inline GitLab store is refused while GitLab is disabled");
        let message = format!("{strict:#}");
        ensure!(
            message.contains(".spec.provider.gitlab"),
            "a strict apply names the field: {message}"
        );
        // Without it the API server prunes the unknown key; the chart's rule then says why.
        let stores = Api::<DynamicObject>::namespaced_with(
            self.client.clone(),
            APP,
            &core("v1", "SecretStore", "secretstores"),
        );
        let store: DynamicObject = serde_yaml::from_str(&self.gitlab_inline_store("gl-inline"))?;
        let refused = stores
            .create(&PostParams::default(), &store)
            .await
            .expect_err("an inline GitLab store is refused while GitLab is disabled");
        let message = refused.to_string();
        ensure!(
            message.contains("providers.<name>.enabled") && message.contains("fake, vault"),
            "the refusal names the served providers and the chart value: {message}"
        );
        self.apply(
            r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: gl}
spec:
  providerRef: {apiVersion: providers.external-secrets.io/v1alpha1, kind: Gitlab, name: gl}
"#,
        )
        .await?;
        let resource = core("v1", "SecretStore", "secretstores");
        testenv::wait_for(TIMEOUT, "store gl ProviderNotInstalled", || async {
            let ready = self.condition(&resource, Some(APP), "gl").await?;
            let message = ready["message"].as_str().unwrap_or_default();
            ensure!(
                ready["reason"] == "ProviderNotInstalled"
                    && message.contains("gitlabs.providers.external-secrets.io")
                    && message.contains("providers.gitlab.enabled"),
                "store gl: {ready}"
            );
            anyhow::Ok(())
        })
        .await
    }

    fn gitlab_inline_store(&self, name: &str) -> String {
        format!(
            r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {{name: {name}}}
spec:
  provider:
    gitlab:
      url: {url}
      projectID: "{project}"
      auth: {{SecretRef: {{accessToken: {{name: gitlab-token, key: token}}}}}}
"#,
            url = self.gitlab.url(),
            project = self.gitlab.project_id("acme/app").unwrap_or_default(),
        )
    }

    /// After `helm upgrade` enabled GitLab: the running operator serves it, no restart.
    async fn gitlab_after_upgrade(&self) -> Result<()> {
        let gitlab = self.gitlab;
        gitlab.add_group("acme")?;
        gitlab.add_project("acme/app")?;
        gitlab.add_user("ci", "glpat-chart")?;
        gitlab.grant("ci", "acme/app", GitlabRole::Maintainer)?;
        self.apply(&format!(
            r#"
apiVersion: v1
kind: Secret
metadata: {{name: gitlab-token}}
stringData: {{token: glpat-chart}}
---
apiVersion: providers.external-secrets.io/v1alpha1
kind: Gitlab
metadata: {{name: gl}}
spec:
  url: {url}
  projectID: "{project}"
  auth: {{SecretRef: {{accessToken: {{name: gitlab-token, key: token}}}}}}
"#,
            url = gitlab.url(),
            project = gitlab.project_id("acme/app")?,
        ))
        .await?;
        let gitlabs = api::providers::gitlab::DESCRIPTOR
            .storage_resource(api::provider_kinds::Scope::Namespaced);
        self.wait_ready(&gitlabs, Some(APP), "gl").await?;
        self.wait_ready(&core("v1", "SecretStore", "secretstores"), Some(APP), "gl")
            .await?;
        self.apply(&self.gitlab_inline_store("gl-inline")).await?;
        let stores = core("v1", "SecretStore", "secretstores");
        self.wait_ready(&stores, Some(APP), "gl-inline").await?;
        // Gitlab converts through the webhook: its new CRDs trust it without waiting for the
        // operator's periodic check.
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        for crd in [
            "gitlabs.providers.external-secrets.io",
            "gitlabs.cluster.providers.external-secrets.io",
        ] {
            testenv::wait_for(
                Duration::from_secs(20),
                &format!("{crd} caBundle"),
                || async {
                    let value = serde_json::to_value(crds.get(crd).await?.spec.conversion)?;
                    let bundle = value["webhook"]["clientConfig"]["caBundle"].as_str();
                    ensure!(
                        bundle.is_some_and(|b| !b.is_empty()),
                        "{crd} has no caBundle yet"
                    );
                    anyhow::Ok(())
                },
            )
            .await?;
        }
        Ok(())
    }

    /// After `helm upgrade` enabled Kubernetes: the running operator serves a store reading
    /// another namespace of this cluster with a bearer token (its CA from `kube-root-ca.crt`).
    async fn kubernetes_after_upgrade(&self) -> Result<()> {
        let shared = "k8s-shared";
        testenv::apply_yaml(
            &self.client,
            &format!(
                r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {shared}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: reader, namespace: {shared}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: shared-db, namespace: {shared}}}
stringData: {{password: from-another-namespace}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: reader, namespace: {shared}}}
rules: [{{apiGroups: [""], resources: [secrets], verbs: [get, list]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: reader, namespace: {shared}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}}
subjects: [{{kind: ServiceAccount, name: reader, namespace: {shared}}}]
"#
            ),
            true,
        )
        .await?;
        let token = testenv::service_account_token(
            &self.client,
            shared,
            "reader",
            &[],
            Duration::from_secs(3600),
        )
        .await?;
        self.apply(&format!(
            r#"
apiVersion: v1
kind: Secret
metadata: {{name: shared-token}}
stringData: {{token: {token}}}
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {{name: shared}}
spec:
  provider:
    kubernetes:
      remoteNamespace: {shared}
      server: {{caProvider: {{type: ConfigMap, name: kube-root-ca.crt, key: ca.crt}}}}
      auth: {{token: {{bearerToken: {{name: shared-token, key: token}}}}}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: shared}}
spec:
  secretStoreRef: {{kind: SecretStore, name: shared}}
  target: {{name: shared}}
  data: [{{secretKey: password, remoteRef: {{key: shared-db, property: password}}}}]
"#
        ))
        .await?;
        self.wait_ready(
            &core("v1", "SecretStore", "secretstores"),
            Some(APP),
            "shared",
        )
        .await?;
        self.wait_secret("shared", "password", b"from-another-namespace")
            .await
    }

    /// Kubernetes through its server: the bearer-token store of `kubernetes_after_upgrade`,
    /// routed there since the upgrade, reads a changed value; a `serviceAccount` store makes the
    /// server request a token of ServiceAccount `reader` (the one Vault's login uses), which the
    /// shared namespace lets read.
    async fn kubernetes_through_the_server(&self) -> Result<()> {
        let shared = "k8s-shared";
        testenv::apply_yaml(
            &self.client,
            &format!(
                r#"
apiVersion: v1
kind: Secret
metadata: {{name: shared-db, namespace: {shared}}}
stringData: {{password: through-the-kubernetes-server}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: app-reader, namespace: {shared}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}}
subjects: [{{kind: ServiceAccount, name: reader, namespace: {APP}}}]
"#
            ),
            true,
        )
        .await?;
        self.apply(&format!(
            r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: shared, annotations: {{force-sync: through-the-server}}}}
spec:
  secretStoreRef: {{kind: SecretStore, name: shared}}
  target: {{name: shared}}
  data: [{{secretKey: password, remoteRef: {{key: shared-db, property: password}}}}]
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {{name: shared-as-reader}}
spec:
  provider:
    kubernetes:
      remoteNamespace: {shared}
      server: {{caProvider: {{type: ConfigMap, name: kube-root-ca.crt, key: ca.crt}}}}
      auth: {{serviceAccount: {{name: reader}}}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: shared-as-reader}}
spec:
  refreshInterval: 1h
  secretStoreRef: {{kind: SecretStore, name: shared-as-reader}}
  target: {{name: shared-as-reader}}
  data: [{{secretKey: password, remoteRef: {{key: shared-db, property: password}}}}]
"#
        ))
        .await?;
        for name in ["shared", "shared-as-reader"] {
            self.wait_secret(name, "password", b"through-the-kubernetes-server")
                .await?;
        }
        Ok(())
    }

    /// PushSecret `deletionPolicy: Delete`: the operator holds it with a finalizer until it
    /// removed what it pushed.
    async fn push_deletion(&self) -> Result<()> {
        let pushsecrets = self.api(APP, &core("v1alpha1", "PushSecret", "pushsecrets"));
        pushsecrets
            .patch(
                "push",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"deletionPolicy": "Delete"}})),
            )
            .await?;
        testenv::wait_for(TIMEOUT, "the PushSecret's finalizer", || async {
            let ps = pushsecrets.get("push").await?;
            let finalizers = ps.metadata.finalizers.unwrap_or_default();
            ensure!(!finalizers.is_empty(), "no finalizer yet");
            anyhow::Ok(())
        })
        .await?;
        delete_and_wait(&pushsecrets, "push").await
    }

    /// `namespace` `None` for a cluster-scoped resource.
    fn api(
        &self,
        namespace: impl Into<Option<&'static str>>,
        resource: &ApiResource,
    ) -> Api<DynamicObject> {
        match namespace.into() {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, resource),
            None => Api::all_with(self.client.clone(), resource),
        }
    }

    /// Objects Go ESO left with its finalizers are deletable: the operator removes them.
    async fn eso_finalizers(&self) -> Result<()> {
        self.apply(
            r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata:
  name: eso-store
  finalizers: [secretstore.externalsecrets.io/finalizer]
spec:
  provider:
    fake:
      data: [{key: k, value: v}]
---
apiVersion: external-secrets.io/v1
kind: ClusterSecretStore
metadata:
  name: eso-cluster-store
  finalizers: [secretstore.externalsecrets.io/finalizer]
spec:
  provider:
    fake:
      data: [{key: k, value: v}]
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata:
  name: eso-left
  finalizers: [externalsecrets.external-secrets.io/externalsecret-cleanup]
spec:
  refreshInterval: 1h
  secretStoreRef: {name: eso-store, kind: SecretStore}
  target: {name: eso-left}
  data: [{secretKey: k, remoteRef: {key: k}}]
"#,
        )
        .await?;
        self.wait_secret("eso-left", "k", b"v").await?;
        let es = core("v1", "ExternalSecret", "externalsecrets");
        delete_and_wait(&self.api(APP, &es), "eso-left").await?;
        let store = core("v1", "SecretStore", "secretstores");
        delete_and_wait(&self.api(APP, &store), "eso-store").await?;
        let cluster_store = core("v1", "ClusterSecretStore", "clustersecretstores");
        delete_and_wait(&self.api(None, &cluster_store), "eso-cluster-store").await
    }

    /// A ClusterExternalSecret (with ESO's finalizer) and a ClusterPushSecret over the namespaces
    /// labelled `cluster-kinds=yes`: each writes its child into the app namespace once labelled,
    /// deletes it once unlabelled, and the ClusterExternalSecret is released at its deletion.
    async fn cluster_kinds(&self) -> Result<()> {
        let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(self.client.clone());
        let label = |value: Option<&str>| {
            Patch::Merge(json!({"metadata": {"labels": {"cluster-kinds": value}}}))
        };
        namespaces
            .patch(APP, &PatchParams::default(), &label(Some("yes")))
            .await?;
        self.apply(
            r#"
apiVersion: external-secrets.io/v1
kind: ClusterExternalSecret
metadata:
  name: cluster-es
  finalizers: [externalsecrets.external-secrets.io/clusterexternalsecret-cleanup]
spec:
  namespaceSelectors: [{matchLabels: {cluster-kinds: "yes"}}]
  externalSecretSpec:
    refreshInterval: 1h
    secretStoreRef: {name: fake, kind: SecretStore}
    target: {name: from-cluster-es}
    data: [{secretKey: k, remoteRef: {key: db}}]
---
apiVersion: external-secrets.io/v1alpha1
kind: ClusterPushSecret
metadata: {name: cluster-push}
spec:
  namespaceSelectors: [{matchLabels: {cluster-kinds: "yes"}}]
  pushSecretSpec:
    refreshInterval: 1h
    secretStoreRefs: [{name: fake, kind: SecretStore}]
    selector: {secret: {name: to-push}}
    data:
      - match: {secretKey: k, remoteRef: {remoteKey: cluster-pushed-key}}
"#,
        )
        .await?;
        let es = core("v1", "ExternalSecret", "externalsecrets");
        let ps = core("v1alpha1", "PushSecret", "pushsecrets");
        self.wait_ready(&es, Some(APP), "cluster-es").await?;
        self.wait_ready(&ps, Some(APP), "cluster-push").await?;
        namespaces
            .patch(APP, &PatchParams::default(), &label(None))
            .await?;
        for (resource, name) in [(&es, "cluster-es"), (&ps, "cluster-push")] {
            let children = self.api(APP, resource);
            testenv::wait_for(TIMEOUT, &format!("{name}'s child deleted"), || async {
                ensure!(children.get_opt(name).await?.is_none(), "still there");
                anyhow::Ok(())
            })
            .await?;
        }
        let ces = core("v1", "ClusterExternalSecret", "clusterexternalsecrets");
        delete_and_wait(&self.api(None, &ces), "cluster-es").await?;
        let cps = core("v1alpha1", "ClusterPushSecret", "clusterpushsecrets");
        delete_and_wait(&self.api(None, &cps), "cluster-push").await
    }

    /// For each enabled provider, in both scopes: an inline store gets its provider object
    /// applied and validated, then moves to a providerRef and the object goes.
    async fn every_kind_in_both_scopes(&self) -> Result<()> {
        let token = self.vault.root_token();
        self.apply(&format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: vault-token}}\nstringData: {{token: {token}}}\n"
        ))
        .await?;
        for descriptor in api::providers::ALL {
            let spec = self.minimal_spec(descriptor.store_key)?;
            let name = format!("{}-every", descriptor.store_key);
            let scopes = [
                ("SecretStore", "secretstores", Scope::Namespaced, Some(APP)),
                (
                    "ClusterSecretStore",
                    "clustersecretstores",
                    Scope::Cluster,
                    None,
                ),
            ];
            for (kind, plural, scope, namespace) in scopes {
                let resource = descriptor.storage_resource(scope);
                let store = json!({
                    "apiVersion": "external-secrets.io/v1", "kind": kind,
                    "metadata": {"name": name},
                    "spec": {"provider": {descriptor.store_key: spec}},
                });
                self.apply(&serde_yaml::to_string(&store)?).await?;
                let what = format!("{kind} {name}'s {} validated", descriptor.kind);
                testenv::wait_for(TIMEOUT, &what, || {
                    self.condition(&resource, namespace, &name)
                })
                .await?;
                let target = json!({
                    "apiVersion": resource.api_version, "kind": descriptor.kind,
                    "metadata": {"name": format!("{name}-ref")}, "spec": spec,
                });
                self.apply(&serde_yaml::to_string(&target)?).await?;
                let reference = json!({"spec": {"provider": null, "providerRef": {
                    "apiVersion": resource.api_version, "kind": descriptor.kind,
                    "name": format!("{name}-ref")}}});
                self.api(namespace, &core("v1", kind, plural))
                    .patch(&name, &PatchParams::default(), &Patch::Merge(reference))
                    .await?;
                let objects = self.api(namespace, &resource);
                let what = format!(
                    "the {} converted for {kind} {name} deleted",
                    descriptor.kind
                );
                testenv::wait_for(TIMEOUT, &what, || async {
                    ensure!(objects.get_opt(&name).await?.is_none(), "still there");
                    anyhow::Ok(())
                })
                .await?;
            }
        }
        Ok(())
    }

    /// A spec each provider accepts, its Secrets in `app` (so valid in both scopes).
    fn minimal_spec(&self, key: &str) -> Result<Value> {
        let secret = |name: &str, key: &str| json!({"name": name, "key": key, "namespace": APP});
        Ok(match key {
            "fake" => json!({"data": [{"key": "k", "value": "v"}]}),
            "vault" => json!({
                "server": self.vault.address(), "path": "kv", "version": "v2",
                "auth": {"tokenSecretRef": secret("vault-token", "token")},
            }),
            "gitlab" => json!({
                "url": self.gitlab.url(),
                "projectID": self.gitlab.project_id("acme/app")?.to_string(),
                "auth": {"SecretRef": {"accessToken": secret("gitlab-token", "token")}},
            }),
            "kubernetes" => json!({
                "remoteNamespace": "k8s-shared",
                "server": {"caProvider": {"type": "ConfigMap", "name": "kube-root-ca.crt",
                                          "key": "ca.crt", "namespace": APP}},
                "auth": {"token": {"bearerToken": secret("shared-token", "token")}},
            }),
            // Keys are not checked with AWS until a call needs them: any Secret key will do.
            "aws" => json!({
                "service": "SecretsManager", "region": "eu-central-1",
                "auth": {"secretRef": {
                    "accessKeyIDSecretRef": secret("vault-token", "token"),
                    "secretAccessKeySecretRef": secret("vault-token", "token"),
                }},
            }),
            other => {
                bail!("no minimal spec for provider {other}: add one so its RBAC is exercised")
            }
        })
    }
}

async fn delete_and_wait(api: &Api<DynamicObject>, name: &str) -> Result<()> {
    api.delete(name, &Default::default()).await?;
    testenv::wait_for(TIMEOUT, &format!("{name} deleted"), || async {
        ensure!(api.get_opt(name).await?.is_none(), "{name} still exists");
        anyhow::Ok(())
    })
    .await
}

fn core(version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(api::GROUP, version, kind), plural)
}

/// Zero refusals of `user` in the audit log, and every permission `granted` used at least once
/// (or listed in `unused_on_purpose`).
fn rbac_is_minimal(
    cp: &ControlPlane,
    user: &str,
    granted: &BTreeSet<audit::Permission>,
    unused_on_purpose: &[(&str, &str)],
) -> Result<()> {
    let log = std::fs::read_to_string(cp.audit_log_path())?;
    let requests = audit::requests(&log, user)?;
    ensure!(
        !requests.is_empty(),
        "the audit log has no request of {user}"
    );
    let findings = audit::findings(&requests, granted, unused_on_purpose);
    ensure!(
        findings.is_empty(),
        "the chart's RBAC is not minimal for {user} in this run:\n  {}",
        findings.join("\n  ")
    );
    Ok(())
}
