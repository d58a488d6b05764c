//! The operator under test runs in this process, on a runtime of its own in a thread of its own,
//! for the whole run; trials talk to it only through the API server and its metrics endpoint.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use api::conditions::{Condition, READY};
use k8s_openapi::api::core::v1::Event;
use kube::api::ListParams;
use kube::{Api, Client};
use serde_json::Value;

use crate::Env;

/// Starts the operator, serving the provider kinds `out_of_process` names through those
/// ClusterProviderClasses; returns where it serves metrics and probes.
pub fn start(
    env: &Env,
    out_of_process: std::collections::BTreeMap<String, String>,
) -> Result<controllers::Addresses> {
    let conversions = env.conversions.clone();
    start_registering(
        env.control_plane().client_config(),
        controllers::Settings {
            concurrency: 8,
            allow_generic_targets: true,
            out_of_process,
            ..Default::default()
        },
        std::future::pending(),
        move |registry| conversions.register(registry),
        None,
    )
}

/// A second operator, in single-namespace mode for `ns` with a controller class of its own (the
/// class it returns): the main operator leaves what names that class alone.
pub fn start_scoped(env: &Env, ns: &str) -> Result<String> {
    let class = format!("class-{ns}");
    start_with(
        env,
        controllers::Settings {
            controller_class: class.clone(),
            namespace: Some(ns.to_owned()),
            ..Default::default()
        },
    )?;
    Ok(class)
}

/// A second operator like [`start_scoped`]'s, built without the provider of `kind`.
pub fn start_scoped_lacking(env: &Env, ns: &str, kind: &'static str) -> Result<String> {
    let class = format!("class-{ns}");
    start_registering(
        env.control_plane().client_config(),
        controllers::Settings {
            controller_class: class.clone(),
            namespace: Some(ns.to_owned()),
            ..Default::default()
        },
        std::future::pending(),
        |_| {},
        Some(kind),
    )?;
    Ok(class)
}

/// Starts an operator with `settings`; it runs until the process ends.
pub fn start_with(env: &Env, settings: controllers::Settings) -> Result<controllers::Addresses> {
    start_for(
        env.control_plane().client_config(),
        settings,
        std::future::pending(),
    )
}

/// Starts an operator against the cluster of `config`, until `shutdown` resolves.
pub fn start_for(
    config: kube::Config,
    settings: controllers::Settings,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<controllers::Addresses> {
    start_registering(config, settings, shutdown, |_| {}, None)
}

/// [`start_for`], with `register` adding metrics of what runs beside it (the test webhook), and
/// without the provider of kind `lacking`.
fn start_registering(
    config: kube::Config,
    settings: controllers::Settings,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    register: impl FnOnce(&mut prometheus_client::registry::Registry) + Send + 'static,
    lacking: Option<&'static str>,
) -> Result<controllers::Addresses> {
    // The operator's logs, when asked for: RUST_LOG=info cargo test --test e2e
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
    let free = || -> Result<SocketAddr> { Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?) };
    let addresses = controllers::Addresses {
        metrics: Some(free()?),
        probes: Some(free()?),
    };
    std::thread::Builder::new()
        .name("operator".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("operator runtime");
            rt.block_on(async move {
                let mut registry = provider::ProviderRegistry::default();
                for p in providers::registry_for_cluster(Some(config.cluster_url.to_string()))
                    .iter()
                    .filter(|p| Some(p.descriptor().kind) != lacking)
                {
                    registry.register(p.clone());
                }
                let client = Client::try_from(config).expect("operator client");
                let mut crds = crd_watch::CrdWatch::new(client.clone());
                let mut operator =
                    controllers::Operator::new(client, settings, registry, &mut crds);
                tokio::spawn(crds.run());
                operator.register_metrics(register);
                operator
                    .run(addresses, std::future::ready(()), shutdown)
                    .await;
            });
        })?;
    Ok(addresses)
}

