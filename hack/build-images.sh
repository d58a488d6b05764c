#!/usr/bin/env bash
# Builds the OCI images: the operator (external-secrets) and one per provider server
# (external-secrets-provider-<name>), from the release binary, reproducibly and without a
# container engine (hack/image). Writes <out>/<name>/ (an OCI image layout) and <out>/<name>.tar
# (the same as an archive) for every image, and prints each reference, digest and size.
#
#   bash hack/build-images.sh                      # cargo build --release, then the images
#   bash hack/build-images.sh --binary PATH        # images of a binary built already
#   bash hack/build-images.sh --out DIR            # default: $CARGO_TARGET_DIR/images
#   bash hack/build-images.sh --registry REGISTRY  # default: ghcr.io/external-secrets-rs
#
# The tag is the chart's appVersion; the labels carry the commit (with -dirty when the work
# tree has changes) and its time, which is also the images' `created`.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
binary=""
out="$target/images"
registry="ghcr.io/external-secrets-rs"
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --registry) registry=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

if [ -z "$binary" ]; then
  cargo build --release --locked -p external-secrets
  binary="$target/release/external-secrets"
fi
cargo run --release --locked -q -p external-secrets-image -- \
  --binary "$binary" --out "$out" --registry "$registry" --repository .
