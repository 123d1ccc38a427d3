#!/usr/bin/env bash
# The guest driver (hw/linux) under abuse, in one VM (vm/) whose softirdma function `softirdma
# serve` runs on its embedded default (the guest's QPs reach each other over the device's
# loopback): 20 times a process holding QPs and MRs is SIGKILLed and the module unloaded and
# loaded again; the module is unloaded under a process that still holds the device (its context
# is disassociated); the guest reboots with RC traffic in flight and the device works after it;
# then the function fails with traffic in flight (bus mastering turned off under the driver: it
# stops DMA and goes FATAL): the driver sees it, unregisters the RDMA device without hanging, the
# guest stays up and unloads the module; after another reboot `softirdma serve` is SIGKILLed while
# the guest runs RC traffic: the driver sees every read give all ones and does the same, and QEMU
# lives (serve's socket guard ends the connection cleanly: QEMU 11.1's vfio-user client aborts
# on the reset a plain close with requests unread would give it). In the first boot a process
# resizes a CQ and an SRQ with the driver's part of the answer on a page it cannot write
# (interop/guest/resize_fault.c, built in the VM root): each call fails, and the
# function keeps the ring the provider maps. No kernel warning in any of it. Prints PASS/FAIL
# per case.
set -euo pipefail
cd "$(dirname "$0")/.."
. interop/guestlib.sh
guest_setup device_guest_robust_module_build
echo "interop guest driver robustness; logs in $OUT"
# resize_fault is built in the VM root (its gcc and libibverbs-dev), on the host.
W=$(mktemp -d "$VM_ROOT/tmp/resize.XXXXXX")
cp interop/guest/resize_fault.c "$W/"
chroot "$VM_ROOT" gcc -O2 -Wall -o "/tmp/${W##*/}/resize_fault" "/tmp/${W##*/}/resize_fault.c" -libverbs &&
  mv "$W/resize_fault" "$OUT/share/" ||
  { rm -rf "$W"; abort device_guest_resize_fault_build; }
rm -rf "$W"

start_serve -ip 192.168.77.1

# The guest runs the script twice: the reboot brings it back (QEMU resets the machine instead
# of exiting), and a file in the share says which boot this is.
cat interop/guest/lib.sh - > "$OUT/share/guest.sh" <<'SCRIPT'
load() { modprobe softirdma && softirdma_up 192.168.77.1/24; }
holds() { # holds PID: the process has a QP and an MR on the device
  rdma resource show qp 2>/dev/null | grep -q "pid $1 " && rdma resource show mr 2>/dev/null | grep -q "pid $1 "
}
waitholds() { for j in $(seq 200); do holds $1 && return 0; kill -0 $1 2>/dev/null || return 1; sleep 0.05; done; return 1; }
rts() { rdma resource show qp 2>/dev/null | grep -c "state RTS"; }
traffic() { # traffic PORT: an endless ibv_rc_pingpong over the device's loopback, both ends here
  ip link set lo up
  ibv_rc_pingpong -d softirdma0 -g 1 -n 100000000 -p $1 > /tmp/srv 2>&1 &
  # Its output goes to a file, buffered: the QPs' states say when the exchange is done.
  for j in $(seq 400); do rdma resource show qp 2>/dev/null | grep -q "comm ibv_rc_pingpong" && break; sleep 0.05; done
  for j in $(seq 50); do
    ibv_rc_pingpong -d softirdma0 -g 1 -n 100000000 -p $1 127.0.0.1 > /tmp/cli 2>&1 &
    c=$!
    while kill -0 $c 2>/dev/null; do [ "$(rts)" -ge 2 ] && return 0; sleep 0.05; done
    grep -q "Couldn't connect" /tmp/cli || return 1
    sleep 0.1
  done
  return 1
}
aftermath() { # aftermath WHAT BOOT TENTHS: the driver's answer to a failed function, reported as "VM: WHAT, ..."
  for i in $(seq $3); do dmesg | grep -q "RDMA device unregistered" && break; sleep 0.1; done
  dmesg | grep -q "RDMA device unregistered" && echo "VM: $1, device unregistered"
  [ -e /sys/class/infiniband/softirdma0 ] || echo "VM: $1, softirdma0 gone"
  pkill -9 ibv_rc_pingpong
  echo "VM: $1, guest alive"
  rmmod softirdma && echo "VM: $1, rmmod ok"
  dmesg | grep -E 'WARNING|BUG|Oops|Call Trace|softirdma' | sed "s/^/VM: dmesg$2: /"
  echo "VM: dmesg$2 checked"
}
if [ ! -e /share/boot1 ]; then
  touch /share/boot1
  load || echo "VM: load failed"
  # RESIZE_CQ and MODIFY_SRQ whose mminfo cannot be written: refused, the old rings kept.
  timeout 120 /share/resize_fault softirdma0 1 2>&1 | sed 's/^/VM: /'
  ok=0
  for i in $(seq 20); do
    ibv_rc_pingpong -d softirdma0 -g 1 -p $((18600 + i)) > /dev/null 2>&1 &
    p=$!
    waitholds $p || { echo "VM: holder $i never held the device"; kill -9 $p; break; }
    kill -9 $p; wait $p 2>/dev/null
    ip link set $DEV down
    rmmod softirdma && load && ok=$((ok + 1))
  done
  echo "VM: reloads after a killed holder $ok of 20"
  ibv_rc_pingpong -d softirdma0 -g 1 -p 18650 > /tmp/held 2>&1 &
  p=$!
  if waitholds $p; then
    ip link set $DEV down
    rmmod softirdma && echo "VM: rmmod under a holder ok"
    # rmmod returned with the holder still there: its context was disassociated, not waited for.
    kill -0 $p 2>/dev/null && echo "VM: holder alive after rmmod"
    kill -9 $p; wait $p 2>/dev/null
    load || echo "VM: load failed"
  fi
  traffic 18651 && echo "VM: traffic before reboot"
  dmesg > /share/dmesg1
  echo "VM: rebooting"
  reboot -f
