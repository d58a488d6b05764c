#!/usr/bin/env bash
# Builds hack/grpc-go-peer, a gRPC client on grpc-go (the library ESO's core uses), with which the
# tests check that our provider server's errors read as ESO's core would read them. Its
# dependencies come from the Go module proxy, pinned by the committed go.mod/go.sum; the binary
# goes into the test cache folder under a name made from a hash of the module's files, so an
# edit builds anew and an unchanged module is not built twice. Does nothing when it is there.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
mod="$here/grpc-go-peer"
# The same rule as testenv::grpc_go_peer: SHA-256 of go.mod, go.sum and main.go, in that order.
revision=$(cat "$mod/go.mod" "$mod/go.sum" "$mod/main.go" | sha256sum | cut -c1-16)
out="${EXTERNAL_SECRETS_TESTBIN:-${XDG_CACHE_HOME:-$HOME/.cache}/external-secrets-rs/testbin}/grpc-go-peer-$revision"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly

. "$here/testbin-lock.sh"
testbin_lock "$out" "grpc-go-peer $revision" grpc-go-peer
start=$(date +%s)
mkdir -p "$out"
cd "$mod"
echo "building grpc-go-peer into $out"
go build -trimpath -ldflags "-s -w" -o "$out/grpc-go-peer.tmp" .
mv "$out/grpc-go-peer.tmp" "$out/grpc-go-peer"
echo "built in $(( $(date +%s) - start ))s"
