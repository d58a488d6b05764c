//! The AWS provider against moto, the AWS stand-in, with fixtures written and read back by
//! boto3. The provider finds moto as an operator deployment would find a VPC endpoint: through
//! its environment. The standard `AWS_ENDPOINT_URL` points at a closed port and ESO's own
//! variables (`AWS_SECRETSMANAGER_ENDPOINT`, `AWS_SSM_ENDPOINT`, `AWS_STS_ENDPOINT`) at moto, so
//! every passing call also proves ESO's variables win, as in ESO. Trials run one at a time:
//! they count moto's calls.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

use anyhow::{Context, Result, anyhow, ensure};
use external_secrets_provider_aws::Aws;
use libtest_mimic::{Arguments, Trial};
use provider::{
    Caller, ClientRequest, Error, FindRequest, ProviderIdentity, ProviderRuntime, ProviderSchema,
    PushRemoteRef, PushRequest, RemoteRef, SecretsClient, StaticCredentials, Validation,
};
use serde_json::{Value, json};
use testenv::moto::{Moto, MotoRun};

static MOTO: OnceLock<Moto> = OnceLock::new();
const NS: &str = "team-a";

fn moto() -> &'static Moto {
    MOTO.get().expect("set before any trial")
}

fn main() -> ExitCode {
    let run = Moto::in_environment(|endpoint| {
        [
            // Nothing listens on port 9: a call that went there would fail.
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
            ("AWS_SECRETSMANAGER_ENDPOINT", endpoint),
            ("AWS_SSM_ENDPOINT", endpoint),
            ("AWS_STS_ENDPOINT", endpoint),
            // For the store without `auth`: the SDK's default chain reads these first.
            ("AWS_ACCESS_KEY_ID", "default-chain-key"),
            ("AWS_SECRET_ACCESS_KEY", "default-chain-secret"),
            ("AWS_CONFIG_FILE", "/dev/null"),
            ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    });
    let moto = match run {
        Ok(MotoRun::Parent(code)) => return code,
        Ok(MotoRun::Child(moto)) => moto,
        Err(e) => {
            eprintln!("moto: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let _ = MOTO.set(moto);
    let mut args = Arguments::from_args();
    args.test_threads = Some(1);
    let trials = vec![
        trial("secrets_manager_reads_as_eso", secrets_manager_reads),
        trial(
            "secrets_manager_find_by_name_path_and_tags",
            secrets_manager_find,
        ),
        trial(
            "secrets_manager_push_refuse_and_delete",
            secrets_manager_push,
        ),
        trial("parameter_store_reads_and_find", parameter_store_reads),
        trial(
            "parameter_store_push_refuse_and_delete",
            parameter_store_push,
        ),
        trial("a_role_chain_is_assumed_once_per_client", role_chain),
        trial("irsa_exchanges_a_service_account_token_once", irsa),
        trial("the_default_chain_and_referent_stores", default_chain),
    ];
    libtest_mimic::run(&args, trials).exit_code()
}

fn trial<F, Fut>(name: &'static str, f: F) -> Trial
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<()>>,
{
    Trial::test(name, move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(f())
            .map_err(|e| format!("{e:#}").into())
    })
}

/// The keys a `secretRef` store reads; moto takes any.
fn keys() -> StaticCredentials {
    let mut credentials = StaticCredentials::default();
    for (key, value) in [("access-key", "AKIDTEST"), ("secret-access-key", "secret")] {
        credentials
            .secrets
            .insert((NS.into(), "awssm-secret".into(), key.into()), value.into());
    }
    credentials
}

/// ESO's documented store (`aws-sm-store.yaml` without its role) for `service`, plus `extra`.
fn spec(service: &str, extra: Value) -> Value {
    let mut spec = json!({
        "service": service,
        "region": "eu-central-1",
        "auth": {"secretRef": {
            "accessKeyIDSecretRef": {"name": "awssm-secret", "key": "access-key"},
            "secretAccessKeySecretRef": {"name": "awssm-secret", "key": "secret-access-key"},
        }},
    });
    if let (Value::Object(spec), Value::Object(extra)) = (&mut spec, extra) {
        spec.extend(extra);
    }
    spec
}

async fn client_with(
    aws: &Aws,
    spec: Value,
    caller: Caller,
    credentials: StaticCredentials,
) -> Result<Box<dyn SecretsClient>> {
    aws.validate_spec(&spec)?;
    let spec = aws.apply_referent(spec, caller, NS)?;
    let request = ClientRequest {
        provider: ProviderIdentity {
            kind: "AWS".into(),
            namespace: Some(NS.into()),
            name: "aws".into(),
        },
        api_version: "providers.external-secrets.io/v1alpha1".into(),
        spec,
        namespace: NS.into(),
    };
    Ok(aws.new_client(request, Arc::new(credentials)).await?)
}

async fn client(service: &str, extra: Value) -> Result<Box<dyn SecretsClient>> {
    client_with(
        &Aws::default(),
        spec(service, extra),
        Caller::SecretStore,
        keys(),
    )
    .await
}

fn remote(key: &str, property: Option<&str>) -> RemoteRef {
    RemoteRef {
        key: key.into(),
        property: property.map(str::to_owned),
        ..RemoteRef::default()
    }
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).expect("UTF-8")
}

fn push(key: &str, value: &str, metadata: Option<Value>) -> PushRequest {
    PushRequest {
        remote: PushRemoteRef {
            remote_key: key.into(),
            property: None,
        },
        secret_key: Some("key1".into()),
        value: value.as_bytes().to_vec(),
        metadata,
        source: Default::default(),
    }
}

async fn secrets_manager_reads() -> Result<()> {
    let m = moto();
    // ESO's aws-sm-external-secret.yaml reads these.
    m.create_secret(
        "friendslist",
        r#"{"name": {"first": "Tom", "last": "Anderson"}, "friends": [{"first": "Dale"}, {"first": "Roger"}], "a.b": "dotted"}"#,
    )?;
    m.create_secret("database-credentials", "s3cr3t")?;
    m.tag_secret("database-credentials", &[("dev", "seed"), ("team", "db")])?;
    let first = m.create_secret("rotated", "one")?;
    m.put_secret_value("rotated", "two")?;
    m.create_secret_binary("blob", &[0, 159, 146, 150])?;
    m.create_secret("app/prefixed", "under a prefix")?;

    let sm = client("SecretsManager", json!({})).await?;
    ensure!(sm.validate().await? == Validation::Ready);
    let read = |key: &str, property: Option<&str>| {
        let r = remote(key, property);
        let sm = &sm;
        async move { sm.get_secret(&r).await.map(text) }
    };
    ensure!(read("friendslist", Some("name.first")).await? == "Tom");
    ensure!(read("friendslist", Some("friends.1.first")).await? == "Roger");
    // A key holding a dot wins over the path, as in ESO.
    ensure!(read("friendslist", Some("a.b")).await? == "dotted");
    let missing = sm
        .get_secret(&remote("friendslist", Some("name.middle")))
        .await
        .unwrap_err()
        .to_string();
    ensure!(
        missing.contains("key name.middle does not exist in secret friendslist"),
        "{missing}"
    );
    // Versions: a stage, and a version id as `uuid/<id>`.
    ensure!(read("rotated", None).await? == "two");
    let previous = RemoteRef {
        version: Some("AWSPREVIOUS".into()),
        ..remote("rotated", None)
    };
    ensure!(text(sm.get_secret(&previous).await?) == "one");
    let by_id = RemoteRef {
        version: Some(format!("uuid/{}", first.version_id)),
        ..remote("rotated", None)
    };
    ensure!(text(sm.get_secret(&by_id).await?) == "one");
    ensure!(sm.get_secret(&remote("blob", None)).await? == [0, 159, 146, 150]);
    // metadataPolicy: Fetch reads the tags.
    let tags = RemoteRef {
        fetch_metadata: true,
        ..remote("database-credentials", None)
    };
    let all: Value = serde_json::from_slice(&sm.get_secret(&tags).await?)?;
    ensure!(all == json!({"dev": "seed", "team": "db"}), "{all}");
    let dev = RemoteRef {
        property: Some("dev".into()),
        ..tags
    };
    ensure!(text(sm.get_secret(&dev).await?) == "seed");
    // dataFrom.extract: every key, strings as text and the rest as JSON.
    let map = sm.get_secret_map(&remote("friendslist", None)).await?;
    ensure!(map.get("a.b").map(Vec::as_slice) == Some(b"dotted".as_slice()));
    ensure!(
        serde_json::from_slice::<Value>(&map["name"])?
            == json!({"first": "Tom", "last": "Anderson"})
    );
    let not_json = sm
        .get_secret_map(&remote("database-credentials", None))
        .await
        .unwrap_err()
        .to_string();
    ensure!(
        !not_json.contains("s3cr3t"),
        "a value in an error: {not_json}"
    );
    ensure!(matches!(
        sm.get_secret(&remote("no-such-secret", None)).await,
        Err(Error::NoSecret)
    ));
    let prefixed = client("SecretsManager", json!({"prefix": "app/"})).await?;
    ensure!(text(prefixed.get_secret(&remote("prefixed", None)).await?) == "under a prefix");
    Ok(())
}

async fn secrets_manager_find() -> Result<()> {
    let m = moto();
    for (name, value) in [
        ("find/db/user", "u"),
        ("find/db/pass", "p"),
        ("find/web/key", "k"),
    ] {
        m.create_secret(name, value)?;
    }
    m.tag_secret("find/db/user", &[("tier", "db")])?;
    m.tag_secret("find/db/pass", &[("tier", "db")])?;
    let sm = client("SecretsManager", json!({})).await?;
    let find = |path: Option<&str>, name: Option<&str>, tags: &[(&str, &str)]| FindRequest {
        path: path.map(str::to_owned),
        name_regexp: name.map(str::to_owned),
        tags: tags
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    };
    let names = |found: BTreeMap<String, Vec<u8>>| found.into_keys().collect::<Vec<_>>();
    let by_name = sm
        .get_all_secrets(&find(None, Some("^find/db/"), &[]))
        .await?;
    ensure!(
        by_name.get("find/db/user").map(Vec::as_slice) == Some(b"u".as_slice()),
        "{:?}",
        by_name.keys()
    );
    ensure!(names(by_name) == ["find/db/pass", "find/db/user"]);
    let by_path = sm
        .get_all_secrets(&find(Some("find/web"), Some(".*"), &[]))
        .await?;
    ensure!(names(by_path) == ["find/web/key"]);
    let by_tags = sm
        .get_all_secrets(&find(None, None, &[("tier", "db")]))
        .await?;
    ensure!(names(by_tags) == ["find/db/pass", "find/db/user"]);
    let neither = sm
        .get_all_secrets(&find(None, None, &[]))
        .await
        .unwrap_err();
    ensure!(neither.to_string().contains("find needs name or tags"));
    Ok(())
}

async fn secrets_manager_push() -> Result<()> {
    let m = moto();
    let sm = client(
        "SecretsManager",
        json!({"secretsManager": {"forceDeleteWithoutRecovery": true}}),
    )
    .await?;
    let metadata = json!({
        "apiVersion": "kubernetes.external-secrets.io/v1alpha1",
        "kind": "PushSecretMetadata",
        "spec": {"secretPushFormat": "string", "description": "pushed",
                 "tags": {"secret-store": "teamb-secret-store"}},
    });
    sm.push_secret(&push("pushed/one", "v1", Some(metadata.clone())))
        .await?;
    ensure!(m.get_secret_string("pushed/one")?.as_deref() == Some("v1"));
    let tags = m.secret_tags("pushed/one")?;
    ensure!(tags.get("managed-by").map(String::as_str) == Some("external-secrets"));
    ensure!(tags.get("secret-store").map(String::as_str) == Some("teamb-secret-store"));
    ensure!(
        sm.secret_exists(&push("pushed/one", "", None).remote)
            .await?
    );
    // An update of a managed secret; the default format is binary.
    sm.push_secret(&push("pushed/one", "v2", Some(metadata)))
        .await?;
    ensure!(m.get_secret_string("pushed/one")?.as_deref() == Some("v2"));
    sm.push_secret(&push("pushed/bin", "raw", None)).await?;
    ensure!(m.get_secret_binary("pushed/bin")?.as_deref() == Some(b"raw".as_slice()));
    // A property merges into the JSON already there.
    let mut property = push("pushed/json", "u", None);
    property.remote.property = Some("db.user".into());
    sm.push_secret(&property).await?;
    property.remote.property = Some("db.pass".into());
    property.value = b"p".to_vec();
    sm.push_secret(&property).await?;
    let merged: Value =
        serde_json::from_slice(&m.get_secret_binary("pushed/json")?.context("pushed/json")?)?;
    ensure!(
        merged == json!({"db": {"user": "u", "pass": "p"}}),
        "{merged}"
    );
    // Someone else's secret is refused and never deleted.
    m.create_secret("theirs", "keep")?;
    let refused = sm
        .push_secret(&push("theirs", "mine", None))
        .await
        .unwrap_err();
    ensure!(matches!(refused, Error::Conflict(_)), "{refused}");
    ensure!(
        refused
            .to_string()
            .contains("not managed by external-secrets")
    );
    sm.delete_secret(&push("theirs", "", None).remote).await?;
    ensure!(m.get_secret_string("theirs")?.as_deref() == Some("keep"));
    // Ours goes, at once with forceDeleteWithoutRecovery; a second delete is a no-op.
    sm.delete_secret(&push("pushed/one", "", None).remote)
        .await?;
    ensure!(m.get_secret_string("pushed/one")?.is_none());
    ensure!(
        !sm.secret_exists(&push("pushed/one", "", None).remote)
            .await?
    );
    sm.delete_secret(&push("pushed/one", "", None).remote)
        .await?;
    let bad = sm
        .push_secret(&push(
            "pushed/x",
            "v",
            Some(json!({"spec": {"resourcePolicy": {"blockPublicPolicy": true}}})),
        ))
        .await
        .unwrap_err();
    ensure!(
        bad.to_string().contains("metadata.spec.resourcePolicy"),
        "{bad}"
    );
    Ok(())
}

async fn parameter_store_reads() -> Result<()> {
    let m = moto();
    m.put_parameter("/ps/app/user", "app", "String", &[("team", "a")])?;
    m.put_parameter(
        "/ps/app/json",
        r#"{"db": {"pass": "p"}, "x.y": "dotted"}"#,
        "SecureString",
        &[],
    )?;
    m.put_parameter(
        "/ps/app/json",
        r#"{"db": {"pass": "p2"}, "x.y": "dotted"}"#,
        "SecureString",
        &[],
    )?;
    m.put_parameter("/ps/other/key", "k", "String", &[("team", "a")])?;
    let ps = client("ParameterStore", json!({})).await?;
    ensure!(text(ps.get_secret(&remote("/ps/app/user", None)).await?) == "app");
    ensure!(
        text(
            ps.get_secret(&remote("/ps/app/json", Some("db.pass")))
                .await?
        ) == "p2"
    );
    ensure!(text(ps.get_secret(&remote("/ps/app/json", Some("x.y"))).await?) == "dotted");
    let first = RemoteRef {
        version: Some("1".into()),
        ..remote("/ps/app/json", Some("db.pass"))
    };
    ensure!(text(ps.get_secret(&first).await?) == "p");
    let tags = RemoteRef {
        fetch_metadata: true,
        ..remote("/ps/app/user", None)
    };
    ensure!(serde_json::from_slice::<Value>(&ps.get_secret(&tags).await?)? == json!({"team": "a"}));
    ensure!(matches!(
        ps.get_secret(&remote("/ps/none", None)).await,
        Err(Error::NoSecret)
    ));
    let map = ps.get_secret_map(&remote("/ps/app/json", None)).await?;
    ensure!(map.get("x.y").map(Vec::as_slice) == Some(b"dotted".as_slice()));
    let by_path = ps
        .get_all_secrets(&FindRequest {
            path: Some("/ps/app".into()),
            name_regexp: Some("user$".into()),
            ..FindRequest::default()
        })
        .await?;
    ensure!(
        by_path.keys().collect::<Vec<_>>() == ["/ps/app/user"],
        "{:?}",
        by_path.keys()
    );
    let by_tags = ps
        .get_all_secrets(&FindRequest {
            tags: BTreeMap::from([("team".into(), "a".into())]),
            ..FindRequest::default()
        })
        .await?;
    ensure!(
        by_tags.keys().collect::<Vec<_>>() == ["/ps/app/user", "/ps/other/key"],
        "{:?}",
        by_tags.keys()
    );
    Ok(())
}

async fn parameter_store_push() -> Result<()> {
    let m = moto();
    let ps = client("ParameterStore", json!({})).await?;
    let metadata = json!({
        "apiVersion": "kubernetes.external-secrets.io/v1alpha1",
        "kind": "PushSecretMetadata",
        "spec": {"secretType": "SecureString", "description": "api",
                 "tags": {"team": "pokedex"}},
    });
    ps.push_secret(&push("/pushed/param", "v1", Some(metadata.clone())))
        .await?;
    ensure!(m.get_parameter("/pushed/param")?.as_deref() == Some("v1"));
    let tags = m.parameter_tags("/pushed/param")?;
    ensure!(
        tags.get("managed-by").map(String::as_str) == Some("external-secrets"),
        "{tags:?}"
    );
    ensure!(tags.get("team").map(String::as_str) == Some("pokedex"));
    ps.push_secret(&push("/pushed/param", "v2", Some(metadata)))
        .await?;
    ensure!(m.get_parameter("/pushed/param")?.as_deref() == Some("v2"));
    // A whole Secret is a JSON object of base64 values unless encodeAsDecoded.
    let whole = PushRequest {
        secret_key: None,
        value: br#"{"a":"x","b":"y"}"#.to_vec(),
        ..push("/pushed/whole", "", None)
    };
    ps.push_secret(&whole).await?;
    let pushed: Value = serde_json::from_str(&m.get_parameter("/pushed/whole")?.context("whole")?)?;
    ensure!(pushed == json!({"a": "eA==", "b": "eQ=="}), "{pushed}");
    m.put_parameter("/theirs", "keep", "String", &[])?;
    let refused = ps
        .push_secret(&push("/theirs", "mine", None))
        .await
        .unwrap_err();
    ensure!(
        refused
            .to_string()
            .contains("not managed by external-secrets"),
        "{refused}"
    );
    ps.delete_secret(&push("/theirs", "", None).remote).await?;
    ensure!(m.get_parameter("/theirs")?.as_deref() == Some("keep"));
    ps.delete_secret(&push("/pushed/param", "", None).remote)
        .await?;
    ensure!(m.get_parameter("/pushed/param")?.is_none());
    ensure!(
        !ps.secret_exists(&push("/pushed/param", "", None).remote)
            .await?
    );
    Ok(())
}

fn sts_calls(action: &str) -> Result<usize> {
    moto().count_recorded("sts", action)
}

fn metric(aws: &Aws, needle: &str) -> Result<u64> {
    let mut registry = prometheus_client::registry::Registry::default();
    aws.register_metrics(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    text.lines()
        .find(|l| l.contains(needle))
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.parse().map_err(|e| anyhow!("{e}: {v}")))
        .unwrap_or(Ok(0))
}

async fn role_chain() -> Result<()> {
    let m = moto();
    m.create_secret("chained", "through two roles")?;
    m.start_recording()?;
    let aws = Aws::default();
    let extra = json!({
        "additionalRoles": ["arn:aws:iam::123456789012:role/first"],
        "role": "arn:aws:iam::123456789012:role/external-secrets",
        "externalID": "tenant-7",
        "sessionTags": [{"key": "team", "value": "a"}],
        "transitiveTagKeys": ["team"],
    });
    let sm = client_with(
        &aws,
        spec("SecretsManager", extra),
        Caller::SecretStore,
        keys(),
    )
    .await?;
    ensure!(sm.validate().await? == Validation::Ready);
    for _ in 0..20 {
        ensure!(text(sm.get_secret(&remote("chained", None)).await?) == "through two roles");
    }
    ensure!(sts_calls("AssumeRole")? == 2, "{:?}", m.recorded_actions()?);
    ensure!(metric(&aws, r#"service="STS",call="AssumeRole",status="success""#)? == 2);
    ensure!(metric(&aws, r#"call="GetSecretValue",status="success""#)? == 20);
    m.stop_recording()?;
    Ok(())
}

async fn irsa() -> Result<()> {
    let m = moto();
    m.create_secret("irsa", "via web identity")?;
    m.start_recording()?;
    let mut credentials = StaticCredentials::default();
    credentials.tokens.insert(
        (NS.into(), "eso-reader".into()),
        "header.payload.signature".into(),
    );
    credentials.service_accounts.insert(
        (NS.into(), "eso-reader".into()),
        BTreeMap::from([(
            "eks.amazonaws.com/role-arn".into(),
            "arn:aws:iam::123456789012:role/irsa".into(),
        )]),
    );
    let jwt = json!({"service": "SecretsManager", "region": "eu-central-1",
                     "auth": {"jwt": {"serviceAccountRef": {"name": "eso-reader"}}}});
    let sm = client_with(
        &Aws::default(),
        jwt.clone(),
        Caller::SecretStore,
        credentials,
    )
    .await?;
    for _ in 0..5 {
        ensure!(text(sm.get_secret(&remote("irsa", None)).await?) == "via web identity");
    }
    ensure!(
        sts_calls("AssumeRoleWithWebIdentity")? == 1,
        "{:?}",
        m.recorded_actions()?
    );
    m.stop_recording()?;
    // Without the annotation there is no role to assume: said, naming the account.
    let mut unannotated = StaticCredentials::default();
    unannotated
        .service_accounts
        .insert((NS.into(), "eso-reader".into()), BTreeMap::new());
    let err = client_with(&Aws::default(), jwt, Caller::SecretStore, unannotated)
        .await
        .err()
        .context("a client without a role")?
        .to_string();
    ensure!(
        err.contains("ServiceAccount team-a/eso-reader")
            && err.contains("eks.amazonaws.com/role-arn"),
        "{err}"
    );
    Ok(())
}

async fn default_chain() -> Result<()> {
    let m = moto();
    m.create_secret("pod-credentials", "from the environment")?;
    let aws = Aws::default();
    let sm = client_with(
        &aws,
        json!({"service": "SecretsManager", "region": "eu-central-1"}),
        Caller::SecretStore,
        StaticCredentials::default(),
    )
    .await?;
    ensure!(text(sm.get_secret(&remote("pod-credentials", None)).await?) == "from the environment");
    // A ClusterSecretStore whose keys name no namespace cannot be checked on its own.
    let referent = aws.apply_referent(
        spec("SecretsManager", json!({})),
        Caller::ClusterSecretStore,
        "",
    )?;
    let request = ClientRequest {
        provider: ProviderIdentity {
            kind: "AWS".into(),
            namespace: None,
            name: "aws".into(),
        },
        api_version: "cluster.providers.external-secrets.io/v1alpha1".into(),
        spec: referent,
        namespace: String::new(),
    };
    let alone = aws
        .new_client(request, Arc::new(StaticCredentials::default()))
        .await?;
    ensure!(alone.validate().await? == Validation::Unknown);
    Ok(())
}
