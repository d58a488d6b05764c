//! The resolver of a server in a cluster: the client manager loads the provider object (from
//! watch caches the server keeps for the kinds it serves), applies the provider's referent rule
//! for the caller, refuses credentials outside a namespaced caller's namespace, and caches the
//! client. This file only maps a `ProviderReference` onto those calls.
//!
//! Besides this project's kinds (`providers.external-secrets.io` and
//! `cluster.providers.external-secrets.io`), ESO's own provider kinds whose spec is ESO's v1
//! provider schema, as ours is, are served when the same kind is: `Fake` and `Kubernetes` in
//! `provider.external-secrets.io/v2alpha1`, namespaced only.

use std::collections::HashMap;
use std::sync::Arc;

use api::provider_kinds::Scope;
use api::store::{CLUSTER_SECRET_STORE_KIND, ProviderRef, SECRET_STORE_KIND};
use async_trait::async_trait;
use clientmanager::{ClientManager, ProviderObject, StoreKind};
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use prometheus_client::registry::Registry;
use provider::{Caller, Provider, ProviderRegistry};
use provider_protocol::v1;
use tracing::{debug, info, warn};

use crate::service::{Resolved, Resolver};

/// ESO's group of provider kinds served out of process.
pub const ESO_GROUP: &str = "provider.external-secrets.io";
pub const ESO_VERSION: &str = "v2alpha1";
/// ESO's kinds in [`ESO_GROUP`] whose spec is ESO's v1 provider schema, with their plurals.
pub const ESO_KINDS: [(&str, &str); 2] = [("Fake", "fakes"), ("Kubernetes", "kubernetes")];

/// The providers of `registry` named by `kinds`: what a server serves. A kind this build does
/// not carry is an error that names the ones it does.
pub fn served_registry(
    registry: &ProviderRegistry,
    kinds: &[String],
) -> Result<ProviderRegistry, String> {
    let compiled_in = || registry.kinds().join(", ");
    if kinds.is_empty() {
        return Err(format!(
            "name at least one provider kind to serve (compiled in: {})",
            compiled_in()
        ));
    }
    let mut served = ProviderRegistry::default();
    for kind in kinds {
        let provider = registry.by_kind(kind).ok_or_else(|| {
            format!(
                "provider {kind} is not compiled into this build (compiled in: {})",
                compiled_in()
            )
        })?;
        served.register(provider.clone());
    }
    Ok(served)
}

/// One of ESO's kinds this server serves.
struct EsoKind {
    provider: Arc<dyn Provider>,
    resource: ApiResource,
    /// A watch cache when the CRD was installed at start; otherwise each call reads the object.
    cache: Option<Store<DynamicObject>>,
}

/// Resolves references through a [`ClientManager`].
pub struct KubeResolver {
    kube: kube::Client,
    manager: Arc<ClientManager>,
    eso: HashMap<&'static str, EsoKind>,
}

