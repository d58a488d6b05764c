//! A one-node cluster: the [`ControlPlane`] plus kube-scheduler, containerd, a kubelet,
//! kube-proxy (nftables mode), CoreDNS and kube-router's network policy controller (which
//! enforces NetworkPolicy), with Pods on a bridge of the run's own, so that the chart runs as its
//! users run it (hack/README.md, "The node").
//!
//! The node changes the host (a bridge, cgroups, mounts, iptables chains the kubelet and
//! kube-router make, kube-router's ipsets, the kube-proxy nftables tables, sysctls); [`Host`]
//! records what was there before and puts it back when the node is dropped, also after a failed
//! start. Everything it makes is named after the run, so that other control planes and tests on
//! the machine are never touched.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{Node as NodeObject, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};

use crate::process::Supervisor;
use crate::{
    ControlPlane, KUBERNETES_VERSION, block_on_own_thread, fail_if_exited, keep_if_asked,
    require_files, reserve_port, tail, testbin_dir, testbin_root,
};

/// The CoreDNS version `hack/build-node.sh` builds by default.
pub const COREDNS_VERSION: &str = "1.15.0";
/// The kube-router version `hack/build-node.sh` builds (only its network policy controller runs).
pub const KUBE_ROUTER_VERSION: &str = "2.1.0";
/// The chain kube-router's network policy controller makes first (and jumps to from `FORWARD`).
const KUBE_ROUTER_FORWARD: &str = "KUBE-ROUTER-FORWARD";
/// How long kube-router may take to set up its chains.
const KUBE_ROUTER_TIMEOUT: Duration = Duration::from_secs(60);
/// The sandbox image `hack/build-node.sh` makes (`hack/testbin/pause`), as containerd names it.
const PAUSE_IMAGE: &str = "external-secrets-rs.invalid/pause";
const PAUSE_TAG: &str = "1";
const NODE_BINARIES: [&str; 3] = ["kubelet", "kube-scheduler", "kube-proxy"];
const BUILD_NODE: &str = "bash hack/build-node.sh";
/// What Pods call the API server by, besides its addresses (the serving certificate names them).
pub(crate) const KUBERNETES_SERVICE_NAMES: [&str; 4] = [
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];
/// The kubelet and kube-proxy change these; they are put back when the node stops.
const SYSCTLS: [&str; 9] = [
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
];
const NODE_READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a stop waits for the kubelet to stop the Pods (and tear down their network).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

/// The node's addresses: a /24 of `10.200.0.0/16` for Pods, whose first address is the node's
/// (on the bridge), and the same /24 of `10.201.0.0/16` for Services.
pub(crate) struct Network {
    pub ip: Ipv4Addr,
    pub pod_cidr: String,
    pub service_cidr: String,
    pub kubernetes_service_ip: Ipv4Addr,
    pub bridge: String,
}

impl Network {
    fn numbered(n: u8) -> Self {
        Self {
            ip: Ipv4Addr::new(10, 200, n, 1),
            pod_cidr: format!("10.200.{n}.0/24"),
            service_cidr: format!("10.201.{n}.0/24"),
            kubernetes_service_ip: Ipv4Addr::new(10, 201, n, 1),
            bridge: format!("esnode{n}"),
        }
    }
}

/// A running one-node cluster; dropping it stops every process and undoes every change to the
/// host.
pub struct Node {
    // Taken in this order by `Drop`: the kubelet and its peers, then the control plane, then
    // containerd once its containers are gone, then the host's state.
    processes: Option<Supervisor>,
    control_plane: Option<ControlPlane>,
    containerd: Option<Supervisor>,
    host: Option<Host>,
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    name: String,
    ip: Ipv4Addr,
    socket: PathBuf,
    /// Held until everything above is undone: dropped after `Drop::drop`, as the last field.
    _host_lock: std::fs::File,
}

