#!/usr/bin/env bash
# `make rdma-core-reference`: measures what rdma-core's own test suite passes on Linux rxe in the
# project's VM (interop/rdmacore-run.sh rxe0) and writes it, with how it was produced, to
# interop/testdata/rdma-core-tests-rxe.txt: the reference interop/rdmacore.sh holds softirdma0 to.
# About 10 minutes under TCG. The file changes only when the run gave a tally.
set -euo pipefail
cd "$(dirname "$0")/.."
. vm/lib.sh
DST=interop/testdata/rdma-core-tests-rxe.txt
export INTEROP_OUT=${INTEROP_OUT:-$(mktemp -d)}
bash interop/rdmacore-run.sh rxe0 > "$INTEROP_OUT/reference.txt" 2>&1 || true
grep -q '^rdma-core tests on rxe0: [1-9]' "$INTEROP_OUT/reference.txt" ||
  { tail -20 "$INTEROP_OUT/reference.txt"; echo "no tally: $DST left as it was" >&2; exit 1; }
{
  echo "# rdma-core's own tests (python3-pyverbs's copy) on Linux Soft-RoCE, rxe0, in the project's VM:"
  echo "# the reference interop/rdmacore.sh compares softirdma0 with. Produced by \`make rdma-core-reference\`"
  echo "# (interop/rdmacore-run.sh rxe0) on $(date -u +%Y-%m-%d): guest kernel $(vm_kernel_release 6.12),"
  echo "# rdma-core $(vm_pkg_version rdma-core), QEMU $(vm_pkg_version qemu-system-x86) (TCG), both ends"
  echo "# of each test on rxe0."
  grep -E '^RDMA-CORE|^rdma-core tests on' "$INTEROP_OUT/reference.txt"
} > "$DST"
tail -1 "$DST"
