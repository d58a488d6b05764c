"""A secret store server for the External Secrets operator (and ESO): the `provider.v1`
SecretStoreProvider service over mTLS, backed by SQLite files (backend.py).

The operator sends each call a reference to a SqliteStore object (`provider_ref`) and the
namespace of the ExternalSecret or PushSecret (`source_namespace`); the server reads the object
from the Kubernetes API with its own ServiceAccount (kube.py), opens the file it names and
answers. Errors are gRPC status codes (errors.py).

    python -m grpc_tools.protoc -I <repo>/providers/protocol/proto --python_out=gen \
        --grpc_python_out=gen provider/v1/secretstore.proto
    PYTHONPATH=gen python server.py --tls-dir certs --port 8080 [--kubeconfig FILE]
"""

import argparse
import functools
import json
import logging
import os
import re
import signal
import sys
import threading
from concurrent import futures

import grpc
from google.protobuf import any_pb2
from google.rpc import status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from provider.v1 import secretstore_pb2 as pb
from provider.v1 import secretstore_pb2_grpc as pb_grpc

import backend
import identity
import kube
from errors import Conflict, Credentials, InvalidSpec, NoSecret, ProviderError, Unavailable

SERVICE = "provider.v1.SecretStoreProvider"
# The one kind this server serves: see crd.yaml.
API_VERSION, KIND, PLURAL = "secrets.acme.example/v1", "SqliteStore", "sqlitestores"
# What a Kubernetes name or namespace may be; anything else never reaches the API's URL.
K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")

log = logging.getLogger("sqlite-secret-store")


def error_status(e):
    """The status of `e` as gRPC defines its details (`google.rpc.Status`, which grpc-go checks
    against the code and refuses when they differ), with the error's parts in a
    `provider.v1.Error` among them: the operator shows them apart."""
    detail = any_pb2.Any()
    detail.Pack(pb.Error(code=type(e).__name__, message=str(e), details=e.details or {}))
    code = e.code.value[0]
    return rpc_status.to_status(status_pb2.Status(code=code, message=str(e), details=[detail]))


def rpc(method):
    """Turns the errors a method raises into a gRPC status (never with a secret value in it)."""

    @functools.wraps(method)
    def call(self, request, context):
        try:
            identity.check_claims(context, request.provider_ref, request.source_namespace)
            return method(self, request, context)
        except ProviderError as e:
            log.info("%s: %s %s", method.__name__, e.code.name, e)
            context.abort_with_status(error_status(e))
        except Exception:
            log.exception("%s failed", method.__name__)
            context.abort(grpc.StatusCode.UNKNOWN, f"{method.__name__}: internal error, see the server's log")

    return call