impl KubeResolver {
    /// A resolver for the kinds of `served` (see [`served_registry`]); starts their watch caches
    /// and registers the client manager's and the providers' metrics in `metrics`.
    pub async fn start(
        kube: kube::Client,
        served: ProviderRegistry,
        metrics: &mut Registry,
    ) -> Self {
        let cache_metrics = clientmanager::Metrics::register(metrics);
        for provider in served.iter() {
            provider.register_metrics(metrics);
        }
        let served = Arc::new(served);
        // Only `provider_object` and `client` are used: no store is read, so neither the flood
        // gate nor a controller class applies.
        // The operator's own client holds calls back while a backend is down and wakes its
        // ExternalSecrets when it answers again; a second wait here would only delay that.
        let manager = Arc::new(
            ClientManager::new(
                kube.clone(),
                served.clone(),
                false,
                String::new(),
                cache_metrics,
            )
            .without_breaker(),
        );
        let sweeper = manager.clone();
        tokio::spawn(async move { sweeper.sweep_idle().await });
        for provider in served.iter() {
            let kind = provider.descriptor().kind;
            for scope in [Scope::Namespaced, Scope::Cluster] {
                let resource = provider.descriptor().storage_resource(scope);
                let gone = manager.forget_departed(kind);
                manager.use_provider_cache(resource.clone(), reflect(&kube, resource, gone));
            }
        }
        let mut eso = HashMap::new();
        for (kind, plural) in ESO_KINDS {
            let Some(provider) = served.by_kind(kind) else {
                continue;
            };
            let resource = eso_resource(kind, plural);
            let crd = format!("{plural}.{ESO_GROUP}");
            let cache = match Api::<CustomResourceDefinition>::all(kube.clone())
                .get_opt(&crd)
                .await
            {
                Ok(Some(_)) => Some(reflect(&kube, resource.clone(), |_| {})),
                Ok(None) => {
                    info!(%crd, "ESO's CRD is not installed: its objects are read per call");
                    None
                }
                Err(e) => {
                    info!(%crd, error = %e, "cannot tell whether ESO's CRD is installed: its objects are read per call");
                    None
                }
            };
            eso.insert(
                kind,
                EsoKind {
                    provider: provider.clone(),
                    resource,
                    cache,
                },
            );
        }
        Self { kube, manager, eso }
    }

    pub fn manager(&self) -> &Arc<ClientManager> {
        &self.manager
    }

    /// Where `reference` points: this project's kind at a scope, or one of ESO's.
    fn target(&self, reference: &v1::ProviderReference) -> Result<Target<'_>, provider::Error> {
        for (field, value) in [
            ("api_version", &reference.api_version),
            ("kind", &reference.kind),
        ] {
            if value.is_empty() {
                return Err(provider::Error::InvalidSpec(format!(
                    "provider_ref.{field} is required"
                )));
            }
        }
        let not_served = || {
            let mut kinds = self.manager.registry().kinds();
            kinds.sort_unstable();
            provider::Error::InvalidSpec(format!(
                "this server serves {}; not {} {}",
                kinds.join(", "),
                reference.api_version,
                reference.kind
            ))
        };
        let (group, version) = reference
            .api_version
            .split_once('/')
            .ok_or_else(not_served)?;
        if let Some(scope) = Scope::of_group(group) {
            let provider = self
                .manager
                .registry()
                .by_kind(&reference.kind)
                .ok_or_else(not_served)?;
            return Ok(Target::Ours(scope, provider.clone()));
        }
        match self.eso.get(reference.kind.as_str()) {
            Some(eso) if group == ESO_GROUP && version == ESO_VERSION => Ok(Target::Eso(eso)),
            _ => Err(not_served()),
        }
    }

    async fn eso_object(
        &self,
        eso: &EsoKind,
        namespace: &str,
        name: &str,
    ) -> Result<ProviderObject, provider::Error> {
        let cached = eso.cache.as_ref().and_then(|store| {
            store.get(&ObjectRef::new_with(name, eso.resource.clone()).within(namespace))
        });
        let object = match cached {
            Some(object) => (*object).clone(),
            None => {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.kube.clone(), namespace, &eso.resource);
                let what = format!(
                    "{} {namespace}/{name} ({})",
                    eso.resource.kind, eso.resource.api_version
                );
                match api.get_opt(name).await {
                    Ok(Some(object)) => object,
                    Ok(None) => {
                        return Err(provider::Error::InvalidSpec(format!(
                            "{what} does not exist{}",
                            if eso.cache.is_none() {
                                format!(
                                    ", or its CRD {}.{ESO_GROUP} is not installed",
                                    eso.resource.plural
                                )
                            } else {
                                String::new()
                            }
                        )));
                    }
                    Err(e) => return Err(kube_error(format!("could not get {what}"), e)),
                }
            }
        };
        let mut object = ProviderObject::from_dynamic(eso.provider.clone(), &object);
        // Not the same object as ours of that kind, name and namespace: its own cache slot (and,
        // for the Fake provider, its own pushed values).
        object.identity.kind = format!("{}.{ESO_GROUP}", eso.resource.kind);
        Ok(object)
    }
}

