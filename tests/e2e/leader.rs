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
    vec![trial("leader::the_other_replica_takes_over", env, takeover)]
}

fn es(name: &str) -> String {
    format!(
        "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: {name}}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{name: fake}}\n  data: [{{secretKey: user, remoteRef: {{key: user}}}}]\n"
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
    let store = format!(
        "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {{name: fake}}\nspec:\n  controller: {class}\n  provider:\n    fake:\n      data: [{{key: user, value: alice}}]\n"
    );
    testenv::apply_yaml_in(&client, &ns, &store, true).await?;
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
