//! What a `ProviderClass` reports: whether its server answers gRPC health, on how many of the
//! endpoints its address resolves to, and which methods of `provider.v1.SecretStoreProvider` it
//! serves (asked through server reflection, which ESO's servers and ours offer; ESO's draft has
//! no other negotiation).

use crate::balance::Transport;
use prost::Message;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::pool::Connection;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The server's methods of the service, `None` when it offers no reflection.
    pub methods: Option<Vec<String>>,
    /// The endpoints the address resolved to.
    pub endpoints: usize,
    /// Those whose health is SERVING.
    pub serving: usize,
}

/// Asks each endpoint of `connection`'s address for its health (service `""`, as ESO's core
/// does) and a serving one for its methods; usable when any endpoint serves. An error says why
/// none is usable; it never carries secret material.
pub async fn probe(connection: &Connection) -> Result<Probe, String> {
    let endpoints = connection
        .transport()
        .endpoints()
        .await
        .map_err(|e| format!("health check of {}: {e}", connection.address()))?;
    let mut checks = tokio::task::JoinSet::new();
    for (addr, transport) in &endpoints {
        let (addr, transport, deadline) = (*addr, transport.clone(), connection.deadline());
        checks.spawn(async move { (health(transport.clone(), deadline).await, addr, transport) });
    }
    let mut serving = Vec::new();
    let mut failures = Vec::new();
    while let Some(checked) = checks.join_next().await {
        let Ok((answer, addr, transport)) = checked else {
            continue;
        };
        match answer {
            Ok(()) => serving.push(transport),
            Err(why) => failures.push((addr, why)),
        }
    }
    let Some(asked) = serving.first() else {
        failures.sort();
        let why = failures
            .iter()
            .map(|(addr, why)| match endpoints.len() {
                1 => why.clone(),
                _ => format!("{addr}: {why}"),
            })
            .collect::<Vec<_>>()
            .join("; ");
        return Err(format!("health check of {}: {why}", connection.address()));
    };
    Ok(Probe {
        methods: methods(asked.clone(), connection).await,
        endpoints: endpoints.len(),
        serving: serving.len(),
    })
}

/// One endpoint's health: `Ok` when SERVING.
async fn health(transport: Transport, deadline: std::time::Duration) -> Result<(), String> {
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    request.set_timeout(deadline);
    let status = HealthClient::new(transport)
        .check(request)
        .await
        .map_err(|s| describe(&s))?
        .into_inner()
        .status();
    match status {
        ServingStatus::Serving => Ok(()),
        other => Err(format!("the server is {}", other.as_str_name())),
    }
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
