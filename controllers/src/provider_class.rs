//! ProviderClass and ClusterProviderClass: whether the gRPC server a class names can be used.
//! `Ready` comes from a health check over the same pooled connection the stores' clients use
//! (ESO's reasons Healthy, HealthCheckFailed, TLSConfigFailed), and `methods` from the server's
//! reflection, so a user sees what the server serves before a store fails on it.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use api::conditions::{Condition, ConditionStatus, READY, set_condition};
use api::provider_class::{
    ClusterProviderClass, ClusterProviderClassSpec, ProviderClass, ProviderClassSpec,
    ProviderClassStatus, TlsSecretRef, reason,
};
use clientmanager::{ClassHealth, ClassProbe, ClassRef};
use futures::StreamExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::instrument;

use crate::context::Context;
use crate::generations::Generations;
use crate::outcome::{after_reconcile, error_policy};
use crate::provider_objects::StoreNudges;
use crate::readiness::StatusError;

/// A server that answers is asked again after this long, one that does not sooner.
const HEALTHY_RECHECK: Duration = Duration::from_secs(10);
const UNHEALTHY_RECHECK: Duration = Duration::from_secs(5);

pub trait ClassObject:
    Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    fn class_ref(&self) -> ClassRef;
    fn class_status(&self) -> Option<&ProviderClassStatus>;
    fn address(&self) -> &str;
    fn api(client: kube::Client, namespace: Option<&str>) -> Api<Self>;
}

impl ClassObject for ProviderClass {
    fn class_ref(&self) -> ClassRef {
        ClassRef {
            namespace: Some(self.namespace().unwrap_or_default()),
            name: self.name_any(),
        }
    }
    fn class_status(&self) -> Option<&ProviderClassStatus> {
        self.status.as_ref()
    }
    fn address(&self) -> &str {
        &self.spec.address
    }
    fn api(client: kube::Client, namespace: Option<&str>) -> Api<Self> {
        Api::namespaced(client, namespace.unwrap_or_default())
    }
}

impl ClassObject for ClusterProviderClass {
    fn class_ref(&self) -> ClassRef {
        ClassRef::cluster(self.name_any())
    }
    fn class_status(&self) -> Option<&ProviderClassStatus> {
        self.status.as_ref()
    }
    fn address(&self) -> &str {
        &self.spec.address
    }
    fn api(client: kube::Client, _: Option<&str>) -> Api<Self> {
        Api::all(client)
    }
}

/// The Ready condition, what the probe found, and the next check for what
/// [`ClientManager::check_class`] found.
fn assess(
    health: ClassHealth,
    address: &str,
) -> (
    ConditionStatus,
    &'static str,
    String,
    Option<ClassProbe>,
    Duration,
) {
    match health {
        ClassHealth::Healthy(probe) => (
            ConditionStatus::True,
            reason::HEALTHY,
            match probe.endpoints {
                1 => format!("provider server at {address} is serving"),
                n => format!(
                    "provider server at {address} is serving on {} of {n} endpoints",
                    probe.serving
                ),
            },
            Some(probe),
            HEALTHY_RECHECK,
        ),
        ClassHealth::TlsFailed(message) => (
            ConditionStatus::False,
            reason::TLS_CONFIG_FAILED,
            message,
            None,
            UNHEALTHY_RECHECK,
        ),
        ClassHealth::Unhealthy(message) => (
            ConditionStatus::False,
            reason::HEALTH_CHECK_FAILED,
            message,
            None,
            UNHEALTHY_RECHECK,
        ),
    }
}

/// What the class reconcilers work with: the handles every reconciler shares, and the
/// generations seen of the classes.
pub struct ProviderClassContext {
    pub shared: Arc<Context>,
    /// Spec changes of classes, as opposed to first sights after a start.
    pub generations: Arc<Generations>,
}

impl ProviderClassContext {
    pub fn new(shared: Arc<Context>) -> Arc<Self> {
        Arc::new(Self {
            shared,
            generations: Default::default(),
        })
    }
}

