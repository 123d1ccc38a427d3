#!/usr/bin/env bash
# Interop with Linux Soft-RoCE: a TCG guest (Linux 6.12, rdma_rxe, rdma-core tools) whose eth1 is a
# QEMU -netdev dgram link to softirdma. Each case runs rdma-core's tool in the guest against
# softirdma on the host, checks both ends succeeded, and decodes softirdma's pcap of the link
# (0 bad ICRC, 0 malformed). QEMU and the guest come from vm/provision.sh (about 90 s from
# nothing, into $VM_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
. interop/guestlib.sh
need_iproute2 ss
run_or_exit "$OUT/provision.log" "interop: provisioning failed" bash vm/provision.sh
go build -o bin/softirdma ./cmd/softirdma
SI=bin/softirdma
# softirdma's end of the link to the guest.
LINK="-link dgram:127.0.0.1:9002,127.0.0.1:9001 -ip 192.168.77.1 -mac 02:00:00:00:00:01"

# guest_start LINE: boot the guest in the background running LINE after interop/guest/rxe.sh:
# rxe0 on its eth1 at 192.168.77.2, a dgram link to softirdma at 127.0.0.1:9002 (softirdma
# sends to 9001), the host's 127.0.0.1:18516 forwarded to its 18515; its console goes to
# $OUT/guest.log, its pid is gpid.
guest_start() {
  { cat interop/guest/rxe.sh; echo "$1"; } > "$OUT/guest.sh"
  VM_SCRIPT="$OUT/guest.sh" VM_LINK=9001,9002 VM_FWD=18516 \
    timeout 300 bash vm/run.sh vm.rxe=1 vm.eth1=192.168.77.2/24 > "$OUT/guest.log" 2>&1 &
  gpid=$!
}

# guest_wait: wait for the guest to power off, and print its VM lines.
guest_wait() {
  wait "$gpid" || true
  grep '^VM: ' "$OUT/guest.log" || true
}

# owns_18515 PID: softirdma (PID) itself listens on the host's port 18515.
owns_18515() { ss -ltnpH 'sport = :18515' | grep -q "pid=$1,"; }

# host_ready READY PID: softirdma (PID), a server, is ready: READY tcp, it listens on the host's
# 18515 (another program on that port, a second test run, is reported instead of being
# mistaken for it); else it printed a line READY.
host_ready() {
  [ "$1" != tcp ] && { waitfor "$OUT/si.log" "$1" 60 "$2"; return; }
  wait_until 60 "$2" owns_18515 "$2" && return
  echo "  softirdma never listened on 18515"; ss -ltnpH 'sport = :18515' | sed 's/^/    in use: /'
  return 1
}

# guest_client TAG READY TOOL ARGS...: softirdma ARGS as the server (its output in si.log) and,
# once it is READY (host_ready), the guest's TOOL (a command line) as its client, saying
# "VM: TAG rc=N". rc is softirdma's exit status.
guest_client() {
  local tag=$1 ready=$2 tool=$3 pid
  shift 3
  rc=0 TAG=$tag
  $SI "$@" -timeout 200s $LINK -pcap "$OUT/$CASE.pcap" > "$OUT/si.log" 2>&1 &
  pid=$!
  if host_ready "$ready" $pid; then
    guest_start "client $tag timeout 200 $tool"
    guest_wait
  else
    kill $pid 2>/dev/null || true
  fi
  wait $pid || rc=$?
}

# guest_server TAG HOW TOOL ARGS...: the guest's TOOL as the server, saying "VM: TAG rc=N"; once
# it is up, softirdma ARGS as its client. HOW tcp: up once it listens on its exchange port
# (the client comes through the forward); cm: once it starts (the client reaches it through
# rdma_cm, trying again with -wait until it listens). rc is softirdma's exit status.
guest_server() {
  local tag=$1 how=$2 tool=$3 up="VM: listening" run=serve
  shift 3
  rc=0 TAG=$tag
  [ "$how" = tcp ] || up="VM: $tag server starting" run=serve_cm
  guest_start "$run $tag timeout 200 $tool"
  if waitfor "$OUT/guest.log" "$up" 120 "$gpid"; then
    $SI "$@" -timeout 200s $LINK -pcap "$OUT/$CASE.pcap" > "$OUT/si.log" 2>&1 || rc=$?
  else
    rc=1
  fi
  guest_wait
}

