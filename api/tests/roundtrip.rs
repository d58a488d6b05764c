//! ESO manifests must survive deserialize → serialize unchanged: the controllers read objects with
//! these types and write them back (status patches, conversions), so a field the types drop or
//! invent would be silently lost or added on the user's objects.

use std::path::Path;

use external_secrets_api::external_secret::ExternalSecret;
use external_secrets_api::provider_class::{ClusterProviderClass, ProviderClass};
use external_secrets_api::provider_kinds::Scope;
use external_secrets_api::providers::ALL;
use external_secrets_api::providers::gitlab::GitlabProvider;
use external_secrets_api::push_secret::PushSecret;
use external_secrets_api::store::{ClusterSecretStore, SecretStore};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

fn same_after_roundtrip<K: Serialize + DeserializeOwned>(input: &Value, origin: &str) {
    let typed: K = serde_json::from_value(input.clone())
        .unwrap_or_else(|e| panic!("{origin}: does not deserialize: {e}"));
    let output = serde_json::to_value(&typed).unwrap();
    assert_eq!(&output, input, "{origin}: changed by a round trip");
}

/// Round-trips one document, choosing the type by apiVersion and kind. Returns false for kinds
/// this crate does not define (core Secrets and ConfigMaps in the examples).
fn roundtrip(doc: &Value, origin: &str) -> bool {
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    let kind = doc["kind"].as_str().unwrap_or_default();
    match (api_version, kind) {
        ("external-secrets.io/v1", "ExternalSecret") => {
            same_after_roundtrip::<ExternalSecret>(doc, origin)
        }
        ("external-secrets.io/v1", "SecretStore") => {
            same_after_roundtrip::<SecretStore>(doc, origin)
        }
        ("external-secrets.io/v1", "ClusterSecretStore") => {
            same_after_roundtrip::<ClusterSecretStore>(doc, origin)
        }
        ("external-secrets.io/v1alpha1", "PushSecret") => {
            same_after_roundtrip::<PushSecret>(doc, origin)
        }
        ("external-secrets.io/v1alpha1", "ProviderClass") => {
            same_after_roundtrip::<ProviderClass>(doc, origin)
        }
        ("external-secrets.io/v1alpha1", "ClusterProviderClass") => {
            same_after_roundtrip::<ClusterProviderClass>(doc, origin)
        }
        _ => return provider_roundtrip(doc, origin),
    }
    true
}

/// Provider kinds, found through the descriptor table so a new provider is covered unasked.
fn provider_roundtrip(doc: &Value, origin: &str) -> bool {
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    let kind = doc["kind"].as_str().unwrap_or_default();
    let Some((group, version)) = api_version.split_once('/') else {
        return false;
    };
    let Some(scope) = Scope::of_group(group) else {
        return false;
    };
    let Some(descriptor) = ALL.iter().find(|d| d.kind == kind && d.serves(version)) else {
        panic!("{origin}: {api_version} {kind} is not a provider kind this API defines");
    };
    let output = descriptor
        .roundtrip(scope, doc.clone())
        .unwrap_or_else(|e| panic!("{origin}: does not deserialize: {e}"));
    assert_eq!(&output, doc, "{origin}: changed by a round trip");
    true
}

fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

fn docs(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

fn roundtrip_yaml(yaml: &str, origin: &str) {
    for doc in docs(yaml) {
        assert!(
            roundtrip(&doc, origin),
            "{origin}: no type for {}/{}",
            doc["apiVersion"],
            doc["kind"]
        );
    }
}

#[test]
fn external_secret_with_data_data_from_and_template() {
    roundtrip_yaml(
        r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata:
  name: example
  namespace: default
  labels: {team: a}
spec:
  refreshPolicy: Periodic
  refreshInterval: 1h0m0s
  secretStoreRef:
    name: vault-backend
    kind: ClusterSecretStore
  target:
    name: app-secret
    creationPolicy: Owner
    deletionPolicy: Retain
    immutable: false
    template:
      type: kubernetes.io/dockerconfigjson
      engineVersion: v2
      mergePolicy: Replace
      metadata:
        annotations: {a: b}
        labels: {c: d}
        finalizers: [example.com/keep]
      data:
        .dockerconfigjson: '{{ .config | toString }}'
      templateFrom:
      - configMap:
          name: tpl
          items:
          - key: config.yaml
            templateAs: KeysAndValues
        target: Annotations
      - secret:
          name: tpl-secret
          items:
          - key: x
        literal: '{{ .a }}'
        valuesDecodingStrategy: Base64
  data:
  - secretKey: password
    remoteRef:
      key: provider-key
      version: provider-key-version
      property: provider-key-property
      metadataPolicy: None
      conversionStrategy: Default
      decodingStrategy: Auto
      nullBytePolicy: Fail
  - secretKey: other
    remoteRef:
      key: other
    sourceRef:
      storeRef:
        name: other-store
  dataFrom:
  - extract:
      key: provider-key
      version: provider-key-version
      property: provider-key-property
      conversionStrategy: Unicode
      decodingStrategy: Base64URL
    rewrite:
    - regexp:
        source: "exp-(.*?)-ression"
        target: "rewriting-${1}-with-groups"
    - transform:
        template: "secret-{{ .value }}"
  - find:
      path: path-to-filter
      name:
        regexp: ".*foobar.*"
      tags:
        foo: bar
      conversionStrategy: Default
      decodingStrategy: None
      nullBytePolicy: Ignore
    sourceRef:
      storeRef:
        name: aws-store
        kind: SecretStore
  - sourceRef:
      generatorRef:
        apiVersion: generators.external-secrets.io/v1alpha1
        kind: Password
        name: my-password
    rewrite:
    - merge:
        into: merged
        priority: [a, b]
        priorityPolicy: IgnoreNotFound
        conflictPolicy: Ignore
        strategy: JSON
status:
  refreshTime: "2026-01-02T03:04:05Z"
  syncedResourceVersion: 1-0123456789abcdef
  binding:
    name: app-secret
  conditions:
  - type: Ready
    status: "True"
    reason: SecretSynced
    message: Secret was synced
    lastTransitionTime: "2026-01-02T03:04:05Z"
"#,
        "ExternalSecret",
    );
}

#[test]
fn go_written_empty_structs_survive() {
    // A Go client serializes non-pointer structs even when empty.
    roundtrip_yaml(
        r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: generated, namespace: default}
spec:
  secretStoreRef: {}
  target: {creationPolicy: Owner, deletionPolicy: Retain}
  dataFrom:
  - sourceRef:
      generatorRef: {kind: UUID, name: id}
status:
  binding: {}
"#,
        "ExternalSecret with empty structs",
    );
}

