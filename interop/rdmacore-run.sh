#!/usr/bin/env bash
# interop/rdmacore-run.sh DEV [GUEST-SETUP] -- rdma-core's own test suite (interop/guest/
# rdma_core_suite.py) in a VM on RDMA device DEV: softirdma0 (the guest driver on a function that
# `softirdma serve` runs on its embedded default: both ends of each test over its loopback) or
# rxe0 (Linux Soft-RoCE on the VM's eth1, both ends on it), on the guest kernel VM_KERNEL names
# (6.12 unless set; provisioned already). GUEST-SETUP is shell run in the guest
# first, with the interop share at /share. Prints each RDMA-CORE line and a last line
#   rdma-core tests on DEV: N ok, N skipped, N failed, N errors, N modules crashed
# RDMA_CORE_MODULES picks modules (default: all that are not vendor-specific). Logs in $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=${1:?usage: interop/rdmacore-run.sh softirdma0|rxe0 [GUEST-SETUP]}
. interop/guestlib.sh
MODS=${RDMA_CORE_MODULES:-addr atomic cq cq_events cqex device mr odp parent_domain pd qp qpex rdmacm relaxed_ordering shared_pd srq tag_matching}
for m in $MODS; do [[ $m =~ ^[a-z_]+$ ]] || { echo "RDMA_CORE_MODULES: '$m' is not a module name" >&2; exit 2; }; done
T=${RDMA_CORE_TIMEOUT:-3000}
[[ $T =~ ^[1-9][0-9]{0,5}$ ]] || { echo "RDMA_CORE_TIMEOUT is seconds (1..999999), not '$T'" >&2; exit 2; }
cp interop/guest/rdma_core_suite.py "$OUT/share/"
case $DEV in
  softirdma0)
    guest_setup device_guest_rdma_core_module_build
    start_serve -ip 192.168.77.1
    env=(VM_SOCKET="$SOCK")
    args=(vm.softirdma=192.168.77.1/24)
    gid=1 ;;
  rxe0)
    bash vm/provision.sh > "$OUT/provision.log" 2>&1 || { cat "$OUT/provision.log"; exit 1; }
    # A link to nothing: rxe needs a netdev, and both ends of each test are on rxe0.
    env=(VM_LINK=9311,9312 VM_KERNEL="${VM_KERNEL:-6.12}")
    args=(vm.rxe=1 vm.eth1=192.168.77.2/24)
    gid='"${GIDX:?rxe0 has no IPv4 GID}"' ;;
  *) echo "interop/rdmacore-run.sh: DEV is softirdma0 or rxe0, not '$DEV'" >&2; exit 2 ;;
esac
cat > "$OUT/suite.sh" <<SCRIPT
${2:-}
python3 /share/rdma_core_suite.py $DEV $gid $MODS
SCRIPT
env "${env[@]}" VM_SHARE="$OUT/share" VM_SCRIPT="$OUT/suite.sh" VM_MEM=1G VM_MAC0=52:54:00:00:0b:10 \
  timeout "$T" bash vm/run.sh "${args[@]}" > "$OUT/guest.log" 2>&1 || true
tr -d '\r' < "$OUT/guest.log" > "$OUT/tests.txt"
grep -E '^RDMA-CORE' "$OUT/tests.txt" || true
n() { grep -cE "^RDMA-CORE: .* $1\$" "$OUT/tests.txt" || true; }
crashed=$(grep -cE '^RDMA-CORE-MODULE: .* rc=(1[3-9][0-9]|12[4-9]|timeout)$' "$OUT/tests.txt" || true)
missing=$(grep -c 'is not in the suite$' "$OUT/tests.txt" || true)
extra=; [ "$missing" = 0 ] || extra=", $missing modules not in the suite"
echo "rdma-core tests on $DEV: $(n ok) ok, $(n skipped) skipped, $(n FAIL) failed, $(n ERROR) errors, $crashed modules crashed$extra"
