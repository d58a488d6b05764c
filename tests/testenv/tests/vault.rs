//! `VaultServer` against the real Vault server `hack/build-vault.sh` builds: every
//! configuration helper is used, and what it configured is proven by logging in or reading
//! with plain HTTP calls, as a Vault client would.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use external_secrets_testenv as testenv;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use serde_json::{Value, json};
use testenv::{
    AuditedRequest, CertificateAuthority, ControlPlane, IssuedCertificate, JwtRole, KubernetesRole,
    KvVersion, TokenOptions, VaultServer,
};

const READER_POLICY: &str = r#"
path "kv1/*" { capabilities = ["read"] }
path "kv2/data/*" { capabilities = ["read"] }
"#;

fn runtime() -> tokio::runtime::Runtime {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    tokio::runtime::Runtime::new().expect("a tokio runtime")
}

/// A plain Vault HTTP client of one listener: what the provider does, minus the provider.
struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    /// For `base`, trusting only `ca_pem`, with a client certificate if given.
    fn new(base: &str, ca_pem: &str, identity: Option<&IssuedCertificate>) -> Result<Self> {
        let mut builder = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .tls_certs_only([reqwest::Certificate::from_pem(ca_pem.as_bytes())?]);
        if let Some(id) = identity {
            let pem = format!("{}{}", id.cert_pem, id.key_pem);
            builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes())?);
        }
        Ok(Self {
            http: builder.build()?,
            base: base.to_owned(),
        })
    }

    /// `method /v1/<path>`: the status and the JSON answer (`null` when there is none).
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value)> {
        let mut request = self
            .http
            .request(method.clone(), format!("{}/v1/{path}", self.base))
            .header("X-Vault-Token", token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("{method} {}/v1/{path}", self.base))?;
        let status = response.status().as_u16();
        Ok((status, response.json().await.unwrap_or(Value::Null)))
    }

    async fn get(&self, path: &str, token: &str) -> Result<(u16, Value)> {
        self.call(reqwest::Method::GET, path, token, None).await
    }

    async fn post_login(&self, path: &str, body: &Value) -> Result<(u16, Value)> {
        let path = format!("auth/{path}");
        self.call(reqwest::Method::POST, &path, "", Some(body))
            .await
    }

    /// Logs in at `auth/<path>` and checks that the token carries the `reader` policy.
    async fn login(&self, path: &str, body: Value) -> Result<String> {
        let (status, answer) = self.post_login(path, &body).await?;
        ensure!(
            status == 200,
            "login at auth/{path}: {status}: {}",
            answer["errors"]
        );
        let token = answer["auth"]["client_token"]
            .as_str()
            .with_context(|| format!("login at auth/{path}: no auth.client_token"))?
            .to_owned();
        let (status, lookup) = self.get("auth/token/lookup-self", &token).await?;
        ensure!(
            status == 200,
            "token lookup: {status}: {}",
            lookup["errors"]
        );
        ensure!(
            lookup["data"]["policies"]
                .as_array()
                .is_some_and(|p| p.contains(&json!("reader"))),
            "login at auth/{path}: the token's policies are {}",
            lookup["data"]["policies"]
        );
        Ok(token)
    }

    /// Expects Vault to refuse the login at `auth/<path>` with a client error.
    async fn refused(&self, path: &str, body: Value, why: &str) -> Result<()> {
        let (status, answer) = self.post_login(path, &body).await?;
        if !(400..500).contains(&status) {
            bail!("login at auth/{path} ({why}) answered {status}, expected a refusal: {answer}");
        }
        Ok(())
    }
}

