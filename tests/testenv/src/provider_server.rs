//! `external-secrets provider serve` as its own process, on 127.0.0.1 with mTLS from files in
//! ESO's layout, so tests can kill it, stop it as Kubernetes stops a Pod, restart it and rotate
//! its certificates; and replicas of it on 127.0.0.2, 127.0.0.3, ... at the same port, as the
//! Pods behind a headless Service.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::pki::{CertificateAuthority, IssuedCertificate};
use crate::process::Supervisor;

/// The TLS material both sides use, from one CA.
#[derive(Clone)]
pub struct ProviderPki {
    pub ca_pem: String,
    pub server: IssuedCertificate,
    pub client: IssuedCertificate,
}

impl ProviderPki {
    pub fn generate() -> Result<Self> {
        let ca = CertificateAuthority::new("external-secrets-provider-ca")?;
        Ok(Self {
            ca_pem: ca.cert_pem(),
            server: ca.issue_server()?,
            client: ca.issue_client("external-secrets-controller", None)?,
        })
    }

    /// The client half as ESO's TLS Secret holds it: `ca.crt`, `client.crt`, `client.key`.
    pub fn client_secret_data(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("ca.crt".into(), self.ca_pem.clone()),
            ("client.crt".into(), self.client.cert_pem.clone()),
            ("client.key".into(), self.client.key_pem.clone()),
        ])
    }
}

pub struct ProviderServer {
    supervisor: Mutex<Option<Supervisor>>,
    /// The running process's id.
    pid: Mutex<Option<u32>>,
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    binary: PathBuf,
    kubeconfig: PathBuf,
    kinds: Vec<String>,
    /// `127.0.0.<n>:<port>`, the same across restarts.
    pub address: String,
    /// Where it serves `/metrics`.
    pub metrics_address: std::net::SocketAddr,
    pki: Mutex<ProviderPki>,
}

impl ProviderServer {
    /// Starts `binary provider serve` for `kinds`, reading the cluster through `kubeconfig`.
    pub fn start(binary: &Path, kubeconfig: &Path, kinds: &[&str]) -> Result<Self> {
        crate::retry_on_port_clash(|| Self::start_once(binary, kubeconfig, kinds))
    }

    fn start_once(
        binary: &Path,
        kubeconfig: &Path,
        kinds: &[&str],
    ) -> Result<Self, (anyhow::Error, Option<tempfile::TempDir>)> {
        let setup = || -> Result<Self> {
            let dir = tempfile::Builder::new()
                .prefix("external-secrets-provider-")
                .tempdir()
                .context("creating the provider server's folder")?;
            let grpc = crate::reserve_port()?;
            let metrics = crate::reserve_port()?;
            let server = Self {
                supervisor: Mutex::new(None),
                pid: Mutex::new(None),
                path: dir.path().to_owned(),
                dir: Some(dir),
                binary: binary.to_owned(),
                kubeconfig: kubeconfig.to_owned(),
                kinds: kinds.iter().map(|k| (*k).to_owned()).collect(),
                address: format!("127.0.0.1:{}", crate::port(&grpc)?),
                metrics_address: metrics.local_addr()?,
                pki: Mutex::new(ProviderPki::generate()?),
            };
            server.write_certificates()?;
            drop((grpc, metrics));
            Ok(server)
        };
        let mut server = setup().map_err(|e| (e, None))?;
        match server.spawn() {
            Ok(()) => Ok(server),
            Err(e) => {
                let log = server.log_path();
                let dir = server.dir.take();
                Err((e.context(format!("log: {}", log.display())), dir))
            }
        }
    }

