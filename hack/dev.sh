#!/usr/bin/env bash
# A local control plane (etcd, kube-apiserver, kube-controller-manager) with every CRD, the
# examples and the operator; prints the Secret the quickstart ExternalSecret synced, and an
# `export KUBECONFIG=...` line. Runs until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/build-control-plane.sh
cargo build --locked -p external-secrets -p external-secrets-testenv --bins
exec target/debug/local-cluster target/debug/external-secrets
