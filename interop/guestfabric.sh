#!/usr/bin/env bash
# Two VMs on one `softirdma serve` (vm/): two functions, a and b, on the fabric inside serve, each
# VM with the guest driver (hw/linux) on its own, and a third VM, r, on Linux rxe on the fabric's
# uplink (a dgram link). In both directions (a_to_b: a's tool is the client, b's the server;
# b_to_a the other way): ibv_rc_pingpong, ib_write_bw, ib_read_bw, ib_send_bw and ib_atomic_bw
# (their TCP exchange over the functions' netdevs, through the fabric too); rping through rdma_cm
# and NVMe over Fabrics (a the host of b's nvmet-rdma target, fio verifying) a_to_b, and
# ib_write_bw a_to_b again on jumbo frames (netdevs at MTU 9000, path MTU 4096); the
# fabric's pcap decodes clean and names the CM exchange; no guest's kernel warns. Faults on
# demand (serve -fault, the control socket): a READ response dropped mid-transfer and a WRITE
# packet corrupted, both recovered; b's link down for longer than a's retry budget, a's QP
# failing with RETRY_EXC_ERR and the next connection working; each fault's count checked.
# Isolation: while b writes to r over the uplink, a's QEMU is killed in the middle of a's
# traffic to b; b's transfer completes, serve stays up, and a new QEMU on a's socket finds its
# function reset and talks to b. A host program's device on the same serve (-host rxe1): rping
# between it and b both ways, in the same capture. Prints PASS/FAIL fabric2_<case>,
# fault_<kind>_fired.
set -euo pipefail
cd "$(dirname "$0")/.."
. interop/guestlib.sh
guest_setup fabric2_module_build
# The host program's side: the preload library, and rping with rdma-core's rxe provider.
missing=()
command -v rping > /dev/null || missing+=(rdmacm-utils)
ls /usr/lib/*/libibverbs/librxe-rdmav34.so > /dev/null 2>&1 || missing+=(ibverbs-providers)
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" > "$OUT/apt.log" 2>&1 ||
    { cat "$OUT/apt.log"; abort "fabric2: installing ${missing[*]}"; }
fi
run_or_exit "$OUT/make-build.log" "FAIL fabric2_make_build" make --no-print-directory build
echo "interop two VMs on one serve; logs in $OUT"
A=192.168.77.1 B=192.168.77.2 R=192.168.77.3 H=192.168.77.10 NQN=softirdma.fabric
HDIR=$(mktemp -d /tmp/softirdma-fabric2-host.XXXXXX)
# UD between b and the rxe guest on the uplink: this many 1 KiB datagrams each way, the uplink
# shaped to UPLINK_RATE (serve -rate; FABRIC_UPLINK_RATE= leaves it unshaped).
UD_N=2000 UPLINK_RATE=${FABRIC_UPLINK_RATE-12M}
UD="ib_send_bw -d softirdma0 -x 1 -F -c UD -s 1024 -n $UD_N"
SA=$(mktemp -u /tmp/softirdma-a-XXXXXX.sock) SB=$(mktemp -u /tmp/softirdma-b-XXXXXX.sock)
read -r UP RP < <(free_udp_ports 2) # the uplink's end, r's end
# Two faults from the start, each firing once on the traffic of one case: a READ response in the
# middle of b's answer to a's ib_read_bw dropped (a asks again), a WRITE packet of a's ib_write_bw
# corrupted (b drops it by its ICRC and NAKs, a sends again). Both transfers must complete.
bin/softirdma serve -function name=a,socket=$SA,ip=$A -function name=b,socket=$SB,ip=$B \
  -link "dgram:127.0.0.1:$UP,127.0.0.1:$RP" ${UPLINK_RATE:+-rate $UPLINK_RATE} \
  -fault "drop from=b opcode=RDMA_READ_RESPONSE_MIDDLE nth=3 name=read-middle" \
  -fault "corrupt from=a opcode=RDMA_WRITE_MIDDLE nth=5 name=write-middle" \
  -host name=rxe1,ip=$H/24 -host-dir "$HDIR" \
  -pcap "$OUT/fabric.pcap" -control "$OUT/ctl.sock" > "$OUT/serve.out" 2> "$OUT/serve.log" &
spid=$!
pids+=($spid)
waitfor "$OUT/serve.out" "control socket" 30 $spid && waitfor "$OUT/serve.out" "function b .* listening on" 30 $spid ||
  { cat "$OUT/serve.log"; abort fabric2_serve; }

# Each tool as "NAME|OPTIONS|RESULT": RESULT is the line the client prints when it ran through.
TOOLS="ibv_rc_pingpong|-g 1 -n 50|50 iters in
ib_write_bw|-x 1 -F -n 200 -s 65536|^ +65536 +200 
ib_read_bw|-x 1 -F -n 200 -s 65536|^ +65536 +200 
ib_send_bw|-x 1 -F -n 200 -s 65536|^ +65536 +200 
ib_atomic_bw|-x 1 -F -n 200|^ +8 +200 "

# guest_script ME MY_IP PEER FIRST: a VM's part. FIRST is the role it takes first (client: it is
# the client of the peer's servers, then their server; server: the other way round).
guest_script() {
  local me=$1 me_ip=$2 peer=$3 first=$4
  cat interop/guest/lib.sh interop/guest/nvmeof.sh - <<SCRIPT
echo "VM: up"
client() {
  echo "$TOOLS" | while IFS='|' read -r t opts result; do
    until_served 120 0.5 timeout 120 \$t -d softirdma0 \$opts $peer
    grep -E "\$result" /tmp/out | sed "s/^/VM: $me client \$t: /"
  done
}
server() {
  echo "$TOOLS" | while IFS='|' read -r t opts result; do
    timeout 180 \$t -d softirdma0 \$opts > /tmp/srv 2>&1; echo "VM: $me server \$t rc=\$?"
  done
}
if [ $first = client ]; then client; server; else server; client; fi
# rping through rdma_cm: a is the client of b's server. Then NVMe over Fabrics: a the host of
# b's target (which b leaves up for the rest of the run).
if [ $me = a ]; then
  for i in \$(seq 60); do timeout 60 rping -c -a $peer -v -V -C 10 > /tmp/rp 2>&1; rc=\$?; [ \$rc = 0 ] && break; sleep 1; done
  echo "VM: rping client rc=\$rc"; grep -c 'ping data: rdma-ping-' /tmp/rp | sed 's/^/VM: rping pings /'
  nvmeof_connect $NQN $peer
  [ -n "\$D" ] && nvmeof_fio_verify $NQN 16M
else
  nvmeof_target $NQN $me_ip 0
  timeout 180 rping -s -a $me_ip -v -C 10 > /tmp/rp 2>&1; echo "VM: rping server rc=\$?"
fi
# A link flap longer than the retry budget: b's link goes down (the harness adds the fault once
# a's long ib_write_bw runs); a's QP ends in RETRY_EXC_ERR (perftest: "Failed status 12"), then a
# new connection works.
W="ib_write_bw -d softirdma0 -x 1 -F -s 65536"
if [ $me = a ]; then
  echo "VM: flap next"
  until_served 120 0.5 timeout 300 \$W -n 100000 $peer
  grep -E 'Failed status|retry' /tmp/out | head -3 | sed 's/^/VM: flap client: /'
  until_served 120 0.5 timeout 120 \$W -n 200 $peer
  grep -E '^ +65536 +200 ' /tmp/out | sed 's/^/VM: after flap client: /'
else
  timeout 300 \$W -n 100000 > /tmp/srv 2>&1; echo "VM: flap server rc=\$?"
  timeout 180 \$W -n 200 > /tmp/srv 2>&1; echo "VM: after flap server rc=\$?"
fi
# Jumbo frames between the functions: both netdevs at MTU 9000, a ping of 8900 bytes not
# fragmented, and ib_write_bw on the port's active MTU, now 4096; then back to 1500.
ip link set \$SOFTIRDMA_NETDEV mtu 9000
J="ib_write_bw -d softirdma0 -x 1 -F -s 65536 -n 2000"
if [ $me = a ]; then
  for i in \$(seq 100); do ping -M do -s 8900 -c 1 -W 1 $peer > /tmp/ping 2>&1 && break; sleep 0.2; done
  grep -q ' 0% packet loss' /tmp/ping && echo "VM: jumbo ping ok"
  until_served 120 0.5 timeout 120 \$J $peer
  grep -E '^ +65536 +2000 |Mtu' /tmp/out | sed 's/^/VM: jumbo client: /'
else
  timeout 180 \$J > /tmp/srv 2>&1; echo "VM: jumbo server rc=\$?"
fi
ip link set \$SOFTIRDMA_NETDEV mtu 1500
# Isolation: b writes to r (rxe, on the uplink) for 10 s while a pingpongs with b; the harness
# kills a's QEMU once both move. Then b serves a new a on a's socket.
if [ $me = a ]; then
  dmesg | grep -E 'WARNING|BUG|Oops|Call Trace|softirdma' | sed 's/^/VM: dmesg: /'
  echo "VM: dmesg checked"
  echo "VM: isolation next"
  until_served 120 0.5 timeout 300 ibv_rc_pingpong -g 1 -n 10000000 -p 18516 $peer
  echo "VM: pingpong to be killed ended"
else
  timeout 120 ibv_rc_pingpong -g 1 -n 10000000 -p 18516 > /tmp/pp 2>&1 &
  pp=\$!
  # perftest's 128 WRITEs of 64 KiB are 5.6 s of frames at the uplink's 12 Mbit/s, past QEMU's
  # 5 s reply timeout: serve's vfio-user loop must keep answering while the port paces them.
  until_served 120 0.5 timeout 120 ib_write_bw -d softirdma0 -x 1 -F -s 65536 -D 10 $R
  grep -E '^ +65536 +[0-9]+ ' /tmp/out | sed 's/^/VM: uplink client: /' || said "uplink client" /tmp/out
  kill \$pp 2> /dev/null
  timeout 300 ibv_rc_pingpong -g 1 -n 50 > /tmp/srv 2>&1; rc=\$?; echo "VM: new a server rc=\$rc"
  [ \$rc = 0 ] || said "new a server" /tmp/srv
  # UD to and from the rxe guest on the uplink, which serve shapes to that guest's pace (-rate):
  # a datagram is never sent again, so one the guest cannot take in is lost and its server waits.
  until_served 120 0.5 timeout 120 $UD $R
  grep -E "^ +1024 +$UD_N " /tmp/out | sed 's/^/VM: uplink UD client: /'
  timeout 300 $UD > /tmp/srv 2>&1; echo "VM: uplink UD server rc=\$?"
fi
if [ $me = b ]; then
  # A program on the host, on serve's device rxe1: first its rping client, then its server.
  echo "VM: host rping next"
  timeout 300 rping -s -a $me_ip -v -V -C 10 > /tmp/rp 2>&1; echo "VM: host rping server rc=\$?"
  for i in \$(seq 60); do timeout 60 rping -c -a $H -v -V -C 10 > /tmp/rp 2>&1; rc=\$?; [ \$rc = 0 ] && break; sleep 1; done
  echo "VM: host rping client rc=\$rc"
  dmesg | grep -E 'WARNING|BUG|Oops|Call Trace|softirdma' | sed 's/^/VM: dmesg: /'
  echo "VM: dmesg checked"
fi
SCRIPT
}
guest_script b $B $A server > "$OUT/b.sh"
guest_script a $A $B client > "$OUT/a.sh"
# r: Linux rxe on the uplink, the server of b's write in the isolation case, then of b's UD
# sends, then their client.
cat interop/guest/lib.sh - > "$OUT/r.sh" <<SCRIPT
timeout 900 ib_write_bw -d rxe0 -x \$GIDX -F -s 65536 -D 10 > /tmp/srv 2>&1; echo "VM: uplink server rc=\$?"
U="ib_send_bw -d rxe0 -x \$GIDX -F -c UD -s 1024 -n $UD_N"
timeout 300 \$U > /tmp/srv 2>&1; echo "VM: uplink UD server rc=\$?"
until_served 240 0.5 timeout 120 \$U $B
grep -E "^ +1024 +$UD_N " /tmp/out | sed 's/^/VM: uplink UD client: /'
SCRIPT
# The new QEMU on a's socket after the kill: its function reset, it pingpongs with b.
cat interop/guest/lib.sh - > "$OUT/a2.sh" <<SCRIPT
until_served 240 0.5 timeout 60 ibv_rc_pingpong -g 1 -n 50 $B
grep -E '50 iters in' /tmp/out | sed 's/^/VM: new a client: /'
dmesg | grep -E 'WARNING|BUG|Oops|Call Trace|softirdma' | sed 's/^/VM: dmesg: /'
echo "VM: dmesg checked"
SCRIPT
VM_SCRIPT="$OUT/r.sh" VM_LINK=$RP,$UP VM_MAC0=52:54:00:00:0c:10 VM_MAC1=52:54:00:00:77:0c \
  timeout 900 bash vm/run.sh vm.rxe=1 vm.eth1=$R/24 > "$OUT/r.log" 2>&1 &
rpid=$!; pids+=($rpid)
VM_SCRIPT="$OUT/b.sh" VM_SOCKET=$SB VM_MAC0=52:54:00:00:0b:10 timeout 900 bash vm/run.sh vm.softirdma=$B/24 > "$OUT/b.log" 2>&1 &
bpid=$!; pids+=($bpid)
VM_SCRIPT="$OUT/a.sh" VM_SOCKET=$SA VM_MAC0=52:54:00:00:0a:10 timeout 900 bash vm/run.sh vm.softirdma=$A/24 > "$OUT/a.log" 2>&1 &
apid=$!; pids+=($apid)
# The flap: once a's long transfer moves (a probe fault, a 1 ms delay of one of its WRITE
# packets, has fired), b's link goes down for 20 s.
flap=
if waitfor "$OUT/a.log" "VM: flap next" 600 $apid; then
  bin/softirdma fault -socket "$OUT/ctl.sock" add delay from=a opcode=RDMA_WRITE_MIDDLE delay=1ms count=1 name=probe > /dev/null
  POLL=0.1 wait_until 120 $apid probed "$OUT/ctl.sock" probe || true
  bin/softirdma fault -socket "$OUT/ctl.sock" add flap from=b for=20s name=flap > /dev/null && flap=1
fi
# Isolation: once a's pingpong and b's write to r both move (a probe fault on each has fired),
# a's QEMU goes (SIGKILL); then a new QEMU on a's socket.
killed=
if waitfor "$OUT/a.log" "VM: isolation next" 600 $apid; then
  bin/softirdma fault -socket "$OUT/ctl.sock" add delay from=a opcode=SEND_MIDDLE delay=1ms count=1 name=iso-a > /dev/null
  bin/softirdma fault -socket "$OUT/ctl.sock" add delay from=b opcode=RDMA_WRITE_MIDDLE delay=1ms count=1 name=iso-b > /dev/null
  if POLL=0.1 wait_until 120 $apid probed "$OUT/ctl.sock" iso-a iso-b && pkill -9 -f "qemu-system.*$SA"; then
    killed=$(wc -l < "$OUT/b.log")
    echo "a's QEMU killed"
  fi
fi
wait $apid || true
a2pid=
if [ -n "$killed" ]; then
  VM_SCRIPT="$OUT/a2.sh" VM_SOCKET=$SA VM_MAC0=52:54:00:00:0a:10 timeout 900 bash vm/run.sh vm.softirdma=$A/24 > "$OUT/a2.log" 2>&1 &
  a2pid=$!; pids+=($a2pid)
fi
[ -z "$a2pid" ] || wait $a2pid || true
# The host program on rxe1: the client of b's rping server (tried until b listens, for at most
# two minutes, and not once b's server has ended), then the server of b's client.
hrc=- hsrc=-
if waitfor "$OUT/b.log" "VM: host rping next" 900 $bpid; then
  deadline=$((SECONDS + 120))
  while :; do
    hrc=0
    timeout 30 bin/softirdma run -socket "$HDIR/sock" -- rping -c -a $B -v -V -C 10 > "$OUT/host_rping.client" 2>&1 || hrc=$?
    [ $hrc = 0 ] || [ $SECONDS -ge $deadline ] || grep -q "VM: host rping server rc=" "$OUT/b.log" && break
    sleep 1
  done
  hsrc=0
  timeout 180 bin/softirdma run -socket "$HDIR/sock" -- rping -s -a $H -v -V -C 10 > "$OUT/host_rping.server" 2>&1 &
  hspid=$!
  # Once b's client has ended, the server has what it will get.
  waitfor "$OUT/b.log" "VM: host rping client rc=" 200 $hspid > /dev/null || true
  ended() { ! kill -0 "$1" 2> /dev/null; }
  wait_until 15 - ended $hspid || kill $hspid 2> /dev/null || true
  wait $hspid || hsrc=$?
fi
serve_alive=
kill -0 $spid 2>/dev/null && serve_alive=1
wait $rpid || true
wait $bpid || true
bin/softirdma fault -socket "$OUT/ctl.sock" list > "$OUT/faults.txt" 2>&1 || true
sed 's/^/faults: /' "$OUT/faults.txt"
bin/softirdma fault -socket "$OUT/ctl.sock" ports > "$OUT/ports.txt" 2>&1 || true
sed 's/^/ports: /' "$OUT/ports.txt"

# tool_ran TOOL DIR RESULT: the client of DIR (CLIENT_to_SERVER) printed TOOL's line RESULT and
# the server's TOOL ended well.
tool_ran() {
  local c=${2%%_to_*} s=${2##*_to_}
  has_lines "$OUT/$c.log" "VM: $c client $1: .*${3#^}" "$OUT/$s.log" "VM: $s server $1 rc=0" ||
    { grep -aE "VM: ($c client|$s server) $1" "$OUT/$c.log" "$OUT/$s.log" | tail -3; return 1; }
}
while IFS='|' read -r t opts result; do
  for dir in a_to_b b_to_a; do
    verdict "fabric2_${t}_$dir" tool_ran "$t" $dir "$result"
  done
done <<< "$TOOLS"
why="host client exit $hrc" verdict fabric2_host_rping_host_to_b has_lines "$OUT/host_rping.client" "^ping data: rdma-ping-9: " \
  "$OUT/b.log" "VM: host rping server rc=0"
host_served() {
  [ "$hsrc" = 0 ] && has_lines "$OUT/b.log" "VM: host rping client rc=0" "$OUT/host_rping.server" "^server ping data: rdma-ping-9: "
}
why="host server exit $hsrc" verdict fabric2_host_rping_b_to_host host_served
verdict fabric2_rping_a_to_b has_lines "$OUT/a.log" "VM: rping client rc=0" "$OUT/a.log" "VM: rping pings 10" \
  "$OUT/b.log" "VM: rping server rc=0"
# ran_or_show PATTERN COMMAND...: COMMAND succeeds, or the guests' last lines that match
# PATTERN are shown.
ran_or_show() {
  local shown=$1
  shift
  "$@" || { grep -aE "$shown" "$OUT"/{a,a2,b,r}.log 2>/dev/null | tail -8; return 1; }
}
nvmeof_ran() {
  note=$(grep -aoE "VM: (randwrite|seqwrite): +write: IOPS=[^,]*" "$OUT/a.log" | sed 's/VM: //' | tr '\n' ' ')
  has_lines "$OUT/b.log" "VM: target ready" "$OUT/a.log" "VM: discover: .*subnqn: *$NQN" \
    "$OUT/a.log" "VM: connect rc=0" "$OUT/a.log" "VM: randwrite rc=0" "$OUT/a.log" "VM: seqwrite rc=0" \
    "$OUT/a.log" "VM: disconnect: .*disconnected 1 controller"
}
verdict fabric2_nvmeof_a_to_b ran_or_show "VM: (target|discover rc|connect|namespace|randwrite rc|seqwrite rc|disconnect)" nvmeof_ran
# client_mbs LOG PREFIX FIELD: the MB/s field FIELD of the line PREFIX in LOG, for a note.
client_mbs() { echo "$(grep -a "$2" "$1" | tr -d '\r' | awk -v f="$3" '{print $f}') MB/s"; }
# The rxe guest on the uplink: b's 10 s write to r ran through (r's server ended well too).
note=$(client_mbs "$OUT/b.log" "VM: uplink client:" 7) verdict fabric2_uplink_rxe_ib_write_bw_b_to_r \
  ran_or_show "uplink client|uplink server" has_lines "$OUT/b.log" "VM: uplink client: +65536 +[0-9]+ " "$OUT/r.log" "VM: uplink server rc=0"
# UD with the rxe guest on the shaped uplink, both roles: every datagram arrived (the server
# ended well) and the client printed its line.
for dir in b_to_r r_to_b; do
  c=${dir%%_to_*} s=${dir##*_to_}
  note="$(client_mbs "$OUT/$c.log" "VM: uplink UD client:" 8), uplink ${UPLINK_RATE:-unshaped}" why="uplink ${UPLINK_RATE:-unshaped}" \
    verdict "fabric2_uplink_rxe_ib_send_bw_UD_$dir" ran_or_show "uplink UD" \
    has_lines "$OUT/$c.log" "VM: uplink UD client: +1024 +$UD_N " "$OUT/$s.log" "VM: uplink UD server rc=0"
done
note=$(client_mbs "$OUT/a.log" "VM: jumbo client: .*65536" 7) verdict fabric2_jumbo_mtu4096_ib_write_bw_a_to_b ran_or_show jumbo \
  has_lines "$OUT/a.log" "VM: jumbo ping ok" "$OUT/a.log" "VM: jumbo client: +Mtu +: 4096" \
  "$OUT/a.log" "VM: jumbo client: +65536 +2000 " "$OUT/b.log" "VM: jumbo server rc=0"
# Isolation: a's QEMU went while a's pingpong and b's write both moved, and b's write completed
# after that (its result came after the kill), serve living on.
isolated() {
  [ -n "$killed" ] && [ -n "$serve_alive" ] &&
    [ "$(tail -n +"$((killed + 1))" "$OUT/b.log" | grep -acE "VM: uplink client: +65536 +[0-9]+ ")" -gt 0 ]
}
why="killed='$killed' serve_alive='$serve_alive'" verdict fabric2_isolation_qemu_killed_other_transfer_completes isolated
# The new QEMU found a's function reset (the old one's connection gone, serve said so) and ran.
found_reset() {
  [ -n "$killed" ] && has_lines "$OUT/serve.log" 'msg="client gone" function=a ' \
    "$OUT/a2.log" "VM: new a client: 50 iters in" "$OUT/b.log" "VM: new a server rc=0"
}
verdict fabric2_isolation_new_qemu_finds_reset_function ran_or_show "new a" found_reset
# Every port of the fabric carried frames both ways, as the switch counted them: a (and the
# new a on its function), b, and the uplink to r.
moved=$(awk '$1 == "port" && $3 ~ /^in_frames=[1-9]/ && $5 ~ /^out_frames=[1-9]/ { print $2 }' "$OUT/ports.txt" | sort | tr '\n' ' ')
note=$(awk '$1 == "port" { printf "%s %s %s %s; ", $2, $3, $5, $7 }' "$OUT/ports.txt") \
  why="ports that moved frames both ways: '$moved'" verdict fabric2_ports_counted [ "$moved" = "a b rxe1 uplink " ]
for g in a a2 b; do
  KERNEL_LOG=$OUT/$g.log kernel_clean "fabric2_${g}_no_kernel_warning" "" "VM: dmesg checked"
done
# b's RDMA that stopped on the way (its last transfers did not run through): where serve's
# goroutines wait says which part of it did, so a run that fails once leaves its cause behind.
if ! has_lines "$OUT/b.log" "VM: uplink client: " "$OUT/b.log" "VM: host rping client rc=0"; then
  kill -QUIT $spid 2>/dev/null && wait $spid 2>/dev/null || true
  echo "serve's goroutines (count, state, first frame of the project's):"
  goroutine_summary "$OUT/serve.log" | head -25
else
  kill $spid 2>/dev/null; wait $spid 2>/dev/null || true
fi
# The capture: every frame the switch took from a port (the ports' in_frames, the guests all
# gone when they were read), nothing malformed, the one frame the corruption fault changed the
# only one with a bad ICRC, the CM exchange named. Then what each fault did, read from the
# capture at the frames the fault list names.
bin/softirdma decode -flows "$OUT/fabric.pcap" > "$OUT/fabric.txt" 2>&1 || true
took=$(awk '$1 == "port" { sub("in_frames=", "", $3); n += $3 } END { print n + 0 }' "$OUT/ports.txt")
decodes_clean() {
  has_lines "$OUT/fabric.txt" "^summary: frames=$took .* icrc_bad=1 malformed=0" "$OUT/fabric.txt" "^cm .*\(disconnected\)" ||
    { tail -3 "$OUT/fabric.txt"; return 1; }
}
note=$(tail -1 "$OUT/fabric.txt") why="the ports took $took frames" verdict fabric2_pcap_decodes_clean decodes_clean
# The host program's traffic is in the same capture: its device's READs of b and b's of it.
verdict fabric2_host_in_capture has_lines "$OUT/fabric.txt" "$H -> $B .*RC_RDMA_READ_REQUEST" \
  "$OUT/fabric.txt" "$B -> $H .*RC_RDMA_READ_REQUEST" "$OUT/fabric.txt" "$B -> $H .*mad=CM/REQ"
fired() { grep -qE "^[0-9]+ fired=$2 .*name=$1\$" "$OUT/faults.txt"; }
FAULT_LIST=$OUT/faults.txt CAPTURE_TXT=$OUT/fabric.txt
# fault_recovered FAULT TOOL LATER: FAULT fired once, on TOOL's a_to_b traffic, which ran through,
# and LATER (the frame that made up for it) was found.
fault_recovered() {
  fired "$1" 1 && tool_ran "$2" a_to_b "^ +65536 +200 " > /dev/null && [ -n "$3" ]
}
# The drop: the frame it took is one of b's READ responses to a (a middle one), and a asked again
# for it: a READ request from a after it, from that response's PSN on.
n=$(frames_of read-middle) line= asked=
if [[ $n =~ ^[0-9]+$ ]]; then
  line=$(frame_line "$n")
  psn=$(frame_psn "$line")
  [[ $line == *" $B -> $A "*" RC_RDMA_READ_RESPONSE_MIDDLE "* ]] && asked=$(after "$n" "$A" "$B" RC_RDMA_READ_REQUEST "$psn")
fi
note="dropped #$n: ${line#* #$n }; asked again: ${asked#* }" why="frames='$n' dropped: '$line', asked again: '$asked'" \
  verdict fault_drop_fired fault_recovered read-middle ib_read_bw "$asked"
# The corruption: the frame it changed is one of a's WRITE packets to b, the one bad ICRC of the
# capture; b dropped it and a sent that PSN again, intact.
n=$(frames_of write-middle) line= again=
if [[ $n =~ ^[0-9]+$ ]]; then
  line=$(frame_line "$n")
  psn=$(frame_psn "$line")
  [[ $line == *" $A -> $B "*" RC_RDMA_WRITE_MIDDLE "*" icrc=bad"* ]] &&
    again=$(after "$n" "$A" "$B" "RC_RDMA_WRITE_(FIRST|MIDDLE|LAST|ONLY)" "$psn")
fi
note="corrupted #$n: ${line#* #$n }; sent again: ${again#* }" why="frames='$n' corrupted: '$line', sent again: '$again'" \
  verdict fault_corrupt_fired fault_recovered write-middle ib_write_bw "$again"
flapped() {
  [ -n "$flap" ] && grep -qE "^[0-9]+ fired=[1-9][0-9]* .*name=flap\$" "$OUT/faults.txt" &&
    has_lines "$OUT/a.log" "VM: flap client: .*Failed status 12" "$OUT/a.log" "VM: after flap client: +65536 +200 " \
      "$OUT/b.log" "VM: after flap server rc=0"
}
verdict fault_flap_fired ran_or_show flap flapped
rm -rf "$HDIR"
finish