impl Node {
    /// Starts the cluster and imports `images` (OCI archives, named by their
    /// `io.containerd.image.name` annotation, as `hack/build-images.sh` writes them) into its
    /// containerd; blocks until the Node is Ready. Needs root.
    pub fn start(images: &[PathBuf]) -> Result<Self> {
        let started = Instant::now();
        preflight()?;
        let host_lock = lock_host()?;
        let dir = tempfile::Builder::new()
            .prefix("external-secrets-node-")
            .tempdir()
            .context("creating the node's temporary folder")?;
        let path = dir.path().to_owned();
        let mut host = Host::record(&path)?;
        let network = host.claim_network()?;
        let mut node = Self {
            processes: Some(Supervisor::new()?),
            control_plane: None,
            containerd: Some(Supervisor::new()?),
            host: Some(host),
            dir: Some(dir),
            socket: path.join("containerd.sock"),
            name: format!("node-{}", network.ip.octets()[2]),
            ip: network.ip,
            path,
            _host_lock: host_lock,
        };
        if let Err(err) = node.boot(&network, images) {
            // Kept for its logs, whatever EXTERNAL_SECRETS_TESTENV_KEEP says.
            let kept = node.dir.take().map(tempfile::TempDir::keep);
            drop(node);
            return Err(err.context(format!(
                "starting the node failed; its folder (logs) is kept: {}",
                kept.map(|p| p.display().to_string()).unwrap_or_default()
            )));
        }
        eprintln!(
            "testenv: one-node cluster (Kubernetes {KUBERNETES_VERSION}, node {} at {}) ready in {:.1}s (kubeconfig {})",
            node.name,
            node.ip,
            started.elapsed().as_secs_f64(),
            node.kubeconfig_path().display()
        );
        Ok(node)
    }

