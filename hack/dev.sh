#!/usr/bin/env bash
# A local control plane (etcd, kube-apiserver, kube-controller-manager) and a Vault server, with
# every CRD, the examples, the Vault quickstart (hack/dev/vault-quickstart.yaml) and the
# operator; prints the Secrets the two quickstart ExternalSecrets synced, and an
# `export KUBECONFIG=...` line. Runs until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/build-control-plane.sh
bash hack/build-vault.sh
cargo build --locked -p external-secrets -p external-secrets-testenv --bins
exec target/debug/local-cluster target/debug/external-secrets
