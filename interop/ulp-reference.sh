#!/usr/bin/env bash
# `make ulp-reference`: NFS over RDMA, iSER, SRP and RDS with both ends on Linux rxe in the
# project's VMs (interop/guestulp.sh PROTO_rxe_to_rxe), written with how it was produced to
# interop/testdata/ulp-rxe.txt: the reference interop/guestulp.sh compares a client on softirdma0
# with when its run has no rxe client of its own. About 5 minutes under TCG. The file changes
# only when every case gave its throughput.
set -euo pipefail
cd "$(dirname "$0")/.."
. vm/lib.sh
DST=interop/testdata/ulp-rxe.txt
export INTEROP_OUT=${INTEROP_OUT:-$(mktemp -d)}
bash interop/guestulp.sh nfsrdma_rxe_to_rxe iser_rxe_to_rxe srp_rxe_to_rxe rds_rxe_to_rxe > "$INTEROP_OUT/reference.txt" 2>&1 || true
[ "$(grep -c ' throughput: ' "$INTEROP_OUT/reference.txt")" = 4 ] ||
  { tail -30 "$INTEROP_OUT/reference.txt"; echo "not every protocol ran through: $DST left as it was" >&2; exit 1; }
{
  echo "# NFS over RDMA, iSER, SRP and RDS between two guests on Linux Soft-RoCE (rxe0), the server in one,"
  echo "# the client in the other: the reference interop/guestulp.sh compares softirdma0 with. Produced by"
  echo "# \`make ulp-reference\` (interop/guestulp.sh PROTO_rxe_to_rxe) on $(date -u +%Y-%m-%d): guest kernel"
  echo "# $(vm_kernel_release 6.12), nfs-utils $(vm_pkg_version nfs-kernel-server), open-iscsi"
  echo "# $(vm_pkg_version open-iscsi), QEMU $(vm_pkg_version qemu-system-x86) (TCG). Throughput is fio's"
  echo "# (write, then the read that verified it) or RDS's checked messages; NOTE lines are what an rxe"
  echo "# guest's kernel said."
  # A NOTE's lines, indented below it, say what the kernel said.
  awk '/^(PASS|FAIL|NOTE) | throughput: / { print; note = /^NOTE / ; next } note && /^  / { print; next } { note = 0 }' "$INTEROP_OUT/reference.txt"
} > "$DST"
grep ' throughput: ' "$DST"
