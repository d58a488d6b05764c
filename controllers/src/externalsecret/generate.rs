//! `dataFrom[].sourceRef.generatorRef`: the generator object read from the API server and its
//! values made, fresh at every refresh (as in ESO: the refresh interval is the rotation).

use std::collections::BTreeMap;

use api::external_secret::{GENERATORS_API_VERSION, GeneratorRef};
use api::generators::{self, ClusterGenerator, Fake, MFA, Password, UUID};
use external_secrets_generators::Reads;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::DynamicObject;
use kube::discovery::ApiResource;

use super::Error;
use crate::context::Context;

fn resource(kind: &str) -> Option<ApiResource> {
    Some(match kind {
        "Password" => ApiResource::erase::<Password>(&()),
        "UUID" => ApiResource::erase::<UUID>(&()),
        "Fake" => ApiResource::erase::<Fake>(&()),
        "MFA" => ApiResource::erase::<MFA>(&()),
        "ClusterGenerator" => ApiResource::erase::<ClusterGenerator>(&()),
        _ => return None,
    })
}

/// A missing object said in a few words, rather than the API server's whole status.
fn read_failure(kind: &str, name: &str, e: &kube::Error) -> Error {
    let reason = match e {
        kube::Error::Api(status) if status.code == 404 => "it does not exist".to_owned(),
        other => other.to_string(),
    };
    Error::ReadGenerator {
        kind: kind.to_owned(),
        name: name.to_owned(),
        reason,
    }
}

/// The values the referenced generator makes now. `field` names the `dataFrom` entry.
pub(super) async fn generated(
    ctx: &Context,
    namespace: &str,
    reference: &GeneratorRef,
    field: &str,
) -> Result<BTreeMap<String, Vec<u8>>, Error> {
    let field = format!("{field}.sourceRef.generatorRef");
    let api_version = reference
        .api_version
        .as_deref()
        .unwrap_or(GENERATORS_API_VERSION);
    if api_version != GENERATORS_API_VERSION {
        return Err(Error::Invalid {
            field: format!("{field}.apiVersion"),
            message: format!("{api_version:?} is not {GENERATORS_API_VERSION:?}"),
        });
    }
    let kind = serde_json::to_value(reference.kind)
        .ok()
        .and_then(|k| k.as_str().map(str::to_owned))
        .unwrap_or_default();
    let Some(resource) = resource(&kind) else {
        return Err(Error::Invalid {
            field: format!("{field}.kind"),
            message: format!(
                "generator kind {kind} is not served by this build (served: {}, ClusterGenerator)",
                generators::SERVED.join(", ")
            ),
        });
    };
    let api: Api<DynamicObject> = if kind == "ClusterGenerator" {
        Api::all_with(ctx.client.clone(), &resource)
    } else {
        Api::namespaced_with(ctx.client.clone(), namespace, &resource)
    };
    let object = api
        .get(&reference.name)
        .await
        .map_err(|e| read_failure(&kind, &reference.name, &e))?;
    let spec = object.data.get("spec").cloned().unwrap_or_default();
    let invalid = |e: external_secrets_generators::Error| Error::Invalid {
        field: field.clone(),
        message: format!("{kind} {}: {e}", reference.name),
    };
    let (kind, spec) = if kind == "ClusterGenerator" {
        external_secrets_generators::cluster_generator(&spec).map_err(invalid)?
    } else {
        (kind.clone(), spec)
    };
    // What the generator reads is read in the ExternalSecret's namespace, a ClusterGenerator's
    // too, as in ESO.
    let read = match external_secrets_generators::reads(&kind, &spec).map_err(invalid)? {
        Reads::Nothing => None,
        Reads::SecretKey { name, key } => {
            let secret = Api::<Secret>::namespaced(ctx.client.clone(), namespace)
                .get(&name)
                .await
                .map_err(|e| read_failure("Secret", &name, &e))?;
            let value = secret
                .data
                .and_then(|mut d| d.remove(&key))
                .ok_or_else(|| Error::Invalid {
                    field: field.clone(),
                    message: format!(
                        "{kind} {}: Secret {name:?} has no key {key:?}",
                        reference.name
                    ),
                })?;
            Some(value.0)
        }
    };
    external_secrets_generators::generate(
        &kind,
        &spec,
        read.as_deref(),
        std::time::SystemTime::now(),
    )
    .map_err(invalid)
}