#[instrument(skip_all, fields(kind = %C::kind(&()), namespace = class.namespace(), name = class.name_any()))]
pub async fn reconcile<C: ClassObject>(
    class: Arc<C>,
    class_ctx: &ProviderClassContext,
    nudges: &StoreNudges,
) -> Result<Action, StatusError> {
    let ctx = class_ctx.shared.as_ref();
    let reference = class.class_ref();
    let changed = class_ctx.generations.changed(class.as_ref());
    let health = ctx.manager.check_class(&reference).await;
    let (status, why, message, probe, recheck) = assess(health, class.address());
    let previous = class.class_status().cloned().unwrap_or_default();
    let was_ready = api::conditions::find(&previous.conditions, READY)
        .is_some_and(|c| c.status == ConditionStatus::True);
    if changed || (status == ConditionStatus::True && !was_ready) {
        // As a provider object does: the stores it serves revalidate now rather than at their
        // interval (a store that named it before it existed, or before its server answered).
        nudges.send(ctx.manager.stores_using_class(&reference));
    }
    let mut conditions = previous.conditions.clone();
    set_condition(
        &mut conditions,
        Condition::ready(status, why, message.clone()),
        jiff::Timestamp::now(),
    );
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let next = ProviderClassStatus {
        conditions,
        observed_generation: class.meta().generation,
        endpoints: probe.as_ref().map(|p| count(p.endpoints)),
        ready_endpoints: probe.as_ref().map(|p| count(p.serving)),
        methods: probe.and_then(|p| p.methods).unwrap_or_default(),
    };
    let api = C::api(ctx.client.clone(), reference.namespace.as_deref());
    let written = ctx
        .status
        .update(&api, &(), class.meta(), &previous, &next)
        .await
        .map_err(|source| StatusError {
            part: "status",
            kind: C::kind(&()).to_string(),
            name: reference.name.clone(),
            source,
        })?;
    if written {
        let old = api::conditions::find(&previous.conditions, READY);
        let changed = old.is_none_or(|c| {
            c.reason.as_deref() != Some(why) || c.message.as_deref() != Some(&message)
        });
        if changed {
            let type_ = match status {
                ConditionStatus::True => EventType::Normal,
                _ => EventType::Warning,
            };
            ctx.event(&class.object_ref(&()), type_, why, message);
        }
    }
    Ok(Action::requeue(recheck))
}

/// The field manager of the classes kept for `--provider-class`.
pub const DECLARED_MANAGER: &str = "external-secrets-provider-class";

/// A ClusterProviderClass the operator keeps as its command line declares it
/// (`--provider-class`): for installers that create the class's CRD in the same step as the
/// class, which Helm cannot do ("ensure CRDs are installed first").
#[derive(Clone, Debug, PartialEq)]
pub struct DeclaredClass {
    pub name: String,
    pub spec: ProviderClassSpec,
}

impl DeclaredClass {
    /// `NAME=ADDRESS[,NAMESPACE/SECRET]`; the Secret becomes `spec.tlsSecretRef`.
    pub fn parse(flag: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{flag:?}: expected NAME=ADDRESS[,NAMESPACE/SECRET] with ADDRESS as HOST:PORT, e.g. vault=provider-vault.external-secrets.svc:8080,external-secrets/provider-vault-tls"
            )
        };
        let (name, rest) = flag.split_once('=').ok_or_else(bad)?;
        let (address, secret) = match rest.split_once(',') {
            Some((address, secret)) => (address, Some(secret)),
            None => (rest, None),
        };
        let tls_secret_ref = match secret.map(|s| s.split_once('/')) {
            None => None,
            Some(Some((namespace, name))) if !namespace.is_empty() && !name.is_empty() => {
                Some(TlsSecretRef {
                    name: name.to_owned(),
                    namespace: Some(namespace.to_owned()),
                })
            }
            Some(_) => return Err(bad()),
        };
        // The address is dialled as `http(s)://ADDRESS`: a host and a port, nothing more. Checked
        // here, so that a typo stops the start rather than a class that never connects.
        let host_and_port = address.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if name.is_empty() || !host_and_port || address.contains(['/', ' ', '@']) {
            return Err(bad());
        }
        Ok(Self {
            name: name.to_owned(),
            spec: ProviderClassSpec {
                address: address.to_owned(),
                tls_secret_ref,
                call_timeout: None,
            },
        })
    }
}

