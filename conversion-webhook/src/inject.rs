//! The CA bundle into `spec.conversion.webhook.clientConfig.caBundle` of the CRDs that the
//! converters serve, and nowhere else.
//!
//! A CRD is patched only when its bundle lacks a CA that a certificate in use (or about to be)
//! needs. A replica that has not read a rotated Secret yet therefore never writes its older
//! bundle over the newer one: the newer one still holds the CA of the certificate it serves.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::FIELD_MANAGER;
use crate::certs::{Material, certificates};

/// Which CRDs were looked at, and whether each now trusts every CA `material` needs.
#[derive(Debug, Default)]
pub struct Injected {
    /// CRDs that trust the required CAs (patched now or already).
    pub ready: Vec<String>,
    /// CRDs that could not be patched, with why; the next check tries again.
    pub failed: Vec<(String, String)>,
}

impl Injected {
    pub fn complete(&self) -> bool {
        self.failed.is_empty()
    }
}

/// What a converting CRD tells the API server of its webhook, as the CRD watch last showed it.
#[derive(Debug, Clone, PartialEq)]
struct Conversion {
    /// `spec.conversion.strategy` is `Webhook`: without it the API server calls no webhook, and
    /// a caBundle without a webhook is invalid.
    webhook: bool,
    url: Option<String>,
    /// The certificates of `caBundle`, DER.
    cas: Vec<Vec<u8>>,
}

impl Conversion {
    fn of(crd: &CustomResourceDefinition) -> Self {
        let conversion = crd.spec.conversion.as_ref();
        let client_config = conversion
            .and_then(|c| c.webhook.as_ref())
            .and_then(|w| w.client_config.as_ref());
        Self {
            webhook: conversion.is_some_and(|c| c.strategy == "Webhook"),
            url: client_config.and_then(|c| c.url.clone()),
            cas: client_config
                .and_then(|c| c.ca_bundle.as_ref())
                .map(|b| certificates(&b.0).unwrap_or_default())
                .unwrap_or_default(),
        }
    }

    fn trusts(&self, required: &[&[u8]], url: Option<&str>) -> bool {
        url.is_none_or(|u| self.url.as_deref() == Some(u))
            && required
                .iter()
                .all(|ca| self.cas.iter().any(|c| c.as_slice() == *ca))
    }
}

/// The CRDs that need conversion, by name, as their watch shows them: checks read them here,
/// not from the API server (a list and a read of each, at every start and every minute).
#[derive(Debug, Default)]
pub struct Crds {
    current: BTreeMap<String, Conversion>,
    /// Filled by a (re)list under way; it replaces `current` when the list is through.
    listing: Option<BTreeMap<String, Conversion>>,
    listed: bool,
}

impl Crds {
    /// Whether the watch's first list went through: before it, a check would find no CRD.
    pub fn listed(&self) -> bool {
        self.listed
    }

    /// Takes one event of the watch of converting CRDs; whether a check is due: the first list
    /// is through, or what a CRD tells the API server changed (not its status, say).
    pub fn apply(&mut self, event: watcher::Event<CustomResourceDefinition>) -> bool {
        match event {
            watcher::Event::Init => {
                self.listing = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply(crd) => {
                let listing = self.listing.get_or_insert_default();
                listing.insert(crd.name_any(), Conversion::of(&crd));
                false
            }
            watcher::Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                let changed = !self.listed || listed != self.current;
                self.current = listed;
                self.listed = true;
                changed
            }
            watcher::Event::Apply(crd) => {
                let conversion = Conversion::of(&crd);
                let previous = self.current.insert(crd.name_any(), conversion.clone());
                self.listed && previous.as_ref() != Some(&conversion)
            }
            watcher::Event::Delete(crd) => {
                self.current.remove(&crd.name_any());
                false
            }
        }
    }
}

/// Makes every CRD in `crds` (those that need conversion) that converts through a webhook
/// trust the CAs of `material`.
pub async fn ensure(
    client: &kube::Client,
    crds: &mut Crds,
    material: &Material,
    url: Option<&str>,
) -> Injected {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let required = material.required_cas();
    let bundle = base64::engine::general_purpose::STANDARD.encode(material.ca_bundle_pem());
    let mut injected = Injected::default();
    for (name, conversion) in &mut crds.current {
        match ensure_one(client, &api, name, conversion, &required, &bundle, url).await {
            Ok(()) => injected.ready.push(name.clone()),
            Err(e) => {
                tracing::warn!(crd = %name, error = %e, "injecting the webhook's CA bundle");
                injected.failed.push((name.clone(), e));
            }
        }
    }
    injected
}

