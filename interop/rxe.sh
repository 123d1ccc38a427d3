#!/usr/bin/env bash
# Interop with Linux Soft-RoCE: a TCG guest (Linux 6.12, rdma_rxe, rdma-core tools) whose eth1 is a
# QEMU -netdev dgram link to softirdma. Each case runs rdma-core's tool in the guest against
# softirdma on the host, checks both ends succeeded, and decodes softirdma's pcap of the link
# (0 bad ICRC, 0 malformed). QEMU and the guest come from vm/provision.sh (about 90 s from
# nothing, into $VM_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
. vm/lib.sh
OUT=${INTEROP_OUT:-$(mktemp -d)}
mkdir -p "$OUT"
command -v ss >/dev/null || { apt-get update -qq && apt-get install -y -qq iproute2; }
bash vm/provision.sh > "$OUT/provision.log" 2>&1 || { cat "$OUT/provision.log"; echo "interop: provisioning failed"; exit 1; }
go build -o bin/softirdma ./cmd/softirdma
SI=bin/softirdma
LINK="-link dgram:127.0.0.1:9002,127.0.0.1:9001 -ip 192.168.77.1 -mac 02:00:00:00:00:01"
# The exchange port rdma-core's tools listen on (18515) and its forward from the host (18516), in
# the hex form /proc/net/tcp uses.
TOOL_PORT_HEX=4853
pass=0 fail=0

# In the guest, before a tool starts: wait until eth1 has its IPv6 link-local address and none of
# its addresses is still tentative (duplicate address detection), so GID 0 is usable. Then run the
# tool; a server tool prints "VM: listening" once its exchange port listens.
GUEST_LIB='
settled() {
  seen=1
  while read -r _a _i _p _s f n; do
    [ "$n" = eth1 ] || continue
    seen=0; [ $((0x$f & 0x40)) = 0 ] || return 1
  done < /proc/net/if_inet6
  return $seen
}
i=0; until settled; do i=$((i+1)); [ $i -lt 600 ] || { echo "VM: eth1 still tentative"; break; }; sleep 0.05; done
echo "VM: eth1 addresses settled after $i polls"
listening() { cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '\''$2 ~ /:'$TOOL_PORT_HEX'$/ && $4 == "0A" { f = 1 } END { exit !f }'\''; }
serve() { # serve TAG COMMAND...: run a server tool, say when it listens, then its exit status
  tag=$1; shift
  "$@" & t=$!
  i=0; until listening; do i=$((i+1)); kill -0 $t 2>/dev/null || break; [ $i -lt 2000 ] || break; sleep 0.05; done
  listening && echo "VM: listening"
  wait $t; echo "VM: $tag rc=$?"
}
'

# guest_script TEXT: the guest's script, $OUT/guest.sh, with the helpers above in front.
guest_script() { printf '%s\n%s\n' "$GUEST_LIB" "$1" > "$OUT/guest.sh"; }

# guest_start: boot the guest with $OUT/guest.sh in the background: rxe0 on its eth1 at
# 192.168.77.2, a dgram link to softirdma at 127.0.0.1:9002 (softirdma sends to 9001), the
# host's 127.0.0.1:18516 forwarded to its 18515; its console goes to $OUT/guest.log.
guest_start() {
  : > "$OUT/guest.log"
  VM_SCRIPT="$OUT/guest.sh" VM_LINK=9001,9002 VM_FWD=18516 \
    timeout 300 bash vm/run.sh vm.rxe=1 vm.eth1=192.168.77.2/24 > "$OUT/guest.log" 2>&1 &
  gpid=$!
}

# guest_wait: wait for the guest to power off, and print its VM lines.
guest_wait() {
  wait "$gpid" || true
  grep '^VM: ' "$OUT/guest.log" || true
}

# wait_guest_line PATTERN SECONDS: wait until the guest's console shows PATTERN; fails early when
# the guest has ended without it.
wait_guest_line() { wait_line "$OUT/guest.log" "$1" "$gpid" "$2" "the guest"; }

# wait_line FILE PATTERN PID SECONDS WHO: wait until FILE, which process PID (WHO) writes, shows
# PATTERN; fails early when the process has ended without it.
wait_line() {
  local deadline=$((SECONDS + $4))
  until grep -q "$2" "$1"; do
    if ! kill -0 "$3" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
      echo "  $5 never printed '$2'"; return 1
    fi
    sleep 0.05
  done
}

