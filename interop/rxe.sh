#!/usr/bin/env bash
# Interop with Linux Soft-RoCE: a TCG guest (Linux 6.12, rdma_rxe, rdma-core tools) whose eth1 is a
# QEMU -netdev dgram link to softirdma. Each case runs rdma-core's tool in the guest against
# softirdma on the host, checks both ends succeeded, and decodes softirdma's pcap of the link
# (0 bad ICRC, 0 malformed). The guest and QEMU are provisioned with the project's rig scripts
# (../shared/rig, about 30 s from nothing) into $RIG_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
RIG_SRC=${RIG_SRC:-../shared/rig}
if [ ! -f "$RIG_SRC/run-guest.sh" ]; then
  echo "interop: the rig scripts are not at $RIG_SRC (set RIG_SRC to shared/rig)" >&2
  exit 1
fi
RIG_SRC=$(cd "$RIG_SRC" && pwd)
export RIG_DIR=${RIG_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/softirdma-rig}
OUT=${INTEROP_OUT:-$(mktemp -d)}
mkdir -p "$RIG_DIR" "$OUT"
[ -x "$RIG_DIR/bin/qemu-system-x86_64" ] || bash "$RIG_SRC/setup-qemu.sh"
[ -f "$RIG_DIR/guest/vmlinuz" ] || bash "$RIG_SRC/build-guest.sh"
go build -o bin/softirdma ./cmd/softirdma
SI=bin/softirdma
LINK="-link dgram:127.0.0.1:9002,127.0.0.1:9001 -ip 192.168.77.1 -mac 02:00:00:00:00:01"
pass=0 fail=0

# guest MODE ARGS...: boot the guest, wait for it to power off, print its RIG lines.
guest() {
  timeout 240 bash "$RIG_SRC/run-guest.sh" "$@" > "$OUT/guest.log" 2>&1 || true
  grep '^RIG: ' "$OUT/guest.log" | grep -v 'gid\[' || true
}

# check NAME SOFTIRDMA_RC GUEST_PATTERN PCAP
check() {
  local name=$1 rc=$2 want=$3 pcap=$4 ok=1
  [ "$rc" = 0 ] || { echo "  softirdma exited $rc:"; sed 's/^/    /' "$OUT/si.log"; ok=0; }
  grep -q "$want" "$OUT/guest.log" || { echo "  the guest did not report '$want':"; tail -20 "$OUT/guest.log" | sed 's/^/    /'; ok=0; }
  if ! $SI decode "$pcap" > "$OUT/decode.log"; then echo "  decode of $pcap:"; tail -3 "$OUT/decode.log"; ok=0; fi
  tail -1 "$OUT/decode.log" | sed 's/^/  /'
  if [ $ok = 1 ]; then echo "PASS $name"; pass=$((pass+1)); else echo "FAIL $name"; fail=$((fail+1)); fi
}

# softirdma as pingpong server, the guest's ibv_rc_pingpong as client (it reaches the host's
# 127.0.0.1:18515 as 10.0.2.2:18515 through slirp).
pp_guest_client() {
  local name=$1 size=$2 n=$3 g=$4 loss=$5
  local pcap="$OUT/$name.pcap"
  $SI pingpong -server -p 18515 -s "$size" -n "$n" -g "$g" -loss "$loss" -timeout 200s $LINK -pcap "$pcap" > "$OUT/si.log" 2>&1 &
  local pid=$!
  sleep 0.3
  local gidx='$GIDX'; [ "$g" = 0 ] && gidx=0
  guest run rig.cmd="$(printf 'ping -c 1 -W 2 $PEER >/dev/null; timeout 200 ibv_rc_pingpong -d rxe0 -g %s -s %s -n %s $SRV; echo "RIG: pingpong rc=$?"' "$gidx" "$size" "$n" | base64 -w0)"
  local rc=0; wait $pid || rc=$?
  check "$name" $rc "RIG: pingpong rc=0" "$pcap"
}

