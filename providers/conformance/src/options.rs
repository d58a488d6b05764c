//! What a run is told: where the server is, how to reach it, which provider object to ask about.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use provider_protocol::v1;
use provider_remote::TlsMaterial;

/// A run against one server and one provider object.
#[derive(Clone, Debug)]
pub struct Options {
    /// `host:port`; the host is also the TLS server name, as for the operator.
    pub address: String,
    /// mTLS with ESO's Secret keys; `None` speaks plaintext (a server run with
    /// `--enable-tls=false`).
    pub tls: Option<TlsMaterial>,
    /// The provider object every call names.
    pub provider_ref: v1::ProviderReference,
    /// The namespace the calls are made on behalf of (an ExternalSecret's).
    pub source_namespace: String,
    /// Keys the provider object can read, with their exact values.
    pub reads: Vec<Read>,
    /// Every call's deadline, and the time the concurrent calls have to be answered in.
    pub deadline: Duration,
    /// How many `GetSecret` calls are made at once.
    pub concurrency: usize,
    /// The start of every remote key the run makes up (then random hex digits). The default
    /// `conformance-` suits most back ends; GitLab variables need `conformance_`.
    pub remote_key_prefix: String,
    /// The server's maximum connection age, when it has one: the run then calls on until the
    /// server ends the connection with GOAWAY, and expects no call to fail on the way.
    pub max_connection_age: Option<Duration>,
}

impl Options {
    /// Defaults: calls on behalf of the reference's namespace, a 10 s deadline, 100 concurrent
    /// calls, no read keys.
    pub fn new(
        address: impl Into<String>,
        tls: Option<TlsMaterial>,
        provider_ref: v1::ProviderReference,
    ) -> Self {
        Self {
            address: address.into(),
            tls,
            source_namespace: provider_ref.namespace.clone(),
            provider_ref,
            reads: Vec::new(),
            deadline: Duration::from_secs(10),
            concurrency: 100,
            remote_key_prefix: "conformance-".into(),
            max_connection_age: None,
        }
    }
}

/// A key the provider object holds and the bytes `GetSecret` must return for it.
#[derive(Clone, PartialEq, Eq)]
pub struct Read {
    pub key: String,
    pub value: Vec<u8>,
}

impl fmt::Debug for Read {
    // The value is a secret; it reaches no log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Read")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// `apiVersion/kind/namespace/name`, read from the right since an apiVersion has a slash of its
/// own (`providers.external-secrets.io/v1alpha1/Fake/team-a/fake`). The namespace may be empty
/// (`.../Fake//fake`). `store_ref_kind` is `SecretStore` or `ClusterSecretStore`.
pub fn parse_provider_ref(
    text: &str,
    store_ref_kind: &str,
) -> Result<v1::ProviderReference, String> {
    let bad = || {
        format!(
            "{text:?}: expected apiVersion/kind/namespace/name, e.g. providers.external-secrets.io/v1alpha1/Fake/team-a/fake"
        )
    };
    let mut parts = text.rsplitn(4, '/');
    let name = parts.next().filter(|s| !s.is_empty()).ok_or_else(bad)?;
    let namespace = parts.next().ok_or_else(bad)?;
    let kind = parts.next().filter(|s| !s.is_empty()).ok_or_else(bad)?;
    let api_version = parts.next().filter(|s| !s.is_empty()).ok_or_else(bad)?;
    if !matches!(store_ref_kind, "SecretStore" | "ClusterSecretStore") {
        return Err(format!(
            "{store_ref_kind:?}: the store kind is SecretStore or ClusterSecretStore"
        ));
    }
    Ok(v1::ProviderReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        namespace: namespace.into(),
        store_ref_kind: store_ref_kind.into(),
    })
}

/// The client's TLS material from a directory holding ESO's Secret keys as files: `ca.crt`,
/// `client.crt`, `client.key`. The error names the file that is missing or not usable.
pub fn tls_from_dir(dir: &Path) -> Result<TlsMaterial, String> {
    let unreadable = std::cell::RefCell::new(None);
    let material = TlsMaterial::from_secret_data(|key| {
        let path = dir.join(key);
        std::fs::read(&path)
            .inspect_err(|e| {
                unreadable
                    .borrow_mut()
                    .get_or_insert_with(|| format!("{}: {e}", path.display()));
            })
            .ok()
    });
    let material = match (material, unreadable.into_inner()) {
        (Ok(material), _) => material,
        (Err(_), Some(why)) => return Err(why),
        (Err(e), None) => return Err(format!("{}: {e}", dir.display())),
    };
    material
        .client_config()
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(material)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_is_read_from_the_right() {
        let r = parse_provider_ref(
            "providers.external-secrets.io/v1alpha1/Fake/team-a/fake",
            "SecretStore",
        )
        .unwrap();
        assert_eq!(r.api_version, "providers.external-secrets.io/v1alpha1");
        assert_eq!(r.kind, "Fake");
        assert_eq!(r.namespace, "team-a");
        assert_eq!(r.name, "fake");
        assert_eq!(r.store_ref_kind, "SecretStore");

        let core = parse_provider_ref("v1/Thing//name", "ClusterSecretStore").unwrap();
        assert_eq!(
            (core.api_version.as_str(), core.namespace.as_str()),
            ("v1", "")
        );

        for bad in ["Fake/team-a/fake", "g/v1/Fake/team-a/", "/Fake/ns/name", ""] {
            assert!(parse_provider_ref(bad, "SecretStore").is_err(), "{bad}");
        }
        assert!(parse_provider_ref("g/v1/Fake/ns/n", "Store").is_err());
    }

    #[test]
    fn tls_files_name_what_is_missing() {
        let dir = std::env::temp_dir().join(format!("conformance-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = tls_from_dir(&dir).unwrap_err();
        assert!(err.contains("ca.crt"), "{err}");
        std::fs::write(dir.join("ca.crt"), "not PEM").unwrap();
        std::fs::write(dir.join("client.crt"), "not PEM").unwrap();
        std::fs::write(dir.join("client.key"), "not PEM").unwrap();
        let err = tls_from_dir(&dir).unwrap_err();
        assert!(err.contains("ca.crt"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_read_value_is_not_printed() {
        let read = Read {
            key: "k".into(),
            value: b"hunter2".to_vec(),
        };
        assert!(!format!("{read:?}").contains("hunter2"));
    }
}