# wait_host_listen PID SECONDS: wait until softirdma (PID) itself listens on the host's port 18515;
# another program on that port (a second test run) is reported instead of being mistaken for it.
wait_host_listen() {
  local deadline=$((SECONDS + $2))
  until ss -ltnpH 'sport = :18515' | grep -q "pid=$1,"; do
    if ! kill -0 "$1" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
      echo "  softirdma never listened on 18515"; ss -ltnpH 'sport = :18515' | sed 's/^/    in use: /'; return 1
    fi
    sleep 0.05
  done
}

# check NAME SOFTIRDMA_RC GUEST_PATTERN PCAP
check() {
  local name=$1 rc=$2 want=$3 pcap=$4 ok=1
  [ "$rc" = 0 ] || { echo "  softirdma exited $rc:"; sed 's/^/    /' "$OUT/si.log"; ok=0; }
  grep -q "$want" "$OUT/guest.log" || { echo "  the guest did not report '$want':"; tail -20 "$OUT/guest.log" | sed 's/^/    /'; ok=0; }
  if ! $SI decode "$pcap" > "$OUT/decode.log"; then echo "  decode of $pcap:"; tail -3 "$OUT/decode.log"; ok=0; fi
  tail -1 "$OUT/decode.log" | sed 's/^/  /'
  cp "$OUT/guest.log" "$OUT/$name.guest.log"; cp "$OUT/si.log" "$OUT/$name.si.log"
  if [ $ok = 1 ]; then echo "PASS $name"; pass=$((pass+1)); else echo "FAIL $name"; fail=$((fail+1)); fi
}

gid_arg() { if [ "$1" = 0 ]; then echo 0; else echo '$GIDX'; fi; }

# softirdma as pingpong server, the guest's ibv_rc_pingpong (or with a sixth argument uc or ud,
# ibv_uc_pingpong or ibv_ud_pingpong) as client (it reaches the host's 127.0.0.1:18515 as
# 10.0.2.2:18515 through slirp). The guest boots once softirdma listens.
pp_guest_client() {
  local name=$1 size=$2 n=$3 g=$4 loss=$5 tr=${6:-rc}
  local pcap="$OUT/$name.pcap" rc=0
  $SI pingpong -server -transport "$tr" -p 18515 -s "$size" -n "$n" -g "$g" -loss "$loss" -timeout 200s $LINK -pcap "$pcap" > "$OUT/si.log" 2>&1 &
  local pid=$!
  if wait_host_listen $pid 60; then
    guest_script "$(printf 'ping -c 1 -W 2 192.168.77.1 >/dev/null; timeout 200 ibv_%s_pingpong -d rxe0 -g %s -s %s -n %s 10.0.2.2; echo "VM: pingpong rc=$?"' "$tr" "$(gid_arg "$g")" "$size" "$n")"; guest_start
    guest_wait
  else
    kill $pid 2>/dev/null || true
  fi
  wait $pid || rc=$?
  check "$name" $rc "VM: pingpong rc=0" "$pcap"
}

# the guest's ibv_rc_pingpong as server, softirdma as client through the forward 127.0.0.1:18516,
# started once the guest's tool listens.
pp_guest_server() {
  local name=$1 size=$2 n=$3 g=$4 loss=$5 tr=${6:-rc}
  local pcap="$OUT/$name.pcap" rc=0
  : > "$OUT/si.log"
  guest_script "$(printf 'serve pingpong timeout 200 ibv_%s_pingpong -d rxe0 -g %s -s %s -n %s' "$tr" "$(gid_arg "$g")" "$size" "$n")"; guest_start
  if wait_guest_line "VM: listening" 120; then
    $SI pingpong 127.0.0.1 -transport "$tr" -p 18516 -s "$size" -n "$n" -g "$g" -loss "$loss" -wait 30s -timeout 200s $LINK -pcap "$pcap" > "$OUT/si.log" 2>&1 || rc=$?
  else
    rc=1
  fi
  guest_wait
  check "$name" $rc "VM: pingpong rc=0" "$pcap"
}