#[test]
fn kv_approle_userpass_cert_tls_audit_and_restart() -> Result<()> {
    let vault = VaultServer::start()?;
    runtime().block_on(async {
        let http = Client::new(vault.address(), vault.ca_pem(), None)?;
        vault.enable_file_audit().await?;

        // KV v1 and v2.
        vault.mount_kv("kv1", KvVersion::V1).await?;
        vault.mount_kv("kv2", KvVersion::V2).await?;
        let v1 = json!({"username": "u1", "nested": {"a": 1}});
        vault.write_kv_v1("kv1", "app/db", &v1).await?;
        let read = vault.read_kv_v1("kv1", "app/db").await?;
        assert_eq!(read.map(Value::Object), Some(v1.clone()));
        assert_eq!(vault.read_kv_v1("kv1", "app/missing").await?, None);

        for (password, version) in [("one", 1), ("two", 2)] {
            let data = json!({ "password": password });
            assert_eq!(vault.write_kv_v2("kv2", "app/db", &data).await?, version);
        }
        let labels = BTreeMap::from([("managed-by".to_owned(), "external-secrets".to_owned())]);
        vault.write_kv_v2_metadata("kv2", "app/db", &labels).await?;
        let latest = vault.read_kv_v2("kv2", "app/db", None).await?;
        let latest = latest.context("kv2 secret")?;
        assert_eq!(latest.version, 2);
        assert_eq!(latest.data["password"], "two");
        assert_eq!(latest.custom_metadata, labels);
        let first = vault.read_kv_v2("kv2", "app/db", Some(1)).await?;
        assert_eq!(first.context("version 1")?.data["password"], "one");
        assert_eq!(vault.read_kv_v2("kv2", "app/missing", None).await?, None);
        vault.write_policy("reader", READER_POLICY).await?;

        // AppRole: the token it issues carries the policy and reads the secret, nothing else.
        let reader = TokenOptions::policies(&["reader"]).ttl(Duration::from_secs(600));
        vault.enable_auth("approle", "approle").await?;
        vault.create_approle_role("approle", "app", &reader).await?;
        let approle_body = json!({
            "role_id": vault.approle_role_id("approle", "app").await?,
            "secret_id": vault.approle_secret_id("approle", "app").await?,
        });
        let approle_token = http.login("approle/login", approle_body.clone()).await?;
        let (status, answer) = http.get("kv2/data/app/db", &approle_token).await?;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["data"]["data"]["password"], "two");
        let (status, _) = http.get("sys/policies/acl/reader", &approle_token).await?;
        assert_eq!(
            status, 403,
            "the reader policy grants no more than KV reads"
        );

        // The audit log saw that one login, and the reads: ours with the root token (latest
        // and version 1) and the AppRole token's.
        let logins = |r: &AuditedRequest| r.path == "auth/approle/login" && !r.failed;
        assert_eq!(vault.count_audit_responses(logins)?, 1);
        let reads = |r: &AuditedRequest| r.path == "kv2/data/app/db" && r.operation == "read";
        assert_eq!(vault.count_audit_responses(reads)?, 3);
        let writes = |r: &AuditedRequest| {
            r.path == "kv2/data/app/db" && matches!(r.operation, "create" | "update")
        };
        assert_eq!(vault.count_audit_responses(writes)?, 2);

        // userpass.
        vault.enable_auth("userpass", "userpass").await?;
        vault
            .create_userpass_user("userpass", "alice", "s3cret-pw", &reader)
            .await?;
        let alice = "userpass/login/alice";
        http.login(alice, json!({"password": "s3cret-pw"})).await?;
        http.refused(alice, json!({"password": "nope"}), "wrong password")
            .await?;
        let failed = |r: &AuditedRequest| r.path == "auth/userpass/login/alice" && r.failed;
        assert_eq!(vault.count_audit_responses(failed)?, 1);

        // The TLS listener: verified with ca_pem, refused by a client trusting another CA.
        let tls = Client::new(vault.tls_address(), vault.ca_pem(), None)?;
        assert_eq!(tls.get("sys/health", "").await?.0, 200);
        let other_ca = CertificateAuthority::new("someone-else")?;
        let stranger = Client::new(vault.tls_address(), &other_ca.cert_pem(), None)?;
        ensure!(
            stranger.get("sys/health", "").await.is_err(),
            "a client trusting another CA connected"
        );

        // cert auth over the TLS listener, with a client certificate of our own CA.
        let client_ca = CertificateAuthority::new("vault-client-ca")?;
        vault.enable_auth("cert", "cert").await?;
        vault
            .create_cert_role("cert", "app", &client_ca.cert_pem(), &reader)
            .await?;
        let by_name = json!({"name": "app"});
        let app_cert = client_ca.issue_client("app", None)?;
        let with_cert = Client::new(vault.tls_address(), vault.ca_pem(), Some(&app_cert))?;
        with_cert.login("cert/login", by_name.clone()).await?;
        let foreign_cert = other_ca.issue_client("app", None)?;
        let foreign = Client::new(vault.tls_address(), vault.ca_pem(), Some(&foreign_cert))?;
        foreign
            .refused("cert/login", by_name.clone(), "certificate of another CA")
            .await?;
        tls.refused("cert/login", by_name, "no client certificate")
            .await?;

        // Stopped: nothing answers at the address. Restarted: same address, same data, and
        // the token issued before still works.
        vault.stop();
        ensure!(
            http.get("sys/health", "").await.is_err(),
            "Vault still answers after stop()"
        );
        vault.restart()?;
        let (status, answer) = http.get("kv2/data/app/db", &approle_token).await?;
        assert_eq!(status, 200, "the token issued before the restart: {answer}");
        assert_eq!(answer["data"]["data"]["password"], "two");
        http.login("approle/login", approle_body).await?;
        assert_eq!(vault.count_audit_responses(logins)?, 2);
        let read = vault.read_kv_v1("kv1", "app/db").await?;
        assert_eq!(read.map(Value::Object), Some(v1));
        Ok(())
    })
}

