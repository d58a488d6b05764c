#!/usr/bin/env bash
# The whole test suite: format, lints, generated files, unit tests, and the end-to-end tests
# against a real kube-apiserver, etcd and kube-controller-manager built by build-control-plane.sh,
# a real Vault server built by build-vault.sh, Helm built by build-helm.sh for the chart tests,
# a grpc-go client built by build-grpc-go-peer.sh that reads our provider server's errors, and
# the journeys on a one-node cluster whose kubelet and peers build-node.sh builds.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase prints how long it took, so a slow CI run says where its time went.
started=$(date +%s)
phase() {
  local name=$1 t0
  shift
  t0=$(date +%s)
  echo "== $name"
  "$@"
  echo "== $name took $(( $(date +%s) - t0 ))s ($(( $(date +%s) - started ))s in all)"
}

phase "build the control plane" bash hack/build-control-plane.sh
phase "build Vault" bash hack/build-vault.sh
phase "build Helm" bash hack/build-helm.sh
phase "build the node" bash hack/build-node.sh
phase "build the grpc-go peer" bash hack/build-grpc-go-peer.sh
phase "cargo fmt" cargo fmt --all --check
phase "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings
# The node journeys are `test = false` (run in a phase of their own below): --all-targets leaves
# them out, and so does `--test node` beside it (cargo then lints nothing of tests/node).
phase "cargo clippy the node journeys" cargo clippy --locked --test node -- -D warnings
phase "build the tests" cargo test --workspace --locked --no-run

log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
t0=$(date +%s)
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
echo "== run the tests took $(( $(date +%s) - t0 ))s ($(( $(date +%s) - started ))s in all)"
# The Vault, GitLab and Kubernetes suites again, their stores served by a provider server out of process
# (tests/e2e/out_of_process.rs).
t0=$(date +%s)
E2E_PROVIDERS_OUT_OF_PROCESS=1 cargo test --locked --test e2e 2>&1 | tee -a "$log"
oop=${PIPESTATUS[0]}
[ "$status" -ne 0 ] || status=$oop
set -e
echo "== run the provider suites out of process took $(( $(date +%s) - t0 ))s ($(( $(date +%s) - started ))s in all)"
# The journeys on a one-node cluster (tests/node: `test = false` keeps them out of the workspace
# run above, so that their node's time shows here on its own).
set +e
t0=$(date +%s)
cargo test --locked --test node 2>&1 | tee -a "$log"
node=${PIPESTATUS[0]}
[ "$status" -ne 0 ] || status=$node
set -e
echo "== run the node journeys took $(( $(date +%s) - t0 ))s ($(( $(date +%s) - started ))s in all)"
# cargo prints one result line per test binary, the last often a crate's empty doc-tests; one
# total at the end says what the whole run did.
sum() { grep -oE "test result: [A-Za-z]+\. [0-9]+ passed; [0-9]+ failed" "$log" | awk -v f="$1" '{ s += $f } END { print s + 0 }'; }
echo "tests: $(sum 4) passed, $(sum 6) failed"
exit "$status"
