//! Design 007's `RefRegister`: the providers compiled into this binary, looked up by kind or by
//! inline store key.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::Provider;

#[derive(Clone, Default)]
pub struct ProviderRegistry {
    by_kind: BTreeMap<&'static str, Arc<dyn Provider>>,
}

impl ProviderRegistry {
    pub fn register(&mut self, provider: Arc<dyn Provider>) {
        self.by_kind.insert(provider.descriptor().kind, provider);
    }

    pub fn by_kind(&self, kind: &str) -> Option<&Arc<dyn Provider>> {
        self.by_kind.get(kind)
    }

    pub fn by_store_key(&self, key: &str) -> Option<&Arc<dyn Provider>> {
        self.by_kind
            .values()
            .find(|p| p.descriptor().store_key == key)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Provider>> {
        self.by_kind.values()
    }

    /// The compiled-in kinds, for messages about one that is not.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.by_kind.keys().copied().collect()
    }
}
