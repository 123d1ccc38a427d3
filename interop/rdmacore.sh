#!/usr/bin/env bash
# rdma-core's own test suite (pyverbs; interop/rdmacore-run.sh) in a VM on the guest driver's
# device, softirdma0, whose function `softirdma serve` runs on its embedded default (both ends of
# each test's connection on the one device, over its loopback). Prints the suite's RDMA-CORE
# lines and tally, the tally rxe0 gets in the same VM on the same guest kernel (VM_KERNEL, 6.12
# unless set: interop/testdata/rdma-core-tests-rxe-<series>.txt, which `make rdma-core-reference
# KERNEL=...` measures again), each test rxe0 passes and softirdma0 does not,
# and PASS/FAIL for each test the driver must pass: every one rxe0 passes, test_rdmacm's
# included (rdma_cm through the GSI QP and kernel verbs); interop/guest/resize_cq.py's check
# of ibv_resize_cq; and interop/guest/odp_migrate.py's on-demand MR whose pages the guest kernel
# migrates between the VM's two NUMA nodes during RDMA traffic.
set -euo pipefail
cd "$(dirname "$0")/.."
export INTEROP_OUT=${INTEROP_OUT:-$(mktemp -d)}
. interop/guestlib.sh
REF=${RDMA_CORE_REF:-interop/testdata/rdma-core-tests-rxe-$(vm_series "$(vm_kernel_release "${VM_KERNEL:-6.12}")").txt}
[ -f "$REF" ] || abort "device_guest_rdma_core_reference (no reference $REF: make rdma-core-reference KERNEL=${VM_KERNEL:-6.12})"
echo "interop rdma-core tests on softirdma0; logs in $OUT"
cp interop/guest/rcpair.py interop/guest/resize_cq.py interop/guest/odp_migrate.py "$OUT/share/"
export RDMA_CORE_MODULES=${RDMA_CORE_MODULES:-addr atomic cq cq_events cqex device mr odp parent_domain pd qp qpex rdmacm relaxed_ordering shared_pd srq tag_matching}
VM_NUMA=2 bash interop/rdmacore-run.sh softirdma0 'timeout 120 python3 /share/resize_cq.py softirdma0 > /share/resize_cq.out 2>&1
timeout 600 python3 /share/odp_migrate.py softirdma0 > /share/odp_migrate.out 2>&1' \
  > "$OUT/tests.out" 2>&1 || true
grep -E '^RDMA-CORE|^rdma-core tests on|^FAIL' "$OUT/tests.out" || true
echo "$(grep -E '^rdma-core tests on' "$REF" || echo 'rdma-core tests on rxe0: no reference') (reference, $(sed -n 's/.* on \([0-9-]*\):.*/\1/p' "$REF" | head -1), Linux $(sed -n 's/.*guest kernel \([^,]*\),.*/\1/p' "$REF" | head -1))"
grep -q '^FAIL' "$OUT/tests.out" && exit 1

result() { # result TEST-ID: what softirdma0 got, empty if the test did not run
  awk -v t="$1" '$1 == "RDMA-CORE:" && $2 == t { print $3; exit }' "$OUT/tests.out"
}
echo "tests rxe0 passes and softirdma0 does not (of the modules run):"
grep -E '^RDMA-CORE: .* ok$' "$REF" | awk '{print $2}' | while read -r t; do
  m=${t#tests.test_}; m=${m%%.*}
  case " $RDMA_CORE_MODULES " in *" $m "*) ;; *) continue ;; esac
  r=$(result "$t"); [ "$r" = ok ] || echo "  $t: ${r:-not run}"
done

# The guest's kernel: FLUSH (IB_ACCESS_FLUSH_*, the flush work request) came with Linux 6.2, so
# on 6.1 rdma-core's FLUSH tests are not the driver's to pass.
kernel=$(sed -n 's/.*VM: ready after .* s, Linux \([0-9]*\.[0-9]*\).*/\1/p' "$OUT/guest.log" | head -1)
no_flush=0
case "$kernel" in 6.0|6.1|5.*) no_flush=1 ;; esac
required=$(grep -E '^RDMA-CORE: .* ok$' "$REF" | awk '{print $2}' | while read -r t; do
  m=${t#tests.test_}; m=${m%%.*}
  case " $RDMA_CORE_MODULES " in *" $m "*) ;; *) continue ;; esac
  if [ $no_flush = 1 ] && echo "$t" | grep -qi flush; then
    echo "not required on Linux $kernel (no FLUSH before 6.2): $t" >&2
    continue
  fi
  echo "$t"
done)
[ -n "$required" ] || abort "device_guest_rdma_core_reference (no tests in $REF)"
passes() { [ "$(result "$1")" = ok ]; }
n=0
for t in $required; do
  n=$((n + 1))
  verdict "device_guest_rdma_core_$(echo "${t#tests.}" | tr . _)" passes "$t"
done
echo "rdma-core tests required on softirdma0: $n"
# ibv_resize_cq, which rdma-core's own test reaches only through UD QPs.
resized() { has_lines "$OUT/share/resize_cq.out" '^resize_cq: ok' || { cat "$OUT/share/resize_cq.out" 2>/dev/null; return 1; }; }
verdict device_guest_resize_cq resized
migrated() { has_lines "$OUT/share/odp_migrate.out" '^odp_migrate: ok' || { cat "$OUT/share/odp_migrate.out" 2>/dev/null; return 1; }; }
verdict device_guest_odp_migrate migrated
kernel_clean device_guest_rdma_core_no_kernel_warning '' 'VM: exit '
finish