async fn ensure_one(
    client: &kube::Client,
    api: &Api<CustomResourceDefinition>,
    name: &str,
    conversion: &mut Conversion,
    required: &[&[u8]],
    bundle: &str,
    url: Option<&str>,
) -> Result<(), String> {
    if !conversion.webhook {
        // An older CRD, left alone until one with the webhook is applied.
        tracing::debug!(crd = %name, "no webhook conversion in this CRD; no CA bundle to inject");
        return Ok(());
    }
    if conversion.trusts(required, url) {
        return Ok(());
    }
    // Asked first, so that a CRD applied moments before the RBAC that covers it (a Helm upgrade
    // enabling a provider) is retried rather than refused.
    if !may_patch(client, name).await {
        return Err("not permitted to patch it (yet)".to_owned());
    }
    // The test makes the patch fail, instead of writing a webhook block, if the strategy was
    // changed since the watch showed it.
    let set = match url {
        Some(url) => json!({
            "op": "add",
            "path": "/spec/conversion/webhook/clientConfig",
            "value": {"url": url, "caBundle": bundle},
        }),
        None => {
            json!({"op": "add", "path": "/spec/conversion/webhook/clientConfig/caBundle", "value": bundle})
        }
    };
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/conversion/strategy", "value": "Webhook"},
        set,
    ]))
    .map_err(|e| format!("building the patch: {e}"))?;
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    match api.patch(name, &params, &Patch::Json::<()>(patch)).await {
        // Until its watch event, a check in between must not patch it again.
        Ok(patched) => *conversion = Conversion::of(&patched),
        // Deleted since the watch showed it: its Delete event is on the way.
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(e) => return Err(e.to_string()),
    }
    tracing::info!(crd = %name, "injected the webhook's CA bundle");
    Ok(())
}

/// Whether this identity may patch the CRD `name`; `true` when that cannot be asked, so the
/// patch itself reports what is wrong.
async fn may_patch(client: &kube::Client, name: &str) -> bool {
    let attributes = access_review::ResourceAttributes {
        group: Some("apiextensions.k8s.io".to_owned()),
        resource: Some("customresourcedefinitions".to_owned()),
        verb: Some("patch".to_owned()),
        name: Some(name.to_owned()),
        ..Default::default()
    };
    access_review::allowed(client, attributes)
        .await
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use watcher::Event;

    fn crd(url: &str, label: &str) -> CustomResourceDefinition {
        serde_json::from_value(json!({
            "metadata": {"name": "things.example.com", "labels": {"l": label}},
            "spec": {
                "group": "example.com",
                "names": {"kind": "Thing", "plural": "things"},
                "scope": "Namespaced",
                "versions": [],
                "conversion": {"strategy": "Webhook", "webhook": {
                    "conversionReviewVersions": ["v1"],
                    "clientConfig": {"url": url},
                }},
            },
        }))
        .unwrap()
    }

    /// Checks follow what the CRDs tell the API server of the webhook, not every event: none
    /// before the first list is through, none for a label or a relist that finds the same.
    #[test]
    fn a_check_is_due_when_the_list_is_through_or_a_webhook_changes() {
        let mut crds = Crds::default();
        assert!(!crds.apply(Event::Init));
        assert!(!crds.apply(Event::InitApply(crd("https://a/convert", "a"))));
        assert!(!crds.listed());
        assert!(crds.apply(Event::InitDone));
        assert!(crds.listed());
        assert!(
            !crds.apply(Event::Apply(crd("https://a/convert", "b"))),
            "a label"
        );
        assert!(
            crds.apply(Event::Apply(crd("https://b/convert", "b"))),
            "the webhook's URL"
        );
        assert!(!crds.apply(Event::Init));
        assert!(!crds.apply(Event::InitApply(crd("https://b/convert", "c"))));
        assert!(!crds.apply(Event::InitDone), "a relist that finds the same");
        assert!(!crds.apply(Event::Delete(crd("https://b/convert", "c"))));
        assert!(crds.current.is_empty());
    }
}
