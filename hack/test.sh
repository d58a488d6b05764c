#!/usr/bin/env bash
# The whole test suite: format, lints, generated files, unit tests, and the end-to-end tests
# against a real kube-apiserver, etcd and kube-controller-manager built by build-control-plane.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/build-control-plane.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
