# shellcheck shell=bash
# Sourced by the scripts that boot rig guests with softirdma's PCI function and its Linux driver
# (run from the repository's root): where the rig and the logs are, guest_setup, and waitfor.
RIG_SRC=${RIG_SRC:-../shared/rig}
RIG_SRC=$(cd "$RIG_SRC" && pwd)
export RIG_DIR=${RIG_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/softirdma-rig}
OUT=${INTEROP_OUT:-$(mktemp -d)}
mkdir -p "$RIG_DIR" "$OUT/share"

# guest_setup CASE: the rig's full tree (the guest kernel's headers), bin/softirdma, and the
# driver built into $OUT/share; a driver that does not build is FAIL CASE.
guest_setup() {
  bash "$RIG_SRC/ensure.sh" full
  go build -o bin/softirdma ./cmd/softirdma
  bash "$RIG_SRC/build-module.sh" hw/linux "$OUT/share" > "$OUT/build.log" 2>&1 ||
    { cat "$OUT/build.log"; echo "FAIL $1"; exit 1; }
}

# waitfor FILE REGEX SECONDS PID: a line in a log, while its writer lives.
waitfor() {
  local i
  for i in $(seq $(($3 * 20))); do
    grep -qE "$2" "$1" 2>/dev/null && return 0
    kill -0 "$4" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