/// Serves the provider conversion webhook for the test control plane, on 127.0.0.1 (its CRDs
/// are pointed there by the webhook itself), and waits until the API server can call it for
/// every kind with several versions.
pub async fn start_webhook(env: &Env) -> Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let url = format!("https://{addr}/convert");
    let mut settings = conversion_webhook::Settings::new("default");
    settings.listen = addr;
    settings.loopback = true;
    settings.url = Some(url.clone());
    let config = env.control_plane().client_config();
    let conversions = env.conversions.clone();
    std::thread::Builder::new()
        .name("webhook".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("webhook runtime");
            rt.block_on(async move {
                let client = Client::try_from(config).expect("webhook client");
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let converters: std::sync::Arc<dyn conversion_webhook::Converters> =
                    std::sync::Arc::new(conversion_webhook::Counted::new(
                        conversion_webhook::ProviderConverters,
                        conversions,
                    ));
                let crd_events = conversion_webhook::Followed::alone(
                    client.clone(),
                    conversion_webhook::converting(converters.clone()),
                );
                let served = conversion_webhook::serve(
                    client,
                    settings,
                    converters,
                    listener,
                    crd_events,
                    std::future::pending(),
                )
                .await;
                if let Err(e) = served {
                    eprintln!("e2e: the conversion webhook stopped: {e}");
                }
            });
        })?;
    let crds: kube::Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        kube::Api::all(env.client().await);
    let converted = api::providers::ALL
        .iter()
        .filter(|d| d.conversion.is_some());
    for name in converted.flat_map(|d| {
        [
            api::provider_kinds::Scope::Namespaced,
            api::provider_kinds::Scope::Cluster,
        ]
        .map(|scope| d.crd_name(scope))
    }) {
        testenv::wait_for(
            TIMEOUT,
            &format!("the webhook's URL and CA in CRD {name}"),
            || async {
                let crd = crds.get(&name).await?;
                let config = crd
                    .spec
                    .conversion
                    .and_then(|c| c.webhook)
                    .and_then(|w| w.client_config)
                    .ok_or_else(|| anyhow::anyhow!("no clientConfig yet"))?;
                anyhow::ensure!(
                    config.url.as_deref() == Some(url.as_str()) && config.ca_bundle.is_some(),
                    "clientConfig is {config:?}"
                );
                Ok(())
            },
        )
        .await?;
    }
    Ok(())
}

pub const TIMEOUT: Duration = Duration::from_secs(60);

/// The Ready condition of any object with ESO-shaped status.
pub fn ready(obj: &Value) -> Option<Condition> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == READY)
        .and_then(|c| serde_json::from_value(c.clone()).ok())
}

/// The message of `obj`'s Ready condition; empty without one.
pub fn ready_message(obj: &Value) -> String {
    ready(obj).and_then(|c| c.message).unwrap_or_default()
}

/// Waits until `get` returns an object whose Ready condition has `status` and `reason`.
pub async fn wait_ready<F, Fut>(what: &str, status: &str, reason: &str, mut get: F) -> Result<Value>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Value>>,
{
    testenv::wait_for(
        TIMEOUT,
        &format!("{what} to be Ready={status} ({reason})"),
        || {
            let fut = get();
            async move {
                let obj = fut.await?;
                match ready(&obj) {
                    Some(c)
                        if c.status.as_str() == status && c.reason.as_deref() == Some(reason) =>
                    {
                        Ok(obj)
                    }
                    other => Err(anyhow!("Ready condition is {other:?}")),
                }
            }
        },
    )
    .await
}

/// The events recorded for the object `name` in `namespace`.
pub async fn events(client: &Client, namespace: &str, name: &str) -> Result<Vec<Event>> {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let list = events
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await?;
    Ok(list.items)
}

/// Reasons of the events recorded for the object `name` in `namespace`.
pub async fn event_reasons(client: &Client, namespace: &str, name: &str) -> Result<Vec<String>> {
    Ok(events(client, namespace, name)
        .await?
        .into_iter()
        .filter_map(|e| e.reason)
        .collect())
}

/// Reasons of the events recorded for the object `name` in `namespace`, once one of them is
/// `reason`: events are published in the background, after the condition that caused them.
pub async fn wait_event(
    client: &Client,
    namespace: &str,
    name: &str,
    reason: &str,
) -> Result<Vec<String>> {
    testenv::wait_for(TIMEOUT, &format!("a {reason} event of {name}"), || async {
        let reasons = event_reasons(client, namespace, name).await?;
        if reasons.iter().any(|r| r == reason) {
            Ok(reasons)
        } else {
            Err(anyhow!("events: {reasons:?}"))
        }
    })
    .await
}

/// The body of `path` on the operator's HTTP server at `addr`.
pub async fn get(addr: SocketAddr, path: &str) -> Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr} for {path}"))?;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await?;
    if !body.starts_with("HTTP/1.1 200") {
        bail!(
            "{path} answered {}",
            body.lines().next().unwrap_or_default()
        );
    }
    Ok(body)
}

/// The value of the sample whose line starts with `series` (name and labels as printed).
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The metrics endpoint's text.
pub async fn scrape(addr: SocketAddr) -> Result<String> {
    get(addr, "/metrics").await
}

pub fn trials(env: &std::sync::Arc<Env>) -> Vec<libtest_mimic::Trial> {
    vec![crate::trial("operator::probes", env, |env| async move {
        let probes = env
            .addresses()
            .probes
            .expect("the test operator serves probes");
        for path in ["/healthz", "/readyz"] {
            // The operator starts in the background; give it a moment to listen.
            let body = testenv::wait_for(TIMEOUT, path, || get(probes, path)).await?;
            anyhow::ensure!(body.ends_with("ok"), "{path}: {body}");
        }
        Ok(())
    })]
}
