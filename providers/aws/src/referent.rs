//! Design 007's `ApplyReferent` for AWS: the access key Secrets and the IRSA ServiceAccount.
//! The rule is [`provider::referent`]'s, the same for every provider.

use provider::CredentialKind;
use provider::referent::{Reference, References};

pub(crate) const REFERENCES: References = References(&[
    (
        "/auth/secretRef/accessKeyIDSecretRef",
        Reference::Fixed(CredentialKind::Secret),
    ),
    (
        "/auth/secretRef/secretAccessKeySecretRef",
        Reference::Fixed(CredentialKind::Secret),
    ),
    (
        "/auth/secretRef/sessionTokenSecretRef",
        Reference::Fixed(CredentialKind::Secret),
    ),
    (
        "/auth/jwt/serviceAccountRef",
        Reference::Fixed(CredentialKind::ServiceAccountToken),
    ),
]);
