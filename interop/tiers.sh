#!/usr/bin/env bash
# interop/tiers.sh TIER...: `make interop`'s tiers, each run to its end whatever the ones before
# it did, so that one failure does not hide the rest; then a tally of the tiers (each tier's own
# PASS/FAIL lines and tally come before it). Exits 1 when any tier failed. MAKE is the make to run
# the tiers with (make's own, from the Makefile).
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: interop/tiers.sh TIER..." >&2; exit 2; }
failed=()
for t in "$@"; do
  echo "=== $t"
  start=$SECONDS
  if ${MAKE:-make} --no-print-directory "$t"; then
    echo "=== $t passed ($((SECONDS - start)) s)"
  else
    echo "=== $t FAILED ($((SECONDS - start)) s)"
    failed+=("$t")
  fi
done
echo "interop tiers: $(($# - ${#failed[@]})) passed, ${#failed[@]} failed${failed[*]:+ (${failed[*]})}"
[ ${#failed[@]} = 0 ]
