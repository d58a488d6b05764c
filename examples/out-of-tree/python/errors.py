"""The errors a secret store server answers with, one class per gRPC status code.

The operator reads the code, so pick the class by what happened, not by where:

    NoSecret      NOT_FOUND            the secret does not exist (and only that: the operator
                                       then applies the ExternalSecret's deletionPolicy)
    InvalidSpec   INVALID_ARGUMENT     the SqliteStore or the request is wrong; retrying won't help
    Credentials   PERMISSION_DENIED    the server may not read what the request needs
    Conflict      FAILED_PRECONDITION  refused on purpose
    Unavailable   UNAVAILABLE          the backend cannot be reached now; the operator backs off
    (other)       UNKNOWN              anything else

A message is shown in the ExternalSecret's or SecretStore's status: it must never contain a
secret value.
"""

import grpc


class ProviderError(Exception):
    code = grpc.StatusCode.UNKNOWN
    # The error's parts, sent in the status details inside a `provider.v1.Error` (server.py).
    details = None


class NoSecret(ProviderError):
    code = grpc.StatusCode.NOT_FOUND

    def __init__(self):
        super().__init__("Secret does not exist")


class InvalidSpec(ProviderError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class Credentials(ProviderError):
    code = grpc.StatusCode.PERMISSION_DENIED

    def __init__(self, reference, reason):
        super().__init__(f"could not read {reference}: {reason}")
        # The operator shows these two apart ("could not read <reference>: <reason>").
        self.details = {"reference": reference, "reason": reason}


class Conflict(ProviderError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Unavailable(ProviderError):
    code = grpc.StatusCode.UNAVAILABLE
