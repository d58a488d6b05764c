//! ESO's generators that need nothing but randomness (`generators/v1/{password,uuid,fake}`):
//! the generator object's spec in, the keys and values it makes out. Reading the object, and
//! where the values go, is the caller's.

mod mfa;
mod password;

use std::collections::BTreeMap;
use std::time::SystemTime;

use api::generators::{FakeSpec, MfaSpec, PasswordSpec};
use serde_json::Value;

pub use password::{Constraints, password};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("{0}")]
    InvalidSpec(String),
    #[error(
        "generator kind {0:?} is not served by this build (served: Password, UUID, Fake, MFA, ClusterGenerator)"
    )]
    Unserved(String),
}

/// What a generator reads from the cluster, in the namespace it generates for, before it can
/// make values: the caller reads it, so this crate needs no cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reads {
    Nothing,
    SecretKey { name: String, key: String },
}

/// What the generator of `kind` with `spec` needs [`generate`] to be given.
pub fn reads(kind: &str, spec: &Value) -> Result<Reads, Error> {
    if kind != "MFA" {
        return Ok(Reads::Nothing);
    }
    let spec: MfaSpec = serde_json::from_value(spec.clone())
        .map_err(|e| Error::InvalidSpec(format!("spec: {e}")))?;
    match (spec.secret.name, spec.secret.key) {
        (Some(name), Some(key)) if !name.is_empty() && !key.is_empty() => {
            Ok(Reads::SecretKey { name, key })
        }
        _ => Err(Error::InvalidSpec(
            "spec.secret needs a name and a key".into(),
        )),
    }
}

/// The values the generator of `kind` with `spec` (the object's `spec`, or a ClusterGenerator's
/// `generator.<kind>Spec`) makes at `now`; `read` is what [`reads`] asked for.
pub fn generate(
    kind: &str,
    spec: &Value,
    read: Option<&[u8]>,
    now: SystemTime,
) -> Result<BTreeMap<String, Vec<u8>>, Error> {
    let parse_error = |e: serde_json::Error| Error::InvalidSpec(format!("spec: {e}"));
    match kind {
        "MFA" => {
            let spec: MfaSpec = serde_json::from_value(spec.clone()).map_err(parse_error)?;
            let seed = read.ok_or_else(|| Error::InvalidSpec("the seed was not read".into()))?;
            mfa::generate(&spec, seed, now)
        }
        "Password" => {
            let spec: PasswordSpec = serde_json::from_value(spec.clone()).map_err(parse_error)?;
            password::generate(&spec)
        }
        "UUID" => Ok(BTreeMap::from([(
            "uuid".to_owned(),
            uuid_v4().into_bytes(),
        )])),
        "Fake" => {
            let spec: FakeSpec = serde_json::from_value(spec.clone()).map_err(parse_error)?;
            Ok(spec
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes()))
                .collect())
        }
        other => Err(Error::Unserved(other.to_owned())),
    }
}

/// A ClusterGenerator's `spec`: the kind it wraps and that kind's spec.
pub fn cluster_generator(spec: &Value) -> Result<(String, Value), Error> {
    let kind = spec
        .get("kind")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::InvalidSpec("spec.kind is required".into()))?;
    let field = match kind {
        "Password" => "passwordSpec",
        "UUID" => "uuidSpec",
        "Fake" => "fakeSpec",
        "MFA" => "mfaSpec",
        other => return Err(Error::Unserved(other.to_owned())),
    };
    let inner = spec
        .get("generator")
        .and_then(|g| g.get(field))
        .cloned()
        .ok_or_else(|| {
            Error::InvalidSpec(format!(
                "spec.generator.{field} is required for kind {kind}"
            ))
        })?;
    Ok((kind.to_owned(), inner))
}

/// A random (version 4) UUID, as ESO's `uuid.NewString()`.
fn uuid_v4() -> String {
    let mut bytes: [u8; 16] = rand::random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = hex::encode(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_uuid_is_version_4_and_new_each_time() {
        let a = generate("UUID", &json!({}), None, SystemTime::now()).unwrap();
        let b = generate("UUID", &json!({}), None, SystemTime::now()).unwrap();
        let a = String::from_utf8(a["uuid"].clone()).unwrap();
        assert_ne!(a, String::from_utf8(b["uuid"].clone()).unwrap());
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "{a}");
        assert!(
            matches!(parts[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'),
            "{a}"
        );
    }

    #[test]
    fn fake_returns_its_data_and_cluster_generators_unwrap_their_kind() {
        let data = generate(
            "Fake",
            &json!({"data": {"foo": "bar", "baz": "bang"}}),
            None,
            SystemTime::now(),
        )
        .unwrap();
        assert_eq!(data["foo"], b"bar");
        assert_eq!(data["baz"], b"bang");
        let (kind, spec) = cluster_generator(&json!({
            "kind": "Password", "generator": {"passwordSpec": {"length": 12}}}))
        .unwrap();
        assert_eq!((kind.as_str(), spec), ("Password", json!({"length": 12})));
        assert_eq!(
            cluster_generator(&json!({"kind": "VaultDynamicSecret", "generator": {}})),
            Err(Error::Unserved("VaultDynamicSecret".into()))
        );
        let err = cluster_generator(&json!({"kind": "UUID", "generator": {"fakeSpec": {}}}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("spec.generator.uuidSpec"), "{err}");
    }
}
