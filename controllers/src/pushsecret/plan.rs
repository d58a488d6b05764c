//! Pure planning for a PushSecret: from its spec and the source Secret's data to the values to
//! push, and from what was pushed before to what must be deleted.

use std::collections::{BTreeMap, BTreeSet};

use api::push_secret::{PushSecret, PushSecretConversionStrategy, PushSecretData};
use provider::{PushRemoteRef, PushRequest};

/// One value to push, with the entry it came from (what status records).
#[derive(Clone, Debug, PartialEq)]
pub struct Push {
    pub request: PushRequest,
    pub entry: PushSecretData,
}

/// ESO's key in `status.syncedPushSecrets[store]`: the remote key, and the property if any.
pub fn status_key(entry: &PushSecretData) -> String {
    let remote = &entry.match_.remote_ref;
    match &remote.property {
        Some(p) if !p.is_empty() => format!("{}/{p}", remote.remote_key),
        _ => remote.remote_key.clone(),
    }
}

/// Features refused with a condition naming the field rather than half done.
pub fn unsupported(ps: &PushSecret) -> Result<(), (String, String)> {
    let spec = &ps.spec;
    if spec.selector.generator_ref.is_some() {
        return Err((
            "spec.selector.generatorRef".into(),
            "generators are not supported yet".into(),
        ));
    }
    if spec
        .selector
        .secret
        .as_ref()
        .is_some_and(|s| s.selector.is_some())
    {
        return Err((
            "spec.selector.secret.selector".into(),
            "selecting the source by labels is not supported yet; use name".into(),
        ));
    }
    if spec.data_to.as_ref().is_some_and(|d| !d.is_empty()) {
        return Err((
            "spec.dataTo".into(),
            "bulk pushes are not supported yet; use data".into(),
        ));
    }
    for (i, d) in spec.data.iter().flatten().enumerate() {
        if d.conversion_strategy == Some(PushSecretConversionStrategy::ReverseUnicode) {
            return Err((
                format!("spec.data[{i}].conversionStrategy"),
                "ReverseUnicode is not supported yet".into(),
            ));
        }
    }
    Ok(())
}

/// The values to push. An entry without `secretKey` pushes the whole Secret as a JSON object of
/// strings; an entry naming a key the Secret lacks is an error naming the entry (never the value).
pub fn pushes(
    ps: &PushSecret,
    source: &BTreeMap<String, Vec<u8>>,
) -> Result<Vec<Push>, (String, String)> {
    let mut out = Vec::new();
    for (i, entry) in ps.spec.data.iter().flatten().enumerate() {
        let key = entry.match_.secret_key.as_deref().filter(|k| !k.is_empty());
        let value = match key {
            Some(k) => source.get(k).cloned().ok_or_else(|| {
                (
                    format!("spec.data[{i}].match.secretKey"),
                    format!("the source Secret has no key {k:?}"),
                )
            })?,
            None => {
                let mut object = serde_json::Map::new();
                for (k, v) in source {
                    let text = String::from_utf8(v.clone()).map_err(|_| {
                        (
                            format!("spec.data[{i}].match.secretKey"),
                            format!("key {k:?} is not UTF-8, so the whole Secret cannot be pushed as JSON; push it by key"),
                        )
                    })?;
                    object.insert(k.clone(), serde_json::Value::String(text));
                }
                serde_json::Value::Object(object).to_string().into_bytes()
            }
        };
        out.push(Push {
            request: PushRequest {
                remote: PushRemoteRef {
                    remote_key: entry.match_.remote_ref.remote_key.clone(),
                    property: entry.match_.remote_ref.property.clone(),
                },
                secret_key: key.map(str::to_owned),
                value,
                metadata: entry.metadata.clone(),
            },
            entry: entry.clone(),
        });
    }
    Ok(out)
}

/// Entries pushed before (store → status key → entry) that are no longer pushed now.
pub fn stale(
    before: &BTreeMap<String, BTreeMap<String, PushSecretData>>,
    now: &BTreeMap<String, BTreeMap<String, PushSecretData>>,
) -> Vec<(String, PushSecretData)> {
    let mut out = Vec::new();
    for (store, entries) in before {
        let kept: BTreeSet<&String> = now
            .get(store)
            .map(|e| e.keys().collect())
            .unwrap_or_default();
        for (key, entry) in entries {
            if !kept.contains(key) {
                out.push((store.clone(), entry.clone()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ps(yaml: &str) -> PushSecret {
        serde_yaml::from_str(yaml).unwrap()
    }

    const PS: &str = r#"
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {name: p, namespace: n}
spec:
  secretStoreRefs: [{name: fake}]
  selector: {secret: {name: src}}
  data:
  - match: {secretKey: token, remoteRef: {remoteKey: remote-token}}
  - match: {remoteRef: {remoteKey: whole, property: all}}
"#;

    fn source() -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([
            ("token".into(), b"t0k".to_vec()),
            ("user".into(), b"u".to_vec()),
        ])
    }

    #[test]
    fn pushes_by_key_and_whole_secret() {
        let p = pushes(&ps(PS), &source()).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].request.value, b"t0k");
        assert_eq!(p[0].request.remote.remote_key, "remote-token");
        assert_eq!(status_key(&p[0].entry), "remote-token");
        let whole: serde_json::Value = serde_json::from_slice(&p[1].request.value).unwrap();
        assert_eq!(whole, serde_json::json!({"token": "t0k", "user": "u"}));
        assert_eq!(status_key(&p[1].entry), "whole/all");
    }

    #[test]
    fn a_missing_key_names_the_entry_not_the_value() {
        let err = pushes(
            &ps(&PS.replace("secretKey: token", "secretKey: nope")),
            &source(),
        )
        .unwrap_err();
        assert_eq!(err.0, "spec.data[0].match.secretKey");
        assert!(!err.1.contains("t0k"));
    }

    #[test]
    fn stale_entries_are_those_no_longer_pushed() {
        let p = pushes(&ps(PS), &source()).unwrap();
        let entry = |i: usize| p[i].entry.clone();
        let before = BTreeMap::from([(
            "SecretStore/fake".to_string(),
            BTreeMap::from([
                ("remote-token".to_string(), entry(0)),
                ("whole/all".to_string(), entry(1)),
            ]),
        )]);
        let now = BTreeMap::from([(
            "SecretStore/fake".to_string(),
            BTreeMap::from([("whole/all".to_string(), entry(1))]),
        )]);
        let gone = stale(&before, &now);
        assert_eq!(gone.len(), 1);
        assert_eq!(status_key(&gone[0].1), "remote-token");
        assert!(stale(&now, &now).is_empty());
    }

    #[test]
    fn unsupported_features_name_their_field() {
        assert!(unsupported(&ps(PS)).is_ok());
        let bulk = PS.replace(
            "  data:\n",
            "  dataTo: [{storeRef: {name: fake}}]\n  data:\n",
        );
        assert_eq!(unsupported(&ps(&bulk)).unwrap_err().0, "spec.dataTo");
    }
}
