"""Who calls, from the client certificate of the call, and what that caller may claim.

The server believes `provider_ref.store_ref_kind`, `source_namespace` and
`provider_ref.namespace` when it picks what to read. A namespace's client certificate (the one
the operator, or you, put in a namespaced ProviderClass's Secret) names its namespace with the
URI `spiffe://external-secrets.io/ns/<namespace>`, and may then claim only a SecretStore of that
namespace: otherwise a team that can read its own Secrets could call the server directly as a
ClusterSecretStore and read every team's store. A certificate without such a URI is the
operator's own (ClusterProviderClasses), which may claim anything.
"""

import grpc

from errors import ProviderError

NAMESPACE_URI_PREFIX = "spiffe://external-secrets.io/ns/"


class ClaimRefused(ProviderError):
    code = grpc.StatusCode.PERMISSION_DENIED


def caller_namespace(context):
    """The namespace the caller's certificate names, or None for the operator's certificate."""
    names = context.auth_context().get("x509_subject_alternative_name", [])
    namespaces = {
        name.decode()[len(NAMESPACE_URI_PREFIX):]
        for name in names
        if name.decode().startswith(NAMESPACE_URI_PREFIX)
    }
    if len(namespaces) > 1:
        raise ClaimRefused("the client certificate names more than one namespace")
    return namespaces.pop() if namespaces else None


def check_claims(context, ref, source_namespace):
    """Refuses a call that claims more than the caller's certificate allows."""
    own = caller_namespace(context)
    if own is None:
        return
    store_ok = ref.store_ref_kind in ("", "SecretStore")
    source_ok = source_namespace in ("", own)
    provider_ok = ref.namespace == own or (not ref.namespace and source_namespace == own)
    if store_ok and source_ok and provider_ok:
        return
    raise ClaimRefused(
        f'the client certificate is namespace "{own}"\'s ({NAMESPACE_URI_PREFIX}{own}): it may '
        f'claim only store_ref_kind SecretStore with source_namespace and provider_ref.namespace '
        f'"{own}", not store_ref_kind "{ref.store_ref_kind}", source_namespace '
        f'"{source_namespace}", provider_ref.namespace "{ref.namespace}"'
    )