enum Target<'a> {
    Ours(Scope, Arc<dyn Provider>),
    Eso(&'a EsoKind),
}

#[async_trait]
impl Resolver for KubeResolver {
    async fn resolve(
        &self,
        reference: &v1::ProviderReference,
        source_namespace: &str,
    ) -> Result<Resolved, provider::Error> {
        let store = store_kind(&reference.store_ref_kind)?;
        if reference.name.is_empty() {
            return Err(provider::Error::InvalidSpec(
                "provider_ref.name is required".into(),
            ));
        }
        let target = self.target(reference)?;
        let namespaced = match &target {
            Target::Ours(scope, _) => *scope == Scope::Namespaced,
            Target::Eso(_) => true,
        };
        // A namespaced object's namespace: the reference's, else (ESO's rule) the caller's.
        let object_namespace = if namespaced {
            let namespace = [reference.namespace.as_str(), source_namespace]
                .into_iter()
                .find(|ns| !ns.is_empty())
                .ok_or_else(|| {
                    provider::Error::InvalidSpec(format!(
                        "provider_ref.namespace is required: {} is a namespaced kind",
                        reference.kind
                    ))
                })?;
            Some(namespace)
        } else {
            None
        };
        // A SecretStore and its ExternalSecrets share a namespace, and so does what it reads.
        if let Some(namespace) = object_namespace
            && store == StoreKind::SecretStore
            && !source_namespace.is_empty()
            && namespace != source_namespace
        {
            return Err(provider::Error::Credentials {
                reference: format!("{} {namespace}/{}", reference.kind, reference.name),
                reason: format!(
                    "a SecretStore used from namespace {source_namespace:?} reads only provider objects of that namespace"
                ),
            });
        }
        // Whom the client works for, which decides where its credentials may come from. A
        // namespaced provider object reads credentials only from its own namespace, whichever
        // store uses it: otherwise whoever may edit the object could, through a ClusterSecretStore
        // naming it, have this server read Secrets of any namespace. A cluster-scoped one works
        // for the caller's namespace; for a store's validation (no caller) a SecretStore's own,
        // and none for a ClusterSecretStore, whose referent credentials then cannot be checked.
        let (caller, home) = match (object_namespace, store) {
            (Some(namespace), _) => (Caller::Provider, namespace),
            (None, StoreKind::SecretStore) if source_namespace.is_empty() => {
                (Caller::SecretStore, reference.namespace.as_str())
            }
            (None, StoreKind::SecretStore) => (Caller::SecretStore, source_namespace),
            (None, StoreKind::ClusterSecretStore) => (Caller::ClusterSecretStore, source_namespace),
        };
        let object = match target {
            Target::Ours(_, _) => {
                let namespace = object_namespace.map(str::to_owned);
                let provider_ref = ProviderRef {
                    api_version: reference.api_version.clone(),
                    kind: reference.kind.clone(),
                    name: reference.name.clone(),
                    namespace: namespace.clone(),
                };
                self.manager
                    .provider_object(&provider_ref, namespace.as_deref())
                    .await
                    .map_err(from_manager)?
            }
            Target::Eso(eso) => {
                self.eso_object(eso, object_namespace.unwrap_or_default(), &reference.name)
                    .await?
            }
        };
        let spec = object.spec.clone();
        let provider = object.provider.clone();
        let handle = self
            .manager
            .client(object, caller, home)
            .await
            .map_err(from_manager)?;
        Ok(Resolved {
            client: handle.client,
            provider,
            spec,
        })
    }

    /// From the kind alone: no read, no client.
    async fn provider(
        &self,
        reference: &v1::ProviderReference,
        _source_namespace: &str,
    ) -> Result<Arc<dyn Provider>, provider::Error> {
        Ok(match self.target(reference)? {
            Target::Ours(_, provider) => provider,
            Target::Eso(eso) => eso.provider.clone(),
        })
    }
}

