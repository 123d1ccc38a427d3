#!/usr/bin/env bash
# The kernel's other RDMA storage users between two VMs (vm/): NFS over RDMA (NFSv4.2 on port
# 20049), iSER (LIO's target, open-iscsi), SRP (ib_srpt over rdma_cm, ib_srp) and RDS (rds_rdma,
# interop/guest/rds_check.py). One VM serves, the other is the client: it mounts or logs in, moves
# data with every byte verified (fio's verify on the mounted file system or the block device; for
# RDS messages of many sizes between many sockets, each checked by its receiver), then unmounts,
# logs out or closes; neither kernel may warn. Each end is a guest on Linux rxe (rxe0) or on
# softirdma0; two rxe guests are joined by a dgram link, a softirdma guest and an rxe one by the
# softirdma guest's serve on that link, and two softirdma guests are two functions of one serve,
# whose capture and faults cover both.
#
# Usage: interop/guestulp.sh CASE...   CASE is PROTO_SERVER_to_CLIENT[_fault]:
#   PROTO    nfsrdma, iser, srp or rds
#   SERVER, CLIENT   rxe or softirdma (the NFS server, the iSCSI or SRP target, the RDS receiver)
#   _fault   (softirdma_to_softirdma only) the I/O four times more, each under a fault of the
#            serve's fabric: a dropped frame of the protocol's traffic (an RDMA READ response where
#            it reads), a corrupted one, the client's link down for less than the retry budget
#            (flap), then for longer (longflap: the protocol reconnects, and the next I/O completes)
# PASS/FAIL lines device_guest_<PROTO>_<SERVER>_to_<CLIENT>_<check> (setup, io_verify,
# teardown, no_kernel_warning, pcap_decodes_clean) and ..._fault_<drop|corrupt|flap|longflap>;
# then a line per case with its throughput: "<case> throughput: write N MB/s, read N MB/s".
# ULP_SIZE (default 64M) is how much each I/O moves. ULP_RXE_RATE (default 400M) paces a softirdma
# guest's serve toward an rxe guest (serve -rate): unpaced, its RDMA READ responses and SENDs
# outrun what an rxe guest under TCG takes in, and rxe asks again for what it dropped (an NFS
# client on softirdma0 then wrote at half an rxe client's speed to an rxe server); empty: unpaced.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: $0 PROTO_SERVER_to_CLIENT[_fault]... (PROTO nfsrdma|iser|srp|rds, each end rxe|softirdma)" >&2; exit 2; }
for c in "$@"; do
  [[ $c =~ ^(nfsrdma|iser|srp|rds)_(softirdma|rxe)_to_(softirdma|rxe)(_fault)?$ ]] ||
    { echo "unknown case '$c' (PROTO_SERVER_to_CLIENT[_fault]: PROTO nfsrdma|iser|srp|rds, each end rxe|softirdma)" >&2; exit 2; }
  [[ $c != *_fault ]] || [[ $c == *_softirdma_to_softirdma_fault ]] ||
    { echo "case '$c': faults are the fabric's, so both ends are softirdma" >&2; exit 2; }
done
SIZE=${ULP_SIZE:-64M} RXE_RATE=${ULP_RXE_RATE-400M}
[[ $SIZE =~ ^[1-9][0-9]{0,5}[kKMG]?$ ]] || { echo "ULP_SIZE must be a size like 64M, not '$SIZE'" >&2; exit 2; }
. interop/guestlib.sh
guest_setup device_guest_ulp_module_build
echo "interop NFS over RDMA, iSER, SRP and RDS; logs in $OUT"
SIP=192.168.77.1 CIP=192.168.77.2
FAULTS="drop corrupt flap longflap"

