//! The CA bundle into `spec.conversion.webhook.clientConfig.caBundle` of the CRDs that the
//! converters serve, and nowhere else.
//!
//! A CRD is patched only when its bundle lacks a CA that a certificate in use (or about to be)
//! needs. A replica that has not read a rotated Secret yet therefore never writes its older
//! bundle over the newer one: the newer one still holds the CA of the certificate it serves.

use base64::Engine;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;

use crate::certs::{Material, certificates};
use crate::{Converters, Error, FIELD_MANAGER};

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

/// Makes every CRD that needs conversion (and converts through a webhook) trust the CAs of
/// `material`.
pub async fn ensure(
    client: &kube::Client,
    converters: &dyn Converters,
    material: &Material,
    url: Option<&str>,
) -> Result<Injected, Error> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    // Metadata only: CRDs are large and most of them are not ours.
    let names: Vec<String> = api
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| Error::Kube("listing", "CustomResourceDefinitions".into(), e))?
        .items
        .into_iter()
        .filter_map(|crd| crd.metadata.name)
        .filter(|name| converters.needs_conversion(name))
        .collect();

    let required = material.required_cas();
    let bundle = base64::engine::general_purpose::STANDARD.encode(material.ca_bundle_pem());
    let mut injected = Injected::default();
    for name in names {
        match ensure_one(client, &api, &name, &required, &bundle, url).await {
            Ok(()) => injected.ready.push(name),
            Err(e) => {
                tracing::warn!(crd = %name, error = %e, "injecting the webhook's CA bundle");
                injected.failed.push((name, e));
            }
        }
    }
    Ok(injected)
}

async fn ensure_one(
    client: &kube::Client,
    api: &Api<CustomResourceDefinition>,
    name: &str,
    required: &[&[u8]],
    bundle: &str,
    url: Option<&str>,
) -> Result<(), String> {
    let Some(crd) = api.get_opt(name).await.map_err(|e| e.to_string())? else {
        return Ok(());
    };
    let conversion = crd.spec.conversion.as_ref();
    if conversion.is_none_or(|c| c.strategy != "Webhook") {
        // The API server never calls a webhook for it, and a caBundle without a webhook is
        // invalid: an older CRD, left alone until one with the webhook is applied.
        tracing::debug!(crd = %name, "no webhook conversion in this CRD; no CA bundle to inject");
        return Ok(());
    }
    let client_config = conversion
        .and_then(|c| c.webhook.as_ref())
        .and_then(|w| w.client_config.as_ref());
    let url_ok = url.is_none_or(|u| client_config.and_then(|c| c.url.as_deref()) == Some(u));
    let current = client_config
        .and_then(|c| c.ca_bundle.as_ref())
        .map(|b| certificates(&b.0).unwrap_or_default())
        .unwrap_or_default();
    if url_ok
        && required
            .iter()
            .all(|ca| current.iter().any(|c| c.as_slice() == *ca))
    {
        return Ok(());
    }
    // Asked first, so that a CRD applied moments before the RBAC that covers it (a Helm upgrade
    // enabling a provider) is retried rather than refused.
    if !may_patch(client, name).await {
        return Err("not permitted to patch it (yet)".to_owned());
    }
    // The test makes the patch fail, instead of writing a webhook block, if the strategy was
    // changed since the read.
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
    api.patch(name, &params, &Patch::Json::<()>(patch))
        .await
        .map_err(|e| e.to_string())?;
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