/// `store_ref_kind` as the store kind it names; empty means SecretStore (ESO's rule).
fn store_kind(kind: &str) -> Result<StoreKind, provider::Error> {
    match kind {
        "" | SECRET_STORE_KIND => Ok(StoreKind::SecretStore),
        CLUSTER_SECRET_STORE_KIND => Ok(StoreKind::ClusterSecretStore),
        other => Err(provider::Error::InvalidSpec(format!(
            "provider_ref.store_ref_kind: {other:?} is neither {SECRET_STORE_KIND} nor {CLUSTER_SECRET_STORE_KIND}"
        ))),
    }
}

fn eso_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: ESO_GROUP.to_owned(),
        version: ESO_VERSION.to_owned(),
        api_version: format!("{ESO_GROUP}/{ESO_VERSION}"),
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    }
}

/// The client manager's errors as the provider errors the protocol carries: a provider's own
/// error as it is, credentials as credentials, an API server that could not be asked as
/// unavailable, and the rest (object or CRD missing, version not served, ...) as configuration.
fn from_manager(error: clientmanager::Error) -> provider::Error {
    use clientmanager::Error as E;
    match error {
        E::Provider(e) => e,
        E::Credentials { reference, source } => provider::Error::Credentials {
            reference,
            reason: source.to_string(),
        },
        E::CredentialOutsideNamespace {
            reference,
            namespace,
        } => provider::Error::Credentials {
            reference,
            reason: format!("credentials must come from namespace {namespace:?}"),
        },
        E::ProviderGet { kind, name, source } => {
            kube_error(format!("could not get {kind} {name:?}"), source)
        }
        other => provider::Error::InvalidSpec(other.to_string()),
    }
}

/// A refusal of the API server is the configuration's problem (or RBAC's); anything else
/// (a timeout, a 5xx) passes.
fn kube_error(what: String, error: kube::Error) -> provider::Error {
    match &error {
        kube::Error::Api(status) if (400..500).contains(&status.code) => {
            provider::Error::InvalidSpec(format!("{what}: {error}"))
        }
        _ => provider::Error::Unavailable(format!("{what}: {error}")),
    }
}

/// A watch cache of `resource` in every namespace, kept until the process ends. A kind whose CRD
/// is missing is retried with backoff, so installing it later needs no restart. `gone` is told
/// of each object that leaves it, deleted or missing from a re-list after the watch was down.
fn reflect(
    kube: &kube::Client,
    resource: ApiResource,
    gone: impl Fn(ObjectRef<DynamicObject>) + Send + Sync + 'static,
) -> Store<DynamicObject> {
    let writer = Writer::new(resource.clone());
    let reader = writer.as_reader();
    let api: Api<DynamicObject> = Api::all_with(kube.clone(), &resource);
    let mut departed = watch_departures::on_departure_with(reader.clone(), resource.clone(), gone);
    tokio::spawn(async move {
        let mut failing = false;
        watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|o| o.managed_fields_mut().clear())
            .reflect(writer)
            .for_each(|event| {
                if let Ok(event) = &event {
                    departed(event);
                }
                match event {
                    // A new list starting says nothing yet; it may fail again.
                    Ok(watcher::Event::Init) => {}
                    Ok(_) if failing => {
                        failing = false;
                        info!(resource = %resource.plural, group = %resource.group, "watching provider objects again");
                    }
                    Ok(_) => {}
                    Err(e) if !failing => {
                        failing = true;
                        warn!(resource = %resource.plural, group = %resource.group, error = %e, "watching provider objects failed; calls read them directly while it is retried");
                    }
                    Err(e) => debug!(resource = %resource.plural, error = %e, "watch still failing"),
                }
                futures::future::ready(())
            })
            .await;
    });
    reader
}
