#!/usr/bin/env bash
# Builds what the one-node test cluster (tests/node, hack/dev-node.sh) adds to the control plane:
# kubelet, kube-scheduler and kube-proxy from the control plane's own Go module
# (hack/testbin/k8s), CoreDNS (hack/testbin/coredns) and the Pods' sandbox image from a pause
# program of our own (hack/testbin/pause; nothing can be pulled on the test node), and
# kube-router's network policy controller (hack/testbin/kube-router), which enforces
# NetworkPolicy on the node. Installs Debian's containerd, runc, CNI plugins and ipset when they
# are missing. Cached by version like the
# control plane; does nothing when everything is there. hack/README.md, "The node".
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.36.3}
COREDNS_VERSION=${COREDNS_VERSION:-1.15.0}
# The newest the Go module proxy serves here (later tags answer 403); only its network policy
# controller runs (hack/README.md, "What the node is").
KUBE_ROUTER_VERSION=${KUBE_ROUTER_VERSION:-2.1.0}
# The tag only names our own image; containerd's sandbox_image points at it.
PAUSE_TAG=1
here=$(cd "$(dirname "$0")" && pwd)
root="${EXTERNAL_SECRETS_TESTBIN:-${XDG_CACHE_HOME:-$HOME/.cache}/external-secrets-rs/testbin}"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
start=$(date +%s)

# The container runtime comes from the distribution: a build of containerd would add minutes
# and nothing the tests need (issue 39 ran Debian's 1.6 under a 1.36 kubelet).
missing=()
command -v containerd >/dev/null || missing+=(containerd)
command -v runc >/dev/null || missing+=(runc)
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
command -v iptables >/dev/null || missing+=(iptables)
command -v conntrack >/dev/null || missing+=(conntrack)
command -v nft >/dev/null || missing+=(nftables)
command -v umoci >/dev/null || missing+=(umoci)
command -v ipset >/dev/null || missing+=(ipset)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

. "$here/testbin-lock.sh"

# Each part in a subshell: testbin_lock ends the (sub)shell when that part is built already.
(
  out=$("$here/testbin-dir.sh" "$K8S_VERSION")
  testbin_lock "$out" "node $K8S_VERSION" kubelet kube-scheduler kube-proxy
  cd "$here/testbin/k8s"
  grep -q "k8s.io/kubernetes v$K8S_VERSION" go.mod || {
    echo "hack/testbin/k8s/go.mod is not at Kubernetes $K8S_VERSION; run hack/build-control-plane.sh first" >&2
    exit 1
  }
  minor=${K8S_VERSION#1.}
  ld="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
   -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor%%.*} \
   -X k8s.io/component-base/version.gitTreeState=clean"
  echo "building kubelet, kube-scheduler, kube-proxy into $out"
  for b in kubelet kube-scheduler kube-proxy; do
    go build -trimpath -ldflags "$ld" -o "$out/$b.tmp" "k8s.io/kubernetes/cmd/$b"
  done
  for b in kubelet kube-scheduler kube-proxy; do mv "$out/$b.tmp" "$out/$b"; done
  "$out/kubelet" --version
)

(
  out="$root/coredns-$COREDNS_VERSION"
  testbin_lock "$out" "coredns $COREDNS_VERSION" coredns
  mkdir -p "$out"
  cd "$here/testbin/coredns"
  if ! grep -q "github.com/coredns/coredns v$COREDNS_VERSION" go.mod 2>/dev/null; then
    echo "generating hack/testbin/coredns/go.mod for CoreDNS $COREDNS_VERSION"
    rm -f go.mod go.sum
    go mod init external-secrets-rs.invalid/testbin/coredns
    go get "github.com/coredns/coredns@v$COREDNS_VERSION"
    go mod tidy
  fi
  echo "building coredns into $out"
  go build -trimpath -ldflags "-s -w" -o "$out/coredns.tmp" github.com/coredns/coredns
  mv "$out/coredns.tmp" "$out/coredns"
  "$out/coredns" -version
)

(
  out="$root/pause-$PAUSE_TAG"
  testbin_lock "$out" "pause image $PAUSE_TAG" pause.tar
  mkdir -p "$out"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cd "$here/testbin/pause"
  go build -trimpath -ldflags "-s -w" -o "$work/pause" .
  umoci init --layout "$work/layout"
  umoci new --image "$work/layout:$PAUSE_TAG"
  umoci insert --image "$work/layout:$PAUSE_TAG" "$work/pause" /pause
  umoci config --image "$work/layout:$PAUSE_TAG" --config.entrypoint /pause --config.user 65535:65535 \
    --os linux --architecture amd64
  umoci gc --layout "$work/layout"
  # An OCI archive is the layout in a tar; containerd names the image from --base-name and the
  # tag (tests: external_secrets_testenv::node).
  tar -C "$work/layout" -cf "$out/pause.tar.tmp" .
  # -x: marks it done for testbin_lock, which looks for executables.
  chmod +x "$out/pause.tar.tmp"
  mv "$out/pause.tar.tmp" "$out/pause.tar"
  echo "pause image in $out/pause.tar"
)
(
  out="$root/kube-router-$KUBE_ROUTER_VERSION"
  testbin_lock "$out" "kube-router $KUBE_ROUTER_VERSION" kube-router
  mkdir -p "$out"
  cd "$here/testbin/kube-router"
  if ! grep -q "github.com/cloudnativelabs/kube-router/v2 v$KUBE_ROUTER_VERSION" go.mod 2>/dev/null; then
    echo "generating hack/testbin/kube-router/go.mod for kube-router $KUBE_ROUTER_VERSION"
    rm -f go.mod go.sum
    go mod init external-secrets-rs.invalid/testbin/kube-router
    go get "github.com/cloudnativelabs/kube-router/v2@v$KUBE_ROUTER_VERSION"
    go mod tidy
  fi
  echo "building kube-router into $out"
  go build -trimpath \
    -ldflags "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=v$KUBE_ROUTER_VERSION" \
    -o "$out/kube-router.tmp" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
  mv "$out/kube-router.tmp" "$out/kube-router"
  "$out/kube-router" --version
)

echo "node parts ready in $(( $(date +%s) - start ))s"