    fn boot(&mut self, network: &Network, images: &[PathBuf]) -> Result<()> {
        let cp = ControlPlane::start_for_node(network).context("the control plane")?;
        let cp_dir = cp.dir().to_owned();
        self.control_plane = Some(cp);
        self.start_containerd(network, images)
            .context("containerd")?;

        let f = |name: &str| self.path.join(name).to_string_lossy().into_owned();
        let cp = self.control_plane();
        let admin = cp.kubeconfig_path().to_string_lossy().into_owned();
        let bin = testbin_dir(KUBERNETES_VERSION);

        std::fs::write(self.path.join("Corefile"), corefile(network, &admin))?;
        self.spawn(
            "coredns",
            &testbin_root()
                .join(format!("coredns-{COREDNS_VERSION}"))
                .join("coredns"),
            vec!["-conf".into(), f("Corefile")],
        )?;
        self.spawn(
            "kube-scheduler",
            &bin.join("kube-scheduler"),
            vec![
                format!("--kubeconfig={admin}"),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
            ],
        )?;

        let metrics = reserve_port()?;
        let healthz = reserve_port()?;
        std::fs::write(
            self.path.join("kube-proxy.yaml"),
            serde_json::to_string_pretty(&serde_json::json!({
                "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                "kind": "KubeProxyConfiguration",
                "clientConnection": {"kubeconfig": admin},
                "hostnameOverride": self.name,
                // Its rules live in tables of its own (`ip kube-proxy`), which go with the node.
                "mode": "nftables",
                "clusterCIDR": network.pod_cidr,
                "metricsBindAddress": format!("127.0.0.1:{}", crate::port(&metrics)?),
                "healthzBindAddress": format!("127.0.0.1:{}", crate::port(&healthz)?),
                // Zero keeps the host's conntrack settings: nothing to put back.
                "conntrack": {
                    "maxPerCore": 0, "min": 0,
                    "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
                    "udpTimeout": "0s", "udpStreamTimeout": "0s",
                },
            }))?,
        )?;
        drop((metrics, healthz));
        self.spawn(
            "kube-proxy",
            &bin.join("kube-proxy"),
            vec![format!("--config={}", f("kube-proxy.yaml"))],
        )?;

        let identity = cp.issue_client_certificate(
            &format!("system:node:{}", self.name),
            Some("system:nodes"),
        )?;
        std::fs::write(self.path.join("kubelet.crt"), &identity.cert_pem)?;
        std::fs::write(self.path.join("kubelet.key"), &identity.key_pem)?;
        std::fs::write(
            self.path.join("kubelet.kubeconfig"),
            kubeconfig(
                cp.server_url(),
                &cp_dir.join("serving-ca.crt"),
                &self.path.join("kubelet.crt"),
                &self.path.join("kubelet.key"),
            )?,
        )?;
        // Default-policy Pods copy it; ClusterFirst ones get the cluster DNS instead.
        std::fs::write(
            self.path.join("resolv.conf"),
            format!("nameserver {}\n", network.ip),
        )?;
        let kubelet_port = reserve_port()?;
        let cgroup_root = self.host()?.cgroup_root.clone();
        std::fs::write(
            self.path.join("kubelet.yaml"),
            serde_json::to_string_pretty(&serde_json::json!({
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                "address": network.ip.to_string(),
                "port": crate::port(&kubelet_port)?,
                "readOnlyPort": 0,
                "healthzPort": 0,
                "authentication": {
                    "anonymous": {"enabled": false},
                    "webhook": {"enabled": true},
                    "x509": {"clientCAFile": cp_dir.join("client-ca.crt")},
                },
                "authorization": {"mode": "Webhook"},
                "containerRuntimeEndpoint": format!("unix://{}", self.socket.display()),
                // The host is cgroup v1 (issue 39); containerd's runc uses cgroupfs too.
                "failCgroupV1": false,
                "cgroupDriver": "cgroupfs",
                "cgroupRoot": cgroup_root,
                "failSwapOn": false,
                "enforceNodeAllocatable": [],
                "protectKernelDefaults": false,
                "clusterDNS": [network.ip.to_string()],
                "clusterDomain": "cluster.local",
                "resolvConf": f("resolv.conf"),
                "podLogsDir": f("pod-logs"),
                "volumePluginDir": f("volume-plugins"),
                // The images are imported, never pulled: the kubelet must not collect them,
                // nor evict Pods because the shared disk of a CI machine fills up.
                "imageGCHighThresholdPercent": 100,
                "imageGCLowThresholdPercent": 99,
                "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%",
                    "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            }))?,
        )?;
        drop(kubelet_port);
        self.spawn(
            "kubelet",
            &bin.join("kubelet"),
            vec![
                format!("--config={}", f("kubelet.yaml")),
                format!("--kubeconfig={}", f("kubelet.kubeconfig")),
                format!("--root-dir={}", f("kubelet")),
                format!("--cert-dir={}", f("kubelet-pki")),
                format!("--hostname-override={}", self.name),
                format!("--node-ip={}", network.ip),
            ],
        )?;
        self.wait_until_ready()?;
        self.start_kube_router(network, &admin)
    }

    /// kube-router's network policy controller alone (iptables chains and ipsets; no routing,
    /// no service proxy: kube-proxy serves the Services), once the Node object it reads exists;
    /// returns when its chains are in place, so that every NetworkPolicy is enforced from then
    /// on (hack/README.md, "What the node is").
    fn start_kube_router(&self, network: &Network, admin: &str) -> Result<()> {
        self.spawn(
            "kube-router",
            &testbin_root()
                .join(format!("kube-router-{KUBE_ROUTER_VERSION}"))
                .join("kube-router"),
            vec![
                format!("--kubeconfig={admin}"),
                format!("--hostname-override={}", self.name),
                "--run-firewall=true".into(),
                "--run-router=false".into(),
                "--run-service-proxy=false".into(),
                format!("--service-cluster-ip-range={}", network.service_cidr),
                // No ports of its own: nothing to collide with another control plane's.
                "--health-port=0".into(),
                "--metrics-port=0".into(),
            ],
        )?;
        let deadline = Instant::now() + KUBE_ROUTER_TIMEOUT;
        loop {
            let chains = iptables_chains()?;
            if chains.contains(&(
                "iptables".to_owned(),
                "filter".to_owned(),
                KUBE_ROUTER_FORWARD.to_owned(),
            )) {
                return Ok(());
            }
            self.fail_if_exited()?;
            ensure!(
                Instant::now() < deadline,
                "kube-router made no {KUBE_ROUTER_FORWARD} chain in {KUBE_ROUTER_TIMEOUT:?}; last lines of kube-router.log:\n{}",
                tail(&self.path.join("kube-router.log"), 30)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn start_containerd(&mut self, network: &Network, images: &[PathBuf]) -> Result<()> {
        let config = containerd_config(&self.path, &self.socket);
        std::fs::write(self.path.join("containerd.toml"), config)?;
        std::fs::create_dir_all(self.path.join("cni"))?;
        std::fs::write(
            self.path.join("cni/10-bridge.conflist"),
            cni_config(network, &self.path),
        )?;
        let containerd = self.containerd.as_ref().context("containerd is stopped")?;
        containerd.spawn(
            "containerd",
            Path::new("containerd"),
            vec![
                "--config".into(),
                self.path.join("containerd.toml").display().to_string(),
            ],
            &self.path.join("containerd.log"),
        )?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.ctr(&["version"]).is_err() {
            fail_if_exited(containerd, &self.path)?;
            ensure!(
                Instant::now() < deadline,
                "containerd did not answer at {} in 30 s; last lines of containerd.log:\n{}",
                self.socket.display(),
                tail(&self.path.join("containerd.log"), 30)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let pause = testbin_root().join(format!("pause-{PAUSE_TAG}/pause.tar"));
        self.ctr(&[
            "images",
            "import",
            "--base-name",
            PAUSE_IMAGE,
            &pause.to_string_lossy(),
        ])?;
        for image in images {
            self.ctr(&["images", "import", &image.to_string_lossy()])?;
        }
        Ok(())
    }

    /// `ctr` against this node's containerd, in the namespace the kubelet's containers live in.
    fn ctr(&self, args: &[&str]) -> Result<String> {
        let socket = self.socket.to_string_lossy();
        let mut all = vec!["--address", &socket, "--namespace", "k8s.io"];
        all.extend_from_slice(args);
        run("ctr", &all)
    }

    fn spawn(&self, name: &str, program: &Path, args: Vec<String>) -> Result<u32> {
        self.processes
            .as_ref()
            .context("the node is stopped")?
            .spawn(name, program, args, &self.path.join(format!("{name}.log")))
    }

    fn host(&self) -> Result<&Host> {
        self.host.as_ref().context("the node is stopped")
    }

    fn fail_if_exited(&self) -> Result<()> {
        if let Some(processes) = &self.processes {
            fail_if_exited(processes, &self.path)?;
        }
        if let Some(containerd) = &self.containerd {
            fail_if_exited(containerd, &self.path)?;
        }
        if let Some(cp) = &self.control_plane {
            cp.fail_if_exited()?;
        }
        Ok(())
    }

    fn wait_until_ready(&self) -> Result<()> {
        let config = self.control_plane().client_config();
        let name = self.name.clone();
        block_on_own_thread(async move {
            let client = kube::Client::try_from(config)?;
            let nodes: Api<NodeObject> = Api::all(client);
            let deadline = Instant::now() + NODE_READY_TIMEOUT;
            loop {
                let why = match nodes.get(&name).await {
                    Ok(node) => match node_ready(&node) {
                        Ok(()) => return Ok(()),
                        Err(why) => why,
                    },
                    Err(e) => e.into(),
                };
                self.fail_if_exited()?;
                if Instant::now() > deadline {
                    bail!(
                        "Node {name} is not Ready after {NODE_READY_TIMEOUT:?}: {why:#}; last lines of kubelet.log:\n{}",
                        tail(&self.path.join("kubelet.log"), 30)
                    );
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })?
    }

    /// Stops the Pods through the kubelet, so that it tears their network down and unmounts
    /// their volumes: the node is cordoned first, so that nothing takes their place.
    fn drain(&self) -> Result<()> {
        let config = self.control_plane().client_config();
        let name = self.name.clone();
        block_on_own_thread(async move {
            let client = kube::Client::try_from(config)?;
            Api::<NodeObject>::all(client.clone())
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"spec": {"unschedulable": true}})),
                )
                .await?;
            let pods: Api<Pod> = Api::all(client.clone());
            for pod in pods.list(&ListParams::default()).await? {
                let (Some(ns), Some(pod_name)) = (pod.metadata.namespace, pod.metadata.name) else {
                    continue;
                };
                Api::<Pod>::namespaced(client.clone(), &ns)
                    .delete(&pod_name, &DeleteParams::default().grace_period(0))
                    .await?;
            }
            anyhow::Ok(())
        })??;
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        loop {
            let running = self.ctr(&["tasks", "list", "--quiet"])?;
            if running.trim().is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "containers still running {DRAIN_TIMEOUT:?} after their Pods were deleted: {}",
                    running.split_whitespace().collect::<Vec<_>>().join(" ")
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Kills and removes whatever containers the kubelet left (it is stopped by then).
    fn remove_containers(&self) -> Result<()> {
        for task in self.ctr(&["tasks", "list", "--quiet"])?.split_whitespace() {
            let _ = self.ctr(&["tasks", "kill", "--signal", "SIGKILL", task]);
            self.ctr(&["tasks", "delete", "--force", task])?;
        }
        for container in self
            .ctr(&["containers", "list", "--quiet"])?
            .split_whitespace()
        {
            self.ctr(&["containers", "delete", container])?;
        }
        Ok(())
    }

    /// The cluster's control plane (admin kubeconfig, client, certificates).
    pub fn control_plane(&self) -> &ControlPlane {
        self.control_plane
            .as_ref()
            .expect("the control plane runs while the node does")
    }

    /// A new admin client bound to the current tokio runtime.
    pub async fn client(&self) -> kube::Client {
        self.control_plane().client().await
    }

    /// An admin kubeconfig (the API server at the node's address).
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.control_plane().kubeconfig_path()
    }

    /// The Node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's address: where the API server, the kubelet and the cluster DNS listen, and the
    /// gateway of the Pods' bridge (the host reaches Pod IPs through it).
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// The node's folder (containerd's and the kubelet's data, the logs of the node's parts).
    pub fn dir(&self) -> &Path {
        &self.path
    }

    /// The cgroup of container `id` (its ID without `containerd://`) of Pod `pod_uid` in the
    /// cgroup v1 `hierarchy` (`memory`, `cpu`, …), under the kubelet's `cgroupRoot`, where the
    /// kernel keeps what the kubelet's summaries are made from (a peak the kubelet does not
    /// report, `memory.max_usage_in_bytes`, among them).
    pub fn container_cgroup(
        &self,
        hierarchy: &str,
        qos: &str,
        pod_uid: &str,
        id: &str,
    ) -> Result<PathBuf> {
        let root = &self.host()?.cgroup_root;
        let mut path = PathBuf::from(format!("/sys/fs/cgroup/{hierarchy}{root}/kubepods"));
        // Guaranteed Pods sit right under kubepods; the other classes in a folder of their own.
        if qos != "Guaranteed" {
            path.push(qos.to_lowercase());
        }
        Ok(path.join(format!("pod{pod_uid}")).join(id))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if self.control_plane.is_some()
            && self.processes.is_some()
            && let Err(e) = self.drain()
        {
            eprintln!("testenv: draining the node: {e:#}");
        }
        drop(self.processes.take());
        drop(self.control_plane.take());
        if self.containerd.is_some()
            && let Err(e) = self.remove_containers()
        {
            eprintln!("testenv: removing the node's containers: {e:#}");
        }
        drop(self.containerd.take());
        drop(self.host.take());
        keep_if_asked(&mut self.dir);
    }
}

/// The host's one node: kube-proxy's nft tables, the KUBE-* iptables chains and the sysctls are
/// host-wide, so a second node started beside a first rewrites its rules, and the first to stop
/// undoes what the other still needs. A second run waits for the first's node to stop.
fn lock_host() -> Result<std::fs::File> {
    let path = Path::new(HOST_LOCK);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => return Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => eprintln!(
            "testenv: another run's node holds {}; waiting for it to stop",
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("locking {}", path.display()));
        }
    }
    file.lock()
        .with_context(|| format!("locking {}", path.display()))?;
    Ok(file)
}

const HOST_LOCK: &str = "/run/external-secrets-node.lock";

/// Fails, naming what to install or build, unless the node can run here.
fn preflight() -> Result<()> {
    ensure!(
        rustix::process::geteuid().is_root(),
        "the one-node cluster needs root (containerd, the kubelet, bridges, cgroups)"
    );
    // The kubelet's settings (cgroupfs driver, a cgroupRoot in every v1 hierarchy), the undo and
    // the limits journey's memory reads are cgroup v1's; a unified hierarchy has none of them.
    ensure!(
        !Path::new("/sys/fs/cgroup/cgroup.controllers").exists(),
        "the one-node cluster is written for a cgroup v1 host, and /sys/fs/cgroup is cgroup v2 here \
         (hack/README.md, \"The node\")"
    );
    require_files(&testbin_dir(KUBERNETES_VERSION), &NODE_BINARIES, BUILD_NODE)?;
    require_files(
        &testbin_root().join(format!("coredns-{COREDNS_VERSION}")),
        &["coredns"],
        BUILD_NODE,
    )?;
    require_files(
        &testbin_root().join(format!("pause-{PAUSE_TAG}")),
        &["pause.tar"],
        BUILD_NODE,
    )?;
    require_files(
        &testbin_root().join(format!("kube-router-{KUBE_ROUTER_VERSION}")),
        &["kube-router"],
        BUILD_NODE,
    )?;
    require_files(
        Path::new("/usr/lib/cni"),
        &["bridge", "host-local"],
        BUILD_NODE,
    )?;
    for program in [
        "containerd",
        "runc",
        "ctr",
        "ip",
        "iptables-save",
        "nft",
        "ipset",
        "umount",
    ] {
        ensure!(
            Command::new("sh")
                .args(["-c", &format!("command -v {program}")])
                .output()
                .is_ok_and(|o| o.status.success()),
            "{program} is not installed; run: {BUILD_NODE}"
        );
    }
    Ok(())
}

fn node_ready(node: &NodeObject) -> Result<()> {
    let conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let ready = conditions.iter().find(|c| c.type_ == "Ready");
    match ready {
        Some(c) if c.status == "True" => Ok(()),
        Some(c) => bail!(
            "Ready={} ({}: {})",
            c.status,
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default()
        ),
        None => bail!("no Ready condition yet"),
    }
}

/// Runs `program args`; its standard output, or an error with its standard error.
fn run(program: &str, args: &[&str]) -> Result<String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    ensure!(
        output.status.success(),
        "{program} {} failed ({}): {}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn kubeconfig(server: &str, ca: &Path, cert: &Path, key: &Path) -> Result<String> {
    Ok(serde_yaml::to_string(&serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "node", "cluster": {
            "server": server, "certificate-authority": ca,
        }}],
        "users": [{"name": "kubelet", "user": {
            "client-certificate": cert, "client-key": key,
        }}],
        "contexts": [{"name": "node", "context": {"cluster": "node", "user": "kubelet"}}],
        "current-context": "node",
    }))?)
}

/// Answers for the cluster's names on the node's address only; nothing is forwarded, as
/// nothing outside the cluster is reachable from a test.
fn corefile(network: &Network, kubeconfig: &str) -> String {
    format!(
        ".:53 {{\n    bind {}\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa {{\n        kubeconfig {kubeconfig}\n        pods insecure\n        fallthrough in-addr.arpa ip6.arpa\n    }}\n}}\n",
        network.ip
    )
}

fn containerd_config(dir: &Path, socket: &Path) -> String {
    let d = |rel: &str| dir.join(rel).display().to_string();
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"

[grpc]
  address = "{socket}"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}:{PAUSE_TAG}"
  # This VM lacks CAP_SYS_RESOURCE: without it every sandbox fails (issue 39).
  restrict_oom_score_adj = true
  # Pods' network namespaces under the run's folder, where the stop finds any left behind.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
    max_conf_num = 1
"#,
        root = d("containerd/root"),
        state = d("containerd/state"),
        socket = socket.display(),
        opt = d("containerd/opt"),
        cni = d("cni"),
    )
}

