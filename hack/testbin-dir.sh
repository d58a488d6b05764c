#!/usr/bin/env bash
# Prints the cache folder for a control-plane version; the Rust test support reads the same rule.
set -euo pipefail
echo "${EXTERNAL_SECRETS_TESTBIN:-${XDG_CACHE_HOME:-$HOME/.cache}/external-secrets-rs/testbin}/k8s-$1"
