//! What makes a PushSecret reconcile: its own spec, a change of its source Secret, and a store it
//! pushes to turning Ready.

use std::future::Future;
use std::sync::Arc;

use api::external_secret::SecretStoreKind;
use api::push_secret::PushSecret;
use clientmanager::StoreKind;
use futures::channel::mpsc::UnboundedReceiver;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::core::{DeserializeGuard, PartialObjectMeta, Selector, SelectorExt};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::PredicateConfig;
use kube::runtime::{WatchStreamExt, watcher};

use crate::context::{Context, ReadyStore};
use crate::outcome::{after_reconcile, error_policy};
use crate::watch::{fingerprint, scoped};

type Watched = DeserializeGuard<PushSecret>;

pub(crate) fn controller<F>(
    ctx: Arc<Context>,
    ready_stores: UnboundedReceiver<ReadyStore>,
    shutdown: F,
) -> impl Future<Output = ()>
where
    F: Future<Output = ()> + Send + Sync + 'static,
{
    let namespace = ctx.settings.namespace.clone();
    let client = ctx.client.clone();
    let ctrl_config =
        kube::runtime::controller::Config::default().concurrency(ctx.settings.concurrency);
    let (ps_reader, ps_writer) = reflector::store::<Watched>();
    let ps_stream = watcher(
        scoped::<Watched>(&client, namespace.as_deref()),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(|ps| ps.managed_fields_mut().clear())
    .reflect(ps_writer)
    .applied_objects()
    .predicate_filter(fingerprint, PredicateConfig::default());
    // Every Secret's metadata streams by (nothing is cached): a changed source is pushed at
    // once rather than at the next refresh.
    let sources = watcher(
        scoped::<PartialObjectMeta<Secret>>(&client, namespace.as_deref()),
        watcher::Config::default(),
    )
    .default_backoff()
    .touched_objects();
    let ps_by_source = ps_reader.clone();
    let woken = wakes(ps_reader.clone(), ready_stores);
    Controller::for_stream(ps_stream, ps_reader)
        .with_config(ctrl_config)
        .watches_stream(sources, move |secret: PartialObjectMeta<Secret>| {
            let (name, ns) = (secret.name_any(), secret.namespace());
            ps_by_source
                .state()
                .iter()
                .filter(|ps| {
                    ps.namespace() == ns
                        && ps
                            .0
                            .as_ref()
                            .ok()
                            .and_then(|ps| ps.spec.selector.secret.as_ref())
                            .and_then(|s| s.name.as_deref())
                            == Some(name.as_str())
                })
                .map(|ps| ObjectRef::from(ps.as_ref()))
                .collect::<Vec<_>>()
        })
        .reconcile_on(woken)
        .graceful_shutdown_on(shutdown)
        .run(
            |watched: Arc<Watched>, ctx| {
                let ps = watched.0.clone().map(Arc::new);
                async move {
                    match ps {
                        Ok(ps) => super::reconcile(ps, ctx).await,
                        Err(invalid) => super::report_invalid(&ctx, invalid).await,
                    }
                }
            },
            error_policy("pushsecret"),
            ctx.clone(),
        )
        .for_each(after_reconcile(ctx))
}

/// The PushSecrets that push to a store that turned Ready.
fn wakes(
    pushsecrets: Store<Watched>,
    ready_stores: UnboundedReceiver<ReadyStore>,
) -> impl Stream<Item = ObjectRef<Watched>> + Send + 'static {
    ready_stores.flat_map(move |store| {
        let refs: Vec<_> = pushsecrets
            .state()
            .iter()
            .filter(|ps| ps.0.as_ref().is_ok_and(|ps| pushes_to(ps, &store)))
            .map(|ps| ObjectRef::from(ps.as_ref()))
            .collect();
        futures::stream::iter(refs)
    })
}

/// Whether `ps` pushes to `store`, by name or by label selector.
fn pushes_to(ps: &PushSecret, store: &ReadyStore) -> bool {
    let namespace = ps.namespace();
    ps.spec.secret_store_refs.iter().any(|r| {
        let kind = StoreKind::parse(r.kind.map(SecretStoreKind::as_str));
        match (&r.name, &r.label_selector) {
            (Some(name), _) if !name.is_empty() => store.is(kind, name, namespace.as_deref()),
            (_, Some(selector)) => {
                store.is(kind, &store.name, namespace.as_deref())
                    && Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(&store.labels))
            }
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    fn push_secret(refs: serde_json::Value) -> PushSecret {
        serde_json::from_value(json!({
            "apiVersion": "external-secrets.io/v1alpha1",
            "kind": "PushSecret",
            "metadata": {"name": "p", "namespace": "team-a"},
            "spec": {"secretStoreRefs": refs, "selector": {"secret": {"name": "s"}}, "data": []},
        }))
        .unwrap()
    }

    fn ready(kind: StoreKind, name: &str, namespace: Option<&str>, tier: &str) -> ReadyStore {
        ReadyStore {
            kind,
            name: name.into(),
            namespace: namespace.map(Into::into),
            labels: BTreeMap::from([("tier".to_owned(), tier.to_owned())]),
        }
    }

    #[test]
    fn a_store_that_turns_ready_wakes_the_push_secrets_naming_or_selecting_it() {
        let by_name = push_secret(json!([{"name": "vault"}]));
        assert!(pushes_to(
            &by_name,
            &ready(StoreKind::SecretStore, "vault", Some("team-a"), "x")
        ));
        assert!(!pushes_to(
            &by_name,
            &ready(StoreKind::SecretStore, "vault", Some("team-b"), "x")
        ));
        assert!(!pushes_to(
            &by_name,
            &ready(StoreKind::ClusterSecretStore, "vault", None, "x")
        ));

        let cluster = push_secret(json!([{"name": "shared", "kind": "ClusterSecretStore"}]));
        assert!(pushes_to(
            &cluster,
            &ready(StoreKind::ClusterSecretStore, "shared", None, "x")
        ));

        let selected = push_secret(json!([{"labelSelector": {"matchLabels": {"tier": "prod"}}}]));
        assert!(pushes_to(
            &selected,
            &ready(StoreKind::SecretStore, "a", Some("team-a"), "prod")
        ));
        assert!(!pushes_to(
            &selected,
            &ready(StoreKind::SecretStore, "a", Some("team-a"), "dev")
        ));
    }
}
