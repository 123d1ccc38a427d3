#!/usr/bin/env bash
# Two VMs on one `softirdma serve` (vm/): two functions, a and b, on the fabric inside serve, each
# VM with the guest driver (hw/linux) on its own. In both directions (a_to_b: a's tool is the
# client, b's the server; b_to_a the other way): ibv_rc_pingpong, ib_write_bw, ib_read_bw,
# ib_send_bw and ib_atomic_bw (their TCP exchange over the functions' netdevs, through the
# fabric too), and rping through rdma_cm a_to_b; the fabric's pcap decodes clean and names the
# CM exchange; neither guest's kernel warns. Faults on demand (serve -fault, the control socket):
# a READ response dropped mid-transfer and a WRITE packet corrupted, both recovered; b's link
# down for longer than a's retry budget, a's QP failing with RETRY_EXC_ERR and the next
# connection working; each fault's count checked. Prints PASS/FAIL fabric2_<case>, fault_<kind>_fired.
set -euo pipefail
cd "$(dirname "$0")/.."
. interop/guestlib.sh
guest_setup fabric2_module_build
echo "interop two VMs on one serve; logs in $OUT"
A=192.168.77.1 B=192.168.77.2
SA=$(mktemp -u /tmp/softirdma-a-XXXXXX.sock) SB=$(mktemp -u /tmp/softirdma-b-XXXXXX.sock)
# Two faults from the start, each firing once on the traffic of one case: a READ response in the
# middle of b's answer to a's ib_read_bw dropped (a asks again), a WRITE packet of a's ib_write_bw
# corrupted (b drops it by its ICRC and NAKs, a sends again). Both transfers must complete.
bin/softirdma serve -function name=a,socket=$SA,ip=$A -function name=b,socket=$SB,ip=$B \
  -fault "drop from=b opcode=RDMA_READ_RESPONSE_MIDDLE nth=3 name=read-middle" \
  -fault "corrupt from=a opcode=RDMA_WRITE_MIDDLE nth=5 name=write-middle" \
  -pcap "$OUT/fabric.pcap" -control "$OUT/ctl.sock" > "$OUT/serve.out" 2> "$OUT/serve.log" &
spid=$!
pids+=($spid)
waitfor "$OUT/serve.out" "control socket" 30 $spid && waitfor "$OUT/serve.out" "function b .* listening on" 30 $spid ||
  { cat "$OUT/serve.log"; echo "FAIL fabric2_serve"; exit 1; }

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
  cat interop/guest/lib.sh - <<SCRIPT
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
# rping through rdma_cm: a is the client of b's server.
if [ $me = a ]; then
  for i in \$(seq 60); do timeout 60 rping -c -a $peer -v -V -C 10 > /tmp/rp 2>&1; rc=\$?; [ \$rc = 0 ] && break; sleep 1; done
  echo "VM: rping client rc=\$rc"; grep -c 'ping data: rdma-ping-' /tmp/rp | sed 's/^/VM: rping pings /'
else
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
dmesg | grep -E 'WARNING|BUG|Oops|Call Trace|softirdma' | sed 's/^/VM: dmesg: /'
echo "VM: dmesg checked"
SCRIPT
}
guest_script b $B $A server > "$OUT/b.sh"
guest_script a $A $B client > "$OUT/a.sh"
VM_SCRIPT="$OUT/b.sh" VM_SOCKET=$SB VM_MAC0=52:54:00:00:0b:10 timeout 900 bash vm/run.sh vm.softirdma=$B/24 > "$OUT/b.log" 2>&1 &
bpid=$!; pids+=($bpid)
VM_SCRIPT="$OUT/a.sh" VM_SOCKET=$SA VM_MAC0=52:54:00:00:0a:10 timeout 900 bash vm/run.sh vm.softirdma=$A/24 > "$OUT/a.log" 2>&1 &
apid=$!; pids+=($apid)
# The flap: once a's long transfer moves (a probe fault, a 1 ms delay of one of its WRITE
# packets, has fired), b's link goes down for 20 s.
flap=
if waitfor "$OUT/a.log" "VM: flap next" 600 $apid; then
  bin/softirdma fault -socket "$OUT/ctl.sock" add delay from=a opcode=RDMA_WRITE_MIDDLE delay=1ms count=1 name=probe > /dev/null
  for i in $(seq 1200); do
    bin/softirdma fault -socket "$OUT/ctl.sock" list | grep -q "fired=1 .*name=probe" && break
    kill -0 $apid 2>/dev/null || break
    sleep 0.1
  done
  bin/softirdma fault -socket "$OUT/ctl.sock" add flap from=b for=20s name=flap > /dev/null && flap=1