#[test]
fn push_secret() {
    roundtrip_yaml(
        r#"
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata:
  name: pushsecret-example
  namespace: default
spec:
  refreshInterval: 10s
  updatePolicy: IfNotExists
  deletionPolicy: Delete
  secretStoreRefs:
  - name: aws-parameterstore
    kind: SecretStore
  - labelSelector:
      matchLabels:
        push: "true"
    kind: ClusterSecretStore
  selector:
    secret:
      name: pokedex-credentials
  template:
    engineVersion: v2
    data:
      token: "{{ .token | toString | upper }} was templated"
  data:
  - conversionStrategy: None
    match:
      secretKey: best-pokemon
      remoteRef:
        remoteKey: my-first-parameter
        property: pokemon
    metadata:
      apiVersion: kubernetes.external-secrets.io/v1alpha1
      kind: PushSecretMetadata
      spec:
        labels: {a: b}
        targetMergePolicy: Replace
        nested: [1, "two", {three: 3.5}, null, true]
  - match:
      remoteRef:
        remoteKey: whole-secret
  dataTo:
  - storeRef:
      name: aws-parameterstore
    match:
      regexp: "^db-.*"
    rewrite:
    - regexp: {source: "^db-", target: "app/"}
    - transform: {template: "{{ .value | lower }}"}
    conversionStrategy: ReverseUnicode
  - storeRef:
      labelSelector:
        matchExpressions:
        - {key: env, operator: In, values: [prod]}
    remoteKey: bundle
    metadata: "free text is allowed too"
status:
  refreshTime: "2026-01-02T03:04:05Z"
  syncedResourceVersion: 1-abc
  syncedPushSecrets:
    SecretStore/aws-parameterstore:
      my-first-parameter:
        match:
          secretKey: best-pokemon
          remoteRef:
            remoteKey: my-first-parameter
  conditions:
  - type: Ready
    status: "True"
    reason: Synced
    message: PushSecret synced successfully
"#,
        "PushSecret",
    );
    let generator = r#"
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {name: generated, namespace: default}
spec:
  secretStoreRefs: [{name: vault}]
  selector:
    generatorRef:
      apiVersion: generators.external-secrets.io/v1alpha1
      kind: ECRAuthorizationToken
      name: ecr
  data:
  - match: {secretKey: token, remoteRef: {remoteKey: ecr-token}}
"#;
    roundtrip_yaml(generator, "PushSecret with generator");
}

#[test]
fn secret_stores_with_each_provider_inline() {
    roundtrip_yaml(
        r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: fake, namespace: default}
spec:
  controller: dev
  refreshInterval: 300
  retrySettings: {maxRetries: 5, retryInterval: 10s}
  provider:
    fake:
      data:
      - {key: /foo/bar, value: HELLO1, version: v1}
      - {key: /foo/baz, value: '{"john": "doe"}'}
      validationResult: 1
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: kubernetes, namespace: default}
spec:
  provider:
    kubernetes:
      remoteNamespace: default
      server:
        url: https://myapiserver.tld
        caBundle: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K
        caProvider: {type: ConfigMap, name: kube-root-ca.crt, key: ca.crt}
      auth:
        token:
          bearerToken: {name: mydefaulttoken, key: token}
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: kubernetes-kubeconfig, namespace: default}
spec:
  provider:
    kubernetes:
      authRef: {name: kubeconfig, key: config}
