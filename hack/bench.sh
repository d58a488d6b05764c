#!/usr/bin/env bash
# Times the release operator binary syncing N ExternalSecrets against a real control plane
# (hack/bench/). Extra arguments go to the bench, e.g. --counts 100,500 --concurrency 8.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/build-control-plane.sh
cargo build --release -p external-secrets -p external-secrets-bench
exec target/release/bench --operator target/release/external-secrets "$@"
