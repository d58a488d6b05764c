//! Leader election between two operator processes: only the Lease holder reconciles, and when
//! it dies the other takes over within the lease duration plus 5 s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use libtest_mimic::Trial;

use crate::restart::Operator;
use crate::{Env, trial};

const LEASE_SECONDS: u64 = 6;

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial("leader::the_other_replica_takes_over", env, takeover),
        trial(
            "leader::provider_tls_is_issued_while_reconciles_use_up_the_request_budget",
            env,
            provider_tls_budget,
        ),
    ]
}

fn es(name: &str) -> String {
    format!(
        "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: {name}}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{name: fake}}\n  data: [{{secretKey: user, remoteRef: {{key: user}}}}]\n"
    )
}

/// The SecretStore `fake` of controller class `class`, serving `user`.
pub(crate) fn class_store(class: &str) -> String {
    format!(
        "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {{name: fake}}\nspec:\n  controller: {class}\n  provider:\n    fake:\n      data: [{{key: user, value: alice}}]\n"
    )
}

/// `external_secrets_leader` of a replica: 1 when it runs the controllers.
async fn leading(replica: &Operator) -> Result<f64> {
    replica.sum("external_secrets_leader ", |_| true).await
}

async fn holder(leases: &Api<Lease>, name: &str) -> Result<String> {
    Ok(leases
        .get_opt(name)
        .await?
        .and_then(|l| l.spec?.holder_identity)
        .unwrap_or_default())
}

async fn takeover(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "leader").await?;
    let class = format!("leader-{ns}");
    testenv::apply_yaml_in(&client, &ns, &class_store(&class), true).await?;
    testenv::apply_yaml_in(&client, &ns, &es("first"), true).await?;
    let lease = format!("lease-{ns}");
    let duration = format!("{LEASE_SECONDS}s");
    let args = [
        "--enable-leader-election",
        "--leader-election-id",
        &lease,
        "--leader-election-namespace",
        &ns,
        "--lease-duration",
        &duration,
        "--renew-deadline",
        "4s",
    ];
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let mut a = Operator::start_with(&env, &ns, &class, &args)?;
    let written = |name: &'static str, timeout: Duration| {
        let secrets = secrets.clone();
        async move {
            testenv::wait_for(timeout, &format!("Secret {name}"), || async {
                secrets
                    .get_opt(name)
                    .await?
                    .map(|_| ())
                    .ok_or_else(|| anyhow!("not yet"))
            })
            .await
        }
    };
    written("first", Duration::from_secs(60)).await?;
    let a_identity = holder(&leases, &lease).await?;
    ensure!(
        a_identity.ends_with(&format!("-{}", a.child.id())),
        "the first replica holds the Lease: {a_identity:?}"
    );
    let b = Operator::start_with(&env, &ns, &class, &args)?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = b.sum("externalsecret_sync_calls", |_| true).await?;
    ensure!(idle == 0.0, "the standby reconciled {idle} times");
    ensure!(
        (leading(&a).await?, leading(&b).await?) == (1.0, 0.0),
        "external_secrets_leader of the leader and the standby"
    );

    // The leader dies without releasing the Lease.
    a.child.kill()?;
    let _ = a.child.wait();
    let died = Instant::now();
    testenv::apply_yaml_in(&client, &ns, &es("second"), true).await?;
    written("second", Duration::from_secs(LEASE_SECONDS + 5)).await?;
    let b_identity = holder(&leases, &lease).await?;
    ensure!(
        b_identity.ends_with(&format!("-{}", b.child.id())),
        "the standby holds the Lease: {b_identity:?}"
    );
    eprintln!("took over and synced in {:?}", died.elapsed());
    ensure!(
        leading(&b).await? == 1.0,
        "external_secrets_leader of the replica that took over"
    );

    // Stopped as Kubernetes stops a pod, a leader hands the Lease over at once.
    let b_pid = b.child.id();
    b.stop();
    let handed_over = Instant::now();
    testenv::wait_for(
        Duration::from_secs(3),
        "the Lease to be released",
        || async {
            let now = holder(&leases, &lease).await?;
            if now.ends_with(&format!("-{b_pid}")) {
                Err(anyhow!("still held by the stopped replica"))
            } else {
                Ok(())
            }
        },
    )
    .await?;
    eprintln!("released {:?} after SIGTERM", handed_over.elapsed());
    Ok(())
}

/// ExternalSecrets whose reconciles and watches keep the request budget (`--client-qps`) spent.
const BUSY: usize = 40;
/// One request every 5 s, a burst of one.
const BUDGET: &[&str] = &["--client-qps=0.2", "--client-burst=1"];

/// A provider server's TLS Secret (`--provider-tls-secret`) is issued at the pace of its own
/// request budget, as the Lease is renewed, not after the reconciles that queue for theirs: at
/// one request every 5 s shared with them, its read and its write each wait behind the
/// operator's watches and dozens of reconciles (minutes); on its own budget, two requests take
/// 5 s.
async fn provider_tls_budget(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "tls-budget").await?;
    let class = format!("tls-budget-{ns}");
    testenv::apply_yaml_in(&client, &ns, &class_store(&class), true).await?;
    for i in 0..BUSY {
        testenv::apply_yaml_in(&client, &ns, &es(&format!("es-{i}")), true).await?;
    }
    let tls = format!("{ns}/provider-tls=provider");
    let mut args = vec!["--disable-webhook", "--provider-tls-secret", &tls];
    args.extend(BUDGET);
    let started = Instant::now();
    let _operator = Operator::start_with(&env, &ns, &class, &args)?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let limit = Duration::from_secs(25);
    testenv::wait_for(limit, "the provider TLS Secret", || async {
        let issued = secrets
            .get_opt("provider-tls")
            .await?
            .and_then(|s| s.data)
            .is_some_and(|d| d.contains_key("tls.crt") && d.contains_key("ca.crt"));
        ensure!(issued, "not issued after {:?}", started.elapsed());
        anyhow::Ok(())
    })
    .await?;
    let ready = crate::restart::secret_versions(&secrets).await?.len();
    ensure!(
        ready < BUSY,
        "the reconciles were not held by the budget ({ready} of {BUSY} synced): nothing was shown"
    );
    Ok(())
}
