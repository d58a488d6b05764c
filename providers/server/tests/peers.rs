//! Our server's errors as gRPC clients in other languages read them: grpc-go, the library ESO's
//! core uses (`hack/grpc-go-peer`, built by `hack/build-grpc-go-peer.sh`), and Python's `grpcio`
//! with `grpcio-status` (`rpc_status.from_call`, in the Python example's venv). Each must see
//! NOT_FOUND for a key that does not exist (what makes ESO apply `deletionPolicy`), and find our
//! `provider.v1.Error` packed in the `google.rpc.Status` details. No cluster: the server hands
//! out the Fake provider's client (tests/support).

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use support::*;
use testenv::python_example;

/// The client half of `server`'s TLS material in ESO's layout (`ca.crt`, `client.crt`,
/// `client.key`).
fn client_files(server: &Running) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.crt"), server.ca.pem()).unwrap();
    std::fs::write(dir.path().join("client.crt"), &server.client.cert).unwrap();
    std::fs::write(dir.path().join("client.key"), &server.client.key).unwrap();
    dir
}

/// The JSON object a peer printed, or a panic with its output.
fn printed(command: &mut Command, what: &str) -> Value {
    let output = python_example::run(command, what).unwrap_or_else(|e| panic!("{e:#}"));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{what} printed no JSON ({e}): {}",
            python_example::describe(&output)
        )
    })
}

/// What grpc-go reports for GetSecret of `key` from the provider object `name`.
fn grpc_go(server: &Running, tls: &Path, name: &str, key: &str) -> Value {
    let peer = testenv::grpc_go_peer().unwrap_or_else(|e| panic!("{e:#}"));
    printed(
        Command::new(peer)
            .args(["--address", &server.addr.to_string(), "--tls-dir"])
            .arg(tls)
            .args([
                "--provider-ref",
                &format!("providers.external-secrets.io/v1alpha1/Fake/{NAMESPACE}/{name}"),
                "--source-namespace",
                NAMESPACE,
                "--key",
                key,
            ]),
        "the grpc-go peer",
    )
}

// Multi-threaded: the peers run as blocking child processes while the server answers them.
#[tokio::test(flavor = "multi_thread")]
async fn grpc_go_reads_not_found_and_the_packed_provider_error() {
    let server = Running::start().await;
    let tls = client_files(&server);

    let found = grpc_go(&server, tls.path(), "fake", "plain");
    assert_eq!(found["code"], "OK", "{found}");
    assert_eq!(found["value"], "v0", "{found}");

    let missing = grpc_go(&server, tls.path(), "fake", "absent");
    assert_eq!(
        missing,
        json!({
            "code": "NotFound",
            "message": "Secret does not exist",
            "details": [{
                "type_url": "type.googleapis.com/provider.v1.Error",
                "code": "NoSecret",
                "message": "Secret does not exist",
            }],
        })
    );

    // The variant's fields come along.
    let refused = grpc_go(&server, tls.path(), "error-Credentials", "any");
    assert_eq!(refused["code"], "PermissionDenied", "{refused}");
    assert_eq!(
        refused["details"][0]["details"],
        json!({"reference": "Secret team-a/token", "reason": "key \"t\" not found"}),
        "{refused}"
    );
}

/// GetSecret with Python's grpcio; prints what `rpc_status.from_call` finds. `from_call` raises
/// when the details' code or message differ from the call's.
const PYTHON_CLIENT: &str = r#"
import json, sys
import grpc
from grpc_status import rpc_status
from provider.v1 import secretstore_pb2 as pb, secretstore_pb2_grpc as pb_grpc

address, tls, namespace, name, key = sys.argv[1:6]
def read(f):
    with open(f"{tls}/{f}", "rb") as file:
        return file.read()
credentials = grpc.ssl_channel_credentials(read("ca.crt"), read("client.key"), read("client.crt"))
with grpc.secure_channel(address, credentials) as channel:
    stub = pb_grpc.SecretStoreProviderStub(channel)
    reference = pb.ProviderReference(api_version="providers.external-secrets.io/v1alpha1",
        kind="Fake", name=name, namespace=namespace, store_ref_kind="SecretStore")
    try:
        answer = stub.GetSecret(pb.GetSecretRequest(remote_ref=pb.ExternalSecretDataRemoteRef(key=key),
            provider_ref=reference, source_namespace=namespace), timeout=10)
        print(json.dumps({"code": "OK", "value": answer.value.decode()}))
    except grpc.RpcError as e:
        status = rpc_status.from_call(e)
        details = []
        for packed in (status.details if status else []):
            detail = {"type_url": packed.type_url}
            if packed.Is(pb.Error.DESCRIPTOR):
                error = pb.Error()
                packed.Unpack(error)
                detail.update(code=error.code, message=error.message, details=dict(error.details))
            details.append(detail)
        print(json.dumps({"code": e.code().name, "message": e.details(),
            "status_code": status.code if status else None, "details": details}))
"#;

// Multi-threaded: the peers run as blocking child processes while the server answers them.
#[tokio::test(flavor = "multi_thread")]
async fn python_grpcio_status_reads_not_found_and_the_packed_provider_error() {
    let server = Running::start().await;
    let tls = client_files(&server);
    let stubs = tempfile::tempdir().unwrap();
    let example =
        python_example::PythonExample::prepare(stubs.path()).unwrap_or_else(|e| panic!("{e:#}"));
    let python = |name: &str, key: &str| {
        printed(
            Command::new(&example.python)
                .args(["-c", PYTHON_CLIENT, &server.addr.to_string()])
                .arg(tls.path())
                .args([NAMESPACE, name, key])
                .env("PYTHONPATH", &example.stubs),
            "the Python grpcio-status client",
        )
    };

    let missing = python("fake", "absent");
    assert_eq!(
        missing,
        json!({
            "code": "NOT_FOUND",
            "message": "Secret does not exist",
            "status_code": 5,
            "details": [{
                "type_url": "type.googleapis.com/provider.v1.Error",
                "code": "NoSecret",
                "message": "Secret does not exist",
                "details": {},
            }],
        })
    );
    let refused = python("error-Unsupported", "any");
    assert_eq!(refused["code"], "UNIMPLEMENTED", "{refused}");
    assert_eq!(
        refused["details"][0]["details"],
        json!({"provider": "Scripted", "operation": "GetAllSecrets"}),
        "{refused}"
    );
}
