//! The client manager: from a store reference and the namespace of the caller to a secrets
//! client, as design 007 describes.
//!
//! Unlike ESO, which rebuilds provider clients on every reconcile, clients are kept across
//! reconciles. An entry is keyed by the provider object and the caller, and fingerprinted by the
//! provider object's uid and generation and by the resourceVersions of the objects its
//! credentials come from (watched, not read per call), so any of those changing yields a fresh
//! client; the old one is closed once no reconcile holds it (shared.rs).
//!
//! One identity, one client, one login: a SecretStore's check, its provider object's own check
//! and the ExternalSecrets reading through it resolve the same spec with the same credentials,
//! so they share an entry. Callers differ only in whether they are bound to their namespace,
//! which is all a provider's `apply_referent` and the credentials reader may look at.

mod breaker;
mod cache;
mod conditions;
mod convert;
mod credentials;
mod metrics;
mod resolve;
mod runtime;
mod shared;
mod store;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use api::provider_kinds::Capabilities;
use api::store::{LABEL_CONVERTED_FROM, ProviderRef};
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use provider::{
    Caller, ClientRequest, CredentialRef, ProviderIdentity, ProviderRegistry, SecretsClient,
};
use tracing::debug;

pub use conditions::namespace_allowed;
pub use convert::{Converted, Generated, convert};
pub use metrics::Metrics;
pub use provider_remote::Probe as ClassProbe;
pub use resolve::{ProviderObject, provider_resource};
pub use runtime::{ClassHealth, ClassRef};
pub use store::{LoadedStore, StoreKind, StoreRef, is_ready};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("could not get {kind} {name:?}: {source}")]
    StoreGet {
        kind: StoreKind,
        name: String,
        source: kube::Error,
    },
    #[error("{kind} {name:?} does not exist")]
    StoreMissing { kind: StoreKind, name: String },
    #[error(
        "using cluster store {name:?} is not allowed from namespace {namespace:?}: denied by spec.condition"
    )]
    Denied { name: String, namespace: String },
    #[error("could not check spec.conditions of cluster store {name:?}: {reason}")]
    Conditions { name: String, reason: String },
    /// The store belongs to another operator instance (`spec.controller`); not an error to report.
    #[error("{kind} {name:?} is handled by controller class {class:?}")]
    OtherController {
        kind: StoreKind,
        name: String,
        class: String,
    },
    #[error("{kind} {name:?} is not ready: {why}")]
    NotReady {
        kind: StoreKind,
        name: String,
        why: String,
    },
    #[error("spec.provider of {kind} {name:?} must set exactly one provider")]
    NoProvider { kind: StoreKind, name: String },
    #[error("{written} is not a provider kind")]
    UnknownProviderKind { written: String },
    #[error(
        "provider {kind} is not compiled into this build of the operator (compiled in: {compiled_in})"
    )]
    NotCompiledIn { kind: String, compiled_in: String },
    #[error(
        "spec.providerRef: {written} is not a provider kind of this operator; a kind served by a server of its own needs spec.runtimeRef naming its ProviderClass"
    )]
    NeedsRuntime { written: String },
    #[error("spec.providerRef.apiVersion: {reason}")]
    ProviderRefApiVersion { reason: String },
    #[error("spec.providerRef.namespace: {reason}")]
    ProviderRefNamespace { reason: String },
    #[error("provider {kind} is not served at version {version} (served: {served})")]
    VersionNotServed {
        kind: String,
        version: String,
        served: String,
    },
    #[error("{field}: {source}")]
    Convert {
        field: String,
        source: provider::Error,
    },
    #[error(
        "provider {kind} is not installed: CRD {crd} does not exist (the Helm chart installs it with {chart_value}=true)"
    )]
    ProviderNotInstalled {
        kind: String,
        crd: String,
        chart_value: String,
    },
    #[error(
        "provider {kind}: CRD {crd} is installed but not watched yet; the operator starts its controller once it may list and watch it"
    )]
    ProviderNotWatched { kind: String, crd: String },
    #[error("{kind} {name:?} referenced by spec.providerRef does not exist")]
    ProviderObjectMissing { kind: String, name: String },
    #[error("could not get {kind} {name:?}: {source}")]
    ProviderGet {
        kind: String,
        name: String,
        source: kube::Error,
    },
    #[error("could not read {reference}: {source}")]
    Credentials {
        reference: String,
        source: kube::Error,
    },
    #[error("credentials must come from namespace {namespace:?}, not {reference}")]
    CredentialOutsideNamespace {
        reference: String,
        namespace: String,
    },
    #[error("{kind} {name:?} is {why}")]
    Capabilities {
        kind: StoreKind,
        name: String,
        why: &'static str,
    },
    #[error("spec.runtimeRef: {reason}")]
    RuntimeRef { reason: String },
    #[error("{class} does not exist")]
    RuntimeMissing { class: ClassRef },
    #[error("could not get {class}: {source}")]
    RuntimeGet {
        class: ClassRef,
        source: kube::Error,
    },
    #[error("TLS of {class}: {reason}")]
    RuntimeTls { class: ClassRef, reason: String },
    /// A field of the class's spec the schema should have refused (an object written before
    /// its rule); `reason` names the field.
    #[error("{class}: {reason}")]
    RuntimeSpec { class: ClassRef, reason: String },
    #[error(transparent)]
    Provider(#[from] provider::Error),
}

