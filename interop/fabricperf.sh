#!/usr/bin/env bash
# Guest to guest bandwidth: ib_write_bw (64 KiB messages) from one VM to another, first with both
# on softirdma0 as two functions of one `softirdma serve` (frames handed over in memory inside
# serve), then with both on Linux rxe (rxe0) over QEMU dgram netdevs pointing at each other (no
# relay). Prints one line per pair, then the ratio. The softirdma guests' netdevs have MTU
# $FABRIC_MTU (default 9000: the port's active MTU, and so perftest's path MTU, is 4096; 1500 gives
# 1024); rxe's stay at 1500, as its netdev is QEMU's. The guests' CPUs are emulated (TCG);
# softirdma's data path runs on the host. Then, in the same VMs, ib_send_lat with 8-byte
# messages (one-way: half the round trip, as perftest reports it), its median and 99th percentile.
# FABRIC_PROFILE=FILE also writes serve's CPU profile there; FABRIC_RXE=0 leaves out the rxe pair,
# FABRIC_LAT=0 the latency runs.
# Usage: interop/fabricperf.sh [ITERATIONS] (default 5000: 320 MiB through softirdma).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-5000} MTU=${FABRIC_MTU:-9000} LAT=${FABRIC_LAT:-1} LAT_N=2000
. vm/lib.sh
vm_check_number iterations "$N" 5 1000000
vm_check_number FABRIC_MTU "$MTU" 1280 9198
vm_check_number FABRIC_LAT "$LAT" 0 1
N=$((10#$N)) MTU=$((10#$MTU)) LAT=$((10#$LAT))
. interop/guestlib.sh
guest_setup fabricperf_module_build
A=192.168.77.1 B=192.168.77.2 SIZE=65536 LAT_SIZE=8

# pair DEVICE ITERATIONS: two VMs, a the ib_write_bw client of b; b's result line (perftest's
# "#bytes #iterations peak average rate") in $OUT/DEVICE.result, empty if the run gave none. Then
# (LAT=1) a the ib_send_lat client of b: a's result line (perftest's "#bytes #iterations t_min
# t_max t_typical t_avg t_stdev 99% 99.9%") in $OUT/DEVICE.lat.
pair() {
  local dev=$1 n=$2 g=1 a_env=() b_env=() a_args=() b_args=()
  if [ "$dev" = softirdma0 ]; then
    local sa sb
    sa=$(mktemp -u /tmp/softirdma-a-XXXXXX.sock) sb=$(mktemp -u /tmp/softirdma-b-XXXXXX.sock)
    bin/softirdma serve -function name=a,socket=$sa,ip=$A -function name=b,socket=$sb,ip=$B \
      ${FABRIC_PROFILE:+-cpuprofile "$FABRIC_PROFILE"} > "$OUT/serve.out" 2> "$OUT/serve.log" &
    spid=$!; pids+=($spid)
    waitfor "$OUT/serve.out" "function b .* listening on" 30 $spid || { cat "$OUT/serve.log"; abort fabricperf_serve; }
    a_env=(VM_SOCKET=$sa) b_env=(VM_SOCKET=$sb)
    a_args=(vm.softirdma=$A/24 vm.mtu=$MTU) b_args=(vm.softirdma=$B/24 vm.mtu=$MTU)
  else
    local pa pb
    read -r pa pb < <(free_udp_ports 2)
    a_env=(VM_LINK=$pa,$pb) b_env=(VM_LINK=$pb,$pa)
    a_args=(vm.rxe=1 vm.eth1=$A/24) b_args=(vm.rxe=1 vm.eth1=$B/24)
    g='$GIDX'
  fi
  cat interop/guest/lib.sh - > "$OUT/$dev.b.sh" <<SCRIPT
G=$g
timeout 600 ib_write_bw -d $dev -x \$G -F -n $n -s $SIZE > /tmp/srv 2>&1; echo "VM: server rc=\$?"
grep -E '^ +$SIZE +$n ' /tmp/srv | sed 's/^/VM: result: /'
if [ $LAT = 1 ]; then
  timeout 300 ib_send_lat -d $dev -x \$G -F -s $LAT_SIZE -n $LAT_N > /tmp/srv 2>&1; echo "VM: lat server rc=\$?"
fi
SCRIPT
  cat interop/guest/lib.sh - > "$OUT/$dev.a.sh" <<SCRIPT
G=$g
until_served 120 0.5 timeout 600 ib_write_bw -d $dev -x \$G -F -n $n -s $SIZE $B
grep -E '^ +$SIZE +$n ' /tmp/out | sed 's/^/VM: client result: /'
if [ $LAT = 1 ]; then
  until_served 120 0.5 timeout 300 ib_send_lat -d $dev -x \$G -F -s $LAT_SIZE -n $LAT_N $B
  grep -E '^ +$LAT_SIZE +$LAT_N ' /tmp/out | sed 's/^/VM: lat result: /'
fi
SCRIPT
  env "${b_env[@]}" VM_SCRIPT="$OUT/$dev.b.sh" VM_MAC0=52:54:00:00:0b:10 VM_MAC1=52:54:00:00:77:0b \
    timeout 900 bash vm/run.sh "${b_args[@]}" > "$OUT/$dev.b.log" 2>&1 &
  local bpid=$!; pids+=($bpid)
  env "${a_env[@]}" VM_SCRIPT="$OUT/$dev.a.sh" VM_MAC0=52:54:00:00:0a:10 VM_MAC1=52:54:00:00:77:0a \
    timeout 900 bash vm/run.sh "${a_args[@]}" > "$OUT/$dev.a.log" 2>&1 &
  local apid=$!; pids+=($apid)
  wait $apid || true
  wait $bpid || true
  [ "$dev" = softirdma0 ] && { kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null || true; }
  grep -a "VM: result: " "$OUT/$dev.b.log" | tr -d '\r' | sed 's/^VM: result: //' |
    grep -E "^ *$SIZE +$n " | tail -1 > "$OUT/$dev.result" || true
  grep -a "VM: lat result: " "$OUT/$dev.a.log" | tr -d '\r' | sed 's/^VM: lat result: //' |
    grep -E "^ *$LAT_SIZE +$LAT_N " | tail -1 > "$OUT/$dev.lat" || true
}
# latency DEVICE NAME: NAME's line for DEVICE's ib_send_lat (median: perftest's t_typical), and
# its median in $med; empty when the run gave no figure (the line says so).
latency() {
  local figures
  figures=$(lat_figures "$OUT/$1.lat")
  med=$(awk '{print $5}' "$OUT/$1.lat")
  if [ -n "$figures" ]; then
    echo "$2 ib_send_lat ${LAT_SIZE}B: $figures"
  else
    echo "$2 ib_send_lat ${LAT_SIZE}B: the run gave no figure"
    grep -a "VM: lat" "$OUT/$1.a.log" "$OUT/$1.b.log" | tail -3
  fi
}
# average DEVICE: the average MB/s of DEVICE's pair in $avg, or the script ends with FAIL.
average() {
  avg=$(awk '{print $4}' "$OUT/$1.result")
  [ -n "$avg" ] || { grep -a "VM: " "$OUT/$1.a.log" "$OUT/$1.b.log" | tail -5; abort "fabricperf_$1: no figure"; }
}
echo "guest-to-guest ib_write_bw, $SIZE B messages; logs in $OUT"
pair softirdma0 "$N"
average softirdma0; sa=$avg
mtu_name=
[ "$MTU" = 9000 ] || mtu_name=" MTU $MTU"
echo "guest-to-guest one serve ib_write_bw 64KiB$mtu_name: $sa MB/s (netdev MTU $MTU: $(cat "$OUT/softirdma0.result"))"
sl=
if [ "$LAT" = 1 ]; then
  latency softirdma0 "guest-to-guest one serve$mtu_name"
  sl=$med
fi
[ "${FABRIC_RXE:-1}" != 0 ] || exit 0
# rxe moves some 8 MB/s: a tenth of the iterations keeps its run within a minute.
pair rxe0 $(( N / 10 < 5 ? 5 : N / 10 ))
average rxe0; ra=$avg
echo "guest-to-guest rxe ib_write_bw 64KiB: $ra MB/s ($(cat "$OUT/rxe0.result"))"
echo "guest-to-guest ib_write_bw 64KiB ratio (one serve / rxe): $(awk -v a="$sa" -v b="$ra" 'BEGIN { printf "%.2f", a / b }')"
if [ "$LAT" = 1 ]; then
  latency rxe0 "guest-to-guest rxe"
  if [ -n "$sl" ] && [ -n "$med" ]; then
    echo "guest-to-guest ib_send_lat ${LAT_SIZE}B median ratio (one serve / rxe): $(awk -v a="$sl" -v b="$med" 'BEGIN { printf "%.2f", a / b }')"
  fi
fi