    /// Another replica: the same kinds, port and certificates, on 127.0.0.`n` (all of
    /// 127.0.0.0/8 is local on Linux).
    pub fn replica(&self, n: u8) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("external-secrets-provider-")
            .tempdir()
            .context("creating the provider server's folder")?;
        let ip = std::net::Ipv4Addr::new(127, 0, 0, n);
        let port = self.address.rsplit_once(':').map_or("", |(_, p)| p);
        let metrics = std::net::TcpListener::bind((ip, 0))
            .with_context(|| format!("reserving a free {ip} port"))?
            .local_addr()?;
        let mut server = Self {
            supervisor: Mutex::new(None),
            pid: Mutex::new(None),
            path: dir.path().to_owned(),
            dir: Some(dir),
            binary: self.binary.clone(),
            kubeconfig: self.kubeconfig.clone(),
            kinds: self.kinds.clone(),
            address: format!("{ip}:{port}"),
            metrics_address: metrics,
            pki: Mutex::new(self.pki()),
        };
        server.write_certificates()?;
        if let Err(e) = server.spawn() {
            let log = server.log_path();
            crate::keep_if_asked(&mut server.dir);
            return Err(e.context(format!("log: {}", log.display())));
        }
        Ok(server)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Supervisor>> {
        self.supervisor
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub fn log_path(&self) -> PathBuf {
        self.path.join("provider.log")
    }

    /// The certificate folder the server reads (ESO's `/etc/provider/certs` layout).
    pub fn certs_dir(&self) -> PathBuf {
        self.path.join("certs")
    }

    pub fn pki(&self) -> ProviderPki {
        self.pki
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn write_certificates(&self) -> Result<()> {
        let pki = self.pki();
        let dir = self.certs_dir();
        std::fs::create_dir_all(&dir)?;
        for (name, contents) in [
            ("ca.crt", &pki.ca_pem),
            ("tls.crt", &pki.server.cert_pem),
            ("tls.key", &pki.server.key_pem),
        ] {
            // Written aside and renamed, as a kubelet updates a mounted Secret: the server
            // never reads half a file.
            let aside = dir.join(format!(".{name}.new"));
            std::fs::write(&aside, contents).with_context(|| format!("writing {name}"))?;
            std::fs::rename(&aside, dir.join(name))?;
        }
        Ok(())
    }

    fn spawn(&self) -> Result<()> {
        let supervisor = Supervisor::new()?;
        let port = self
            .address
            .rsplit_once(':')
            .map(|(_, p)| p)
            .unwrap_or_default();
        let metrics_port = self.metrics_address.port();
        let bind = self.address.rsplit_once(':').map_or("", |(ip, _)| ip);
        let mut args = vec![
            "provider".into(),
            "serve".into(),
            format!("--bind-address={bind}"),
            format!("--port={port}"),
            format!("--metrics-port={metrics_port}"),
            format!("--tls-dir={}", self.certs_dir().display()),
            format!("--kubeconfig={}", self.kubeconfig.display()),
        ];
        args.extend(self.kinds.iter().map(|k| format!("--kind={k}")));
        let pid = supervisor.spawn("provider", &self.binary, args, &self.log_path())?;
        *self.lock() = Some(supervisor);
        *self.pid.lock().unwrap_or_else(PoisonError::into_inner) = Some(pid);
        self.wait_until_listening()
    }

    /// Waits until the gRPC port accepts connections.
    fn wait_until_listening(&self) -> Result<()> {
        let deadline = Instant::now() + crate::STEP_TIMEOUT;
        loop {
            if std::net::TcpStream::connect(&self.address).is_ok() {
                return Ok(());
            }
            if let Some(supervisor) = &*self.lock() {
                crate::fail_if_exited(supervisor, &self.path)?;
            }
            if Instant::now() > deadline {
                bail!(
                    "the provider server did not listen on {} within {:?}; last lines of {}:\n{}",
                    self.address,
                    crate::STEP_TIMEOUT,
                    self.log_path().display(),
                    crate::tail(&self.log_path(), 30)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Kills the server at once (SIGKILL), calls in flight and all.
    pub fn kill(&self) {
        self.lock().take();
    }

    /// Stops it as Kubernetes stops a Pod (SIGTERM) and waits until it exited, at most `grace`.
    pub fn terminate(&self, grace: Duration) -> Result<()> {
        let Some(pid) = self
            .pid
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return Ok(());
        };
        let pid = rustix::process::Pid::from_raw(pid as i32).context("a process id")?;
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let deadline = Instant::now() + grace;
        loop {
            let exited = match &*self.lock() {
                Some(supervisor) => supervisor.exited()?.is_some(),
                None => true,
            };
            if exited {
                self.kill();
                return Ok(());
            }
            if Instant::now() > deadline {
                self.kill();
                bail!(
                    "the provider server at {} still ran {grace:?} after SIGTERM",
                    self.address
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts it again on the same port with the same certificates.
    pub fn restart(&self) -> Result<()> {
        self.kill();
        self.spawn()
    }

    /// New CA, server and client certificates, written where the running server reads them.
    pub fn rotate(&self) -> Result<ProviderPki> {
        let fresh = ProviderPki::generate()?;
        *self.pki.lock().unwrap_or_else(PoisonError::into_inner) = fresh.clone();
        self.write_certificates()?;
        Ok(fresh)
    }
}

impl Drop for ProviderServer {
    fn drop(&mut self) {
        self.kill();
        crate::keep_if_asked(&mut self.dir);
    }
}