/// Applies `declared` now and every `interval` after (what someone else changed or deleted comes
/// back); a refused apply is logged and tried again sooner. The CRD may be served only moments
/// after the operator starts, in the same install.
pub async fn keep_declared(client: kube::Client, declared: DeclaredClass, interval: Duration) {
    let api = Api::<ClusterProviderClass>::all(client);
    let class = ClusterProviderClass::new(
        &declared.name,
        ClusterProviderClassSpec {
            class: declared.spec,
        },
    );
    let params = kube::api::PatchParams::apply(DECLARED_MANAGER).force();
    let mut retry = Duration::from_secs(1);
    loop {
        let wait = match api
            .patch(&declared.name, &params, &kube::api::Patch::Apply(&class))
            .await
        {
            Ok(_) => {
                retry = Duration::from_secs(1);
                interval
            }
            Err(e) => {
                tracing::warn!(class = %declared.name, error = %e, retry_in = ?retry, "applying the declared ClusterProviderClass");
                let wait = retry;
                retry = (retry * 2).min(interval);
                wait
            }
        };
        tokio::time::sleep(wait).await;
    }
}

/// The controller of one class kind; its watch cache is the client manager's class lookup. A
/// class that changes or turns Ready has its stores nudged.
pub async fn controller<C: ClassObject>(
    class_ctx: Arc<ProviderClassContext>,
    api: Api<C>,
    nudges: StoreNudges,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    name: &'static str,
) -> kube::runtime::reflector::Store<C> {
    let ctx = class_ctx.shared.clone();
    let (store, writer) = kube::runtime::reflector::store();
    let queue = ctx.workqueue(name);
    let classes = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer);
    // The controller's context is the shared one, which its error policy reads.
    let reconcile = move |class, _: Arc<Context>| {
        let (class_ctx, nudges) = (class_ctx.clone(), nudges.clone());
        async move { reconcile::<C>(class, &class_ctx, &nudges).await }
    };
    tokio::spawn(
        queue
            .controller(classes, store.clone(), (), |_| {})
            .graceful_shutdown_on(shutdown)
            .run(
                queue.reconciler(reconcile),
                queue.error_policy(error_policy(name)),
                ctx.clone(),
            )
            .for_each(after_reconcile(ctx, queue)),
    );
    store
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_maps_to_esos_reasons() {
        let healthy = assess(
            ClassHealth::Healthy(provider_remote_probe(Some(vec!["GetSecret".into()]))),
            "a:1",
        );
        assert_eq!((healthy.0, healthy.1), (ConditionStatus::True, "Healthy"));
        assert_eq!(healthy.3.and_then(|p| p.methods).unwrap(), ["GetSecret"]);
        let tls = assess(ClassHealth::TlsFailed("ca.crt: missing".into()), "a:1");
        assert_eq!((tls.0, tls.1), (ConditionStatus::False, "TLSConfigFailed"));
        let down = assess(ClassHealth::Unhealthy("connection refused".into()), "a:1");
        assert_eq!(
            (down.0, down.1),
            (ConditionStatus::False, "HealthCheckFailed")
        );
        assert!(
            down.4 < healthy.4,
            "an unhealthy server is asked again sooner"
        );
    }

    #[test]
    fn declared_class_flag() {
        let declared =
            DeclaredClass::parse("vault=provider-vault.es.svc:8080,es/provider-vault-tls").unwrap();
        assert_eq!(declared.name, "vault");
        assert_eq!(declared.spec.address, "provider-vault.es.svc:8080");
        assert_eq!(
            declared.spec.tls_secret_ref,
            Some(TlsSecretRef {
                name: "provider-vault-tls".into(),
                namespace: Some("es".into())
            })
        );
        let plain = DeclaredClass::parse("fake=127.0.0.1:9000").unwrap();
        assert_eq!(plain.spec.tls_secret_ref, None);
        for bad in [
            "vault",
            "=a:1",
            "vault=",
            "vault=a:1,secret",
            "vault=a:1,/s",
            "vault=a:1,ns/",
            "vault=provider-vault",
            "vault=provider-vault:http",
            "vault=provider-vault:0",
            "vault=:8080",
            "vault=https://provider-vault:8080",
            "vault=provider-vault:8080/grpc",
        ] {
            let err = DeclaredClass::parse(bad).unwrap_err();
            assert!(err.contains("expected NAME=ADDRESS"), "{bad}: {err}");
        }
    }

    fn provider_remote_probe(methods: Option<Vec<String>>) -> clientmanager::ClassProbe {
        clientmanager::ClassProbe {
            methods,
            endpoints: 1,
            serving: 1,
        }
    }
}
