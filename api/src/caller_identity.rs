//! Who calls a provider server, as the client certificate of the call says, and what that caller
//! may claim in a call (`provider_ref.store_ref_kind`, `source_namespace`,
//! `provider_ref.namespace`). The server believes these claims when it picks credentials, so a
//! caller that could claim anything could read every team's store.
//!
//! A certificate names a namespace with one URI subject alternative name
//! `spiffe://external-secrets.io/ns/<namespace>`: the operator issues one such certificate per
//! namespaced ProviderClass into that class's namespace. A certificate without such a name is the
//! cluster identity (the operator's own, ESO's `external-secrets-controller`), which only the
//! operator's namespace holds and which may claim anything, as every caller could before.

use crate::store::{CLUSTER_SECRET_STORE_KIND, SECRET_STORE_KIND};

/// What a namespace's certificate carries as a URI SAN, followed by the namespace.
pub const NAMESPACE_URI_PREFIX: &str = "spiffe://external-secrets.io/ns/";

/// The URI SAN of the certificate issued for `namespace`.
pub fn namespace_uri(namespace: &str) -> String {
    format!("{NAMESPACE_URI_PREFIX}{namespace}")
}

/// The caller of a provider server, from its client certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallerIdentity {
    /// The operator's certificate (or no TLS at all): may claim any store kind and namespace.
    Cluster,
    /// A namespace's certificate: may claim only a SecretStore of that namespace.
    Namespace(String),
}

/// What a call claims about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim<'a> {
    /// `provider_ref.store_ref_kind`; empty means SecretStore (ESO's rule).
    pub store_ref_kind: &'a str,
    pub source_namespace: &'a str,
    /// `provider_ref.namespace`.
    pub provider_namespace: &'a str,
}

impl CallerIdentity {
    /// From the URI SANs of a client certificate. More than one namespace, or a namespace URI
    /// naming no namespace, is refused: such a certificate was not issued here.
    pub fn from_uris<'a>(uris: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut namespaces = uris
            .into_iter()
            .filter_map(|uri| uri.strip_prefix(NAMESPACE_URI_PREFIX));
        match (namespaces.next(), namespaces.next()) {
            (None, _) => Ok(Self::Cluster),
            (Some(ns), None) if is_namespace_name(ns) => Ok(Self::Namespace(ns.to_owned())),
            (Some(ns), None) => Err(format!(
                "the client certificate's URI {NAMESPACE_URI_PREFIX}{ns} names no namespace"
            )),
            (Some(_), Some(_)) => Err(format!(
                "the client certificate names more than one namespace ({NAMESPACE_URI_PREFIX}...)"
            )),
        }
    }

    /// From a client certificate, DER.
    pub fn of_certificate(der: &[u8]) -> Result<Self, String> {
        use x509_parser::extensions::GeneralName;
        let (_, cert) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| format!("the client certificate cannot be read: {e}"))?;
        let names = cert
            .subject_alternative_name()
            .map_err(|e| format!("the client certificate's subject alternative names: {e}"))?;
        let uris = names.iter().flat_map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::URI(uri) => Some(*uri),
                    _ => None,
                })
        });
        Self::from_uris(uris)
    }

    /// From the first certificate of a PEM chain (`client.crt`: the certificate, then its CA).
    pub fn of_pem_chain(pem: &[u8]) -> Result<Self, String> {
        let (_, block) = x509_parser::pem::parse_x509_pem(pem)
            .map_err(|e| format!("the client certificate is not PEM: {e}"))?;
        Self::of_certificate(&block.contents)
    }

    /// Whether this caller may make `claim`; the error says what it may claim instead.
    pub fn permits(&self, claim: &Claim<'_>) -> Result<(), String> {
        let Self::Namespace(own) = self else {
            return Ok(());
        };
        let store_ok = matches!(claim.store_ref_kind, "" | SECRET_STORE_KIND);
        // Empty fields fall back to each other (ESO's rule for the provider's namespace) or are
        // refused by the server later; what is written must be the caller's own namespace.
        let source_ok = matches!(claim.source_namespace, "") || claim.source_namespace == own;
        let provider_ok = claim.provider_namespace == own
            || (claim.provider_namespace.is_empty() && claim.source_namespace == own);
        if store_ok && source_ok && provider_ok {
            return Ok(());
        }
        Err(format!(
            "the client certificate is namespace {own:?}'s ({}): it may claim only store_ref_kind {SECRET_STORE_KIND} with source_namespace and provider_ref.namespace {own:?}, not store_ref_kind {:?}, source_namespace {:?}, provider_ref.namespace {:?}; {CLUSTER_SECRET_STORE_KIND}s are served through a ClusterProviderClass with the operator's certificate",
            namespace_uri(own),
            claim.store_ref_kind,
            claim.source_namespace,
            claim.provider_namespace,
        ))
    }
}

/// A DNS label, as Kubernetes namespace names are.
fn is_namespace_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim<'a>(kind: &'a str, source: &'a str, provider: &'a str) -> Claim<'a> {
        Claim {
            store_ref_kind: kind,
            source_namespace: source,
            provider_namespace: provider,
        }
    }

    #[test]
    fn a_certificate_names_its_namespace_by_uri_or_is_the_cluster_identity() {
        assert_eq!(
            CallerIdentity::from_uris([]).unwrap(),
            CallerIdentity::Cluster
        );
        assert_eq!(
            CallerIdentity::from_uris(["spiffe://example.org/whatever"]).unwrap(),
            CallerIdentity::Cluster
        );
        let uri = namespace_uri("team-a");
        assert_eq!(uri, "spiffe://external-secrets.io/ns/team-a");
        assert_eq!(
            CallerIdentity::from_uris([uri.as_str()]).unwrap(),
            CallerIdentity::Namespace("team-a".into())
        );
        let two = [namespace_uri("a"), namespace_uri("b")];
        assert!(CallerIdentity::from_uris(two.iter().map(String::as_str)).is_err());
        for bad in ["", "Team", "a/b", "-a"] {
            let uri = namespace_uri(bad);
            assert!(
                CallerIdentity::from_uris([uri.as_str()]).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_namespace_may_claim_only_its_own_secret_store() {
        let team = CallerIdentity::Namespace("team-a".into());
        for ok in [
            claim("SecretStore", "team-a", "team-a"),
            claim("", "team-a", "team-a"),
            claim("SecretStore", "team-a", ""),
            // A store's validation has no caller.
            claim("SecretStore", "", "team-a"),
        ] {
            assert_eq!(team.permits(&ok), Ok(()), "{ok:?}");
        }
        for refused in [
            claim("ClusterSecretStore", "team-a", "team-a"),
            claim("ClusterSecretStore", "team-b", "team-b"),
            claim("SecretStore", "team-b", "team-b"),
            claim("SecretStore", "team-a", "team-b"),
            claim("SecretStore", "team-b", "team-a"),
            claim("SecretStore", "", ""),
            claim("Other", "team-a", "team-a"),
        ] {
            let err = team.permits(&refused).unwrap_err();
            assert!(
                err.contains(
                    "may claim only store_ref_kind SecretStore with source_namespace and provider_ref.namespace \"team-a\""
                ),
                "{err}"
            );
        }
        for anything in [
            claim("ClusterSecretStore", "team-b", ""),
            claim("SecretStore", "team-a", "team-b"),
        ] {
            assert_eq!(CallerIdentity::Cluster.permits(&anything), Ok(()));
        }
    }
}
