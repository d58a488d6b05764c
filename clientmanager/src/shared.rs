//! A cached client that every reconcile of one identity shares, closed when the last of them
//! lets go. The cache replaces a client when its inputs change (or when two reconciles see its
//! provider object at different generations), while a reconcile may still be calling it:
//! closing it then would revoke its Vault token under that call, which Vault answers with
//! "permission denied" and the ExternalSecret reports as a failure.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use provider::{
    FindRequest, PushRemoteRef, PushRequest, RemoteRef, Result, SecretsClient, Validation,
};
use tracing::debug;

pub(crate) struct Shared {
    /// Taken when the client is closed, so that it is closed once.
    inner: Option<Box<dyn SecretsClient>>,
}

impl Shared {
    pub(crate) fn new(inner: Box<dyn SecretsClient>) -> Self {
        Self { inner: Some(inner) }
    }

    fn client(&self) -> &dyn SecretsClient {
        self.inner
            .as_deref()
            .expect("a shared client is closed only once nothing holds it")
    }

    /// Closes `client` now when the cache held its last reference, else leaves that to whoever
    /// lets go of it last.
    pub(crate) async fn retire(client: Arc<Self>) {
        if let Some(mut last) = Arc::into_inner(client)
            && let Some(inner) = last.inner.take()
        {
            close(inner).await;
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(close(inner));
            }
            Err(_) => debug!("a secrets client let go of outside the runtime is not closed"),
        }
    }
}

async fn close(client: Box<dyn SecretsClient>) {
    if let Err(e) = client.close().await {
        debug!(error = %e, "closing an evicted secrets client failed");
    }
}

#[async_trait]
impl SecretsClient for Shared {
    async fn get_secret(&self, remote: &RemoteRef) -> Result<Vec<u8>> {
        self.client().get_secret(remote).await
    }

    async fn get_secret_map(&self, remote: &RemoteRef) -> Result<BTreeMap<String, Vec<u8>>> {
        self.client().get_secret_map(remote).await
    }

    async fn get_all_secrets(&self, find: &FindRequest) -> Result<BTreeMap<String, Vec<u8>>> {
        self.client().get_all_secrets(find).await
    }

    async fn push_secret(&self, push: &PushRequest) -> Result<()> {
        self.client().push_secret(push).await
    }

    async fn delete_secret(&self, remote: &PushRemoteRef) -> Result<()> {
        self.client().delete_secret(remote).await
    }

    async fn secret_exists(&self, remote: &PushRemoteRef) -> Result<bool> {
        self.client().secret_exists(remote).await
    }

    async fn validate(&self) -> Result<Validation> {
        self.client().validate().await
    }

    fn validation_warnings(&self) -> Vec<String> {
        self.client().validation_warnings()
    }

    /// The cache closes a client when its last holder lets go, not when asked by one of them.
    async fn close(&self) -> Result<()> {
        Ok(())
    }
}