gid_arg() { if [ "$1" = 0 ]; then echo 0; else echo '$GIDX'; fi; }

# pingpong_case ROLE SIZE N GID LOSS [TRANSPORT]: ibv_<TRANSPORT>_pingpong (rc, uc or ud) in the
# guest as ROLE (guest_client: it reaches the host's 127.0.0.1:18515 as 10.0.2.2:18515 through
# slirp; guest_server: softirdma comes through the forward 127.0.0.1:18516), softirdma pingpong
# on the host, both on GID index GID; softirdma's receive side loses LOSS of the frames.
pingpong_case() {
  local size=$2 n=$3 g=$4 loss=$5 tr=${6:-rc}
  local tool="ibv_${tr}_pingpong -d rxe0 -g $(gid_arg "$g") -s $size -n $n"
  local si=(-transport "$tr" -s "$size" -n "$n" -g "$g" -loss "$loss")
  case $1 in
    guest_client) guest_client pingpong tcp "$tool 10.0.2.2" pingpong -server "${si[@]}" -p 18515 ;;
    guest_server) guest_server pingpong tcp "$tool" pingpong 127.0.0.1 "${si[@]}" -p 18516 -wait 30s ;;
  esac
}

# perf_case ROLE TEST SIZE N LOSS [CONN [EXTRA...]]: perftest's ib_<TEST>_bw in the guest as ROLE,
# softirdma perf on the host, both with connection type CONN (default RC); EXTRA goes to
# softirdma.
perf_case() {
  local test=$2 size=$3 n=$4 loss=$5 conn=${6:-RC} sflag=""
  [ "$test" = atomic ] || sflag="-s $size"
  local tool="ib_${test}_bw -d rxe0 -x \$GIDX -F -c $conn -n $n $sflag"
  # shellcheck disable=SC2206 # sflag and EXTRA are words
  local si=(-c "$conn" -n "$n" $sflag "${@:7}" -loss "$loss")
  case $1 in
    guest_client) guest_client perf tcp "$tool 10.0.2.2" perf "$test" -server -p 18515 "${si[@]}" ;;
    guest_server) guest_server perf tcp "$tool" perf "$test" 127.0.0.1 -p 18516 "${si[@]}" -wait 30s ;;
  esac
}

# lat_case ROLE SIZE N: perftest's ib_send_lat in the guest as ROLE against softirdma perf
# send_lat on the host: N SENDs of SIZE bytes back and forth, one in flight; softirdma prints its
# own latency line, as each side of perftest's does.
lat_case() {
  local tool="ib_send_lat -d rxe0 -x \$GIDX -F -n $3 -s $2" si=(-n "$3" -s "$2")
  case $1 in
    guest_client) guest_client perf tcp "$tool 10.0.2.2" perf send_lat -server -p 18515 "${si[@]}" ;;
    guest_server) guest_server perf tcp "$tool" perf send_lat 127.0.0.1 -p 18516 "${si[@]}" -wait 30s ;;
  esac
  grep -qE "^ $2 +$3([[:space:]]+[0-9]+\.[0-9]+){7}" "$OUT/si.log" || { echo "  softirdma printed no latency line for $3 x $2 B"; rc=1; }
}

# perf_r_case ROLE TEST SIZE N: perftest with -R: no TCP; both QPs connected through rdma_cm at
# the server's RoCE address, the exchange on a QP of its own.
perf_r_case() {
  local tool="ib_$2_bw -d rxe0 -F -R -n $4 -s $3" si=(-R -n "$4" -s "$3")
  case $1 in
    guest_client) guest_client perf "listening through rdma_cm" "$tool 192.168.77.1" perf "$2" -server "${si[@]}" ;;
    guest_server) guest_server perf cm "$tool" perf "$2" 192.168.77.2 "${si[@]}" -wait 60s ;;
  esac
  cm_named || rc=1
}

