//! ProviderClass and ClusterProviderClass: whether the gRPC server a class names can be used.
//! `Ready` comes from a health check over the same pooled connection the stores' clients use
//! (ESO's reasons Healthy, HealthCheckFailed, TLSConfigFailed), and `methods` from the server's
//! reflection, so a user sees what the server serves before a store fails on it.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use api::conditions::{Condition, ConditionStatus, READY, set_condition};
use api::provider_class::{ClusterProviderClass, ProviderClass, ProviderClassStatus, reason};
use clientmanager::{ClassHealth, ClassRef};
use futures::StreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::instrument;

use crate::context::Context;
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

/// The Ready condition, methods and next check for what [`ClientManager::check_class`] found.
fn assess(
    health: ClassHealth,
    address: &str,
) -> (ConditionStatus, &'static str, String, Vec<String>, Duration) {
    match health {
        ClassHealth::Healthy(probe) => (
            ConditionStatus::True,
            reason::HEALTHY,
            format!("provider server at {address} is serving"),
            probe.methods.unwrap_or_default(),
            HEALTHY_RECHECK,
        ),
        ClassHealth::TlsFailed(message) => (
            ConditionStatus::False,
            reason::TLS_CONFIG_FAILED,
            message,
            Vec::new(),
            UNHEALTHY_RECHECK,
        ),
        ClassHealth::Unhealthy(message) => (
            ConditionStatus::False,
            reason::HEALTH_CHECK_FAILED,
            message,
            Vec::new(),
            UNHEALTHY_RECHECK,
        ),
    }
}

#[instrument(skip_all, fields(kind = %C::kind(&()), namespace = class.namespace(), name = class.name_any()))]
pub async fn reconcile<C: ClassObject>(
    class: Arc<C>,
    ctx: Arc<Context>,
    nudges: &StoreNudges,
) -> Result<Action, StatusError> {
    let reference = class.class_ref();
    let changed = ctx.generations.changed(class.as_ref());
    let health = ctx.manager.check_class(&reference).await;
    let (status, why, message, methods, recheck) = assess(health, class.address());
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
    let next = ProviderClassStatus {
        conditions,
        methods,
        observed_generation: class.meta().generation,
    };
    let api = C::api(ctx.client.clone(), reference.namespace.as_deref());
    let written = ctx
        .update_status(&api, &(), class.meta(), &previous, &next)
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
            ctx.event(&class.object_ref(&()), type_, why, message).await;
        }
    }
    Ok(Action::requeue(recheck))
}

/// The controller of one class kind; its watch cache is the client manager's class lookup. A
/// class that changes or turns Ready has its stores nudged.
pub async fn controller<C: ClassObject>(
    ctx: Arc<Context>,
    api: Api<C>,
    nudges: StoreNudges,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    name: &'static str,
) -> kube::runtime::reflector::Store<C> {
    let controller = Controller::new(api, watcher::Config::default());
    let store = controller.store();
    let reconcile = move |class, ctx| {
        let nudges = nudges.clone();
        async move { reconcile::<C>(class, ctx, &nudges).await }
    };
    tokio::spawn(
        controller
            .graceful_shutdown_on(shutdown)
            .run(reconcile, error_policy(name), ctx.clone())
            .for_each(after_reconcile(ctx)),
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
        assert_eq!(healthy.3, ["GetSecret"]);
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

    fn provider_remote_probe(methods: Option<Vec<String>>) -> clientmanager::ClassProbe {
        clientmanager::ClassProbe { methods }
    }
}