# perftest: the guest's ib_<test>_bw as server, softirdma perf as client through the forward.
# A sixth argument is the connection type (-c) both sides get; what follows goes to softirdma.
perf_guest_server() {
  local name=$1 test=$2 size=$3 n=$4 loss=$5 conn=${6:-RC} extra="${*:7}"
  local pcap="$OUT/$name.pcap" sflag="" rc=0
  [ "$test" = atomic ] || sflag="-s $size"
  : > "$OUT/si.log"
  guest_script "$(printf 'serve perf timeout 200 ib_%s_bw -d rxe0 -x $GIDX -F -c %s -n %s %s' "$test" "$conn" "$n" "$sflag")"; guest_start
  if wait_guest_line "VM: listening" 120; then
    $SI perf "$test" 127.0.0.1 -c "$conn" -p 18516 -n "$n" $sflag $extra -loss "$loss" -wait 30s -timeout 200s $LINK -pcap "$pcap" > "$OUT/si.log" 2>&1 || rc=$?
  else
    rc=1
  fi
  guest_wait
  check "$name" $rc "VM: perf rc=0" "$pcap"
}

# perftest: softirdma perf as server, the guest's tool as client (to 10.0.2.2:18515).
perf_guest_client() {
  local name=$1 test=$2 size=$3 n=$4 loss=$5 conn=${6:-RC}
  local pcap="$OUT/$name.pcap" sflag="" rc=0
  [ "$test" = atomic ] || sflag="-s $size"
  $SI perf "$test" -server -c "$conn" -p 18515 -n "$n" $sflag -loss "$loss" -timeout 200s $LINK -pcap "$pcap" > "$OUT/si.log" 2>&1 &
  local pid=$!
  if wait_host_listen $pid 60; then
    guest_script "$(printf 'ping -c 1 -W 2 192.168.77.1 >/dev/null; timeout 200 ib_%s_bw -d rxe0 -x $GIDX -F -c %s -n %s %s 10.0.2.2; echo "VM: perf rc=$?"' "$test" "$conn" "$n" "$sflag")"; guest_start
    guest_wait
  else
    kill $pid 2>/dev/null || true
  fi
  wait $pid || rc=$?
  check "$name" $rc "VM: perf rc=0" "$pcap"
}

# check_pings NAME: ten pings on each end of an rping case, the client's validated (-V).
check_pings() {
  local c s
  c=$(grep -c '^ping data: rdma-ping-' "$OUT/$1.client.log" || true)
  s=$(grep -c '^server ping data: rdma-ping-' "$OUT/$1.server.log" || true)
  if [ "$c" = 10 ] && [ "$s" = 10 ] && ! grep -q mismatch "$OUT/$1.client.log"; then return 0; fi
  echo "  pings: client $c, server $s (want 10 each)"; return 1
}

# rping through rdma_cm: softirdma as server (-a its own address), the guest's rping as client,
# ten pings printed on both ends and validated by the client.
rping_guest_client() {
  local name=$1 pcap="$OUT/$1.pcap" rc=0
  $SI rping -s -a 192.168.77.1 -v -C 10 -timeout 200s $LINK -pcap "$pcap" > "$OUT/si.log" 2>&1 &
  local pid=$!
  if wait_line "$OUT/si.log" "listening on" $pid 60 softirdma; then
    guest_script 'ping -c 1 -W 2 192.168.77.1 >/dev/null; timeout 200 rping -c -a 192.168.77.1 -v -V -C 10; echo "VM: rping rc=$?"'; guest_start
    guest_wait
  else
    kill $pid 2>/dev/null || true
  fi
  wait $pid || rc=$?
  cp "$OUT/guest.log" "$OUT/$name.client.log"; cp "$OUT/si.log" "$OUT/$name.server.log"
  check_pings "$name" || rc=1
  cm_named "$pcap" || rc=1
  check "$name" $rc "VM: rping rc=0" "$pcap"
}

# the guest's rping as server, softirdma as client, which keeps trying (-wait) until the guest's
# rping listens.
rping_guest_server() {
  local name=$1 pcap="$OUT/$1.pcap" rc=0
  : > "$OUT/si.log"
  guest_script 'echo "VM: rping server starting"; timeout 200 rping -s -a 192.168.77.2 -v -C 10; echo "VM: rping rc=$?"'; guest_start
  if wait_guest_line "VM: rping server starting" 120; then
    $SI rping -c -a 192.168.77.2 -v -V -C 10 -wait 60s -timeout 200s $LINK -pcap "$pcap" > "$OUT/si.log" 2>&1 || rc=$?
  else
    rc=1
  fi
  guest_wait
  cp "$OUT/si.log" "$OUT/$name.client.log"; cp "$OUT/guest.log" "$OUT/$name.server.log"
  check_pings "$name" || rc=1
  cm_named "$pcap" || rc=1
  check "$name" $rc "VM: rping rc=0" "$pcap"
}