/// The bridge plugin on the run's own bridge, addresses from host-local kept in the run's
/// folder; no masquerading (nothing outside the node is reached), hairpin for a Pod reaching
/// itself through its Service.
fn cni_config(network: &Network, dir: &Path) -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "cniVersion": "1.0.0",
        "name": network.bridge,
        "plugins": [{
            "type": "bridge",
            "bridge": network.bridge,
            "isGateway": true,
            "ipMasq": false,
            "hairpinMode": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": network.pod_cidr, "gateway": network.ip.to_string()}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": dir.join("cni-ipam"),
            },
        }],
    }))
    .expect("a JSON value serializes")
}

/// What the node changes on the host, as it was before, to put back when the node stops.
struct Host {
    dir: PathBuf,
    bridge: Option<String>,
    sysctls: Vec<(PathBuf, String)>,
    /// `(program, table, chain)` of every iptables chain there was.
    chains: BTreeSet<(String, String, String)>,
    nft_tables: BTreeSet<String>,
    /// Every ipset there was (kube-router's are made by the node).
    ipsets: BTreeSet<String>,
    /// `/<name>` in every cgroup v1 hierarchy: the kubelet's `cgroupRoot`.
    cgroup_root: String,
    cgroup_dirs: Vec<PathBuf>,
    /// Folders made outside the run's folder, when they were not there.
    made_paths: Vec<PathBuf>,
    socket: PathBuf,
}

