#!/usr/bin/env bash
# interop/kernel.sh KERNEL -- the guest driver on another guest kernel (6.1, newest): built with
# DKMS in the root of that kernel's Debian release, loaded with modprobe in a VM running that
# kernel whose function `softirdma serve` serves on a dgram link to a second VM (Linux 6.12)
# running Linux rxe. The subset of interop-guestdriver that shows a kernel works: probe, the
# netdev pinging the rxe guest, unmodified ibv_rc_pingpong both ways and ib_write_bw both ways
# against rxe, rmmod and modprobe again, rdma-core's test_mr and test_pd on softirdma0, no kernel
# warning. PASS lines are device_guest_k<major>.<minor>_<case>. `make interop-kernels` (part of
# make interop) runs it for 6.1 and newest.
set -euo pipefail
cd "$(dirname "$0")/.."
KNAME=${1:?usage: interop/kernel.sh 6.1|6.12|newest}
. interop/guestlib.sh
vm_check_kernel_name "$KNAME"
run_or_exit "$OUT/provision.log" "FAIL provisioning $KNAME" bash vm/provision.sh 6.12 "$KNAME"
KV=$(vm_kernel_release "$KNAME")
P=device_guest_k$(vm_series "$KV")
go build -o bin/softirdma ./cmd/softirdma
run_or_exit "$OUT/build.log" "FAIL ${P}_dkms_build" bash vm/driver.sh "$KNAME"
verdict "${P}_dkms_build" true
echo "interop guest driver on Linux $KV; logs in $OUT"
cp interop/guest/rdma_core_suite.py "$OUT/share/"

# The rxe peer (Linux 6.12): ibv_rc_pingpong server then client, ib_write_bw server then client.
VM_KERNEL=6.12 serve_with_rxe_peer 9401 9402 52:54:00:00:15:10 52:54:00:00:77:15 <<'SCRIPT'
timeout 300 ibv_rc_pingpong -d rxe0 -g $GIDX -n 20 2>&1 | sed "s/^/VM: peer pp server: /"
until_served 120 1 timeout 60 ibv_rc_pingpong -d rxe0 -g $GIDX -n 20 192.168.77.1
sed "s/^/VM: peer pp client: /" /tmp/out
timeout 120 ib_write_bw -d rxe0 -x $GIDX -F -n 20 -s 4096 2>&1 | sed "s/^/VM: peer write server: /"
until_served 120 0.5 timeout 60 ib_write_bw -d rxe0 -x $GIDX -F -n 20 -s 4096 192.168.77.1
sed "s/^/VM: peer write client: /" /tmp/out
sleep 600
SCRIPT

cat interop/guest/lib.sh - > "$OUT/guest.sh" <<'SCRIPT'
up() { softirdma_up 192.168.77.1/24; echo "VM: netdev $DEV"; }
# ib_uverbs out first: modprobe softirdma must bring it back (the module's soft dependency), or
# rdma-core's provider finds no device file.
modprobe -r rdma_ucm ib_uverbs && echo "VM: ib_uverbs unloaded"
modprobe softirdma && echo "VM: modprobe ok"
grep -q '^ib_uverbs ' /proc/modules && [ -e /dev/infiniband/uverbs0 ] && echo "VM: softdep loaded ib_uverbs"
up
for i in $(seq 60); do ping -c 1 -W 1 192.168.77.2 > /dev/null 2>&1 && break; done
ping -c 3 -i 0.2 -W 2 192.168.77.2 | sed 's/^/VM: ping: /'
until_served 60 1 timeout 60 ibv_rc_pingpong -d softirdma0 -g 1 -n 20 192.168.77.2
sed "s/^/VM: pp client: /" /tmp/out
timeout 120 ibv_rc_pingpong -d softirdma0 -g 1 -n 20 2>&1 | sed "s/^/VM: pp server: /"
until_served 60 1 timeout 60 ib_write_bw -d softirdma0 -x 1 -F -n 20 -s 4096 192.168.77.2
grep -E '^ +[0-9]+ +20 ' /tmp/out | sed "s/^/VM: write client: /"
timeout 120 ib_write_bw -d softirdma0 -x 1 -F -n 20 -s 4096 2>&1 | grep -E '^ +[0-9]+ +20 ' | sed "s/^/VM: write server: /"
ok=0
for i in 1 2; do
  ip link set $DEV down
  rmmod softirdma && modprobe softirdma && up && ping -c 1 -w 10 192.168.77.2 > /dev/null 2>&1 && ok=$((ok+1))
done
echo "VM: reloads pinging $ok of 2"
python3 /share/rdma_core_suite.py softirdma0 1 mr pd
dmesg | grep -E 'WARNING|BUG|Oops|Call Trace|softirdma' | sed 's/^/VM: dmesg: /'
echo "VM: dmesg checked"
SCRIPT
VM_KERNEL=$KNAME VM_SCRIPT="$OUT/guest.sh" VM_SOCKET="$SOCK" VM_SHARE="$OUT/share" VM_MAC0=52:54:00:00:16:10 \
  timeout 900 bash vm/run.sh > "$OUT/guest.log" 2>&1 || true
tr -d '\r' < "$OUT/guest.log" | grep -aE '^(VM|RDMA-CORE)' > "$OUT/vm.txt" || true

check ${P}_uname "VM: ready .*Linux ${KV//+/\\+}\$"
check ${P}_modprobe 'VM: modprobe ok'
verdict ${P}_modprobe_loads_ib_uverbs has_lines "$OUT/vm.txt" 'VM: ib_uverbs unloaded' "$OUT/vm.txt" 'VM: softdep loaded ib_uverbs'
check ${P}_probe 'VM: dmesg: .*softirdma .*ABI 1\.3, caps 0x307ff'
check ${P}_netdev 'VM: netdev eth[0-9]+'
check ${P}_ping_vs_rxe 'VM: ping: 3 packets transmitted, 3 received'
check ${P}_ibv_rc_pingpong_client_vs_rxe 'VM: pp client: 20 iters in'
check ${P}_ibv_rc_pingpong_server_vs_rxe 'VM: pp server: 20 iters in'
check ${P}_ib_write_bw_client_vs_rxe 'VM: write client: +4096 +20 '
check ${P}_ib_write_bw_server_vs_rxe 'VM: write server: +4096 +20 '
check ${P}_module_reload 'VM: reloads pinging 2 of 2'
# Every test of test_mr and test_pd rxe0 passes (interop/testdata) passes here too.
REF=interop/testdata/rdma-core-tests-rxe-$(vm_series "$KV").txt
n=0
for t in $(grep -E '^RDMA-CORE: tests\.test_(mr|pd)\..* ok$' "$REF" | awk '{print $2}'); do
  n=$((n + 1))
  check "${P}_rdma_core_$(echo "${t#tests.}" | tr . _)" "^RDMA-CORE: $t ok\$"
done
[ $n -gt 0 ] || why="no test_mr or test_pd tests in $REF" verdict ${P}_rdma_core_reference false
kernel_clean ${P}_no_kernel_warning '' 'VM: dmesg checked'
[ $fail = 0 ] || tail -40 "$OUT/vm.txt"
kill -TERM $spid
finish