# The guests' scripts. The server's stays up until the client's guest has ended (the harness
# then creates /share/done); the client's waits for the server to be ready (/share/server-ready),
# sets up, moves data, tears down. Both end with their kernel's log. $1 is the protocol, $2
# (client) the faults to go through.
server_script() {
  cat interop/guest/lib.sh interop/guest/ulp.sh - <<SCRIPT
SIP=$SIP CIP=$CIP
${1}_server > /tmp/server 2>&1
cat /tmp/server
! grep -q "VM: server ready" /tmp/server || touch /share/server-ready
wait_for 900 test -e /share/done
echo "VM: client done"
[ ! -f /tmp/rds.log ] || sed 's/^/VM: rds: /' /tmp/rds.log
dmesg | sed 's/^/VM: dmesg: /'
echo "VM: dmesg checked"
SCRIPT
}
client_script() {
  cat interop/guest/lib.sh interop/guest/ulp.sh - <<SCRIPT
SIP=$SIP CIP=$CIP
! type ${1}_hello > /dev/null 2>&1 || ${1}_hello
wait_for 600 test -e /share/server-ready || echo "VM: the server is not ready"
${1}_client
if [ -n "\$M" ] && [ -z "$2" ]; then
  ulp_io verify $SIZE
elif [ -n "\$M" ]; then
  for f in $2; do
    echo "VM: fault \$f next"
    wait_for 300 test -e /share/go-\$f || echo "VM: no go for \$f"
    ulp_io \$f $SIZE
    [ \$f != longflap ] || ulp_io after-longflap $SIZE
  done
fi
${1}_down
dmesg | sed 's/^/VM: dmesg: /'
echo "VM: dmesg checked"
SCRIPT
}

# boot ROLE DEVICE IP MAC: one guest in the background, its console in $OUT/<case>.<role>.log,
# its pid in <role>_pid. A softirdma guest beside an rxe one gets a serve of its own, its link
# to the rxe guest paced to RXE_RATE (its capture <case>.<role>.pcap); two softirdma guests
# share $fabric's serve.
boot() {
  local role=$1 dev=$2 ip=$3 mac=$4 mine theirs sock args=() env=()
  if [ "$role" = server ]; then mine=$p1 theirs=$p2; else mine=$p2 theirs=$p1; fi
  if [ "$dev" = softirdma ] && [ -n "$fabric" ]; then
    args=(vm.softirdma=$ip/24) env=(VM_SOCKET="$OUT/$case.$role.sock" VM_MAC0=$mac)
  elif [ "$dev" = softirdma ]; then
    sock=$OUT/$case.$role.sock
    bin/softirdma serve -function name=$role,socket="$sock",ip=$ip -link "dgram:127.0.0.1:$mine,127.0.0.1:$theirs" \
      ${RXE_RATE:+-rate $RXE_RATE} -pcap "$OUT/$case.$role.pcap" > "$OUT/$case.$role.serve.out" 2> "$OUT/$case.$role.serve.log" &
    pids+=($!) serves+=($!)
    waitfor "$OUT/$case.$role.serve.out" "function $role .* listening on" 30 $! || { cat "$OUT/$case.$role.serve.log"; return 1; }
    pcaps+=("$OUT/$case.$role.pcap")
    args=(vm.softirdma=$ip/24) env=(VM_SOCKET="$sock" VM_MAC0=$mac)
  else
    args=(vm.rxe=1 vm.eth1=$ip/24) env=(VM_LINK="$mine,$theirs" VM_MAC0=$mac VM_MAC1=52:54:00:00:77:${mac##*:})
    # Two rxe guests: the server's QEMU captures their link, so that what rxe did is on record.
    if [ "$role$client" = serverrxe ]; then env+=(VM_PCAP="$OUT/$case.link.pcap"); pcaps+=("$OUT/$case.link.pcap"); fi
  fi
  env "${env[@]}" VM_SHARE="$OUT/$case.share" VM_SCRIPT="$OUT/$case.$role.sh" \
    timeout 1800 bash vm/run.sh "${args[@]}" > "$OUT/$case.$role.log" 2>&1 &
  pids+=($!)
  eval "${role}_pid=$!"
}

# The fabric of a softirdma_to_softirdma case: one serve, a function for each guest (server,
# client), its capture and control socket.
start_fabric() {
  bin/softirdma serve -function name=server,socket="$OUT/$case.server.sock",ip=$SIP \
    -function name=client,socket="$OUT/$case.client.sock",ip=$CIP \
    -pcap "$OUT/$case.pcap" -control "$OUT/$case.ctl" > "$OUT/$case.serve.out" 2> "$OUT/$case.serve.log" &
  pids+=($!) serves+=($!)
  waitfor "$OUT/$case.serve.out" "control socket" 30 $! && waitfor "$OUT/$case.serve.out" "function client .* listening on" 30 $! ||
    { cat "$OUT/$case.serve.log"; return 1; }
  pcaps+=("$OUT/$case.pcap")
}
fault() { bin/softirdma fault -socket "$OUT/$case.ctl" "$@"; }

# target PROTO FAULT: what FAULT (drop, corrupt) breaks of the protocol's data, as "SENDER FROM
# TO OPCODE NTH": the sending function, its address and the receiver's, the frames' opcode, and
# which of them. Where the protocol reads (an NFS WRITE's read chunks, an iSCSI or SCSI write's
# data), the server's RDMA READ of the client's buffer: a response from the client dropped; one
# of the server's RDMA WRITEs of the read-back corrupted. RDS moves all in SENDs.
target() {
  case $1:$2 in
    rds:drop) echo "client $CIP $SIP SEND_MIDDLE 40" ;;
    rds:corrupt) echo "client $CIP $SIP SEND_MIDDLE 60" ;;
    *:drop) echo "client $CIP $SIP RDMA_READ_RESPONSE_MIDDLE 40" ;;
    *:corrupt) echo "server $SIP $CIP RDMA_WRITE_MIDDLE 60" ;;
  esac
}