const IPTABLES: [&str; 2] = ["iptables", "ip6tables"];
const IPTABLES_TABLES: [&str; 3] = ["filter", "nat", "mangle"];
/// Folders the node's parts make whatever they are told: the kubelet's (issue 39), libcni's
/// cache of results and the shims' sockets, which containerd 1.6 does not move.
const HOST_PATHS: [&str; 4] = [
    "/var/lib/kubelet/device-plugins",
    "/var/lib/kubelet",
    "/var/lib/cni",
    "/run/containerd",
];

impl Host {
    fn record(dir: &Path) -> Result<Self> {
        let sysctls = SYSCTLS
            .iter()
            .map(|name| Path::new("/proc/sys").join(name))
            .filter_map(|path| {
                let value = std::fs::read_to_string(&path).ok()?;
                Some((path, value.trim().to_owned()))
            })
            .collect();
        Ok(Self {
            dir: dir.to_owned(),
            bridge: None,
            sysctls,
            chains: iptables_chains()?,
            nft_tables: nft_tables()?,
            ipsets: ipsets()?,
            cgroup_root: String::new(),
            cgroup_dirs: Vec::new(),
            made_paths: HOST_PATHS
                .iter()
                .map(PathBuf::from)
                .filter(|p| !p.exists())
                .collect(),
            socket: dir.join("containerd.sock"),
        })
    }

