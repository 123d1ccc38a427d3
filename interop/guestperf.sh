#!/usr/bin/env bash
# Bandwidth of a guest's RDMA device against `softirdma perf` on the host: perftest's
# ib_write_bw and ib_send_bw (64 KiB messages), ib_send_bw -c UD (1 KiB, the path MTU) and
# ib_write_bw -R (rdma_cm; 64 KiB) in a VM (vm/) on the softirdma device (the guest
# driver, hw/linux, with `softirdma serve` behind it), then the same in a VM on Linux rxe
# (rxe0), each against the same host peer on a dgram link. Prints one line per run and the
# ratio; then ib_send_lat with 8-byte messages against the same peer, median and 99th percentile
# (one way, as perftest reports it) for each device. The guest CPU is emulated (TCG); softirdma's
# data path runs on the host.
# GUESTPERF_SEND_WINDOW=N runs serve with -send-window N (1..32768; default 128, rxe's own
# fixed window), and every line of the softirdma0 run says so: the window bounds a 64 KiB
# stream on this link, whose round trip passes through serve, a UDP socket and the host peer.
# Usage: interop/guestperf.sh [ITERATIONS] (default 5000, perftest's own for its bandwidth tests;
# over 500, softirdma0's ib_write_bw stayed near 192 MB/s whatever serve's window).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-5000}
. vm/lib.sh
vm_check_number iterations "$N" 5 100000
N=$((10#$N))
WINDOW=${GUESTPERF_SEND_WINDOW:-128}
vm_check_number GUESTPERF_SEND_WINDOW "$WINDOW" 1 32768
WINDOW=$((10#$WINDOW))
WNOTE=""
[ "$WINDOW" != 128 ] && WNOTE=" (softirdma0's send window $WINDOW)"
. interop/guestlib.sh
guest_setup device_guest_perf_module_build
SIZE=65536 UD_SIZE=1024 LAT_SIZE=8 LAT_N=1000 TCP=18781 QEMU_PORT=9271 PEER_PORT=9272

# run DEVICE: one guest running ib_write_bw then ib_send_bw against the host's servers.
run() {
  local dev=$1 peer_ip script args=() env=()
  if [ "$dev" = softirdma0 ]; then
    start_serve -link "dgram:127.0.0.1:$QEMU_PORT,127.0.0.1:$PEER_PORT" -ip 192.168.77.1 -send-window "$WINDOW"
    script='G=1'
    args=(vm.softirdma=192.168.77.1/24)
    env=(VM_SOCKET="$SOCK")
    peer_ip=192.168.77.2
  else
    # Linux rxe at 192.168.77.2 on the VM's dgram link; the host peer at .1.
    script='G=$GIDX'
    args=(vm.rxe=1 vm.eth1=192.168.77.2/24)
    env=(VM_LINK="$QEMU_PORT,$PEER_PORT")
    peer_ip=192.168.77.1
  fi
  cat interop/guest/lib.sh - > "$OUT/guest.sh" <<SCRIPT
$script
for t in write send; do
  until_served 120 0.5 timeout 300 ib_\${t}_bw -d $dev -x \$G -F -n $N -s $SIZE -p $TCP 10.0.2.2
  grep -E '^ +$SIZE +$N ' /tmp/out | sed "s/^/VM: \$t: /"
done
until_served 120 0.5 timeout 300 ib_send_bw -d $dev -x \$G -F -c UD -n $N -s $UD_SIZE -p $TCP 10.0.2.2
grep -E '^ +$UD_SIZE +$N ' /tmp/out | sed "s/^/VM: send_UD: /"
# rdma_cm (-R): no TCP; the exchange and the test QP connect to the host's RoCE address.
until_ok 120 timeout 300 ib_write_bw -d $dev -F -R -n $N -s $SIZE -p $TCP $peer_ip
grep -E '^ +$SIZE +$N ' /tmp/out | sed "s/^/VM: write_R: /"
until_served 120 0.5 timeout 300 ib_send_lat -d $dev -x \$G -F -n $LAT_N -s $LAT_SIZE -p $TCP 10.0.2.2
grep -E '^ +$LAT_SIZE +$LAT_N ' /tmp/out | sed "s/^/VM: send_lat: /"
SCRIPT
  env "${env[@]}" VM_SCRIPT="$OUT/guest.sh" VM_MAC0=52:54:00:00:0d:10 VM_MAC1=52:54:00:00:77:d2 \
    timeout 900 bash vm/run.sh "${args[@]}" > "$OUT/$dev.log" 2>&1 &
  local gpid=$!; pids+=($gpid)
  local v t
  for v in "write|write -s $SIZE" "send|send -s $SIZE" "send_UD|send -c UD -s $UD_SIZE" "write_R|write -R -s $SIZE" \
    "send_lat|send_lat -s $LAT_SIZE -n $LAT_N"; do
    t=${v%%|*}
    # The test's own words last: send_lat's -n is its own.
    # shellcheck disable=SC2086 # the test's words
    bin/softirdma perf -server -p $TCP -n "$N" ${v#*|} -timeout 300s \
      -link "dgram:127.0.0.1:$PEER_PORT,127.0.0.1:$QEMU_PORT" \
      -ip $peer_ip -mac 02:00:00:00:77:02 > "$OUT/$dev.$t.host.log" 2>&1 || true
  done
  wait $gpid || true
  [ "$dev" = softirdma0 ] && kill "$spid" 2>/dev/null || true
  grep "VM: " "$OUT/$dev.log" | tr -d '\r' | grep -E "VM: (write|send|send_UD|write_R|send_lat): " | sed "s/^VM: /$dev /"
}
echo "guest perftest against softirdma perf on the host, $N x $SIZE B, serve's send window $WINDOW; logs in $OUT"
echo "device  test  #bytes  #iterations  BW-peak[MB/s]  BW-average[MB/s]  MsgRate[Mpps]"
run softirdma0 | tee "$OUT/softirdma0.txt"
run rxe0 | tee "$OUT/rxe0.txt"
for t in write send send_UD write_R; do
  case $t in send_UD) name="ib_send_bw -c UD";; write_R) name="ib_write_bw -R";; *) name=ib_${t}_bw;; esac
  a=$(awk -v t="$t:" '$2 == t {print $6}' "$OUT/softirdma0.txt")
  b=$(awk -v t="$t:" '$2 == t {print $6}' "$OUT/rxe0.txt")
  if [ -n "$a" ] && [ -n "$b" ]; then
    echo "$name average: softirdma0 $a MB/s, rxe0 $b MB/s, ratio $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }')$WNOTE"
  else
    echo "$name: a run gave no figure (softirdma0 '${a}', rxe0 '${b}')"
  fi
done
# The latency lines: perftest's "#bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%".
for dev in softirdma0 rxe0; do
  sed -n 's/^[^ ]* send_lat: *//p' "$OUT/$dev.txt" > "$OUT/$dev.lat"
  figures=$(lat_figures "$OUT/$dev.lat")
  if [ -n "$figures" ]; then
    note=""
    [ "$dev" = softirdma0 ] && note=$WNOTE
    echo "guest to host peer $dev ib_send_lat ${LAT_SIZE}B: $figures$note"
  else
    echo "guest to host peer $dev ib_send_lat ${LAT_SIZE}B: the run gave no figure"
  fi
done
