#!/usr/bin/env bash
# Builds the Helm client the chart tests run (lint, template, install, upgrade) from the Go module
# proxy into a cache folder keyed by version. Does nothing when the binary is already there.
#
# Our module (hack/testbin/helm) requires Helm as a dependency; its go.mod/go.sum are generated
# the first time and then committed, so later builds are checksum-pinned. Why this version:
# hack/README.md.
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-3.22.0}
here=$(cd "$(dirname "$0")" && pwd)
mod="$here/testbin/helm"
out="${EXTERNAL_SECRETS_TESTBIN:-${XDG_CACHE_HOME:-$HOME/.cache}/external-secrets-rs/testbin}/helm-$HELM_VERSION"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

. "$here/testbin-lock.sh"
testbin_lock "$out" "helm $HELM_VERSION" helm
start=$(date +%s)
mkdir -p "$out"
cd "$mod"

if ! grep -q "helm.sh/helm/v3 v$HELM_VERSION" go.mod 2>/dev/null; then
  echo "generating $mod/go.mod for Helm $HELM_VERSION"
  rm -f go.mod go.sum
  go mod init external-secrets-rs.invalid/testbin/helm
  go get "helm.sh/helm/v3@v$HELM_VERSION"
  go mod tidy
fi

echo "building helm into $out"
# Helm reports its version from these variables; without them `helm version` says v3.x-dev.
go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION" \
  -o "$out/helm.tmp" helm.sh/helm/v3/cmd/helm
mv "$out/helm.tmp" "$out/helm"
"$out/helm" version
echo "built in $(( $(date +%s) - start ))s; cache size $(du -sh "$out" | cut -f1)"
