# Sourced by the hack/build-*.sh scripts. `testbin_lock OUT WHAT BINARY...` takes the lock of
# the cache folder OUT, so that two builds at once (tests and a benchmark, say) do not overwrite
# each other's files, and ends the script when every BINARY is already in OUT.
testbin_lock() {
  local out=$1 what=$2
  shift 2
  mkdir -p "$(dirname "$out")"
  exec 9>"$out.lock"
  flock 9
  local binary
  for binary in "$@"; do
    [ -x "$out/$binary" ] || return 0
  done
  echo "$what already built in $out"
  exit 0
}