# perftest with -R: no TCP; both QPs connected through rdma_cm at softirdma's RoCE address, the
# exchange on a QP of its own. softirdma perf -R as server, the guest's ib_<test>_bw -R as client.
perf_r_guest_client() {
  local name=$1 test=$2 size=$3 n=$4 pcap="$OUT/$1.pcap" rc=0
  $SI perf "$test" -server -R -n "$n" -s "$size" -timeout 200s $LINK -pcap "$pcap" > "$OUT/si.log" 2>&1 &
  local pid=$!
  if wait_line "$OUT/si.log" "listening through rdma_cm" $pid 60 softirdma; then
    guest_script "$(printf 'ping -c 1 -W 2 192.168.77.1 >/dev/null; timeout 200 ib_%s_bw -d rxe0 -F -R -n %s -s %s 192.168.77.1; echo "VM: perf rc=$?"' "$test" "$n" "$size")"; guest_start
    guest_wait
  else
    kill $pid 2>/dev/null || true
  fi
  wait $pid || rc=$?
  cm_named "$pcap" || rc=1
  check "$name" $rc "VM: perf rc=0" "$pcap"
}

# the guest's ib_<test>_bw -R as server, softirdma perf -R as client, trying until it listens.
perf_r_guest_server() {
  local name=$1 test=$2 size=$3 n=$4 pcap="$OUT/$1.pcap" rc=0
  : > "$OUT/si.log"
  guest_script "$(printf 'echo "VM: perf server starting"; timeout 200 ib_%s_bw -d rxe0 -F -R -n %s -s %s; echo "VM: perf rc=$?"' "$test" "$n" "$size")"; guest_start
  if wait_guest_line "VM: perf server starting" 120; then
    $SI perf "$test" 192.168.77.2 -R -n "$n" -s "$size" -wait 60s -timeout 200s $LINK -pcap "$pcap" > "$OUT/si.log" 2>&1 || rc=$?
  else
    rc=1
  fi
  guest_wait
  cm_named "$pcap" || rc=1
  check "$name" $rc "VM: perf rc=0" "$pcap"
}

# cm_named PCAP: the capture's CM messages are named by decode (rdma_cm cases).
cm_named() {
  $SI decode "$1" > "$OUT/cm-decode.log" 2>&1
  grep -q ' cm=' "$OUT/cm-decode.log" && return 0
  echo "  decode named no CM message in $1"; return 1
}

# cm_guest_client NAME TOOL ARGS...: softirdma's peer of an rdma_cm tool (ucmatose, udaddy) as
# server, the guest's tool as its client with the same ARGS; both must end with return status 0.
cm_guest_client() {
  local name=$1 tool=$2 pcap="$OUT/$1.pcap" rc=0; shift 2
  $SI "$tool" "$@" -timeout 200s $LINK -pcap "$pcap" > "$OUT/si.log" 2>&1 &
  local pid=$!
  if wait_line "$OUT/si.log" "listening on" $pid 60 softirdma; then
    guest_script "$(printf 'ping -c 1 -W 2 192.168.77.1 >/dev/null; timeout 200 %s -s 192.168.77.1 %s; echo "VM: %s rc=$?"' "$tool" "$*" "$tool")"; guest_start
    guest_wait
  else
    kill $pid 2>/dev/null || true
  fi
  wait $pid || rc=$?
  grep -q '^return status 0$' "$OUT/si.log" || rc=1
  cm_named "$pcap" || rc=1
  check "$name" $rc "VM: $tool rc=0" "$pcap"
}

# cm_guest_server NAME TOOL ARGS...: the guest's tool as server, softirdma's peer as its client,
# which keeps trying (-wait) until the guest's tool listens.
cm_guest_server() {
  local name=$1 tool=$2 pcap="$OUT/$1.pcap" rc=0; shift 2
  : > "$OUT/si.log"
  guest_script "$(printf 'echo "VM: %s server starting"; timeout 200 %s %s; echo "VM: %s rc=$?"' "$tool" "$tool" "$*" "$tool")"; guest_start
  if wait_guest_line "VM: $tool server starting" 120; then
    $SI "$tool" -s 192.168.77.2 "$@" -wait 60s -timeout 200s $LINK -pcap "$pcap" > "$OUT/si.log" 2>&1 || rc=$?
  else
    rc=1
  fi
  guest_wait
  grep -q '^return status 0$' "$OUT/si.log" || rc=1
  cm_named "$pcap" || rc=1
  check "$name" $rc "VM: $tool rc=0" "$pcap"
}

