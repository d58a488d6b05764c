//! The TLS Secrets of namespaced ProviderClasses that name a provider server whose Secret the
//! operator keeps ([`crate::provider_tls`]): each gets `ca.crt` (what the server's certificate
//! chains to) and a client certificate naming the class's namespace
//! ([`Material::namespace_client`]), never the operator's own. A server refuses such a
//! certificate any claim outside its namespace, so a tenant who can read its namespace's Secrets
//! can call the server directly only as its own SecretStores.
//!
//! A Secret of that name that the operator did not write is left alone (the class then uses what
//! its owner put there, as before). A written Secret belongs to the classes that read it (two
//! classes of a namespace without `tlsSecretRef` share `external-secrets-provider-tls`) and is
//! deleted with the last of them. One that classes of another server read too is not written.

use std::collections::BTreeMap;

use api::caller_identity::CallerIdentity;
use api::provider_class::{DEFAULT_TLS_SECRET, ProviderClass};
use futures::{Stream, StreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Api, Resource, ResourceExt};
use tracing::{info, warn};

use crate::Error;
use crate::certs::{self, Material, PROVIDER_TLS_FIELD_MANAGER};
use crate::provider_tls::Settings;

/// `app.kubernetes.io/component` of the Secrets written here: the mark of the operator's own.
pub const COMPONENT: &str = "provider-tls-namespace";
const COMPONENT_LABEL: &str = "app.kubernetes.io/component";

/// An item each time a ProviderClass is created or its spec changes (not its status, which the
/// health checks rewrite every few seconds), so that its Secret is written then rather than at
/// the next periodic check. Nothing while the CRD is not installed.
pub fn class_changes(client: kube::Client) -> impl Stream<Item = ()> + Send {
    watcher(
        Api::<ProviderClass>::all(client),
        watcher::Config::default(),
    )
    .default_backoff()
    .applied_objects()
    .predicate_filter(predicates::generation, Default::default())
    .filter_map(|class| std::future::ready(class.ok().map(drop)))
}

/// Brings the TLS Secret of every ProviderClass of the server `settings` names up to `material`.
/// One Secret's failure is logged and does not stop the others.
pub async fn keep(client: &kube::Client, settings: &Settings, material: &Material) {
    let classes = match Api::<ProviderClass>::all(client.clone())
        .list(&Default::default())
        .await
    {
        Ok(classes) => classes,
        // No ProviderClass CRD installed: no class to write for.
        Err(kube::Error::Api(e)) if e.code == 404 => return,
        Err(e) => {
            warn!(error = %e, "listing ProviderClasses to keep their TLS Secrets");
            return;
        }
    };
    keep_classes(client, settings, material, classes.items).await;
}

/// The TLS Secret a namespaced class reads, `(namespace, name)`; `None` for a class the client
/// manager refuses a Secret to (one of another namespace), which gets nothing written.
fn secret_of(class: &ProviderClass) -> Option<(String, String)> {
    let namespace = class.namespace()?;
    let reference = class.spec.tls_secret_ref.as_ref();
    if reference
        .and_then(|r| r.namespace.as_deref())
        .is_some_and(|ns| ns != namespace)
    {
        return None;
    }
    let name = reference.map_or(DEFAULT_TLS_SECRET, |r| r.name.as_str());
    Some((namespace, name.to_owned()))
}

/// Writes the Secrets of those of `classes` that name the server of `settings`, grouped by the
/// Secret they read: each Secret once, owned by every class of its group. A Secret also read by a
/// class of another server gets nothing: its keeper, if the operator keeps that server too, would
/// write its own certificate over ours at each pass, and either certificate fails the other class.
async fn keep_classes(
    client: &kube::Client,
    settings: &Settings,
    material: &Material,
    classes: impl IntoIterator<Item = ProviderClass>,
) {
    let hosts = settings.hosts();
    let mut groups = BTreeMap::<(String, String), Vec<ProviderClass>>::new();
    for class in classes {
        if let Some(secret) = secret_of(&class) {
            groups.entry(secret).or_default().push(class);
        }
    }
    for ((namespace, name), group) in groups {
        let (ours, others): (Vec<_>, Vec<_>) = group.into_iter().partition(|class| {
            let address = class.spec.address.as_str();
            let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
            hosts.iter().any(|h| h == host)
        });
        let Some(one) = ours.first() else {
            continue;
        };
        if let Some(other) = others.first() {
            warn!(
                secret = %format!("{namespace}/{name}"),
                class = %one.name_any(),
                address = %one.spec.address,
                other_class = %other.name_any(),
                other_address = %other.spec.address,
                "ProviderClasses of two servers read one TLS Secret; writing nothing into it (give one of them a spec.tlsSecretRef of its own)"
            );
            continue;
        }
        if let Err(e) = keep_one(client, &namespace, &name, &ours, material).await {
            warn!(secret = %format!("{namespace}/{name}"), error = %e, "keeping the TLS Secret of ProviderClasses");
        }
    }
}