impl Error {
    /// `kind`'s CRD `crd` is missing; the message names the chart value that installs it.
    pub fn provider_not_installed(kind: &str, crd: String) -> Self {
        let key = api::providers::ALL
            .iter()
            .find(|d| d.kind == kind)
            .map_or("<name>", |d| d.store_key);
        Self::ProviderNotInstalled {
            kind: kind.to_owned(),
            crd,
            chart_value: format!("providers.{key}.enabled"),
        }
    }

    /// A bounded label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::StoreGet { .. } => "StoreGet",
            Self::StoreMissing { .. } => "StoreMissing",
            Self::Denied { .. } => "Denied",
            Self::Conditions { .. } => "Conditions",
            Self::OtherController { .. } => "OtherController",
            Self::NotReady { .. } => "NotReady",
            Self::NoProvider { .. } => "NoProvider",
            Self::UnknownProviderKind { .. } => "UnknownProviderKind",
            Self::NotCompiledIn { .. } => "NotCompiledIn",
            Self::NeedsRuntime { .. } => "NeedsRuntime",
            Self::ProviderRefApiVersion { .. } => "ProviderRefApiVersion",
            Self::ProviderRefNamespace { .. } => "ProviderRefNamespace",
            Self::VersionNotServed { .. } => "VersionNotServed",
            Self::Convert { .. } => "Convert",
            Self::ProviderNotInstalled { .. } => "ProviderNotInstalled",
            Self::ProviderNotWatched { .. } => "ProviderNotWatched",
            Self::ProviderObjectMissing { .. } => "ProviderObjectMissing",
            Self::ProviderGet { .. } => "ProviderGet",
            Self::Credentials { .. } => "Credentials",
            Self::CredentialOutsideNamespace { .. } => "CredentialOutsideNamespace",
            Self::Capabilities { .. } => "Capabilities",
            Self::RuntimeRef { .. } => "RuntimeRef",
            Self::RuntimeMissing { .. } => "RuntimeMissing",
            Self::RuntimeGet { .. } => "RuntimeGet",
            Self::RuntimeTls { .. } => "RuntimeTls",
            Self::RuntimeSpec { .. } => "RuntimeSpec",
            Self::Provider(_) => "Provider",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How long a client no reconcile asks for is kept. A store's own check asks for its client
/// every five minutes (the store requeue interval), so only clients of stores gone or unused
/// for three checks are closed.
pub const IDLE_CLIENT: std::time::Duration = std::time::Duration::from_secs(15 * 60);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Slot {
    provider: ProviderIdentity,
    /// `Caller::is_namespaced`: a SecretStore and its namespaced provider object (or a
    /// ClusterSecretStore and its cluster-scoped one) resolve the same credentials.
    namespaced: bool,
    namespace: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Fingerprint {
    uid: Option<String>,
    generation: Option<i64>,
    /// In process: the credentials the client read. Out of process the server reads them.
    credentials: BTreeMap<CredentialRef, Option<String>>,
    /// Out of process: the class and TLS material the connection was made with.
    runtime: Option<runtime::RuntimeFingerprint>,
}

impl Fingerprint {
    /// Whether this was read from an older generation of the provider object `cached` was
    /// built from: a reconcile whose watch cache lags behind another's (the store's check
    /// right after writing its converted object, say) uses the newer client rather than
    /// replacing it with an older one, which the other would replace again.
    fn behind(&self, cached: &Fingerprint) -> bool {
        self.uid.is_some()
            && self.uid == cached.uid
            && matches!((self.generation, cached.generation), (Some(mine), Some(theirs)) if mine < theirs)
    }
}

#[derive(Clone)]
struct Cached {
    fingerprint: Fingerprint,
    client: Arc<shared::Shared>,
    capabilities: Stated,
    /// The client's breaker, which the questions of [`Stated::Ask`] go through too.
    breaker: Option<breaker::Guarded>,
    /// When a reconcile last asked for it; see [`ClientManager::evict_idle`].
    used: tokio::time::Instant,
}

/// What a store may be used for, as far as it is known.
#[derive(Clone)]
enum Stated {
    /// The provider's own, or what its server stated (or a server without the method: taken
    /// at its word later, when it refuses).
    Known(Capabilities),
    /// The server could not say when the client was built (it was down, or failed the call):
    /// asked again at each lookup, through the client's breaker, until it answers. Meanwhile
    /// nothing is refused before the call.
    Ask(Arc<provider_remote::RemoteClient>),
}

/// A client just built, before the breaker wraps it.
struct Built {
    client: Box<dyn SecretsClient>,
    capabilities: Stated,
}

impl Built {
    /// A remote client whose calls have `deadline`; its server is asked for its capabilities
    /// once the breaker guards it.
    fn remote(
        connection: provider_remote::Connection,
        reference: provider_protocol::v1::ProviderReference,
        namespace: &str,
        deadline: std::time::Duration,
    ) -> Self {
        let client = || {
            provider_remote::RemoteClient::new(
                connection.clone(),
                reference.clone(),
                namespace.to_owned(),
            )
            .with_deadline(deadline)
        };
        Self {
            client: Box::new(client()),
            capabilities: Stated::Ask(Arc::new(client())),
        }
    }
}

/// What `server` states, through `breaker` when there is one; `None` while it cannot say.
async fn ask_capabilities(
    server: &provider_remote::RemoteClient,
    breaker: Option<&breaker::Guarded>,
) -> Option<Capabilities> {
    let answer = match breaker {
        Some(breaker) => breaker.call(server.capabilities()).await,
        None => server.capabilities().await,
    };
    match answer {
        Ok(capabilities) => Some(capabilities),
        Err(provider::Error::Unsupported { .. }) => Some(Capabilities::ReadWrite),
        Err(e) => {
            debug!(error = %e, "a provider server did not state its capabilities; asking again at the next lookup");
            None
        }
    }
}

/// A client together with what it was built from.
#[derive(Clone)]
pub struct Handle {
    pub client: Arc<dyn SecretsClient>,
    /// `None` for a kind this operator does not compile in (served out of tree).
    pub provider: Option<Arc<dyn provider::Provider>>,
    pub identity: ProviderIdentity,
    /// What the store may be used for: the provider's, or what its server states.
    pub capabilities: Capabilities,
}

/// A provider that became unreachable (its client's breaker opened: `available` is false), or
/// reachable again.
#[derive(Clone, Debug)]
pub struct Availability {
    pub identity: ProviderIdentity,
    pub available: bool,
}

pub struct ClientManager {
    kube: kube::Client,
    registry: Arc<ProviderRegistry>,
    flood_gate: bool,
    controller_class: String,
    cache: Mutex<HashMap<Slot, Cached>>,
    watched: cache::Caches,
    credentials: credentials::CredentialVersions,
    metrics: Metrics,
    /// Where a client tells that its provider became unreachable, or reachable again.
    availability: Arc<std::sync::OnceLock<futures::channel::mpsc::UnboundedSender<Availability>>>,
    pool: provider_remote::Pool,
    /// Provider kinds every store of which is served by a ClusterProviderClass.
    routes: BTreeMap<String, String>,
    /// Clients hold calls back while their provider is unavailable (breaker.rs).
    breaker: bool,
}

impl ClientManager {
    pub fn new(
        kube: kube::Client,
        registry: Arc<ProviderRegistry>,
        flood_gate: bool,
        controller_class: String,
        metrics: Metrics,
    ) -> Self {
        Self {
            credentials: credentials::CredentialVersions::new(kube.clone()),
            kube,
            registry,
            flood_gate,
            controller_class,
            cache: Mutex::default(),
            watched: cache::Caches::default(),
            metrics,
            availability: Arc::default(),
            pool: provider_remote::Pool::new(Default::default(), Default::default()),
            routes: BTreeMap::new(),
            breaker: true,
        }
    }

    /// Clients pass every call through even while their provider is unavailable: for a
    /// provider server, whose caller paces its own calls.
    pub fn without_breaker(mut self) -> Self {
        self.breaker = false;
        self
    }

    /// Serves every store of each kind (the map's keys) through the named ClusterProviderClass,
    /// unless the store names a class itself: moving a provider out of process edits no store.
    pub fn route_kinds(mut self, routes: BTreeMap<String, String>) -> Self {
        self.routes = routes;
        self
    }

    /// Whether `reference` names a kind this operator does not compile in (another group's, or
    /// one of our groups' it was built without): only a server of its own can serve it.
    pub fn is_foreign(&self, reference: &ProviderRef) -> bool {
        resolve::provider_resource(&self.registry, reference).is_err()
    }

    /// The class that serves `store`, whose provider has `kind`; `None` in process.
    pub fn class_of(&self, store: &LoadedStore, kind: &str) -> Result<Option<ClassRef>> {
        runtime::class_of(&self.routes, store, kind)
    }

    /// The class that serves provider objects of `kind` themselves (their own validation).
    pub fn class_of_kind(&self, kind: &str) -> Option<ClassRef> {
        self.routes.get(kind).map(ClassRef::cluster)
    }

    /// Lets class lookups use the ProviderClass controllers' watch caches.
    pub fn use_class_caches(
        &self,
        classes: kube::runtime::reflector::Store<api::provider_class::ProviderClass>,
        cluster: kube::runtime::reflector::Store<api::provider_class::ClusterProviderClass>,
    ) {
        self.watched.set_classes(classes, cluster);
    }

    /// Where the news of providers that became unreachable, or reachable again, goes.
    pub fn on_availability(&self, to: futures::channel::mpsc::UnboundedSender<Availability>) {
        let _ = self.availability.set(to);
    }

    pub fn registry(&self) -> &Arc<ProviderRegistry> {
        &self.registry
    }

    /// Lets store lookups use the ExternalSecret controller's watch caches.
    pub fn use_store_caches(
        &self,
        stores: kube::runtime::reflector::Store<api::store::SecretStore>,
        cluster: kube::runtime::reflector::Store<api::store::ClusterSecretStore>,
    ) {
        self.watched.set_stores(stores, cluster);
    }

    /// Lets ClusterSecretStore `conditions` read namespace labels from a watch cache.
    pub fn use_namespace_cache(
        &self,
        namespaces: kube::runtime::reflector::Store<
            kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>,
        >,
    ) {
        self.watched.set_namespaces(namespaces);
    }

    /// Provider kinds are being discovered: until [`ClientManager::providers_discovered`], a
    /// kind not watched yet is waited for rather than reported.
    pub fn discovering_providers(&self) {
        self.watched.discovering();
    }

    /// Every provider kind installed at the start is watched, or waits for permission.
    pub fn providers_discovered(&self) {
        self.watched.discovered();
    }

    /// Whether lookups no longer wait for provider kinds: the discovery settled, or was given
    /// up on.
    pub fn providers_known(&self) -> bool {
        self.watched.discovery_over()
    }

    /// Until the provider kinds installed at the start are watched (within a bound): what the
    /// provider caches hold is then all there is.
    pub async fn providers_settled(&self) {
        self.watched.discovery_settled().await;
    }

    /// Lets provider object lookups use a provider controller's watch cache, once filled.
    pub fn use_provider_cache(
        &self,
        resource: kube::api::ApiResource,
        objects: kube::runtime::reflector::Store<kube::api::DynamicObject>,
    ) {
        self.watched.set_provider(resource, objects);
    }

    /// Stops answering lookups of `resource`'s kind from its watch cache: its CRD was deleted,
    /// and its controller stopped.
    pub fn drop_provider_cache(&self, resource: &kube::api::ApiResource) {
        self.watched.unset_provider(resource);
    }

    /// A client for `store`, used from `namespace`: the path of ExternalSecrets.
    /// Enforces ClusterSecretStore `conditions` and refuses stores that are not Ready.
    pub async fn get(&self, store: &StoreRef, namespace: &str) -> Result<Handle> {
        self.get_gated(store, namespace, self.flood_gate, true)
            .await
    }

    /// A client for `store` whether or not it is Ready: the path of PushSecrets. ESO gives them
    /// no flood gate, so a push or a clean-up is tried against the backend itself rather than
    /// held back by a store whose last validation failed.
    pub async fn get_ungated(&self, store: &StoreRef, namespace: &str) -> Result<Handle> {
        self.get_gated(store, namespace, false, false).await
    }

    /// The store `store` names for a user in `namespace`, from the watch cache when there is one.
    pub async fn load(&self, store: &StoreRef, namespace: &str) -> Result<LoadedStore> {
        match self.watched.store(store, namespace) {
            Some(cached) => Ok(cached),
            None => resolve::load_store(&self.kube, store, namespace).await,
        }
    }

    /// `gate_reads`: the caller reads (ExternalSecrets) rather than writes (PushSecrets).
    async fn get_gated(
        &self,
        store: &StoreRef,
        namespace: &str,
        gate: bool,
        gate_reads: bool,
    ) -> Result<Handle> {
        let loaded = self.load(store, namespace).await?;
        if let Some(class) = loaded
            .spec
            .controller
            .as_deref()
            .filter(|c| !c.is_empty() && *c != self.controller_class)
        {
            return Err(Error::OtherController {
                kind: store.kind,
                name: store.name.clone(),
                class: class.to_owned(),
            });
        }
        if let StoreKind::ClusterSecretStore = store.kind {
            conditions::check(
                &self.kube,
                &self.watched,
                &store.name,
                &loaded.spec,
                namespace,
            )
            .await?;
        }
        if gate && let Some(why) = &loaded.unready {
            return Err(Error::NotReady {
                kind: store.kind,
                name: store.name.clone(),
                why: why.clone(),
            });
        }
        let caller = match store.kind {
            StoreKind::SecretStore => Caller::SecretStore,
            StoreKind::ClusterSecretStore => Caller::ClusterSecretStore,
        };
        let converted = convert(&self.registry, &loaded)?;
        let handle = match self.class_of(&loaded, &converted.reference.kind)? {
            Some(class) if self.is_foreign(&converted.reference) => {
                self.foreign_client(&converted.reference, &loaded, caller, namespace, &class)
                    .await?
            }
            class => {
                let object = match (
                    self.provider_object(&converted.reference, loaded.namespace.as_deref())
                        .await,
                    &converted.generated,
                ) {
                    // The store reconciler writes an inline store's object, and may not have
                    // yet (an operator taking over from Go ESO finds none): its converted form
                    // is the same spec.
                    (Err(Error::ProviderObjectMissing { .. }), Some(generated)) => {
                        let (provider, _, _) =
                            resolve::provider_resource(&self.registry, &converted.reference)?;
                        let object: kube::api::DynamicObject =
                            serde_json::from_value(generated.object.clone())
                                .expect("a converted provider object is a Kubernetes object");
                        ProviderObject::from_dynamic(provider, &object)
                    }
                    (object, _) => object?,
                };
                self.client_via(object, caller, namespace, class).await?
            }
        };
        // Refused before any call, so the condition says why rather than what the backend
        // answers to a call it does not serve.
        if let Some(why) = refusal(gate_reads, handle.capabilities) {
            return Err(Error::Capabilities {
                kind: store.kind,
                name: store.name.clone(),
                why,
            });
        }
        Ok(handle)
    }

    /// The provider object `reference` names, for a store in `store_namespace` (`None` for a
    /// ClusterSecretStore).
    pub async fn provider_object(
        &self,
        reference: &ProviderRef,
        store_namespace: Option<&str>,
    ) -> Result<ProviderObject> {
        // A ClusterSecretStore names a namespaced object's namespace (served out of process);
        // a SecretStore's may only be its own, which `convert` checked.
        let store_namespace = reference.namespace.as_deref().or(store_namespace);
        let loaded = resolve::load_provider(
            &self.kube,
            &self.registry,
            &self.watched,
            reference,
            store_namespace,
        )
        .await;
        if let Err(Error::ProviderObjectMissing { kind, name }) = &loaded {
            // The object is gone: close what was built from it instead of keeping it forever.
            let namespace = store_namespace
                .map(str::to_owned)
                .filter(|_| reference.api_version.starts_with(api::PROVIDERS_GROUP));
            self.forget(&ProviderIdentity {
                kind: kind.clone(),
                namespace,
                name: name.clone(),
            })
            .await;
        }
        loaded
    }

    /// A client for a loaded provider object on behalf of `caller` in `namespace`, in this
    /// process.
    pub async fn client(
        &self,
        object: ProviderObject,
        caller: Caller,
        namespace: &str,
    ) -> Result<Handle> {
        self.client_via(object, caller, namespace, None).await
    }

    /// A client for a loaded provider object on behalf of `caller` in `namespace`: through
    /// `class`'s server, or in this process without one.
    pub async fn client_via(
        &self,
        object: ProviderObject,
        caller: Caller,
        namespace: &str,
        class: Option<ClassRef>,
    ) -> Result<Handle> {
        let provider = object.provider.clone();
        // A namespaced provider object works for its own namespace whichever store names it, as
        // the provider server resolves it: its credentials cannot leave that namespace.
        let (caller, namespace) = match &object.identity.namespace {
            Some(home) if !caller.is_namespaced() => (Caller::Provider, home.clone()),
            _ => (caller, namespace.to_owned()),
        };
        let namespace = namespace.as_str();
        // The referent rules and the namespace check are pure: run here too when the server
        // will run them again, so a store's condition reads the same in and out of process.
        let spec = provider.apply_referent(object.spec.clone(), caller, namespace)?;
        let referenced = provider.credential_refs(&spec, namespace);
        for cred in &referenced {
            credentials::check_scope(caller, namespace, cred)?;
        }
        let (build, credentials) = match &class {
            // The server reads and watches the credentials.
            Some(class) => {
                let (runtime, address) = self.runtime_fingerprint(class).await?;
                (Build::Remote(runtime, address), BTreeMap::new())
            }
            None => {
                let mut credentials = BTreeMap::new();
                for cred in referenced {
                    let version = self.credentials.version(&cred).await?;
                    credentials.insert(cred, version);
                }
                (Build::Local(spec), credentials)
            }
        };
        let fingerprint = Fingerprint {
            uid: object.uid.clone(),
            generation: object.generation,
            credentials,
            runtime: match &build {
                Build::Remote(runtime, _) => Some(runtime.clone()),
                Build::Local(_) => None,
            },
        };
        let slot = Slot {
            provider: object.identity.clone(),
            namespaced: caller.is_namespaced(),
            namespace: namespace.to_owned(),
        };
        let client = self
            .cached_or_build(slot, fingerprint, async || match build {
                Build::Remote(runtime, address) => {
                    let connection = self.connection(&runtime, &address).await?;
                    let reference = runtime::provider_reference(
                        &object.api_version,
                        &object.identity,
                        caller,
                        namespace,
                    );
                    Ok(Built::remote(
                        connection,
                        reference,
                        namespace,
                        runtime.deadline,
                    ))
                }
                Build::Local(spec) => {
                    let client = provider
                        .new_client(
                            ClientRequest {
                                provider: object.identity.clone(),
                                api_version: object.api_version.clone(),
                                spec,
                                namespace: namespace.to_owned(),
                            },
                            Arc::new(credentials::KubeCredentials {
                                kube: self.kube.clone(),
                                caller,
                                home: namespace.to_owned(),
                            }),
                        )
                        .await?;
                    Ok(Built {
                        client,
                        capabilities: Stated::Known(provider.capabilities()),
                    })
                }
            })
            .await?;
        let (client, capabilities) = client;
        Ok(Handle {
            client,
            capabilities,
            provider: Some(provider),
            identity: object.identity,
        })
    }

    /// A client for a provider object of a kind this operator does not compile in, served by
    /// `class`'s server (an out-of-tree secret store): the operator never reads the object, it
    /// passes the reference and the server loads it.
    pub async fn foreign_client(
        &self,
        reference: &ProviderRef,
        store: &LoadedStore,
        caller: Caller,
        namespace: &str,
        class: &ClassRef,
    ) -> Result<Handle> {
        let identity = ProviderIdentity {
            kind: reference.kind.clone(),
            namespace: reference
                .namespace
                .clone()
                .or_else(|| store.namespace.clone()),
            name: reference.name.clone(),
        };
        let (runtime, address) = self.runtime_fingerprint(class).await?;
        let fingerprint = Fingerprint {
            uid: None,
            generation: None,
            credentials: BTreeMap::new(),
            runtime: Some(runtime.clone()),
        };
        let slot = Slot {
            provider: identity.clone(),
            namespaced: caller.is_namespaced(),
            namespace: namespace.to_owned(),
        };
        let client = self
            .cached_or_build(slot, fingerprint, async || {
                let connection = self.connection(&runtime, &address).await?;
                let reference = runtime::provider_reference(
                    &reference.api_version,
                    &identity,
                    caller,
                    namespace,
                );
                Ok(Built::remote(
                    connection,
                    reference,
                    namespace,
                    runtime.deadline,
                ))
            })
            .await?;
        let (client, capabilities) = client;
        Ok(Handle {
            client,
            capabilities,
            provider: None,
            identity,
        })
    }

    /// The cached client of `slot` while its fingerprint holds (or is behind the cached one's),
    /// else a new one from `build`, guarded by the breaker, replacing the old, which is closed
    /// when its last user lets go; with what the store may be used for.
    async fn cached_or_build(
        &self,
        slot: Slot,
        fingerprint: Fingerprint,
        build: impl AsyncFnOnce() -> Result<Built>,
    ) -> Result<(Arc<dyn SecretsClient>, Capabilities)> {
        let cached = self.cached_or_built(&slot, fingerprint, build).await?;
        let capabilities = match &cached.capabilities {
            Stated::Known(capabilities) => *capabilities,
            Stated::Ask(server) => match ask_capabilities(server, cached.breaker.as_ref()).await {
                Some(stated) => {
                    let mut cache = self.cache.lock().expect("client cache lock poisoned");
                    if let Some(entry) = cache
                        .get_mut(&slot)
                        .filter(|entry| Arc::ptr_eq(&entry.client, &cached.client))
                    {
                        entry.capabilities = Stated::Known(stated);
                    }
                    stated
                }
                None => Capabilities::ReadWrite,
            },
        };
        let client: Arc<dyn SecretsClient> = cached.client;
        Ok((client, capabilities))
    }

    async fn cached_or_built(
        &self,
        slot: &Slot,
        fingerprint: Fingerprint,
        build: impl AsyncFnOnce() -> Result<Built>,
    ) -> Result<Cached> {
        let kind = slot.provider.kind.clone();
        let stale = {
            let mut cache = self.cache.lock().expect("client cache lock poisoned");
            match cache.get_mut(slot) {
                Some(c) if c.fingerprint == fingerprint || fingerprint.behind(&c.fingerprint) => {
                    self.metrics.hit(&kind);
                    c.used = tokio::time::Instant::now();
                    return Ok(c.clone());
                }
                Some(_) => cache.remove(slot).map(|c| c.client),
                None => None,
            }
        };
        self.metrics.miss(&kind);
        if let Some(old) = stale {
            self.metrics.evicted(&kind, "changed");
            shared::Shared::retire(old).await;
        }
        debug!(provider = %kind, name = %slot.provider.name, namespace = %slot.namespace, "building secrets client");
        let built = build().await?;
        // Held back while its provider is unavailable (breaker.rs): one question per wait
        // instead of one per ExternalSecret retry.
        let (to, identity) = (self.availability.clone(), slot.provider.clone());
        let (client, breaker): (Box<dyn SecretsClient>, _) = if self.breaker {
            let guarded = breaker::Guarded::new(
                built.client,
                self.metrics.breaker(&kind),
                move |available| {
                    if let Some(to) = to.get() {
                        let identity = identity.clone();
                        let _ = to.unbounded_send(Availability {
                            identity,
                            available,
                        });
                    }
                },
            );
            (Box::new(guarded.clone()), Some(guarded))
        } else {
            (built.client, None)
        };
        let cached = Cached {
            fingerprint,
            client: Arc::new(shared::Shared::new(client)),
            capabilities: built.capabilities,
            breaker,
            used: tokio::time::Instant::now(),
        };
        // Another reconcile may have built this client concurrently. The one already handed
        // out stays: its calls carry state (a Vault token, read-your-writes indexes) that a
        // replacement would lose.
        let (cached, surplus) = {
            let mut cache = self.cache.lock().expect("client cache lock poisoned");
            match cache.get(slot) {
                Some(first)
                    if first.fingerprint == cached.fingerprint
                        || cached.fingerprint.behind(&first.fingerprint) =>
                {
                    (first.clone(), Some(cached.client))
                }
                _ => {
                    let old = cache.insert(slot.clone(), cached.clone());
                    (cached, old.map(|old| old.client))
                }
            }
        };
        if let Some(surplus) = surplus {
            self.metrics.evicted(&kind, "replaced");
            shared::Shared::retire(surplus).await;
        }
        Ok(cached)
    }

    /// Closes clients no reconcile asked for in [`IDLE_CLIENT`], for as long as it is polled.
    pub async fn sweep_idle(&self) {
        let mut every = tokio::time::interval(IDLE_CLIENT / 5);
        loop {
            every.tick().await;
            self.evict_idle(IDLE_CLIENT).await;
        }
    }

    /// Closes the clients no reconcile asked for in `idle`: a deleted store's client, its
    /// connections and its Vault token would otherwise live until the operator restarts. A
    /// client still in use is asked for at least once per refresh of its ExternalSecrets.
    pub async fn evict_idle(&self, idle: std::time::Duration) {
        let evicted: Vec<_> = {
            let mut cache = self.cache.lock().expect("client cache lock poisoned");
            let now = tokio::time::Instant::now();
            let stale: Vec<_> = cache
                .iter()
                .filter(|(_, c)| now.duration_since(c.used) >= idle)
                .map(|(slot, _)| slot.clone())
                .collect();
            stale
                .into_iter()
                .filter_map(|slot| cache.remove(&slot).map(|c| (slot, c)))
                .collect()
        };
        self.prune_credentials();
        for (slot, c) in evicted {
            debug!(provider = %slot.provider.kind, name = %slot.provider.name, namespace = %slot.namespace, "closing an idle secrets client");
            self.metrics.evicted(&slot.provider.kind, "idle");
            shared::Shared::retire(c.client).await;
        }
    }

    /// Keeps the credential versions and watches the cached clients need, and no others.
    fn prune_credentials(&self) {
        let in_use: std::collections::HashSet<CredentialRef> = self
            .cache
            .lock()
            .expect("client cache lock poisoned")
            .values()
            .flat_map(|c| c.fingerprint.credentials.keys().cloned())
            .collect();
        self.credentials.retain(&in_use);
    }

    /// What a watch of provider objects of `kind` calls for an object that left it: the clients
    /// built from it are closed (a Vault token revoked) now, not at the idle eviction a quarter
    /// of an hour later.
    pub fn forget_departed(
        self: &Arc<Self>,
        kind: &'static str,
    ) -> impl Fn(kube::runtime::reflector::ObjectRef<kube::api::DynamicObject>) + Send + Sync + 'static
    {
        let manager = self.clone();
        move |object| {
            let (manager, identity) = (
                manager.clone(),
                ProviderIdentity {
                    kind: kind.to_owned(),
                    namespace: object.namespace,
                    name: object.name,
                },
            );
            tokio::spawn(async move { manager.forget(&identity).await });
        }
    }

    /// Drops and closes every client built from `identity`, e.g. when its object was deleted.
    pub async fn forget(&self, identity: &ProviderIdentity) {
        let evicted: Vec<_> = {
            let mut cache = self.cache.lock().expect("client cache lock poisoned");
            let slots: Vec<_> = cache
                .keys()
                .filter(|s| &s.provider == identity)
                .cloned()
                .collect();
            slots.into_iter().filter_map(|s| cache.remove(&s)).collect()
        };
        self.prune_credentials();
        for c in evicted {
            self.metrics.evicted(&identity.kind, "deleted");
            shared::Shared::retire(c.client).await;
        }
    }

    /// The stores that read through the provider object `identity`, by `providerRef` or as the
    /// object converted from their inline provider, from the watch caches.
    pub fn stores_using(&self, identity: &ProviderIdentity) -> Vec<LoadedStore> {
        self.stores_converting(identity, |_| true)
    }

    /// The stores whose inline provider converts to `identity` with a spec other than `spec`:
    /// the object was edited by hand, and its store puts it back. Exact where the generations
    /// seen are not: an edit that is the first event seen of an object cannot tell.
    pub fn stores_drifted_from(
        &self,
        identity: &ProviderIdentity,
        spec: &serde_json::Value,
    ) -> Vec<LoadedStore> {
        self.stores_converting(identity, |c| {
            c.generated.as_ref().is_some_and(|g| g.spec() != spec)
        })
    }

    fn stores_converting(
        &self,
        identity: &ProviderIdentity,
        keep: impl Fn(&Converted) -> bool,
    ) -> Vec<LoadedStore> {
        // A store reads through an object of its own name (converted) or the one its
        // providerRef names: a cheap test before the full Convert, which runs on every provider
        // event.
        let candidate = |name: &str, spec: &api::store::SecretStoreSpec| match &spec.provider_ref {
            Some(r) => r.name == identity.name,
            None => name == identity.name,
        };
        self.watched
            .stores_where(identity.namespace.as_deref(), candidate)
            .into_iter()
            .filter(|store| {
                convert(&self.registry, store).is_ok_and(|c| {
                    c.reference.kind == identity.kind
                        && c.reference.name == identity.name
                        && keep(&c)
                })
            })
            .collect()
    }

    /// The uids of the stores, classes and provider objects in the watch caches: the objects a
    /// per-object record may still be needed for.
    pub fn watched_uids(&self) -> std::collections::HashSet<String> {
        self.watched.uids()
    }

    /// The stores `class` serves, by their `runtimeRef` or, for a ClusterProviderClass, by the
    /// route of their provider's kind, from the watch caches.
    pub fn stores_using_class(&self, class: &ClassRef) -> Vec<LoadedStore> {
        let routed = class.namespace.is_none() && self.routes.values().any(|c| *c == class.name);
        // A cheap test before the full Convert a route needs.
        let candidate = |_: &str, spec: &api::store::SecretStoreSpec| match &spec.runtime_ref {
            Some(r) => r.name == class.name,
            None => routed,
        };
        let stores = match &class.namespace {
            Some(ns) => self.watched.stores_where(Some(ns), candidate),
            None => self.watched.every_store_where(candidate),
        };
        stores
            .into_iter()
            .filter(|store| {
                convert(&self.registry, store).is_ok_and(|c| {
                    self.class_of(store, &c.reference.kind)
                        .is_ok_and(|served| served.as_ref() == Some(class))
                })
            })
            .collect()
    }

    /// Provider objects converted from the store with this `uid` (label and controller owner),
    /// from the provider watch caches: cleaning up after a change of kind costs no request.
    pub fn converted_from(&self, store: &LoadedStore) -> Vec<(ApiResource, DynamicObject)> {
        let Some(uid) = store.uid.as_deref() else {
            return Vec::new();
        };
        let scope = store.kind.provider_scope();
        self.watched
            .providers_labelled(scope, LABEL_CONVERTED_FROM, &store.name)
            .into_iter()
            .filter(|(_, o)| {
                o.namespace() == store.namespace
                    && o.owner_references()
                        .iter()
                        .any(|r| r.uid == uid && r.controller == Some(true))
            })
            .collect()
    }
}

/// Why a store of `capabilities` may not be used by a reader (`reads`) or a writer.
fn refusal(reads: bool, capabilities: Capabilities) -> Option<&'static str> {
    match (reads, capabilities) {
        (true, Capabilities::WriteOnly) => Some("write-only: ExternalSecrets cannot read from it"),
        (false, Capabilities::ReadOnly) => Some("read-only: PushSecrets cannot write to it"),
        _ => None,
    }
}

/// How a missing client is built.
enum Build {
    /// In process, from the spec after `apply_referent`.
    Local(serde_json::Value),
    /// Through a provider class's server at the address.
    Remote(runtime::RuntimeFingerprint, String),
}

#[cfg(test)]
mod tests;
