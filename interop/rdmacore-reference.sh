#!/usr/bin/env bash
# `make rdma-core-reference [KERNEL=6.1|6.12|newest]`: measures what rdma-core's own test suite
# passes on Linux rxe in the project's VM on that guest kernel (6.12 unless KERNEL says;
# interop/rdmacore-run.sh rxe0) and writes it, with how it was produced, to
# interop/testdata/rdma-core-tests-rxe-<series>.txt: the reference interop/rdmacore.sh holds
# softirdma0 to on the same kernel. About 10 minutes under TCG. The file changes only when the
# run gave a tally.
set -euo pipefail
cd "$(dirname "$0")/.."
. vm/lib.sh
K=${KERNEL:-6.12}
vm_check_kernel_name "$K"
export INTEROP_OUT=${INTEROP_OUT:-$(mktemp -d)}
bash vm/provision.sh 6.12 "$K" > "$INTEROP_OUT/provision.log" 2>&1 ||
  { tail -20 "$INTEROP_OUT/provision.log"; exit 1; }
DST=interop/testdata/rdma-core-tests-rxe-$(vm_series "$(vm_kernel_release "$K")").txt
VM_KERNEL=$K bash interop/rdmacore-run.sh rxe0 > "$INTEROP_OUT/reference.txt" 2>&1 || true
grep -q '^rdma-core tests on rxe0: [1-9]' "$INTEROP_OUT/reference.txt" ||
  { tail -20 "$INTEROP_OUT/reference.txt"; echo "no tally: $DST left as it was" >&2; exit 1; }
{
  echo "# rdma-core's own tests (python3-pyverbs's copy) on Linux Soft-RoCE, rxe0, in the project's VM:"
  echo "# the reference interop/rdmacore.sh compares softirdma0 with on the same kernel. Produced by"
  echo "# \`make rdma-core-reference KERNEL=$K\` (interop/rdmacore-run.sh rxe0) on $(date -u +%Y-%m-%d):"
  echo "# guest kernel $(vm_kernel_release "$K"), rdma-core $(vm_pkg_version rdma-core),"
  echo "# QEMU $(vm_pkg_version qemu-system-x86) (TCG), both ends of each test on rxe0."
  grep -E '^RDMA-CORE|^rdma-core tests on' "$INTEROP_OUT/reference.txt"
} > "$DST"
tail -1 "$DST"
