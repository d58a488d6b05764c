#!/usr/bin/env bash
# Builds the HashiCorp Vault server the tests run (`vault server -dev`) from the Go module proxy
# into a cache folder keyed by version. Does nothing when the binary is already there.
#
# Vault's module cannot be `go install`ed: its go.mod replaces `api` and `sdk` with local folders
# the module zip leaves out, and the published `sdk` tags rarely match a release's tree. Our
# module (hack/testbin/vault) requires Vault as a dependency, replaces `sdk` with a tag that
# builds, and repeats the two replaces of Vault's own go.mod. The module files are generated the
# first time and then committed, so later builds are checksum-pinned. Why this version:
# hack/README.md.
set -euo pipefail

VAULT_VERSION=${VAULT_VERSION:-1.21.0}
VAULT_SDK_VERSION=${VAULT_SDK_VERSION:-0.20.0}
here=$(cd "$(dirname "$0")" && pwd)
mod="$here/testbin/vault"
out="${EXTERNAL_SECRETS_TESTBIN:-${XDG_CACHE_HOME:-$HOME/.cache}/external-secrets-rs/testbin}/vault-$VAULT_VERSION"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

. "$here/testbin-lock.sh"
testbin_lock "$out" "vault $VAULT_VERSION" vault
start=$(date +%s)
mkdir -p "$out"
cd "$mod"

if ! grep -q "github.com/hashicorp/vault v$VAULT_VERSION" go.mod 2>/dev/null; then
  echo "generating $mod/go.mod for Vault $VAULT_VERSION"
  rm -f go.mod go.sum
  go mod init external-secrets-rs.invalid/testbin/vault
  go mod edit -replace="github.com/hashicorp/vault/sdk=github.com/hashicorp/vault/sdk@v$VAULT_SDK_VERSION"
  go mod edit -replace="github.com/99designs/keyring=github.com/Jeffail/keyring@v1.2.3"
  go mod edit -replace="github.com/ma314smith/signedxml@v1.1.1=github.com/moov-io/signedxml@v1.1.1"
  go get "github.com/hashicorp/vault@v$VAULT_VERSION"
  go mod tidy
fi

echo "building vault into $out (a cold build takes a while)"
go build -trimpath -ldflags "-s -w" -o "$out/vault.tmp" github.com/hashicorp/vault
mv "$out/vault.tmp" "$out/vault"
"$out/vault" version
echo "built in $(( $(date +%s) - start ))s; cache size $(du -sh "$out" | cut -f1)"
