//! Generators end to end: ESO's documented generator manifests (`tests/eso-docs-generators`)
//! applied unchanged make Secrets of the documented shape; values rotate with the refresh
//! interval and not under `refreshPolicy: CreatedOnce`; a kind this build does not serve, or a
//! generator that does not exist, is said in the ExternalSecret's status.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use api::external_secret::ExternalSecret;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use libtest_mimic::Trial;

use crate::operator::{TIMEOUT, wait_ready};
use crate::sync::{bytes, value, wait_secret};
use crate::{Env, trial};

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial("generators::esos_documented_manifests", env, documented),
        trial(
            "generators::rotation_follows_the_refresh_interval_and_policy",
            env,
            rotation,
        ),
        trial(
            "generators::mfa_codes_an_independent_totp_accepts",
            env,
            mfa,
        ),
        trial(
            "generators::an_unserved_kind_or_a_missing_generator_is_said",
            env,
            refusals,
        ),
    ]
}

macro_rules! doc {
    ($name:literal) => {
        include_str!(concat!("../eso-docs-generators/", $name, ".yaml"))
    };
}

/// Waits for the Secret `name` and returns its data.
async fn secret_data(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<std::collections::BTreeMap<String, Vec<u8>>> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret = testenv::wait_for(TIMEOUT, &format!("Secret {ns}/{name}"), || async {
        secrets.get(name).await.map_err(anyhow::Error::from)
    })
    .await?;
    Ok(secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect())
}

fn text(data: &std::collections::BTreeMap<String, Vec<u8>>, key: &str) -> Result<String> {
    let value = data.get(key).with_context(|| format!("no key {key:?}"))?;
    Ok(String::from_utf8(value.clone())?)
}

/// generator-password.yaml's shape: 42 characters, 5 digits, 5 of `-_$@`, letters otherwise.
fn documented_password(p: &str) -> Result<()> {
    ensure!(p.chars().count() == 42, "{} characters", p.chars().count());
    let digits = p.chars().filter(char::is_ascii_digit).count();
    let symbols = p.chars().filter(|c| "-_$@".contains(*c)).count();
    let letters = p.chars().filter(char::is_ascii_alphabetic).count();
    ensure!(
        (digits, symbols, letters) == (5, 5, 32),
        "{digits} digits, {symbols} symbols, {letters} letters"
    );
    Ok(())
}

async fn documented(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "generators").await?;
    for manifest in [
        doc!("password"),
        doc!("password-example"),
        doc!("uuid"),
        doc!("uuid-example"),
        doc!("fake"),
        doc!("fake-example"),
        doc!("password-multiple-keys"),
        doc!("password-encoding-examples"),
    ] {
        testenv::apply_yaml_in(&client, &ns, manifest, true).await?;
    }
    testenv::apply_yaml(&client, doc!("cluster"), true).await?;
    testenv::apply_yaml_in(&client, &ns, doc!("cluster-example"), true).await?;
    let encodings = ["hex", "base32", "raw", "base64url"];
    for encoding in encodings {
        let es = format!(
            "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: password-{encoding}}}\nspec:\n  refreshInterval: 1h\n  target: {{name: password-{encoding}}}\n  dataFrom:\n  - sourceRef: {{generatorRef: {{apiVersion: generators.external-secrets.io/v1alpha1, kind: Password, name: password-{encoding}}}}}\n"
        );
        testenv::apply_yaml_in(&client, &ns, &es, true).await?;
    }

    documented_password(&text(
        &secret_data(&client, &ns, "password-secret").await?,
        "password",
    )?)?;
    documented_password(&text(
        &secret_data(&client, &ns, "cluster-secret").await?,
        "password",
    )?)?;
    let uuid = text(&secret_data(&client, &ns, "uuid-secret").await?, "uuid")?;
    let parts: Vec<usize> = uuid.split('-').map(str::len).collect();
    ensure!(
        parts == [8, 4, 4, 4, 12] && uuid.as_bytes()[14] == b'4',
        "{uuid}"
    );
    wait_secret(
        &client,
        &ns,
        "fake",
        &bytes(&[("foo", "bar"), ("baz", "bang")]),
    )
    .await?;
    let keys = secret_data(&client, &ns, "auth-secrets").await?;
    ensure!(
        keys.keys().collect::<Vec<_>>() == ["key1", "key2"],
        "{:?}",
        keys.keys()
    );
    ensure!(keys["key1"].len() == 36 && keys["key2"].len() == 36);
    ensure!(keys["key1"] != keys["key2"], "two keys, one password");

    // Each encoding of its documented length: hex doubles 16, base32 pads 20 to 32, base64url
    // 24 to 32, raw is 12 as it is.
    let shapes: [(&str, usize, &str); 4] = [
        ("hex", 32, "0123456789abcdef"),
        ("base32", 32, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567="),
        ("raw", 12, ""),
        (
            "base64url",
            32,
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=",
        ),
    ];
    for (encoding, length, alphabet) in shapes {
        let value = text(
            &secret_data(&client, &ns, &format!("password-{encoding}")).await?,
            "password",
        )?;
        ensure!(
            value.len() == length,
            "{encoding}: {} characters",
            value.len()
        );
        ensure!(
            alphabet.is_empty() || value.chars().all(|c| alphabet.contains(c)),
            "{encoding}: a character outside its alphabet"
        );
    }
    Ok(())
}

