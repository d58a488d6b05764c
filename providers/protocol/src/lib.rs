//! ESO's out-of-process provider protocol, `provider.v1.SecretStoreProvider`: the generated gRPC
//! types and the one mapping between them and the provider contract, used by both adapters (the
//! server that serves our providers, the client the client manager hands to reconcilers), so the
//! two sides cannot drift.

mod convert;
mod status;

pub use convert::{
    capabilities_from_wire, capabilities_to_wire, find_from_wire, find_to_wire, push_from_wire,
    push_remote_from_wire, push_remote_to_wire, push_to_wire, remote_from_wire, remote_to_wire,
};
pub use status::{
    ERROR_TYPE_URL, RpcStatus, error_from_status, error_from_wire, error_in_details,
    error_to_status, error_to_wire, rpc_status,
};

/// The generated messages, client and server of `provider.v1`.
pub mod v1 {
    tonic::include_proto!("provider.v1");
}

/// The encoded file descriptors of `provider.v1`, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/provider_v1_descriptor.bin"));

/// The service's full name, as gRPC health and reflection name it.
pub const SERVICE: &str = "provider.v1.SecretStoreProvider";

/// The methods of the service, in the order the `.proto` lists them.
pub const METHODS: [&str; 8] = [
    "GetSecret",
    "GetSecretMap",
    "PushSecret",
    "DeleteSecret",
    "SecretExists",
    "GetAllSecrets",
    "Validate",
    "Capabilities",
];