    /// Takes the first free `10.200.<n>.0/24` (its bridge `esnode<n>` made by us is the
    /// claim: making it fails when another run has it) and the kubelet's cgroup root.
    fn claim_network(&mut self) -> Result<Network> {
        let routes = run("ip", &["-4", "route", "show", "table", "all"])?;
        let start = std::process::id() % 250;
        for offset in 0..250 {
            let n = u8::try_from((start + offset) % 250).expect("below 250");
            let network = Network::numbered(n);
            let taken = |cidr: &str| routes.contains(cidr.trim_end_matches(".0/24"));
            if taken(&network.pod_cidr) || taken(&network.service_cidr) {
                continue;
            }
            if run("ip", &["link", "add", &network.bridge, "type", "bridge"]).is_err() {
                continue;
            }
            self.bridge = Some(network.bridge.clone());
            run(
                "ip",
                &[
                    "addr",
                    "add",
                    &format!("{}/24", network.ip),
                    "dev",
                    &network.bridge,
                ],
            )?;
            run("ip", &["link", "set", &network.bridge, "up"])?;
            self.make_cgroup_root(&format!("external-secrets-node-{n}"))?;
            return Ok(network);
        }
        bail!("no free 10.200.<n>.0/24 for the node's Pods (every esnode<n> bridge is taken)")
    }

