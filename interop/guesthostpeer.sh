#!/usr/bin/env bash
# The guest driver's device against softirdma's own peer on the host: a VM (vm/) whose function
# `softirdma serve` serves on a dgram link to `softirdma pingpong` and `softirdma perf` (the
# host's engine, at 192.168.77.2 on the link), run one after the other. Unmodified
# ibv_rc_pingpong (IPv4 and IPv6 link-local GIDs) and perftest's ib_write_bw, ib_read_bw,
# ib_send_bw and ib_atomic_bw on softirdma0, and rping through rdma_cm, in both roles: the guest's tool as client reaches the
# host's through slirp (10.0.2.2), the host's reaches the guest's server through the forward.
# Prints PASS/FAIL per case.
set -euo pipefail
cd "$(dirname "$0")/.."
. interop/guestlib.sh
guest_setup device_guest_hostpeer_module_build
echo "interop guest driver against softirdma's host peer; logs in $OUT"

DEV_PORT=9241 PEER_PORT=9242 TCP=18761 FWD=18766
start_serve -link "dgram:127.0.0.1:$DEV_PORT,127.0.0.1:$PEER_PORT" -ip 192.168.77.1

# The guest runs the same sequence as the host below: for each tool, its client against the
# host's server, then its server for the host's client.
{ cat interop/guest/lib.sh; echo "TCP=$TCP"; } > "$OUT/guest.sh"
cat >> "$OUT/guest.sh" <<'SCRIPT'
modprobe softirdma || echo "VM: modprobe failed"
softirdma_up 192.168.77.1/24
client() { # client NAME CMD...: the tool against the host's server, retried until it is up
  name=$1; shift
  until_served 120 0.5 timeout 120 "$@" -p $TCP 10.0.2.2
  sed "s/^/VM: $name: /" /tmp/out
}
server() { # server NAME CMD...: the tool as server on 18515, the forward's end
  name=$1; shift
  echo "VM: serving $name"
  timeout 120 "$@" 2>&1 | sed "s/^/VM: $name: /"
}
for g in 1 0; do
  client pp_g${g}_client ibv_rc_pingpong -d softirdma0 -g $g -n 20
  server pp_g${g}_server ibv_rc_pingpong -d softirdma0 -g $g -n 20
done
for t in write read send atomic; do
  s="-s 4096"; [ $t = atomic ] && s=""
  client ${t}_client ib_${t}_bw -d softirdma0 -x 1 -F -n 20 $s
  server ${t}_server ib_${t}_bw -d softirdma0 -x 1 -F -n 20 $s
done
# rping through rdma_cm (the guest's ib_cm on the GSI QP, softirdma's connection manager on the
# host): the guest's client until the host's server listens, then the guest's server; ten
# pings each, the client's validated.
for i in $(seq 60); do timeout 60 rping -c -a 192.168.77.2 -v -V -C 10 > /tmp/rp 2>&1; rc=$?; [ $rc = 0 ] && break; sleep 1; done
sed "s/^/VM: rping_client: /" /tmp/rp
echo "VM: rping client rc=$rc pings $(grep -c '^ping data: rdma-ping-' /tmp/rp)"
echo "VM: serving rping"
timeout 120 rping -s -a 192.168.77.1 -v -C 10 > /tmp/rp 2>&1; rc=$?
sed "s/^/VM: rping_server: /" /tmp/rp
echo "VM: rping server rc=$rc pings $(grep -c '^server ping data: rdma-ping-' /tmp/rp)"
echo "VM: done with the host"
dmesg | grep -E 'WARNING|BUG|Oops|Call Trace' | sed 's/^/VM: dmesg: /'
echo "VM: dmesg checked"
SCRIPT
VM_SCRIPT="$OUT/guest.sh" VM_SOCKET="$SOCK" VM_FWD=$FWD VM_MAC0=52:54:00:00:0c:10 \
  timeout 600 bash vm/run.sh > "$OUT/guest.log" 2>&1 &
gpid=$!; pids+=($gpid)

LINK="-link dgram:127.0.0.1:$PEER_PORT,127.0.0.1:$DEV_PORT -ip 192.168.77.2 -mac 02:00:00:00:77:02"
# both_ran RC GUESTLINE: the host's tool ended with status RC 0 and the guest's printed GUESTLINE
# (once it has ended, which may be after the host's).
both_ran() { [ "$1" = 0 ] && waitfor "$OUT/guest.log" "$2" 120 $gpid; }
host() { # host LOG CMD...: one host tool, its output kept
  local log=$1; shift
  "$@" > "$OUT/$log.log" 2>&1
}
# both_roles CASE LABEL RESULT SERVER... -- CLIENT...: the guest's tool LABEL as the client of
# `softirdma SERVER...` (its output in LABEL_server.log), then as the server of `softirdma
# CLIENT...` (in LABEL_client.log), once the guest says it serves; the verdicts
# CASE_client_vs_softirdma and CASE_server_vs_softirdma, the guest's tool printing RESULT.
both_roles() {
  local case=$1 label=$2 result=$3 server=() rc=0
  shift 3
  while [ "$1" != -- ]; do server+=("$1"); shift; done
  shift
  host ${label}_server bin/softirdma "${server[@]}" -timeout 120s $LINK || rc=$?
  verdict "${case}_client_vs_softirdma" both_ran $rc "VM: ${label}_client: $result"
  rc=0
  if waitfor "$OUT/guest.log" "VM: serving ${label}_server" 200 $gpid; then
    host ${label}_client bin/softirdma "$@" -wait 60s -timeout 120s $LINK || rc=$?
  else
    rc=1
  fi
  verdict "${case}_server_vs_softirdma" both_ran $rc "VM: ${label}_server: $result"
}
for g in 1 0; do
  v=ipv4; [ $g = 0 ] && v=ipv6_linklocal
  both_roles device_guest_ibv_rc_pingpong_$v pp_g$g "20 iters in" pingpong -server -p $TCP -n 20 -g $g -- \
    pingpong 127.0.0.1 -p $FWD -n 20 -g $g
done
for t in write read send atomic; do
  s="-s 4096" sz=4096; [ $t = atomic ] && s="" sz=8
  both_roles device_guest_ib_${t}_bw $t "+$sz +20 " perf $t -server -p $TCP -n 20 $s -- perf $t 127.0.0.1 -p $FWD -n 20 $s
done
# rping: the host's validates the guest server's pings (-V), and both ends print ten.
pings10() { [ "$(grep -c "$2" "$OUT/$1.log")" = 10 ]; }
rc=0; host rping_server bin/softirdma rping -s -a 192.168.77.2 -v -C 10 -timeout 120s $LINK || rc=$?
pings10 rping_server '^server ping data: rdma-ping-' || rc=1
verdict device_guest_rping_client_vs_softirdma both_ran $rc "VM: rping client rc=0 pings 10"
rc=0
waitfor "$OUT/guest.log" "VM: serving rping" 200 $gpid || rc=1
[ $rc = 0 ] && { host rping_client bin/softirdma rping -c -a 192.168.77.1 -v -V -C 10 -wait 60s -timeout 120s $LINK || rc=$?; }
pings10 rping_client '^ping data: rdma-ping-' || rc=1
verdict device_guest_rping_server_vs_softirdma both_ran $rc "VM: rping server rc=0 pings 10"
waitfor "$OUT/guest.log" "VM: run rc=" 120 $gpid || true
kernel_clean device_guest_hostpeer_no_kernel_warning '' 'VM: dmesg checked'
[ $fail = 0 ] || grep "VM: " "$OUT/guest.log" | tail -40
finish