---
apiVersion: external-secrets.io/v1
kind: ClusterSecretStore
metadata: {name: kubernetes-cert}
spec:
  conditions:
  - namespaceSelector: {matchLabels: {team: a}}
    namespaces: [a, b]
    namespaceRegexes: ["^team-"]
  provider:
    kubernetes:
      server: {url: "https://remote:6443"}
      auth:
        cert:
          clientCert: {name: client, key: tls.crt, namespace: ops}
          clientKey: {name: client, key: tls.key, namespace: ops}
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: vault-backend, namespace: default}
spec:
  provider:
    vault:
      server: "http://my.vault.server:8200"
      path: secret
      version: v2
      namespace: ns1
      readYourWrites: true
      forwardInconsistent: true
      headers: {X-Custom: value}
      checkAndSet: {required: true}
      caProvider: {type: Secret, name: vault-ca, key: ca.pem}
      tls:
        certSecretRef: {name: vault-client-tls}
        keySecretRef: {name: vault-client-tls, key: tls.key}
      auth:
        namespace: auth-ns
        kubernetes:
          mountPath: kubernetes
          role: demo
          serviceAccountRef:
            name: my-sa
            audiences: [vault]
          secretRef: {name: my-secret, key: token}
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: vault-every-auth, namespace: default}
spec:
  provider:
    vault:
      server: "https://vault:8200"
      version: v1
      caBundle: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K
      auth:
        tokenSecretRef: {name: vault-token, key: token}
        appRole:
          path: approle
          roleRef: {name: approle, key: role-id}
          secretRef: {name: approle, key: secret-id}
        ldap:
          path: ldap
          username: jdoe
          secretRef: {name: ldap, key: password}
        userPass:
          path: userpass
          username: jdoe
          secretRef: {name: userpass, key: password}
        jwt:
          path: jwt
          role: demo
          secretRef: {name: jwt, key: token}
          kubernetesServiceAccountToken:
            serviceAccountRef: {name: my-sa}
            audiences: [vault]
            expirationSeconds: 600
        cert:
          path: cert
          vaultRole: demo
          clientCert: {name: cert, key: tls.crt}
          secretRef: {name: cert, key: tls.key}
        iam:
          path: aws
          region: eu-west-1
          role: arn:aws:iam::123456789012:role/demo
          vaultRole: demo
          externalID: ext
          vaultAwsIamServerID: vault.example.com
          secretRef:
            accessKeyIDSecretRef: {name: aws, key: id}
            secretAccessKeySecretRef: {name: aws, key: secret}
            sessionTokenSecretRef: {name: aws, key: token}
          jwt:
            serviceAccountRef: {name: irsa}
        gcp:
          path: gcp
          role: demo
          projectID: my-project
          location: europe-west1
          secretRef:
            secretAccessKeySecretRef: {name: gcp, key: key.json}
          workloadIdentity:
            serviceAccountRef: {name: wi}
            clusterLocation: europe-west1
            clusterName: prod
            clusterProjectID: my-project
          serviceAccountRef: {name: impersonate}
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: gitlab-secret-store, namespace: default}
spec:
  provider:
    gitlab:
      url: https://gitlab.example.com/
      auth:
        SecretRef:
          accessToken:
            name: gitlab-secret
            key: token
      projectID: "1234"
      inheritFromGroups: false
      groupIDs: ["1", "2"]
      environment: production
      caBundle: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K
      caProvider: {type: Secret, name: gitlab-ca, namespace: ops}
"#,
        "SecretStore",
    );
}

#[test]
fn gitlab_keeps_the_capitalised_secret_ref_key() {
    let store: SecretStore = serde_yaml::from_str(
        r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: gitlab, namespace: default}
spec:
  provider:
    gitlab:
      auth: {SecretRef: {accessToken: {name: gitlab-secret, key: token}}}
"#,
    )
    .unwrap();
    let inline = store.spec.provider.as_ref().unwrap().0["gitlab"].clone();
    let gitlab: GitlabProvider = serde_json::from_value(inline).unwrap();
    let token = gitlab.auth.secret_ref.access_token.as_ref().unwrap();
    assert_eq!(token.name.as_deref(), Some("gitlab-secret"));
    let json = serde_json::to_value(&store).unwrap();
    assert!(json["spec"]["provider"]["gitlab"]["auth"]["SecretRef"].is_object());
}

#[test]
fn every_example_and_accepted_manifest_round_trips() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut seen = 0;
    for dir in ["examples", "tests/accepted-manifests"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            let origin = path.display().to_string();
            for mut doc in docs(&std::fs::read_to_string(&path).unwrap()) {
                // The API server drops explicit nulls of defaulted fields before anyone reads them.
                drop_nulls(&mut doc);
                if roundtrip(&doc, &origin) {
                    seen += 1;
                }
            }
        }
    }
    assert!(
        seen >= 30,
        "only {seen} documents found in examples/ and tests/accepted-manifests/"
    );
}