    fn make_cgroup_root(&mut self, name: &str) -> Result<()> {
        self.cgroup_root = format!("/{name}");
        for hierarchy in std::fs::read_dir("/sys/fs/cgroup")? {
            let hierarchy = hierarchy?.path();
            if !hierarchy.is_dir() || hierarchy.is_symlink() {
                continue;
            }
            let dir = hierarchy.join(name);
            std::fs::create_dir(&dir)
                .with_context(|| format!("making the cgroup {}", dir.display()))?;
            self.cgroup_dirs.push(dir.clone());
            // A new cpuset has no CPUs nor memory nodes: no process could join it.
            for file in ["cpuset.cpus", "cpuset.mems"] {
                if let Ok(value) = std::fs::read_to_string(hierarchy.join(file)) {
                    std::fs::write(dir.join(file), value.trim())
                        .with_context(|| format!("writing {}", dir.join(file).display()))?;
                }
            }
        }
        Ok(())
    }

    /// Each step on its own, so that one failing does not leave the others undone.
    fn restore(&mut self) -> Vec<anyhow::Error> {
        let mut errors = Vec::new();
        let mut step = |what: &str, result: Result<()>| {
            if let Err(e) = result {
                errors.push(e.context(what.to_owned()));
            }
        };
        step(
            "killing the node's leftover processes",
            self.kill_leftovers(),
        );
        step("unmounting the node's mounts", unmount_under(&self.dir));
        if let Some(bridge) = self.bridge.take() {
            step(
                "deleting the bridge",
                run("ip", &["link", "delete", &bridge]).map(drop),
            );
        }
        step("removing iptables chains", self.remove_new_chains());
        step("removing nftables tables", self.remove_new_nft_tables());
        // After the chains: an ipset that a rule names cannot be destroyed.
        step("destroying ipsets", self.destroy_new_ipsets());
        for (path, value) in &self.sysctls {
            let current = std::fs::read_to_string(path).unwrap_or_default();
            if current.trim() != value {
                step(
                    &format!("restoring {}", path.display()),
                    std::fs::write(path, value).map_err(Into::into),
                );
            }
        }
        for dir in std::mem::take(&mut self.cgroup_dirs) {
            step(
                &format!("removing the cgroup {}", dir.display()),
                remove_cgroup(&dir),
            );
        }
        for path in &self.made_paths {
            if path.exists() {
                step(
                    &format!("removing {}", path.display()),
                    std::fs::remove_dir_all(path).map_err(Into::into),
                );
            }
        }
        errors
    }

    /// containerd's shims outlive it (each is its own session); they carry its address.
    fn kill_leftovers(&self) -> Result<()> {
        let socket = self.socket.to_string_lossy().into_owned();
        for entry in std::fs::read_dir("/proc")? {
            let entry = entry?;
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let ours = String::from_utf8_lossy(&cmdline)
                .split('\0')
                .any(|arg| arg == socket);
            if ours {
                kill(pid);
            }
        }
        for dir in &self.cgroup_dirs {
            for pid in cgroup_pids(dir) {
                kill(pid);
            }
        }
        Ok(())
    }