class SqliteProvider(pb_grpc.SecretStoreProviderServicer):
    def __init__(self, api, data_dir):
        self.api, self.data_dir = api, data_dir

    def store(self, ref, source_namespace, data_call=True):
        """The backend for the SqliteStore `ref` names, read from the API server now."""
        if data_call and not source_namespace:
            raise InvalidSpec(
                "source_namespace is required: the namespace of the ExternalSecret or PushSecret"
            )
        served_kind(ref)
        if not K8S_NAME.match(ref.name):
            raise InvalidSpec(f"provider_ref.name {ref.name!r} is not a Kubernetes name")
        # The object's namespace: the reference's, else the caller's.
        namespace = ref.namespace or source_namespace
        if not K8S_NAME.match(namespace):
            raise InvalidSpec(f"provider_ref.namespace {namespace!r} is not a namespace name")
        where = f"{KIND} {namespace}/{ref.name}"
        # A SecretStore serves its own namespace only: its ExternalSecrets may not use a
        # SqliteStore of another namespace. A ClusterSecretStore may.
        if ref.store_ref_kind != "ClusterSecretStore" and source_namespace and namespace != source_namespace:
            reason = (
                f'a SecretStore used from namespace "{source_namespace}" reads only {KIND} '
                "objects of that namespace"
            )
            raise Credentials(where, reason)
        try:
            obj = self.api.get(f"/apis/{API_VERSION}/namespaces/{namespace}/{PLURAL}/{ref.name}")
        except kube.ApiError as e:
            # 4xx (not found, forbidden by RBAC) is the configuration's problem; the rest passes.
            if e.status is not None and 400 <= e.status < 500:
                raise InvalidSpec(f"could not get {where}: {e}") from None
            raise Unavailable(f"could not get {where}: {e}") from None
        return backend.Store(obj.get("spec") or {}, self.data_dir, where)

    # --- reading -------------------------------------------------------------------------

    @rpc
    def GetSecret(self, request, context):
        store = self.store(request.provider_ref, request.source_namespace)
        return pb.GetSecretResponse(value=read(store, request.remote_ref))

    @rpc
    def GetSecretMap(self, request, context):
        store = self.store(request.provider_ref, request.source_namespace)
        value = read(store, request.remote_ref)
        obj = json_object(value, f"the value of {request.remote_ref.key!r}")
        return pb.GetSecretMapResponse(secrets={k: to_bytes(v) for k, v in obj.items()})

    @rpc
    def GetAllSecrets(self, request, context):
        store = self.store(request.provider_ref, request.source_namespace)
        find = request.find
        if find.tags:
            raise InvalidSpec(f"find.tags is not supported: {KIND} keeps no tags; use find.name or find.path")
        try:
            # Python's `re`, searched anywhere in the key as Go's MatchString does.
            pattern = re.compile(find.name.regexp)
        except re.error as e:
            raise InvalidSpec(f"find.name.regexp is not a valid regular expression: {e}") from None
        secrets = {k: v for k, v in store.items(prefix=find.path) if pattern.search(k)}
        return pb.GetAllSecretsResponse(secrets=secrets)

    @rpc
    def SecretExists(self, request, context):
        store = self.store(request.provider_ref, request.source_namespace)
        value = store.get(request.remote_ref.remote_key)
        if value is not None and request.remote_ref.property:
            return pb.SecretExistsResponse(exists=field(value, request.remote_ref.property) is not None)
        return pb.SecretExistsResponse(exists=value is not None)

    # --- writing -------------------------------------------------------------------------

    @rpc
    def PushSecret(self, request, context):
        store = self.store(request.provider_ref, request.source_namespace)
        store.writable()
        data = request.push_secret_data
        if not data.remote_key:
            raise InvalidSpec("push_secret_data.remote_key is required")
        if data.secret_key:
            if data.secret_key not in request.secret_data:
                raise InvalidSpec(f"secret_data has no key {data.secret_key!r} (push_secret_data.secret_key)")
            value = request.secret_data[data.secret_key]
        else:
            # The whole Secret: its keys as one JSON object of strings.
            entries = {k: text(v, f"secret_data[{k!r}]") for k, v in sorted(request.secret_data.items())}
            value = compact(entries)
        if not data.property:
            store.update(data.remote_key, lambda old: value)
            return pb.PushSecretResponse()

        def set_field(old):
            obj = {} if old is None else json_object(old, f"the value of {data.remote_key!r}", refuse=True)
            obj[data.property] = text(value, "the pushed value")
            return compact(obj)

        store.update(data.remote_key, set_field)
        return pb.PushSecretResponse()

    @rpc
    def DeleteSecret(self, request, context):
        store = self.store(request.provider_ref, request.source_namespace)
        store.writable()
        ref = request.remote_ref
        if not ref.property:
            store.update(ref.remote_key, lambda old: None)
            return pb.DeleteSecretResponse()

        def remove_field(old):
            if old is None:
                return None  # already gone: deleting is idempotent
            obj = json_object(old, f"the value of {ref.remote_key!r}", refuse=True)
            obj.pop(ref.property, None)
            # The last field gone, the row goes too.
            return compact(obj) if obj else None

        store.update(ref.remote_key, remove_field)
        return pb.DeleteSecretResponse()

    # --- about the store -----------------------------------------------------------------

    @rpc
    def Validate(self, request, context):
        # No source namespace when the operator checks a store itself.
        store = self.store(request.provider_ref, request.source_namespace, data_call=False)
        # A file that cannot be opened is UNAVAILABLE (raised); a missing table is a failed check.
        problem = store.missing_table()
        return pb.ValidateResponse(valid=problem is None, error=problem or "")

    @rpc
    def Capabilities(self, request, context):
        store = self.store(request.provider_ref, request.source_namespace, data_call=False)
        return pb.CapabilitiesResponse(capabilities=pb.READ_ONLY if store.read_only else pb.READ_WRITE)


def served_kind(ref):
    if (ref.api_version, ref.kind) != (API_VERSION, KIND):
        asked = f"{ref.kind or '?'} of {ref.api_version or '?'}"
        raise InvalidSpec(f"this server serves {KIND} of {API_VERSION}, not {asked}")


# --- values ------------------------------------------------------------------------------


def read(store, remote_ref):
    """GetSecret's answer: the value of `key`, or one field of it when `property` is set."""
    if remote_ref.metadata_policy == "Fetch":
        raise InvalidSpec(f"metadataPolicy Fetch is not supported: {KIND} keeps no metadata")
    # `version` is ignored: the table keeps one value per key.
    value = store.get(remote_ref.key)
    if value is None:
        raise NoSecret()
    if remote_ref.property:
        value = field(value, remote_ref.property)
        if value is None:
            raise NoSecret()  # as the operator's own providers: a missing property is no secret
    return value


