//! The providers compiled into this build. Adding a provider is one line here (and a feature in
//! `Cargo.toml`); leaving one out of a build is `--no-default-features --features ...`.

use std::sync::Arc;

use provider::ProviderRegistry;

pub fn registry() -> ProviderRegistry {
    let mut registry = ProviderRegistry::default();
    #[cfg(feature = "fake")]
    registry.register(Arc::new(provider_fake::Fake::default()));
    #[cfg(feature = "vault")]
    registry.register(Arc::new(provider_vault::Vault::default()));
    #[cfg(feature = "gitlab")]
    registry.register(Arc::new(provider_gitlab::Gitlab::default()));
    registry
}
