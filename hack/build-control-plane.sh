#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, etcd and kubectl from the Go module proxy into a
# cache folder keyed by version. Does nothing when the binaries are already there.
#
# k8s.io/kubernetes requires its staging modules at v0.0.0 and redirects them to ./staging,
# which only works inside its own repository; our module (hack/testbin/k8s) replaces each of
# them with its published v0.<minor>.<patch> instead. The module files are generated from the
# release's own go.mod the first time and then committed, so later builds are checksum-pinned.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.36.3}
here=$(cd "$(dirname "$0")" && pwd)
mod="$here/testbin/k8s"
out=$("$here/testbin-dir.sh" "$K8S_VERSION")
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

. "$here/testbin-lock.sh"
testbin_lock "$out" "control plane $K8S_VERSION" kube-apiserver kube-controller-manager etcd kubectl
start=$(date +%s)
mkdir -p "$out"
cd "$mod"

if ! grep -q "k8s.io/kubernetes v$K8S_VERSION" go.mod 2>/dev/null; then
  echo "generating $mod/go.mod for Kubernetes $K8S_VERSION"
  rm -f go.mod go.sum
  go mod init external-secrets-rs.invalid/testbin/k8s
  json=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION") || { echo "$json" >&2; exit 1; }
  gomod=$(echo "$json" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  minor=${K8S_VERSION#1.}
  for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/src/.*#\1#p' "$gomod"); do
    go mod edit -replace="$m=$m@v0.$minor"
  done
  go get "k8s.io/kubernetes@v$K8S_VERSION"
  etcd=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
  go get "go.etcd.io/etcd/server/v3@$etcd"
  go mod tidy
fi

minor=${K8S_VERSION#1.}
ld="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor%%.*} \
 -X k8s.io/component-base/version.gitTreeState=clean"
echo "building kube-apiserver, kube-controller-manager, etcd, kubectl into $out (a cold build takes a while)"
go build -trimpath -ldflags "$ld" -o "$out/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
go build -trimpath -ldflags "$ld" -o "$out/kube-controller-manager.tmp" k8s.io/kubernetes/cmd/kube-controller-manager
go build -trimpath -ldflags "-s -w" -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3
go build -trimpath -ldflags "$ld" -o "$out/kubectl.tmp" k8s.io/kubernetes/cmd/kubectl
for b in kube-apiserver kube-controller-manager etcd kubectl; do mv "$out/$b.tmp" "$out/$b"; done
"$out/kube-apiserver" --version
"$out/etcd" --version | head -1
echo "built in $(( $(date +%s) - start ))s; cache size $(du -sh "$out" | cut -f1)"