async fn rotation(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "generators-rotate").await?;
    let yaml = r#"
apiVersion: generators.external-secrets.io/v1alpha1
kind: Password
metadata: {name: rotating}
spec: {length: 20}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: periodic}
spec:
  refreshInterval: 1s
  target: {name: periodic}
  dataFrom: [{sourceRef: {generatorRef: {kind: Password, name: rotating}}}]
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: once}
spec:
  refreshInterval: 1s
  refreshPolicy: CreatedOnce
  target: {name: once}
  dataFrom: [{sourceRef: {generatorRef: {kind: Password, name: rotating}}}]
"#;
    testenv::apply_yaml_in(&client, &ns, yaml, true).await?;
    let first_once = secret_data(&client, &ns, "once").await?;
    let seen = std::sync::Mutex::new(BTreeSet::new());
    testenv::wait_for(TIMEOUT, "three passwords in turn in periodic", || async {
        let password = secret_data(&client, &ns, "periodic")
            .await?
            .remove("password");
        let mut seen = seen.lock().expect("not poisoned");
        seen.extend(password);
        ensure!(seen.len() >= 3, "{} distinct so far", seen.len());
        Ok(())
    })
    .await?;
    // Meanwhile `once` kept its first value.
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(
        secret_data(&client, &ns, "once").await? == first_once,
        "refreshPolicy CreatedOnce rotated its password"
    );
    Ok(())
}

async fn refusals(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "generators-refused").await?;
    let yaml = r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: unserved}
spec:
  refreshInterval: 1h
  target: {name: unserved}
  dataFrom: [{sourceRef: {generatorRef: {kind: VaultDynamicSecret, name: db}}}]
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: missing}
spec:
  refreshInterval: 1h
  target: {name: missing}
  dataFrom: [{sourceRef: {generatorRef: {kind: Password, name: not-there}}}]
"#;
    testenv::apply_yaml_in(&client, &ns, yaml, true).await?;
    let externals: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let unserved = wait_ready(
        "ExternalSecret unserved",
        "False",
        "SecretSyncedError",
        || value(&externals, "unserved"),
    )
    .await?;
    let message = unserved.to_string();
    ensure!(
        message.contains("spec.dataFrom[0].sourceRef.generatorRef.kind")
            && message.contains("VaultDynamicSecret is not served"),
        "{message}"
    );
    let missing = wait_ready(
        "ExternalSecret missing",
        "False",
        "SecretSyncedError",
        || value(&externals, "missing"),
    )
    .await?;
    ensure!(
        missing
            .to_string()
            .contains("could not read generator Password \\\"not-there\\\""),
        "{missing}"
    );
    Ok(())
}

/// The TOTP of `seed` (base32) now and one period before, as Python's standard library computes
/// it: an implementation that shares no code with ours.
fn python_totps(seed: &str) -> Result<Vec<String>> {
    const TOTP: &str = r#"
import base64, hashlib, hmac, struct, sys, time
key = base64.b32decode(sys.argv[1])
for counter in (int(time.time()) // 30, int(time.time()) // 30 - 1):
    mac = hmac.new(key, struct.pack(">Q", counter), hashlib.sha1).digest()
    o = mac[-1] & 0x0F
    print("%06d" % ((struct.unpack(">I", mac[o:o + 4])[0] & 0x7FFFFFFF) % 1000000))
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", TOTP, seed])
        .output()
        .context("running python3 (apt-get install -y python3)")?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?
        .lines()
        .map(str::to_owned)
        .collect())
}

async fn mfa(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "generators-mfa").await?;
    const SEED: &str = "JBSWY3DPEHPK3PXP";
    let yaml = r#"
apiVersion: v1
kind: Secret
metadata: {name: secret}
stringData: {token: "jbsw y3dp ehpk 3pxp"}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: mfa}
spec:
  refreshInterval: 1h
  target: {name: mfa}
  dataFrom: [{sourceRef: {generatorRef: {kind: MFA, name: my-mfa-generator}}}]
---
apiVersion: v1
kind: Secret
metadata: {name: rfc-seed}
stringData: {seed: GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ}
---
apiVersion: generators.external-secrets.io/v1alpha1
kind: MFA
metadata: {name: pinned}
spec:
  secret: {name: rfc-seed, key: seed}
  length: 8
  algorithm: sha1
  when: "1970-01-01T00:00:59Z"
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: pinned}
spec:
  refreshInterval: 1h
  target: {name: pinned}
  dataFrom: [{sourceRef: {generatorRef: {kind: MFA, name: pinned}}}]
"#;
    testenv::apply_yaml_in(&client, &ns, doc!("mfa"), true).await?;
    testenv::apply_yaml_in(&client, &ns, yaml, true).await?;
    let data = secret_data(&client, &ns, "mfa").await?;
    let token = text(&data, "token")?;
    let accepted = python_totps(SEED)?;
    ensure!(
        accepted.contains(&token),
        "token {token} is none of the codes python computes now: {accepted:?}"
    );
    let left: u64 = text(&data, "timeLeft")?.parse()?;
    ensure!((1..=30).contains(&left), "timeLeft {left}");
    // RFC 6238's first test vector, through the CRD, the controller and the Secret.
    wait_secret(
        &client,
        &ns,
        "pinned",
        &bytes(&[("token", "94287082"), ("timeLeft", "1")]),
    )
    .await?;
    Ok(())
}
