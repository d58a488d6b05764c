//! The OCI images `hack/build-images.sh` writes (`hack/image`), built here from this test run's
//! binary (the debug build the suite has already; the published images carry the release build
//! of the same source): built twice to the same digests, read back by skopeo, unpacked by umoci,
//! and their entrypoints run from the unpacked root filesystem in a chroot, as user 65532,
//! against the test control plane.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, ensure};
use image::Built;
use libtest_mimic::Trial;
use serde_json::Value;
use testenv::ProviderPki;

use crate::restart::Operator;
use crate::sync::{bytes, wait_secret};
use crate::{Env, trial};

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial(
            "images::built_twice_they_are_the_same_valid_oci_images",
            env,
            |env| async move { reproducible_and_valid(&env) },
        ),
        trial(
            "images::the_operator_image_syncs_an_external_secret_from_its_root_filesystem",
            env,
            operator_image,
        ),
        trial(
            "images::a_provider_server_image_serves_a_store",
            env,
            provider_server_image,
        ),
    ]
}

/// Both builds, made once for the three trials (kept in [`Env`], so that the files go when
/// the run ends): the first in full, the second as its digests and its archives' digests.
pub struct Builds {
    _dir: tempfile::TempDir,
    first: Vec<Built>,
    first_archives: Vec<String>,
    second: Vec<Built>,
    second_archives: Vec<String>,
}

fn archive_digests(built: &[Built]) -> Result<Vec<String>> {
    built
        .iter()
        .map(|b| Ok(image::digest(&std::fs::read(&b.archive)?)))
        .collect()
}

fn builds(env: &Env) -> Result<&Builds> {
    env.images
        .get_or_init(|| {
            let build = || -> Result<Builds> {
                let dir = tempfile::Builder::new()
                    .prefix("external-secrets-images-")
                    .tempdir()?;
                let inputs = image::Inputs {
                    binary: crate::out_of_process::binary().to_owned(),
                    ca_certificates: "/etc/ssl/certs/ca-certificates.crt".into(),
                    registry: "ghcr.io/external-secrets-rs".into(),
                    source: image::Source::from_repository(&Env::path(""))?,
                    provider_servers: image::PROVIDER_SERVERS.map(String::from).to_vec(),
                };
                let first = image::build(&inputs, &dir.path().join("first"))?;
                let second_dir = dir.path().join("second");
                let second = image::build(&inputs, &second_dir)?;
                let (first_archives, second_archives) =
                    (archive_digests(&first)?, archive_digests(&second)?);
                // Nearly a GB with a debug binary, and only its digests are compared.
                std::fs::remove_dir_all(second_dir)?;
                Ok(Builds {
                    _dir: dir,
                    first,
                    first_archives,
                    second,
                    second_archives,
                })
            };
            build().map_err(|e| crate::chain(&e))
        })
        .as_ref()
        .map_err(|e| anyhow!("building the images: {e}"))
}

fn built<'a>(env: &'a Env, name: &str) -> Result<&'a Built> {
    builds(env)?
        .first
        .iter()
        .find(|b| b.name == name)
        .ok_or_else(|| anyhow!("no image {name} was built"))
}

