//! The one part of templating that talks to the API server: reading the ConfigMaps and Secrets
//! a `templateFrom` names.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;

use super::{Sources, source_names};
use api::external_secret::Template;

#[derive(Debug, thiserror::Error)]
#[error("could not read template source {kind} {name:?}: {source}")]
pub struct SourceError {
    kind: &'static str,
    name: String,
    source: kube::Error,
}

/// The sources `template` names, from `namespace` (never another: a template reads only its
/// own namespace). A missing one is left out, and the template's error then names it.
pub async fn read_sources(
    client: &kube::Client,
    namespace: &str,
    template: Option<&Template>,
) -> Result<Sources, SourceError> {
    let (config_maps, secrets) = source_names(template);
    let mut sources = Sources::default();
    let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    for name in config_maps {
        let found = cm_api.get_opt(&name).await.map_err(|source| SourceError {
            kind: "ConfigMap",
            name: name.clone(),
            source,
        })?;
        if let Some(cm) = found {
            sources
                .config_maps
                .insert(name, cm.data.unwrap_or_default());
        }
    }
    let secret_api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for name in secrets {
        let found = secret_api
            .get_opt(&name)
            .await
            .map_err(|source| SourceError {
                kind: "Secret",
                name: name.clone(),
                source,
            })?;
        if let Some(secret) = found {
            let data = crate::keys::secret_data(&secret);
            sources.secrets.insert(name, data);
        }
    }
    Ok(sources)
}
