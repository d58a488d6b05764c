//! What a `ProviderClass` reports: whether its server answers gRPC health, and which methods of
//! `provider.v1.SecretStoreProvider` it serves (asked through server reflection, which ESO's
//! servers and ours offer; ESO's draft has no other negotiation).

use crate::transport::Transport;
use prost::Message;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::pool::Connection;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The server's methods of the service, `None` when it offers no reflection.
    pub methods: Option<Vec<String>>,
}

/// Asks `connection`'s server for its health (service `""`, as ESO's core does) and its
/// methods. An error says why the server is not usable; it never carries secret material.
pub async fn probe(connection: &Connection) -> Result<Probe, String> {
    let channel = connection.transport();
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    request.set_timeout(connection.deadline());
    let status = HealthClient::new(channel.clone())
        .check(request)
        .await
        .map_err(|s| format!("health check of {}: {}", connection.address(), describe(&s)))?
        .into_inner()
        .status();
    if status != ServingStatus::Serving {
        return Err(format!(
            "health check of {}: the server is {}",
            connection.address(),
            status.as_str_name()
        ));
    }
    Ok(Probe {
        methods: methods(channel, connection).await,
    })
}

/// A transport failure's status message is terse ("transport error"); its source says what
/// happened (refused, certificate unknown, ...).
pub(crate) fn describe(status: &tonic::Status) -> String {
    let mut text = status.message().to_owned();
    let mut source = std::error::Error::source(status);
    while let Some(s) = source {
        // tonic repeats "transport error" at each level.
        let part = s.to_string();
        if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// Asks for the file declaring the service through `grpc.reflection.$version`; `None` when the
/// server does not offer that version.
macro_rules! service_files {
    ($version:ident, $channel:expr, $deadline:expr) => {{
        use tonic_reflection::pb::$version::ServerReflectionRequest;
        use tonic_reflection::pb::$version::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::$version::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::$version::server_reflection_response::MessageResponse;
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::FileContainingSymbol(
                provider_protocol::SERVICE.into(),
            )),
        };
        let mut call = tonic::Request::new(tokio_stream::once(request));
        call.set_timeout($deadline);
        async {
            let mut answers = ServerReflectionClient::new($channel)
                .server_reflection_info(call)
                .await
                .ok()?
                .into_inner();
            match answers.message().await.ok()??.message_response {
                Some(MessageResponse::FileDescriptorResponse(files)) => {
                    Some(files.file_descriptor_proto)
                }
                _ => None,
            }
        }
        .await
    }};
}

async fn methods(channel: Transport, connection: &Connection) -> Option<Vec<String>> {
    // v1 first; Python's grpcio-reflection, among others, serves only v1alpha.
    let files = match service_files!(v1, channel.clone(), connection.deadline()) {
        Some(files) => files,
        None => service_files!(v1alpha, channel, connection.deadline())?,
    };
    service_methods(&files)
}

/// The methods of `provider.v1.SecretStoreProvider` in encoded file descriptors, as server
/// reflection returns them.
pub fn service_methods(files: &[Vec<u8>]) -> Option<Vec<String>> {
    let (package, service) = provider_protocol::SERVICE.rsplit_once('.')?;
    files
        .iter()
        .filter_map(|bytes| prost_types::FileDescriptorProto::decode(bytes.as_slice()).ok())
        .filter(|file| file.package() == package)
        .flat_map(|file| file.service)
        .find(|s| s.name() == service)
        .map(|s| s.method.iter().map(|m| m.name().to_owned()).collect())
}