/// The Secret `namespace/name`, read by `classes` (all of this server, at least one).
async fn keep_one(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    classes: &[ProviderClass],
    material: &Material,
) -> Result<(), Error> {
    let what = format!("Secret {namespace}/{name}");
    let api = Api::<Secret>::namespaced(client.clone(), namespace);
    let existing = api
        .get_opt(name)
        .await
        .map_err(|e| Error::Kube("reading", what.clone(), e))?;
    if existing
        .as_ref()
        .is_some_and(|s| s.labels().get(COMPONENT_LABEL).map(String::as_str) != Some(COMPONENT))
    {
        return Ok(());
    }
    // Every class of the group owns the Secret, none as its controller: the garbage collector
    // deletes it once the last of them is gone. References to classes deleted since stay until
    // the garbage collector drops them; they do not make the Secret out of date.
    let owners: Vec<_> = classes.iter().filter_map(|c| c.owner_ref(&())).collect();
    let owned = existing.as_ref().is_some_and(|s| {
        owners
            .iter()
            .all(|o| s.owner_references().iter().any(|r| r.uid == o.uid))
    });
    let data = existing
        .as_ref()
        .and_then(|s| s.data.clone())
        .unwrap_or_default();
    let bundle = material.ca_bundle_pem();
    // Kept only if signed by the server's CA and naming this namespace: one of another
    // namespace (copied from there, say) would claim that namespace's stores.
    let this_namespace = CallerIdentity::Namespace(namespace.to_owned());
    let current = Material::client_of(&data).ok().flatten().filter(|client| {
        client.ca_der == material.serving.ca_der
            && CallerIdentity::of_certificate(&client.cert_der).as_ref() == Ok(&this_namespace)
    });
    let up_to_date = owned
        && current.is_some()
        && data.get(certs::CA_CRT).map(|b| b.0.as_slice()) == Some(bundle.as_bytes());
    if up_to_date {
        return Ok(());
    }
    let client_cert = match current {
        Some(client) => client,
        // A Secret from before the CA's key was kept: the next rotation brings one.
        None => match material.namespace_client(namespace)? {
            Some(client) => client,
            None => return Ok(()),
        },
    };
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            // Of two replicas writing at once, the second finds the first's and keeps it.
            resource_version: existing
                .as_ref()
                .and_then(|s| s.metadata.resource_version.clone()),
            labels: Some(BTreeMap::from([
                (
                    "app.kubernetes.io/managed-by".to_owned(),
                    "external-secrets".to_owned(),
                ),
                (COMPONENT_LABEL.to_owned(), COMPONENT.to_owned()),
            ])),
            owner_references: Some(owners),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([
            (certs::CA_CRT.to_owned(), ByteString(bundle.into_bytes())),
            (
                certs::CLIENT_CRT.to_owned(),
                ByteString(client_cert.chain_pem().into_bytes()),
            ),
            (
                certs::CLIENT_KEY.to_owned(),
                ByteString(client_cert.key_pem.into_bytes()),
            ),
        ])),
        ..Secret::default()
    };
    // A Secret that did not exist is created, never applied: an apply would take over one
    // created since we looked (by another replica, or a Secret of the tenant's own).
    let written = match existing {
        None => {
            let params = PostParams {
                field_manager: Some(PROVIDER_TLS_FIELD_MANAGER.to_owned()),
                ..PostParams::default()
            };
            api.create(&params, &secret).await.map(drop)
        }
        Some(_) => api
            .patch(
                name,
                &PatchParams::apply(PROVIDER_TLS_FIELD_MANAGER).force(),
                &Patch::Apply(&secret),
            )
            .await
            .map(drop),
    };
    match written {
        Ok(()) => {
            info!(secret = %what, "wrote the namespace's client certificate for its ProviderClass");
            Ok(())
        }
        // Created or changed since we looked: the next pass reads what is there now.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(Error::Kube("writing", what, e)),
    }
}