#[test]
fn service_account_logins_with_jwt_and_kubernetes_auth() -> Result<()> {
    let cp = ControlPlane::start()?;
    let vault = VaultServer::start()?;
    runtime().block_on(async {
        let http = Client::new(vault.address(), vault.ca_pem(), None)?;
        let kube = cp.client().await;
        let ns = testenv::create_namespace(&kube, "vault").await?;
        let accounts = Api::<ServiceAccount>::namespaced(kube.clone(), &ns);
        for name in ["app", "other"] {
            let account = ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..ObjectMeta::default()
                },
                ..ServiceAccount::default()
            };
            accounts.create(&PostParams::default(), &account).await?;
        }
        let token_of = |name: &'static str, audiences: &'static [&'static str]| {
            let kube = kube.clone();
            let ns = ns.clone();
            async move {
                let ten_minutes = Duration::from_secs(600);
                testenv::service_account_token(&kube, &ns, name, audiences, ten_minutes).await
            }
        };
        vault.write_policy("reader", READER_POLICY).await?;
        let reader = TokenOptions::policies(&["reader"]);

        // JWT: the ServiceAccount token is verified with the API server's signing key.
        vault.enable_auth("jwt", "jwt").await?;
        vault.configure_jwt_for_kubernetes("jwt", &cp).await?;
        let role = JwtRole {
            audiences: vec!["vault".into()],
            subject: Some(format!("system:serviceaccount:{ns}:app")),
            claims: Some(json!({ "/kubernetes.io/namespace": ns })),
        };
        vault.create_jwt_role("jwt", "app", &role, &reader).await?;
        let jwt = |token: String| json!({"role": "app", "jwt": token});
        http.login("jwt/login", jwt(token_of("app", &["vault"]).await?))
            .await?;
        let wrong_audience = jwt(token_of("app", &["other"]).await?);
        http.refused("jwt/login", wrong_audience, "another audience")
            .await?;
        let other = jwt(token_of("other", &["vault"]).await?);
        http.refused("jwt/login", other, "another subject").await?;

        // kubernetes: Vault asks the API server's TokenReview with its reviewer token.
        vault.enable_auth("kubernetes", "kubernetes").await?;
        vault.configure_kubernetes_auth("kubernetes", &cp).await?;
        let role = KubernetesRole {
            service_account_names: vec!["app".into()],
            namespaces: vec![ns.clone()],
            audience: None,
        };
        vault
            .create_kubernetes_role("kubernetes", "app", &role, &reader)
            .await?;
        http.login("kubernetes/login", jwt(token_of("app", &[]).await?))
            .await?;
        let other = jwt(token_of("other", &[]).await?);
        http.refused(
            "kubernetes/login",
            other,
            "a ServiceAccount the role does not name",
        )
        .await?;
        // Configuring a second mount re-applies the reviewer objects without conflict.
        vault.enable_auth("kubernetes2", "kubernetes").await?;
        vault.configure_kubernetes_auth("kubernetes2", &cp).await?;
        Ok(())
    })
}