# rping_case ROLE: rping through rdma_cm, ten pings printed on both ends and validated by the
# client (-V); softirdma's server is on its own address (-a).
rping_case() {
  case $1 in
    guest_client)
      guest_client rping "listening on" "rping -c -a 192.168.77.1 -v -V -C 10" rping -s -a 192.168.77.1 -v -C 10
      cp "$OUT/guest.log" "$OUT/$CASE.client.log"; cp "$OUT/si.log" "$OUT/$CASE.server.log" ;;
    guest_server)
      guest_server rping cm "rping -s -a 192.168.77.2 -v -C 10" rping -c -a 192.168.77.2 -v -V -C 10 -wait 60s
      cp "$OUT/si.log" "$OUT/$CASE.client.log"; cp "$OUT/guest.log" "$OUT/$CASE.server.log" ;;
  esac
  check_pings || rc=1
  cm_named || rc=1
}

# cm_case ROLE TOOL ARGS...: an rdma_cm tool (ucmatose, udaddy) in the guest as ROLE, softirdma's
# peer of it on the host, both with ARGS; both must end with return status 0.
cm_case() {
  local role=$1 tool=$2
  shift 2
  case $role in
    guest_client) guest_client "$tool" "listening on" "$tool -s 192.168.77.1 $*" "$tool" "$@" ;;
    guest_server) guest_server "$tool" cm "$tool $*" "$tool" -s 192.168.77.2 "$@" -wait 60s ;;
  esac
  grep -q '^return status 0$' "$OUT/si.log" || rc=1
  cm_named || rc=1
}

# check_pings: ten pings on each end of an rping case, the client's validated (-V).
check_pings() {
  local c s
  c=$(grep -c '^ping data: rdma-ping-' "$OUT/$CASE.client.log" || true)
  s=$(grep -c '^server ping data: rdma-ping-' "$OUT/$CASE.server.log" || true)
  if [ "$c" = 10 ] && [ "$s" = 10 ] && ! grep -q mismatch "$OUT/$CASE.client.log"; then return 0; fi
  echo "  pings: client $c, server $s (want 10 each)"; return 1
}

# cm_named: the capture's CM messages are named by decode (rdma_cm cases).
cm_named() {
  $SI decode "$OUT/$CASE.pcap" > "$OUT/cm-decode.log" 2>&1
  grep -q ' cm=' "$OUT/cm-decode.log" && return 0
  echo "  decode named no CM message in $OUT/$CASE.pcap"; return 1
}

# case_ok: softirdma ended well (rc 0), the guest said "VM: TAG rc=0", and decode reads the
# case's pcap; its last line is printed.
case_ok() {
  local ok=0 pcap=$OUT/$CASE.pcap
  [ "$rc" = 0 ] || { echo "  softirdma exited $rc:"; sed 's/^/    /' "$OUT/si.log"; ok=1; }
  grep -q "VM: $TAG rc=0" "$OUT/guest.log" ||
    { echo "  the guest did not report 'VM: $TAG rc=0':"; tail -20 "$OUT/guest.log" | sed 's/^/    /'; ok=1; }
  if ! $SI decode "$pcap" > "$OUT/decode.log"; then echo "  decode of $pcap:"; tail -3 "$OUT/decode.log"; ok=1; fi
  tail -1 "$OUT/decode.log" | sed 's/^/  /'
  return $ok
}

# run_case NAME FUNCTION ROLE ARGS...: one case, unless INTEROP_CASES (a grep -E pattern) leaves
# it out; its logs kept under its name, its verdict case_ok's.
run_case() {
  CASE=$1
  local fn=$2
  shift 2
  if [ -n "${INTEROP_CASES:-}" ] && ! grep -qE "$INTEROP_CASES" <<<"$CASE"; then return; fi
  : > "$OUT/guest.log"
  : > "$OUT/si.log"
  "$fn" "$@"
  cp "$OUT/guest.log" "$OUT/$CASE.guest.log"; cp "$OUT/si.log" "$OUT/$CASE.si.log"
  verdict "$CASE" case_ok
}