def field(value, prop):
    """The field `prop` of a JSON object value (`a.b` reaches into nested objects), or None."""
    try:
        current = json.loads(value)
    except ValueError:
        return None
    if isinstance(current, dict) and prop in current:
        return to_bytes(current[prop])
    for part in prop.split("."):
        if not isinstance(current, dict) or part not in current:
            return None
        current = current[part]
    return to_bytes(current)


def json_object(value, what, refuse=False):
    try:
        obj = json.loads(value)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        # Reading: the request does not fit the value. Writing a field: we won't overwrite it.
        cls = Conflict if refuse else InvalidSpec
        raise cls(f"{what} is not a JSON object")  # never quote the value itself
    return obj


def to_bytes(v):
    """Strings as they are, anything else as its JSON text."""
    return v.encode() if isinstance(v, str) else compact(v)


def compact(v):
    return json.dumps(v, separators=(",", ":"), sort_keys=True).encode()


def text(value, what):
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise InvalidSpec(f"{what} is not UTF-8, so it cannot be stored in a JSON object") from None


# --- serving -----------------------------------------------------------------------------


def tls_credentials(tls_dir):
    """mTLS from ESO's layout: the server's `tls.crt`/`tls.key`, and `ca.crt`, the CA client
    certificates must chain to. The files are read again when they change (a rotated Secret)."""
    files = [os.path.join(tls_dir, name) for name in ("ca.crt", "tls.crt", "tls.key")]

    def load():
        ca, cert, key = (read_file(f) for f in files)
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def stamp():
        return [os.stat(f).st_mtime_ns for f in files]

    seen = [stamp()]

    # Called before each TLS handshake; None keeps the current certificates. A Secret volume
    # swaps all three files at once, so a changed stamp means a consistent new set.
    def fetch():
        try:
            if stamp() == seen[0]:
                return None
            seen[0], config = stamp(), load()
            log.info("reloaded the certificates in %s", tls_dir)
            return config
        except (OSError, ValueError) as e:
            log.warning("keeping the current certificates: %s", e)
            return None

    return grpc.dynamic_ssl_server_credentials(load(), fetch, require_client_authentication=True)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def add_reflection(server):
    """Server reflection, so the operator's ProviderClass can list the methods served.
    grpcio-reflection serves `grpc.reflection.v1alpha`; the same servicer answers the identical
    `grpc.reflection.v1` messages, which the operator and grpcurl ask first."""
    names = (SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME, "grpc.reflection.v1.ServerReflection")
    servicer = reflection.ReflectionServicer(names)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    v1 = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    handler = grpc.method_handlers_generic_handler(
        "grpc.reflection.v1.ServerReflection", {"ServerReflectionInfo": v1}
    )
    server.add_generic_rpc_handlers((handler,))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8080, help="gRPC port (0: any free one, printed)")
    parser.add_argument("--host", default="[::]", help="address to listen on")
    parser.add_argument(
        "--tls-dir",
        default=os.environ.get("TLS_CERT_DIR", "/etc/provider/certs"),
        help="folder with ca.crt, tls.crt, tls.key (default $TLS_CERT_DIR or /etc/provider/certs)",
    )
    parser.add_argument("--kubeconfig", help="read the cluster with this file, not the pod's account")
    parser.add_argument("--data-dir", default="/data", help="the folder SqliteStore paths must be inside")
    parser.add_argument("--grace", type=float, default=10, help="seconds to finish calls on SIGTERM")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    api = kube.from_kubeconfig(args.kubeconfig) if args.kubeconfig else kube.in_cluster()
    # The operator pings every 10 s, while idle and while a call sends nothing, to notice a dead
    # peer between calls; grpc-core's defaults answer a third such ping within 5 minutes with
    # GOAWAY too_many_pings, which ends the calls in flight. Permit pings a second apart.
    keepalive = [
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 1000),
    ]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=keepalive)
    pb_grpc.add_SecretStoreProviderServicer_to_server(SqliteProvider(api, args.data_dir), server)
    # grpc.health.v1: the operator marks its ProviderClass Ready from service "".
    healthy = health.HealthServicer()
    for name in ("", SERVICE):
        healthy.set(name, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(healthy, server)
    add_reflection(server)
    port = server.add_secure_port(f"{args.host}:{args.port}", tls_credentials(args.tls_dir))
    server.start()
    print(f"listening on port {port}", flush=True)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    # Health watchers hear NOT_SERVING first; calls in flight get --grace seconds.
    healthy.enter_graceful_shutdown()
    server.stop(args.grace).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
