#!/usr/bin/env bash
# A one-node cluster (etcd, kube-apiserver, controller-manager, scheduler, containerd, kubelet,
# kube-proxy, CoreDNS, kube-router enforcing NetworkPolicy, a bridge of its own) with the chart
# installed from the project's images and the Fake quickstart applied; prints the Secret the
# operator's Pod synced and an `export KUBECONFIG=...` line. Runs until Ctrl-C, then puts the
# host back. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/build-control-plane.sh
bash hack/build-node.sh
bash hack/build-helm.sh
cargo build --locked -p external-secrets -p external-secrets-testenv --bins
target=${CARGO_TARGET_DIR:-target}
# The debug binary: a release build would take many minutes more (README.md, "Images").
bash hack/build-images.sh --binary "$target/debug/external-secrets" --out "$target/node-images"
exec "$target/debug/node-cluster" "$target/node-images"