fi
wait $apid || true
wait $bpid || true
bin/softirdma fault -socket "$OUT/ctl.sock" list > "$OUT/faults.txt" 2>&1 || true
sed 's/^/faults: /' "$OUT/faults.txt"

fail=0
results=$(while IFS='|' read -r t opts result; do
  for dir in a_to_b b_to_a; do
    c=${dir%%_to_*} s=${dir##*_to_}
    if grep -aqE "VM: $c client $t: .*${result#^}" "$OUT/$c.log" && grep -aq "VM: $s server $t rc=0" "$OUT/$s.log"; then
      echo "PASS fabric2_${t}_$dir"
    else
      grep -aE "VM: ($c client|$s server) $t" "$OUT/$c.log" "$OUT/$s.log" | tail -3
      echo "FAIL fabric2_${t}_$dir"
    fi
  done
done <<< "$TOOLS")
echo "$results"
grep -q "^FAIL" <<< "$results" && fail=1
if grep -aq "VM: rping client rc=0" "$OUT/a.log" && grep -aq "VM: rping pings 10" "$OUT/a.log" && grep -aq "VM: rping server rc=0" "$OUT/b.log"; then
  echo "PASS fabric2_rping_a_to_b"
else
  echo "FAIL fabric2_rping_a_to_b"; fail=1
fi
for g in a b; do
  KERNEL_LOG=$OUT/$g.log kernel_clean "fabric2_${g}_no_kernel_warning" "" "VM: dmesg checked"
done
kill $spid 2>/dev/null; wait $spid 2>/dev/null || true
# The capture: nothing malformed, the one frame the corruption fault changed the only one with a
# bad ICRC, the CM exchange named; b's dropped READ response sent again (a retransmission on a
# flow from b).
bin/softirdma decode -flows "$OUT/fabric.pcap" > "$OUT/fabric.txt" 2>&1 || true
if grep -q "^summary: .* icrc_bad=1 malformed=0" "$OUT/fabric.txt" && grep -q "^cm .*(disconnected)" "$OUT/fabric.txt"; then
  echo "PASS fabric2_pcap_decodes_clean ($(tail -1 "$OUT/fabric.txt"))"
else
  tail -3 "$OUT/fabric.txt"; echo "FAIL fabric2_pcap_decodes_clean"; fail=1
fi
fired() { grep -qE "^[0-9]+ fired=$2 .*name=$1\$" "$OUT/faults.txt"; }
# a asked again for what the dropped response carried: its READ flow (the one whose rkey did
# READs) shows a retransmitted request.
reread=$(awk -v f="  $A -> $B " '/^  [0-9]/ { r = index($0, f) == 1 && $0 ~ / retransmits=[1-9]/; next }
  /^    rkey .* ops=READ/ && r { print "yes"; exit } /^conn / { r = 0 }' "$OUT/fabric.txt")
if fired read-middle 1 && grep -q "PASS fabric2_ib_read_bw_a_to_b" <<< "$results" && [ "$reread" = yes ]; then
  echo "PASS fault_drop_fired"
else
  echo "FAIL fault_drop_fired"; fail=1
fi
if fired write-middle 1 && grep -q "PASS fabric2_ib_write_bw_a_to_b" <<< "$results"; then
  echo "PASS fault_corrupt_fired"
else
  echo "FAIL fault_corrupt_fired"; fail=1
fi
if [ -n "$flap" ] && grep -qE "^[0-9]+ fired=[1-9][0-9]* .*name=flap\$" "$OUT/faults.txt" &&
  grep -aq "VM: flap client: .*Failed status 12" "$OUT/a.log" &&
  grep -aqE "VM: after flap client: +65536 +200 " "$OUT/a.log" && grep -aq "VM: after flap server rc=0" "$OUT/b.log"; then
  echo "PASS fault_flap_fired"
else
  grep -a "flap" "$OUT/a.log" "$OUT/b.log" | tail -5
  echo "FAIL fault_flap_fired"; fail=1
fi
exit $fail