# run_case NAME FUNCTION ARGS...: one case, unless INTEROP_CASES (a grep -E pattern) leaves it out.
run_case() {
  local name=$1 fn=$2; shift 2
  if [ -n "${INTEROP_CASES:-}" ] && ! grep -qE "$INTEROP_CASES" <<<"$name"; then return; fi
  "$fn" "$name" "$@"
}

echo "interop with Linux rxe; logs and pcaps in $OUT"
run_case pingpong_guest_client_ipv4_64B pp_guest_client 64 100 1 0
run_case pingpong_guest_client_ipv4_4KiB pp_guest_client 4096 100 1 0
run_case pingpong_guest_server_ipv4_64B pp_guest_server 64 100 1 0
run_case pingpong_guest_server_ipv4_4KiB pp_guest_server 4096 100 1 0
run_case pingpong_guest_client_ipv6_linklocal_64B pp_guest_client 64 100 0 0
run_case pingpong_guest_client_ipv6_linklocal_4KiB pp_guest_client 4096 100 0 0
run_case pingpong_guest_server_ipv6_linklocal_64B pp_guest_server 64 100 0 0
run_case pingpong_guest_server_ipv6_linklocal_4KiB pp_guest_server 4096 100 0 0
run_case pingpong_guest_client_ipv4_4KiB_loss2 pp_guest_client 4096 200 1 0.02
run_case pingpong_guest_server_ipv4_4KiB_loss2 pp_guest_server 4096 200 1 0.02
run_case perf_guest_server_write_4KiB perf_guest_server write 4096 100 0
run_case perf_guest_server_read_4KiB perf_guest_server read 4096 100 0
run_case perf_guest_server_atomic perf_guest_server atomic 8 100 0
run_case perf_guest_server_send_4KiB perf_guest_server send 4096 100 0
run_case perf_guest_client_write_4KiB perf_guest_client write 4096 100 0
run_case perf_guest_client_send_4KiB perf_guest_client send 4096 100 0
run_case perf_guest_server_write_4KiB_loss2 perf_guest_server write 4096 300 0.02
# READ recovery: 5% of rxe's READ responses lost on softirdma's receive side; softirdma asks again
# from the first missing response. decode -flows counts what went on the wire.
run_case perf_guest_server_read_32KiB_loss5 perf_guest_server read 32768 200 0.05
# The other transports: UD (rxe's port MTU on its 1500-byte eth1 is 1024, the largest datagram)
# and UC, each tool in both roles. Nothing is lost on this link: neither sends anything again.
run_case ud_pingpong_guest_client pp_guest_client 1024 100 1 0 ud
run_case ud_pingpong_guest_server pp_guest_server 1024 100 1 0 ud
run_case uc_pingpong_guest_client pp_guest_client 4096 100 1 0 uc
run_case uc_pingpong_guest_server pp_guest_server 4096 100 1 0 uc
run_case send_bw_UD_guest_client perf_guest_client send 1024 1000 0 UD
# softirdma sends as fast as its link takes datagrams; the TCG guest takes in a few thousand a
# second, and what its socket cannot hold is lost: the client keeps to 2,000 a second.
run_case send_bw_UD_guest_server perf_guest_server send 1024 1000 0 UD -rate_limit 2000
# rdma_cm: softirdma's connection manager against Linux's (IB CM over QP1), then rping's traffic.
run_case rping_guest_client rping_guest_client
run_case rping_guest_server rping_guest_server
# ucmatose: four RC connections through rdma_cm, ten SENDs each way on each.
run_case ucmatose_guest_client cm_guest_client ucmatose -c 4
run_case ucmatose_guest_server cm_guest_server ucmatose -c 4
# ib_write_bw -R: perftest's exchange and its test QP both through rdma_cm.
run_case write_bw_R_guest_client perf_r_guest_client write 4096 200
run_case write_bw_R_guest_server perf_r_guest_server write 4096 200
# udaddy: a UD QP found through rdma_cm's UDP port space (SIDR), ten datagrams each way.
run_case udaddy_guest_client cm_guest_client udaddy
run_case udaddy_guest_server cm_guest_server udaddy
echo "interop: $pass passed, $fail failed"
[ "$fail" = 0 ]