    fn remove_new_chains(&self) -> Result<()> {
        let now = iptables_chains()?;
        for (program, table, chain) in now.difference(&self.chains) {
            let rules = run(&format!("{program}-save"), &["-t", table])?;
            // First every jump to the chain, then the chain.
            for line in rules.lines() {
                let words = split_words(line);
                let jumps = words
                    .windows(2)
                    .any(|w| (w[0] == "-j" || w[0] == "-g") && w[1] == *chain);
                if words.first().map(String::as_str) == Some("-A") && jumps {
                    let mut args: Vec<&str> = vec!["-w", "-t", table, "-D"];
                    args.extend(words[1..].iter().map(String::as_str));
                    run(program, &args)?;
                }
            }
            run(program, &["-w", "-t", table, "-F", chain])?;
            run(program, &["-w", "-t", table, "-X", chain])?;
        }
        Ok(())
    }

    fn destroy_new_ipsets(&self) -> Result<()> {
        for set in ipsets()?.difference(&self.ipsets) {
            run("ipset", &["destroy", set])?;
        }
        Ok(())
    }

    fn remove_new_nft_tables(&self) -> Result<()> {
        for table in nft_tables()?.difference(&self.nft_tables) {
            let mut args = vec!["delete", "table"];
            args.extend(table.split_whitespace());
            run("nft", &args)?;
        }
        Ok(())
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for e in self.restore() {
            eprintln!("testenv: cleaning up after the node: {e:#}");
        }
    }
}

fn kill(pid: i32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// Every pid in the cgroup `dir` and its descendants.
fn cgroup_pids(dir: &Path) -> Vec<i32> {
    let mut pids: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    for child in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if child.path().is_dir() {
            pids.extend(cgroup_pids(&child.path()));
        }
    }
    pids
}

/// Removes the cgroup `dir` and its descendants, the deepest first (a cgroup folder goes with
/// `rmdir` once it has no processes and no children); waits a little for killed processes.
fn remove_cgroup(dir: &Path) -> Result<()> {
    for child in std::fs::read_dir(dir)? {
        let child = child?.path();
        if child.is_dir() {
            remove_cgroup(&child)?;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(e).with_context(|| format!("rmdir {}", dir.display()));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Unmounts every mount point under `dir` (Pods' volumes, network namespaces, container root
/// filesystems, the kubelet's bind mount of its root folder), the deepest first.
fn unmount_under(dir: &Path) -> Result<()> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mut points: Vec<&str> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| Path::new(point).starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    points.dedup();
    for point in points {
        // Lazily: a mount still in use somewhere goes once it is not.
        run("umount", &["--lazy", point])?;
    }
    Ok(())
}

fn iptables_chains() -> Result<BTreeSet<(String, String, String)>> {
    let mut chains = BTreeSet::new();
    for program in IPTABLES {
        for table in IPTABLES_TABLES {
            let Ok(rules) = run(&format!("{program}-save"), &["-t", table]) else {
                continue;
            };
            for line in rules.lines() {
                if let Some(chain) = line
                    .strip_prefix(':')
                    .and_then(|l| l.split_whitespace().next())
                {
                    chains.insert((program.to_owned(), table.to_owned(), chain.to_owned()));
                }
            }
        }
    }
    Ok(chains)
}

/// `family name` of every nftables table.
fn nft_tables() -> Result<BTreeSet<String>> {
    Ok(run("nft", &["list", "tables"])?
        .lines()
        .filter_map(|l| l.strip_prefix("table "))
        .map(str::to_owned)
        .collect())
}

/// The name of every ipset.
fn ipsets() -> Result<BTreeSet<String>> {
    Ok(run("ipset", &["list", "-name"])?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

/// The words of an `iptables-save` line, a double-quoted one (a comment) as one word.
fn split_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if quoted => word.extend(chars.next()),
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::split_words;

    #[test]
    fn an_iptables_save_comment_is_one_word() {
        assert_eq!(
            split_words(
                r#"-A INPUT -m comment --comment "kubelet \"firewall\" rules" -j KUBE-FIREWALL"#
            ),
            [
                "-A",
                "INPUT",
                "-m",
                "comment",
                "--comment",
                "kubelet \"firewall\" rules",
                "-j",
                "KUBE-FIREWALL"
            ]
        );
    }
}