/// A tool from Debian's packages, or an error saying how to install it.
fn tool(name: &str) -> Result<PathBuf> {
    ["/usr/bin", "/usr/local/bin", "/usr/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .ok_or_else(|| anyhow!("{name} is not installed: apt-get install {name} (.ci/run installs skopeo and umoci)"))
}

fn run(command: &mut Command) -> Result<String> {
    let out = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    ensure!(
        out.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

fn git_head() -> Result<String> {
    Ok(run(Command::new("git")
        .current_dir(Env::path(""))
        .args(["rev-parse", "HEAD"]))?
    .trim()
    .to_owned())
}

fn reproducible_and_valid(env: &Env) -> Result<()> {
    let builds = builds(env)?;
    let names: Vec<&str> = builds.first.iter().map(|b| b.name.as_str()).collect();
    ensure!(
        names
            == [
                "external-secrets",
                "external-secrets-provider-fake",
                "external-secrets-provider-vault",
                "external-secrets-provider-gitlab",
                "external-secrets-provider-kubernetes",
                "external-secrets-provider-aws"
            ],
        "images built: {names:?}"
    );
    let head = git_head()?;
    let chart = std::fs::read_to_string(Env::path("charts/external-secrets/Chart.yaml"))?;
    let app_version = chart
        .lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .context("the chart's appVersion")?;
    let skopeo = tool("skopeo")?;
    for (i, (first, second)) in builds.first.iter().zip(&builds.second).enumerate() {
        let name = &first.name;
        ensure!(
            first.digest == second.digest,
            "{name}: built twice, {} then {}",
            first.digest,
            second.digest
        );
        ensure!(
            builds.first_archives[i] == builds.second_archives[i],
            "{name}: the two archives differ"
        );
        ensure!(
            first.reference == format!("ghcr.io/external-secrets-rs/{name}:{app_version}"),
            "{name}: reference {}",
            first.reference
        );
        // skopeo reads both the layout and the archive, checks the manifest against the
        // digest and gives the config back.
        for transport in [
            format!("oci:{}", first.layout.display()),
            format!("oci-archive:{}", first.archive.display()),
        ] {
            let inspected: Value =
                serde_json::from_str(&run(Command::new(&skopeo).args(["inspect", &transport]))?)?;
            ensure!(
                inspected["Digest"] == first.digest.as_str(),
                "{transport}: skopeo's digest {} is not {}",
                inspected["Digest"],
                first.digest
            );
            ensure!(
                inspected["Os"] == "linux" && inspected["Architecture"] == "amd64",
                "{transport}: {inspected}"
            );
            let labels = &inspected["Labels"];
            let revision = labels["org.opencontainers.image.revision"]
                .as_str()
                .unwrap_or_default();
            ensure!(
                revision == head || revision == format!("{head}-dirty"),
                "{transport}: revision label {revision:?}, HEAD is {head}"
            );
            ensure!(
                labels["org.opencontainers.image.version"] == app_version.as_str()
                    && labels["org.opencontainers.image.source"]
                        .as_str()
                        .is_some_and(|s| s.starts_with("https://")),
                "{transport}: labels {labels}"
            );
        }
        let config: Value = serde_json::from_str(&run(Command::new(&skopeo).args([
            "inspect",
            "--config",
            &format!("oci:{}", first.layout.display()),
        ]))?)?;
        let expected_entrypoint: Vec<String> = match name.strip_prefix("external-secrets-provider-")
        {
            None => vec!["/external-secrets".into()],
            Some(provider) => {
                let kind = image::PROVIDER_SERVERS
                    .iter()
                    .find(|k| k.to_lowercase() == provider)
                    .context("a provider server's kind")?;
                ["/external-secrets", "provider", "serve"]
                    .map(String::from)
                    .into_iter()
                    .chain([format!("--kind={kind}")])
                    .collect()
            }
        };
        ensure!(
            config["config"]["Entrypoint"] == serde_json::json!(expected_entrypoint),
            "{name}: entrypoint {}",
            config["config"]["Entrypoint"]
        );
        ensure!(
            config["config"]["User"] == "65532:65532",
            "{name}: user {}",
            config["config"]["User"]
        );
        // One set of layers for every image: a node pulls the binary once.
        ensure!(
            config["rootfs"] == built(env, "external-secrets")?.config()?["rootfs"],
            "{name}: its layers are not the operator's"
        );
    }
    Ok(())
}

trait Config {
    fn config(&self) -> Result<Value>;
}

impl Config for Built {
    fn config(&self) -> Result<Value> {
        Ok(serde_json::from_str(&run(Command::new(tool("skopeo")?)
            .args([
                "inspect",
                "--config",
                &format!("oci:{}", self.layout.display()),
            ]))?)?)
    }
}

/// An image unpacked by umoci into a runtime bundle: `rootfs/` and the OCI runtime config.
struct Unpacked {
    dir: tempfile::TempDir,
    runtime: Value,
}

impl Unpacked {
    fn new(built: &Built) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("external-secrets-bundle-")
            .tempdir()?;
        let bundle = dir.path().join("bundle");
        let mut umoci = Command::new(tool("umoci")?);
        umoci.arg("unpack");
        if !is_root()? {
            umoci.arg("--rootless");
        }
        let tag = built
            .reference
            .rsplit_once(':')
            .map(|(_, t)| t)
            .unwrap_or_default();
        run(umoci
            .arg("--image")
            .arg(format!("{}:{tag}", built.layout.display()))
            .arg(&bundle))?;
        let runtime: Value = serde_json::from_slice(&std::fs::read(bundle.join("config.json"))?)?;
        let uid = &runtime["process"]["user"];
        ensure!(
            uid["uid"] == 65532 && uid["gid"] == 65532,
            "{}: the runtime config's user is {uid}",
            built.name
        );
        Ok(Self { dir, runtime })
    }

    fn rootfs(&self) -> PathBuf {
        self.dir.path().join("bundle/rootfs")
    }

    /// The image's entrypoint and command, run in a chroot of its root filesystem as the
    /// image's user (as root; otherwise as the root of a user namespace of its own).
    fn command(&self, log: &Path) -> Result<Command> {
        let args: Vec<String> = serde_json::from_value(self.runtime["process"]["args"].clone())?;
        let env: Vec<String> = serde_json::from_value(self.runtime["process"]["env"].clone())?;
        let chroot = tool("chroot")?;
        let mut command = if is_root()? {
            let mut c = Command::new(chroot);
            c.arg("--userspec=65532:65532");
            c
        } else {
            let mut c = Command::new(tool("unshare")?);
            c.args(["--user", "--map-root-user"]).arg(chroot);
            c
        };
        let log = std::fs::File::create(log)?;
        command
            .arg(self.rootfs())
            .args(args)
            .env_clear()
            .envs(env.iter().filter_map(|e| e.split_once('=')))
            .stdout(log.try_clone()?)
            .stderr(log);
        Ok(command)
    }

    /// Puts `contents` at `path` inside the root filesystem, readable by the image's user.
    fn put(&self, path: &str, contents: &[u8]) -> Result<()> {
        let target = self.rootfs().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(target.parent().context("a parent folder")?)?;
        std::fs::write(&target, contents)?;
        Ok(())
    }
}

fn is_root() -> Result<bool> {
    Ok(run(Command::new("id").arg("-u"))?.trim() == "0")
}

/// The last lines of a log, for a failure's message.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

async fn operator_image(env: Arc<Env>) -> Result<()> {
    let unpacked = Unpacked::new(built(&env, "external-secrets")?)?;
    ensure!(
        unpacked.runtime["process"]["args"]
            == serde_json::json!(["/external-secrets", "controller"]),
        "the operator image runs {}",
        unpacked.runtime["process"]["args"]
    );
    unpacked.put(
        "/etc/kubeconfig",
        &std::fs::read(env.control_plane().kubeconfig_path())?,
    )?;
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "image").await?;
    let class = format!("image-{ns}");
    let log = unpacked.dir.path().join("operator.log");
    let mut command = unpacked.command(&log)?;
    command.args(["--kubeconfig", "/etc/kubeconfig", "--disable-webhook"]);
    let operator = Operator::start_command(command, &ns, &class, &[])?;
    testenv::apply_yaml_in(
        &client,
        &ns,
        &format!(
            "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {{name: fake}}\nspec:\n  controller: {class}\n  provider:\n    fake:\n      data: [{{key: user, value: alice}}]\n---\napiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: from-image}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{name: fake}}\n  data: [{{secretKey: user, remoteRef: {{key: user}}}}]\n"
        ),
        true,
    )
    .await?;
    wait_secret(&client, &ns, "from-image", &bytes(&[("user", "alice")]))
        .await
        .with_context(|| format!("the operator's log:\n{}", tail(&log)))?;
    let synced = operator
        .sum("externalsecret_sync_calls", |l| l.contains(&ns))
        .await?;
    ensure!(
        synced >= 1.0,
        "the operator in the chroot reconciled it: {synced}"
    );
    Ok(())
}

/// The provider server of an image, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn provider_server_image(env: Arc<Env>) -> Result<()> {
    let unpacked = Unpacked::new(built(&env, "external-secrets-provider-fake")?)?;
    let pki = ProviderPki::generate()?;
    for (name, contents) in [
        ("ca.crt", &pki.ca_pem),
        ("tls.crt", &pki.server.cert_pem),
        ("tls.key", &pki.server.key_pem),
    ] {
        unpacked.put(&format!("/etc/provider/certs/{name}"), contents.as_bytes())?;
    }
    unpacked.put(
        "/etc/kubeconfig",
        &std::fs::read(env.control_plane().kubeconfig_path())?,
    )?;
    let free = || -> Result<u16> {
        Ok(std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port())
    };
    let (port, metrics) = (free()?, free()?);
    let log = unpacked.dir.path().join("provider.log");
    let mut command = unpacked.command(&log)?;
    // The chart's arguments for a provider server, with the kubeconfig a pod would not need.
    command.args([
        format!("--port={port}"),
        format!("--metrics-port={metrics}"),
        "--tls-dir=/etc/provider/certs".into(),
        "--kubeconfig=/etc/kubeconfig".into(),
    ]);
    let _server = Server(command.spawn().context("starting the provider server")?);
    let address = format!("127.0.0.1:{port}");
    testenv::wait_for(
        crate::operator::TIMEOUT,
        "the provider server to listen",
        || async { tokio::net::TcpStream::connect(&address).await.map(|_| ()) },
    )
    .await
    .with_context(|| format!("the provider server's log:\n{}", tail(&log)))?;

    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "image-provider").await?;
    crate::out_of_process::provider_class_at(&client, &ns, "fake", &address, &pki).await?;
    testenv::apply_yaml_in(
        &client,
        &ns,
        "apiVersion: providers.external-secrets.io/v1alpha1\nkind: Fake\nmetadata: {name: fake}\nspec: {data: [{key: user, value: alice}]}\n---\napiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {name: served}\nspec:\n  runtimeRef: {name: fake}\n  providerRef: {apiVersion: providers.external-secrets.io/v1alpha1, kind: Fake, name: fake}\n---\napiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {name: served}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {name: served}\n  data: [{secretKey: user, remoteRef: {key: user}}]\n",
        true,
    )
    .await?;
    wait_secret(&client, &ns, "served", &bytes(&[("user", "alice")]))
        .await
        .with_context(|| format!("the provider server's log:\n{}", tail(&log)))?;
    let served = crate::operator::scrape(format!("127.0.0.1:{metrics}").parse()?).await?;
    ensure!(
        served
            .lines()
            .any(|l| l.starts_with("grpc_server_handled_total") && l.contains("GetSecret")),
        "the server in the chroot answered the read:\n{served}"
    );
    Ok(())
}