# run_faults PROTO: each fault once the client says it is next, then its I/O goes. A flap starts
# once that I/O moves (a probe, a 1 ms delay of one of the client's frames, has fired).
run_faults() {
  local f sender op nth
  for f in $FAULTS; do
    waitfor "$c" "VM: fault $f next" 900 "$client_pid" || return
    case $f in
      drop | corrupt)
        read -r sender _ _ op nth <<< "$(target "$1" $f)"
        fault add "$f from=$sender opcode=$op nth=$nth name=$f" > /dev/null ;;
      flap | longflap) fault add delay from=client delay=1ms count=1 name=probe-$f > /dev/null ;;
    esac
    touch "$OUT/$case.share/go-$f"
    case $f in
      flap) POLL=0.1 wait_until 300 "$client_pid" probed "$OUT/$case.ctl" probe-$f && fault add "flap from=client for=500ms name=$f" > /dev/null ;;
      longflap) POLL=0.1 wait_until 300 "$client_pid" probed "$OUT/$case.ctl" probe-$f && fault add "flap from=client for=20s name=$f" > /dev/null ;;
    esac
    waitfor "$c" "VM: io $f rc=" 900 "$client_pid" > /dev/null || true
  done
}

# proved PROTO FAULT: FAULT fired during its I/O, which then completed with every byte verified,
# and the capture shows what the fault did and how the two ends made up for it (a fault of the
# kernel's own code that the ends did not recover from shows there too):
#   drop      the frame it took is the one asked for, and the same PSN came again: a READ
#             request from the server from that response's PSN on, or the client's SEND again
#   corrupt   the frame it changed has a bad ICRC, and the same PSN came again intact
#   flap      the client's link was down for 500 ms: the first RoCEv2 frame it stopped came
#             again, on the same connection (no new CM REQ before the next fault)
#   longflap  20 s, more than the retry budget: a new connection (CM REQ, REP, RTU) after it,
#             and the next I/O completed too
proved() {
  local proto=$1 f=$2 n first line psn from to ops again req rtu next
  has_lines "$c" "VM: io $f rc=0" || { why="its I/O failed"; return 1; }
  n=$(frames_of $f) first=${n%%,*}
  [[ $first =~ ^[0-9]+$ ]] || { why="it never fired"; return 1; }
  line=$(frame_line "$first") psn=$(frame_psn "$line")
  case $f in
    drop | corrupt)
      read -r _ from to ops _ <<< "$(target "$proto" $f)"
      ops=RC_$ops
      [[ $line == *" $from -> $to "*" $ops "* ]] || { why="#$first is not $ops from $from: $line"; return 1; }
      [ $f = drop ] || [[ $line == *" icrc=bad"* ]] || { why="#$first has no bad ICRC: $line"; return 1; }
      if [ $ops = RC_RDMA_READ_RESPONSE_MIDDLE ]; then
        again=$(after "$first" "$to" "$from" RC_RDMA_READ_REQUEST "$psn")
      else
        again=$(after "$first" "$from" "$to" "${ops%_MIDDLE}_(FIRST|MIDDLE|LAST|ONLY)" "$psn")
      fi
      [ -n "$again" ] || { why="nothing made up for #$first: $line"; return 1; }
      note="$f #$first ${line#* #$first }; again ${again#* }" ;;
    flap)
      # It stops whatever the client sends, a neighbour's ARP or ND too, which the capture's
      # text (RoCEv2 frames only) does not list: the first RoCEv2 frame it stopped counts.
      for first in ${n//,/ }; do
        line=$(frame_line "$first")
        [ -z "$line" ] || break
      done
      [ -n "$line" ] || { why="it stopped no RoCEv2 frame (#$n)"; return 1; }
      psn=$(frame_psn "$line")
      read -r _ _ from _ to _ ops _ <<< "$line"
      again=$(after "$first" "$from" "$to" "$ops" "$psn")
      [ -n "$again" ] || { why="#$first never came again: $line"; return 1; }
      next=$(frames_of probe-longflap) next=${next%%,*}
      req=$(awk -v a="$first" -v b="${next:-999999999}" '{ k = substr($2, 2) + 0 } k > a && k < b && / cm=REQ / { print; exit }' "$CAPTURE_TXT")
      [ -z "$req" ] || { why="it reconnected: $req"; return 1; }
      note="stopped #$n, first ${line#* #$first }; again ${again#* }" ;;
    longflap)
      has_lines "$c" "VM: io after-longflap rc=0" || { why="the I/O after it failed"; return 1; }
      req=$(awk -v a="$first" '{ k = substr($2, 2) + 0 } k > a && / cm=REQ / { print; exit }' "$CAPTURE_TXT")
      rtu=$(awk -v a="$first" '{ k = substr($2, 2) + 0 } k > a && / cm=RTU / { print; exit }' "$CAPTURE_TXT")
      [ -n "$req" ] && [ -n "$rtu" ] || { why="no new connection after #$first"; return 1; }
      note="link down at #$first ($(cut -c12-19 <<< "$line")), new connection: REQ $(awk '{ print $2, substr($1, 12, 8) }' <<< "$req"), RTU $(awk '{ print $2, substr($1, 12, 8) }' <<< "$rtu")" ;;
  esac
}

