#!/usr/bin/env bash
# The whole test suite: format, lints, generated files, unit tests, and the end-to-end tests
# against a real kube-apiserver, etcd and kube-controller-manager built by build-control-plane.sh
# and a real Vault server built by build-vault.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/build-control-plane.sh
bash hack/build-vault.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings

log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# cargo prints one result line per test binary, the last often a crate's empty doc-tests; one
# total at the end says what the whole run did.
sum() { grep -oE "test result: [A-Za-z]+\. [0-9]+ passed; [0-9]+ failed" "$log" | awk -v f="$1" '{ s += $f } END { print s + 0 }'; }
echo "tests: $(sum 4) passed, $(sum 6) failed"
exit "$status"