# the guest's ibv_rc_pingpong as server, softirdma as client through the forward 127.0.0.1:18516.
pp_guest_server() {
  local name=$1 size=$2 n=$3 g=$4 loss=$5
  local pcap="$OUT/$name.pcap"
  local gidx='$GIDX'; [ "$g" = 0 ] && gidx=0
  guest run rig.cmd="$(printf 'timeout 200 ibv_rc_pingpong -d rxe0 -g %s -s %s -n %s; echo "RIG: pingpong rc=$?"' "$gidx" "$size" "$n" | base64 -w0)" &
  local gpid=$!
  sleep 6 # the guest boots in about 5 s; the client keeps dialling until the server is up
  local rc=0
  $SI pingpong 127.0.0.1 -p 18516 -s "$size" -n "$n" -g "$g" -loss "$loss" -timeout 200s $LINK -pcap "$pcap" > "$OUT/si.log" 2>&1 || rc=$?
  wait $gpid || true
  check "$name" $rc "RIG: pingpong rc=0" "$pcap"
}

# perftest: the guest's ib_<test>_bw as server, softirdma perf as client through the forward.
perf_guest_server() {
  local name=$1 test=$2 size=$3 n=$4 loss=$5
  local pcap="$OUT/$name.pcap" sflag=""
  [ "$test" = atomic ] || sflag="-s $size"
  guest run rig.cmd="$(printf 'timeout 200 ib_%s_bw -d rxe0 -x $GIDX -F -n %s %s; echo "RIG: perf rc=$?"' "$test" "$n" "$sflag" | base64 -w0)" &
  local gpid=$!
  sleep 6
  local rc=0
  $SI perf "$test" 127.0.0.1 -p 18516 -n "$n" $sflag -loss "$loss" -timeout 200s $LINK -pcap "$pcap" > "$OUT/si.log" 2>&1 || rc=$?
  wait $gpid || true
  check "$name" $rc "RIG: perf rc=0" "$pcap"
}

# perftest: softirdma perf as server, the guest's tool as client (to 10.0.2.2:18515).
perf_guest_client() {
  local name=$1 test=$2 size=$3 n=$4 loss=$5
  local pcap="$OUT/$name.pcap" sflag=""
  [ "$test" = atomic ] || sflag="-s $size"
  $SI perf "$test" -server -p 18515 -n "$n" $sflag -loss "$loss" -timeout 200s $LINK -pcap "$pcap" > "$OUT/si.log" 2>&1 &
  local pid=$!
  sleep 0.3
  guest run rig.cmd="$(printf 'ping -c 1 -W 2 $PEER >/dev/null; timeout 200 ib_%s_bw -d rxe0 -x $GIDX -F -n %s %s $SRV; echo "RIG: perf rc=$?"' "$test" "$n" "$sflag" | base64 -w0)"
  local rc=0; wait $pid || rc=$?
  check "$name" $rc "RIG: perf rc=0" "$pcap"
}

echo "interop with Linux rxe; logs and pcaps in $OUT"
pp_guest_client pingpong_guest_client_ipv4_64B 64 100 1 0
pp_guest_client pingpong_guest_client_ipv4_4KiB 4096 100 1 0
pp_guest_server pingpong_guest_server_ipv4_64B 64 100 1 0
pp_guest_server pingpong_guest_server_ipv4_4KiB 4096 100 1 0
pp_guest_client pingpong_guest_client_ipv6_linklocal_64B 64 100 0 0
pp_guest_client pingpong_guest_client_ipv6_linklocal_4KiB 4096 100 0 0
pp_guest_server pingpong_guest_server_ipv6_linklocal_64B 64 100 0 0
pp_guest_server pingpong_guest_server_ipv6_linklocal_4KiB 4096 100 0 0
pp_guest_client pingpong_guest_client_ipv4_4KiB_loss2 4096 200 1 0.02
pp_guest_server pingpong_guest_server_ipv4_4KiB_loss2 4096 200 1 0.02
perf_guest_server perf_guest_server_write_4KiB write 4096 100 0
perf_guest_server perf_guest_server_read_4KiB read 4096 100 0
perf_guest_server perf_guest_server_atomic atomic 8 100 0
perf_guest_server perf_guest_server_send_4KiB send 4096 100 0
perf_guest_client perf_guest_client_write_4KiB write 4096 100 0
perf_guest_client perf_guest_client_send_4KiB send 4096 100 0
perf_guest_server perf_guest_server_write_4KiB_loss2 write 4096 300 0.02
echo "interop: $pass passed, $fail failed"
[ "$fail" = 0 ]
