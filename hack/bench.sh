#!/usr/bin/env bash
# Times the release operator binary syncing N ExternalSecrets against a real control plane
# (hack/bench/). Extra arguments go to the bench, e.g. --counts 100,500 --concurrency 8.
# Out-of-process runs (the Fake store's default) start --replicas (3) provider servers behind
# one name and need root: the bench re-runs itself in a mount namespace with its own /etc/hosts.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/build-control-plane.sh
cargo build --release -p external-secrets -p external-secrets-bench
exec target/release/bench --operator target/release/external-secrets "$@"
