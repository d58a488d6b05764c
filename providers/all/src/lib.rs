//! The providers compiled into this build. Adding a provider is one line here (and a feature in
//! `Cargo.toml`); leaving one out of a build is `--no-default-features --features ...`.

use std::sync::Arc;

use provider::ProviderRegistry;

pub fn registry() -> ProviderRegistry {
    registry_for_cluster(None)
}

/// The providers, those that reach the cluster this process runs against (the Kubernetes
/// provider's default `server.url`) told its URL; `None` infers it as kube does.
pub fn registry_for_cluster(
    #[cfg_attr(not(feature = "kubernetes"), allow(unused_variables))] url: Option<String>,
) -> ProviderRegistry {
    let mut registry = ProviderRegistry::default();
    #[cfg(feature = "fake")]
    registry.register(Arc::new(provider_fake::Fake::default()));
    #[cfg(feature = "vault")]
    registry.register(Arc::new(provider_vault::Vault::default()));
    #[cfg(feature = "gitlab")]
    registry.register(Arc::new(provider_gitlab::Gitlab::default()));
    #[cfg(feature = "aws")]
    registry.register(Arc::new(provider_aws::Aws::default()));
    #[cfg(feature = "kubernetes")]
    registry.register(Arc::new(provider_kubernetes::Kubernetes::new(
        url.map_or_else(Default::default, provider_kubernetes::Home::Url),
    )));
    registry
}