echo "interop with Linux rxe; logs and pcaps in $OUT"
run_case pingpong_guest_client_ipv4_64B pingpong_case guest_client 64 100 1 0
run_case pingpong_guest_client_ipv4_4KiB pingpong_case guest_client 4096 100 1 0
run_case pingpong_guest_server_ipv4_64B pingpong_case guest_server 64 100 1 0
run_case pingpong_guest_server_ipv4_4KiB pingpong_case guest_server 4096 100 1 0
run_case pingpong_guest_client_ipv6_linklocal_64B pingpong_case guest_client 64 100 0 0
run_case pingpong_guest_client_ipv6_linklocal_4KiB pingpong_case guest_client 4096 100 0 0
run_case pingpong_guest_server_ipv6_linklocal_64B pingpong_case guest_server 64 100 0 0
run_case pingpong_guest_server_ipv6_linklocal_4KiB pingpong_case guest_server 4096 100 0 0
run_case pingpong_guest_client_ipv4_4KiB_loss2 pingpong_case guest_client 4096 200 1 0.02
run_case pingpong_guest_server_ipv4_4KiB_loss2 pingpong_case guest_server 4096 200 1 0.02
run_case perf_guest_server_write_4KiB perf_case guest_server write 4096 100 0
run_case perf_guest_server_read_4KiB perf_case guest_server read 4096 100 0
run_case perf_guest_server_atomic perf_case guest_server atomic 8 100 0
run_case perf_guest_server_send_4KiB perf_case guest_server send 4096 100 0
run_case perf_guest_client_write_4KiB perf_case guest_client write 4096 100 0
run_case perf_guest_client_send_4KiB perf_case guest_client send 4096 100 0
run_case perf_guest_server_write_4KiB_loss2 perf_case guest_server write 4096 300 0.02
# ib_send_lat: the ping-pong of SENDs, softirdma in both roles.
run_case send_lat_guest_client lat_case guest_client 8 500
run_case send_lat_guest_server lat_case guest_server 8 500
# READ recovery: 5% of rxe's READ responses lost on softirdma's receive side; softirdma asks again
# from the first missing response. decode -flows counts what went on the wire.
run_case perf_guest_server_read_32KiB_loss5 perf_case guest_server read 32768 200 0.05
# The other transports: UD (rxe's port MTU on its 1500-byte eth1 is 1024, the largest datagram)
# and UC, each tool in both roles. Nothing is lost on this link: neither sends anything again.
run_case ud_pingpong_guest_client pingpong_case guest_client 1024 100 1 0 ud
run_case ud_pingpong_guest_server pingpong_case guest_server 1024 100 1 0 ud
run_case uc_pingpong_guest_client pingpong_case guest_client 4096 100 1 0 uc
run_case uc_pingpong_guest_server pingpong_case guest_server 4096 100 1 0 uc
run_case send_bw_UD_guest_client perf_case guest_client send 1024 1000 0 UD
# softirdma sends as fast as its link takes datagrams; the TCG guest takes in a few thousand a
# second, and what its socket cannot hold is lost: the client keeps to 2,000 a second.
run_case send_bw_UD_guest_server perf_case guest_server send 1024 1000 0 UD -rate_limit 2000
# rdma_cm: softirdma's connection manager against Linux's (IB CM over QP1), then rping's traffic.
run_case rping_guest_client rping_case guest_client
run_case rping_guest_server rping_case guest_server
# ucmatose: four RC connections through rdma_cm, ten SENDs each way on each.
run_case ucmatose_guest_client cm_case guest_client ucmatose -c 4
run_case ucmatose_guest_server cm_case guest_server ucmatose -c 4
# ib_write_bw -R: perftest's exchange and its test QP both through rdma_cm.
run_case write_bw_R_guest_client perf_r_case guest_client write 4096 200
run_case write_bw_R_guest_server perf_r_case guest_server write 4096 200
# udaddy: a UD QP found through rdma_cm's UDP port space (SIDR), ten datagrams each way.
run_case udaddy_guest_client cm_case guest_client udaddy
run_case udaddy_guest_server cm_case guest_server udaddy
finish interop