declare -A wbw rbw msgs
port=9401
for case in "$@"; do
  proto=${case%%_*} rest=${case#*_} faults= fabric= serves=() pcaps=()
  [[ $rest != *_fault ]] || { faults=$FAULTS rest=${rest%_fault}; }
  server=${rest%%_to_*} client=${rest##*_to_}
  [ "$server$client" != softirdmasoftirdma ] || fabric=1
  p1=$port p2=$((port + 1)) port=$((port + 2))
  mkdir -p "$OUT/$case.share"
  cp interop/guest/rds_check.py "$OUT/$case.share/"
  server_script "$proto" > "$OUT/$case.server.sh"
  client_script "$proto" "$faults" > "$OUT/$case.client.sh"
  s="$OUT/$case.server.log" c="$OUT/$case.client.log" n=device_guest_${proto}_$rest${faults:+_fault}
  if { [ -z "$fabric" ] || start_fabric; } && boot server "$server" $SIP 52:54:00:00:0a:10 && boot client "$client" $CIP 52:54:00:00:0a:20; then
    [ -z "$faults" ] || run_faults "$proto"
    wait "$client_pid"
    touch "$OUT/$case.share/done"
    wait "$server_pid"
    [ -z "$fabric" ] || { fault list > "$OUT/$case.faults" 2>&1; sed 's/^/faults: /' "$OUT/$case.faults"; }
  else
    verdict "${n}_serve" false
    continue
  fi
  [ ${#serves[@]} = 0 ] || { kill "${serves[@]}" 2> /dev/null; wait "${serves[@]}" 2> /dev/null; }
  grep -aq "VM: server ready" "$s" || grep -a "VM: " "$s" | grep -v dmesg | tail -20
  check "${n}_server_setup" "VM: server ready" "$s"
  check "${n}_client_setup" "VM: client ready" "$c"
  if [ -z "$faults" ]; then
    check "${n}_io_verify" "VM: io verify rc=0" "$c"
    # fio's verified I/O: its write phase's MB/s, and the read phase's that checked every block.
    wbw[$case]=$(grep -aoE "VM: io verify: +WRITE: bw=[^(]*\([0-9.]+[kMG]B/s" "$c" | sed -E 's/.*\(//; s/B\/s//')
    rbw[$case]=$(grep -aoE "VM: io verify: +READ: bw=[^(]*\([0-9.]+[kMG]B/s" "$c" | sed -E 's/.*\(//; s/B\/s//')
    msgs[$case]=$(grep -aoE "VM: io verify: .* all checked, .* ([0-9.]+) MB/s" "$c" | sed -E 's/.* ([0-9.]+) MB\/s$/\1/')
    grep -aE "VM: io verify: +(READ|WRITE|verify: )" "$c" | sed "s/^VM: /$case /"
  else
    FAULT_LIST=$OUT/$case.faults CAPTURE_TXT=$OUT/$case.pcap.txt
    bin/softirdma decode "$OUT/$case.pcap" > "$CAPTURE_TXT" 2>&1
    for f in $FAULTS; do
      note= why=
      verdict "${n}_$f" proved "$proto" $f
    done
  fi
  check "${n}_teardown" "VM: teardown rc=0" "$c"
  # A guest on softirdma0 must not warn; what a guest on rxe0 says is Linux rxe's, and noted.
  for role in server client; do
    log=$s dev=$server
    [ $role = server ] || log=$c dev=$client
    if [ "$dev" = softirdma ]; then
      KERNEL_LOG=$log kernel_clean "${n}_${role}_no_kernel_warning" "" "VM: dmesg checked"
    elif ! why= kernel_quiet "$log" "" "VM: dmesg checked" > "$OUT/quiet.out" 2>&1; then
      echo "NOTE ${n}_$role on rxe0: its kernel warned: ${why:-$(grep -m1 -aE 'WARNING|BUG|Oops|blocked for' "$OUT/quiet.out" | sed -E 's/^.*\] //')}"
      sed 's/^/  /' "$OUT/quiet.out"
    fi
  done
  for p in "${pcaps[@]}"; do
    [ -s "$p.txt" ] || bin/softirdma decode "$p" > "$p.txt" 2>&1
    label=${p#"$OUT/$case."} label=${label%pcap}
    note=$(tail -1 "$p.txt") verdict "${n}_${label:-fabric.}pcap_decodes_clean" has_lines "$p.txt" '^summary: frames=[1-9].* malformed=0'
  done
done
# mbs FIGURE: fio's 12.3M (or k, G) as MB/s.
mbs() { awk -v v="${1%?}" -v u="${1: -1}" 'BEGIN { printf "%.1f", v * (u == "k" ? 0.001 : u == "G" ? 1000 : 1) }'; }
for case in "$@"; do
  [ -z "${msgs[$case]:-}" ] || echo "$case throughput: ${msgs[$case]} MB/s of messages, each checked"
  [ -n "${wbw[$case]:-}" ] && [ -n "${rbw[$case]:-}" ] || continue
  echo "$case throughput: write $(mbs "${wbw[$case]}") MB/s, read $(mbs "${rbw[$case]}") MB/s"
done
# The client on softirdma0 beside the client on rxe0, against the same server: from this run, or
# for an rxe server without an rxe client here, from the reference (make ulp-reference).
REF=interop/testdata/ulp-rxe.txt
figures() {
  if [ -n "${wbw[$1]:-}" ] && [ -n "${rbw[$1]:-}" ]; then
    echo "$(mbs "${wbw[$1]}") $(mbs "${rbw[$1]}")"
  elif [ -n "${msgs[$1]:-}" ]; then
    echo "${msgs[$1]}"
  elif [[ $1 == *_rxe_to_rxe ]] && [ -f $REF ]; then
    sed -nE "s/^$1 throughput: (write ([0-9.]+) MB\/s, read ([0-9.]+) MB\/s|([0-9.]+) MB\/s of messages.*)\$/\2 \3\4 (reference)/p" $REF | sed 's/^ //'
  fi
}
for proto in nfsrdma iser srp rds; do
  for tg in rxe softirdma; do
    a=$(figures ${proto}_${tg}_to_softirdma) b=$(figures ${proto}_${tg}_to_rxe)
    [ -n "$a" ] && [ -n "$b" ] || continue
    ref=
    [[ $b != *"(reference)" ]] || { ref=" (reference)" b=${b% (reference)}; }
    read -r aw ar <<< "$a"
    read -r bw br <<< "$b"
    if [ $proto = rds ]; then
      echo "$proto server on $tg: client on softirdma0 $aw MB/s, on rxe0 $bw MB/s$ref; ratio $(awk -v a="$aw" -v b="$bw" 'BEGIN { printf "%.2f", a / b }')"
    else
      echo "$proto server on $tg: client on softirdma0 write $aw MB/s, read $ar MB/s; on rxe0 write $bw MB/s, read $br MB/s$ref; ratios $(awk -v a="$aw" -v b="$bw" 'BEGIN { printf "%.2f", a / b }') and $(awk -v a="$ar" -v b="$br" 'BEGIN { printf "%.2f", a / b }')"
    fi
  done
done
finish
