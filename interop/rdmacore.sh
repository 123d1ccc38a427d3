#!/usr/bin/env bash
# rdma-core's own test suite (pyverbs, the rig's rdma-core-tests.sh) in a full rig guest on the
# guest driver's device, softirdma0, whose function `softirdma serve` runs on its embedded
# default (both ends of each test's connection on the one device, over its loopback). Prints the
# suite's RDMA-CORE lines and tally, the tally rxe0 gets in the same image
# (../shared/reference/rdma-core-tests-rxe.txt), each test rxe0 passes and softirdma0 does not,
# and PASS/FAIL for each test the driver must pass: those rxe0 passes in test_mr, test_pd,
# test_atomic, test_cq_events (RC) and test_qp (RC); and interop/guest/resize_cq.py's check of
# ibv_resize_cq. test_rdmacm is left out unless
# RDMA_CORE_MODULES names it: rdma_cm needs the GSI QP the driver does not have yet, and each of
# its tests waits out its timeouts (the module takes the suite's whole 600 s).
set -euo pipefail
cd "$(dirname "$0")/.."
. interop/guestlib.sh
REF=${RDMA_CORE_REF:-$RIG_SRC/../reference/rdma-core-tests-rxe.txt}
guest_setup device_guest_rdma_core_module_build
echo "interop rdma-core tests on softirdma0; logs in $OUT"

start_serve -ip 192.168.77.1

# The setup runs from the share, so that the suite's script and it fit the kernel's 2 KiB
# command line together. The share is mounted at /share in the guest's init; the full tree's
# chroot reaches it through init's root (the rig binds it at /tmp/share only where the initramfs
# has `mountpoint`).
cat > "$OUT/share/pre.sh" <<'PRE'
S=/proc/1/root/share; [ -e /tmp/share/softirdma.ko ] && S=/tmp/share
insmod $S/softirdma.ko
for d in /sys/class/net/*; do case $(readlink $d/device/driver) in *softirdma) DEV=$(basename $d);; esac; done
ip link set $DEV up; ip addr add 192.168.77.1/24 dev $DEV
for i in $(seq 100); do grep -q ffff /sys/class/infiniband/softirdma0/ports/1/gids/1 2>/dev/null && break; sleep 0.1; done
timeout 120 python3 $S/resize_cq.py softirdma0 > $S/resize_cq.out 2>&1
PRE
cp interop/guest/resize_cq.py "$OUT/share/"
PRE='sh /proc/1/root/share/pre.sh'
export RDMA_CORE_MODULES=${RDMA_CORE_MODULES:-addr atomic cq cq_events cqex device mr odp parent_domain pd qp qpex relaxed_ordering shared_pd srq tag_matching}
RIG_PRE="$PRE" RIG_SHARE="$OUT/share" RIG_VFIO_USER="$SOCK" RIG_QEMU_PORT=9231 RIG_PEER_PORT=9232 \
  RIG_SHELL_PORT=2553 RIG_FWD_PORT=18746 RIG_MAC0=52:54:00:00:0b:10 RIG_MAC1=52:54:00:00:77:b2 \
  bash "$RIG_SRC/rdma-core-tests.sh" softirdma0 > "$OUT/tests.txt" 2>&1 || true
grep -E '^RDMA-CORE|^rdma-core tests on' "$OUT/tests.txt" || true
echo "$(grep -E '^rdma-core tests on' "$REF" || echo 'rdma-core tests on rxe0: no reference')"

result() { # result TEST-ID: what softirdma0 got, empty if the test did not run
  awk -v t="$1" '$1 == "RDMA-CORE:" && $2 == t { print $3; exit }' "$OUT/tests.txt"
}
echo "tests rxe0 passes and softirdma0 does not:"
grep -E '^RDMA-CORE: .* ok$' "$REF" | awk '{print $2}' | while read -r t; do
  r=$(result "$t"); [ "$r" = ok ] || echo "  $t: ${r:-not run}"
done

required=$(grep -E '^RDMA-CORE: .* ok$' "$REF" | awk '{print $2}' |
  grep -E '^tests\.test_(mr|pd|atomic)\.|^tests\.test_cq_events\..*_rc$|^tests\.test_qp\..*_rc_' || true)
[ -n "$required" ] || { echo "FAIL device_guest_rdma_core_reference (no tests in $REF)"; exit 1; }
n=0
for t in $required; do
  n=$((n + 1))
  name=device_guest_rdma_core_$(echo "${t#tests.}" | tr . _)
  if [ "$(result "$t")" = ok ]; then echo "PASS $name"; else echo "FAIL $name"; fail=1; fi
done
echo "rdma-core tests required on softirdma0: $n"
# ibv_resize_cq, which rdma-core's own test reaches only through UD QPs.
if grep -q '^resize_cq: ok' "$OUT/share/resize_cq.out" 2>/dev/null; then
  echo "PASS device_guest_resize_cq"
else
  echo "FAIL device_guest_resize_cq"; cat "$OUT/share/resize_cq.out" 2>/dev/null; fail=1
fi
exit $fail
