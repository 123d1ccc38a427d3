#!/usr/bin/env bash
# `make interop-long`: the guest cases of interop-guestdriver, -guesthostpeer, -guestrobust and
# -rdmacore, which make interop runs on Linux 6.12, run again with every VM on Linux 6.1 and on
# the newest kernel Debian ships (VM_KERNEL). Their PASS/FAIL lines are renamed
# device_guest_k<major>.<minor>_<case>; the last line is the tally. About 15 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
. vm/lib.sh
pass=0 failed=0
for k in 6.1 newest; do
  log=$(mktemp)
  bash vm/provision.sh 6.12 "$k" > "$log" 2>&1 || { tail -20 "$log"; echo "FAIL provisioning $k"; failed=$((failed + 1)); continue; }
  rm -f "$log"
  series=$(vm_series "$(vm_kernel_release "$k")")
  for t in guestdriver guesthostpeer guestrobust rdmacore; do
    out=$(VM_KERNEL=$k bash "interop/$t.sh" 2>&1)
    rc=$?
    # A case of the 6.12 run, device_guest_X, is device_guest_kS_X here; other lines as they are.
    out=$(sed -E "s/^(PASS|FAIL) device_guest_/\1 device_guest_k${series}_/" <<< "$out")
    grep -E '^(PASS|FAIL)|^rdma-core tests on|logs in' <<< "$out"
    pass=$((pass + $(grep -c '^PASS' <<< "$out")))
    n=$(grep -c '^FAIL' <<< "$out")
    [ "$rc" = 0 ] || [ "$n" -gt 0 ] || n=1
    failed=$((failed + n))
  done
done
echo "interop-long: $pass passed, $failed failed"
[ "$failed" = 0 ]