fi
if [ -e /share/boot2 ]; then
  # The third boot: `softirdma serve` is SIGKILLed under RC traffic; every read of the function
  # then gives all ones, and the driver takes the RDMA device down.
  load && echo "VM: loaded for serve's end"
  traffic 18654 && echo "VM: traffic running for serve's end"
  aftermath "serve gone" 3 1200
  exit 0
fi
# The second boot.
cat /share/dmesg1 | grep -E 'WARNING|BUG|Oops|Call Trace|softirdma' | sed 's/^/VM: dmesg1: /'
echo "VM: dmesg1 checked"
load && echo "VM: loaded after reboot"
ibv_rc_pingpong -d softirdma0 -g 1 -n 20 -p 18652 > /tmp/srv 2>&1 &
s=$!
for j in $(seq 200); do grep -q "local address" /tmp/srv && break; sleep 0.05; done
for i in $(seq 50); do
  timeout 60 ibv_rc_pingpong -d softirdma0 -g 1 -n 20 -p 18652 127.0.0.1 > /tmp/cli 2>&1
  grep -q "Couldn't connect" /tmp/cli || break; sleep 0.1
done
wait $s 2>/dev/null
sed 's/^/VM: pp after reboot: /' /tmp/cli
traffic 18653 && echo "VM: traffic running"
# The function fails under traffic: bus mastering turned off behind the driver's back (the
# command register's byte, memory space left on) stops its DMA and makes it FATAL.
BDF=$(basename $(readlink /sys/class/net/$DEV/device))
printf '\002' | dd of=/sys/bus/pci/devices/$BDF/config bs=1 seek=4 count=1 conv=notrunc 2>/dev/null
aftermath "function failed" 2 600
touch /share/boot2
reboot -f
SCRIPT
# -action reboot=reset after vm/run.sh's -no-reboot: a reboot resets the machine.
VM_QEMU_ARGS="-action reboot=reset" VM_SHARE="$OUT/share" VM_SCRIPT="$OUT/share/guest.sh" VM_SOCKET="$SOCK" \
  VM_MAC0=52:54:00:00:0a:10 timeout 400 bash vm/run.sh > "$OUT/guest.log" 2>&1 &
gpid=$!; pids+=($gpid)
# serve is SIGKILLed under traffic in the third boot: QEMU's client reads end of file on its
# socket, and the guest's reads of the function give all ones.
if waitfor "$OUT/guest.log" "VM: traffic running for serve's end" 400 $gpid; then
  kill -9 $spid
fi
wait $gpid || true
grep "VM: " "$OUT/guest.log" | tr -d '\r' > "$OUT/vm.txt" || true

check device_guest_resize_fault_cq 'VM: resize_fault: cq ok'
check device_guest_resize_fault_srq 'VM: resize_fault: srq ok'
check device_guest_reload_after_killed_holder_x20 'VM: reloads after a killed holder 20 of 20'
check device_guest_rmmod_under_holder 'VM: rmmod under a holder ok'
check device_guest_holder_disassociated 'VM: holder alive after rmmod'
check device_guest_traffic_before_reboot 'VM: traffic before reboot'
check device_guest_reboot_during_traffic 'VM: loaded after reboot'
check device_guest_ibv_rc_pingpong_after_reboot 'VM: pp after reboot: 20 iters in'
check device_guest_function_failed_device_unregistered 'VM: function failed, device unregistered'
check device_guest_function_failed_ibdev_gone 'VM: function failed, softirdma0 gone'
check device_guest_function_failed_guest_stays_up 'VM: function failed, guest alive'
check device_guest_function_failed_rmmod 'VM: function failed, rmmod ok'
check device_guest_serve_killed_traffic_running "VM: traffic running for serve's end"
check device_guest_serve_killed_under_traffic_device_unregistered 'VM: serve gone, device unregistered'
check device_guest_serve_killed_under_traffic_ibdev_gone 'VM: serve gone, softirdma0 gone'
check device_guest_serve_killed_under_traffic_guest_stays_up 'VM: serve gone, guest alive'
check device_guest_serve_killed_under_traffic_rmmod 'VM: serve gone, rmmod ok'
check device_guest_serve_killed_guard_ended_connection \
  'softirdma-sockguard: the server is gone; 1 connection\(s\) shut down' "$OUT/serve.log"
verdict device_guest_serve_killed_qemu_lives no_lines "$OUT/guest.log" Assertion
kernel_clean device_guest_robust_no_kernel_warning 'VM: dmesg[123]: .*softirdma[0-9]+: set (active|down)' \
  'VM: dmesg1 checked' 'VM: dmesg2 checked' 'VM: dmesg3 checked'
[ $fail = 0 ] || tail -40 "$OUT/vm.txt"
finish
