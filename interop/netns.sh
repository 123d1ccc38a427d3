#!/usr/bin/env bash
# softirdma on real adapters: two network namespaces joined by a veth pair, one softirdma in
# each on an AF_PACKET socket. The kernels own the addresses and answer ARP; softirdma learns its
# peer's MAC from the kernel's neighbour table. Runs softirdma pingpong and softirdma perf write
# between them, then checks that ARP resolved the peer and that no RoCE frame was answered with
# ICMP port unreachable. Needs root (ip netns).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${INTEROP_OUT:-$(mktemp -d)}
mkdir -p "$OUT"
command -v ip >/dev/null || { apt-get update -qq && apt-get install -y -qq iproute2; }
go build -o bin/softirdma ./cmd/softirdma
SI=$PWD/bin/softirdma
A=si-a-$$ B=si-b-$$
cleanup() { ip netns del "$A" 2>/dev/null || true; ip netns del "$B" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$A"; ip netns add "$B"
ip link add va netns "$A" type veth peer name vb netns "$B"
ip -n "$A" addr add 192.0.2.1/24 dev va; ip -n "$B" addr add 192.0.2.2/24 dev vb
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set va up; ip -n "$B" link set vb up
# wait_until SECONDS DESCRIPTION COMMAND...: poll COMMAND until it succeeds; fail after SECONDS.
wait_until() {
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@"; do
    if [ $SECONDS -ge $deadline ]; then echo "interop netns: gave up waiting for $what" >&2; return 1; fi
    sleep 0.05
  done
}
# The IPv6 link-local addresses must be out of duplicate address detection before GID 0 is used.
settled() { ip -n "$1" -6 addr show dev "$2" | grep -q fe80 && ! ip -n "$1" -6 addr show dev "$2" | grep -q tentative; }
wait_until 60 "va's IPv6 link-local address" settled "$A" va
wait_until 60 "vb's IPv6 link-local address" settled "$B" vb
# listening NS PID: softirdma (PID) listens on the exchange port 18515 inside namespace NS.
listening() {
  kill -0 "$2" 2>/dev/null || return 0 # it ended: stop waiting, its status tells why
  ip netns exec "$1" awk '$2 ~ /:4853$/ && $4 == "0A" { f = 1 } END { exit !f }' /proc/net/tcp /proc/net/tcp6
}
pass=0 fail=0
run() { # NAME SERVER_ARGS... -- CLIENT_ARGS...
  local name=$1; shift
  local sargs=() cargs=()
  while [ "$1" != -- ]; do sargs+=("$1"); shift; done; shift
  cargs=("$@")
  ip netns exec "$A" "$SI" "${sargs[@]}" -server -link afpacket:va -timeout 60s > "$OUT/$name.server" 2>&1 &
  local spid=$! src=0 crc=0
  wait_until 60 "the $name server to listen" listening "$A" $spid || true
  ip netns exec "$B" "$SI" "${cargs[@]}" 192.0.2.1 -link afpacket:vb -timeout 60s > "$OUT/$name.client" 2>&1 || crc=$?
  wait $spid || src=$?
  if [ $src = 0 ] && [ $crc = 0 ]; then echo "PASS $name"; pass=$((pass+1)); else
    echo "FAIL $name (server $src, client $crc)"; sed 's/^/  server: /' "$OUT/$name.server" | tail -5; sed 's/^/  client: /' "$OUT/$name.client" | tail -5; fail=$((fail+1)); fi
  tail -2 "$OUT/$name.client" | sed 's/^/  /'
}
run pingpong_afpacket_4KiB pingpong -s 4096 -n 500 -- pingpong -s 4096 -n 500
run pingpong_afpacket_ipv6_linklocal pingpong -g 0 -s 4096 -n 200 -- pingpong -g 0 -s 4096 -n 200
run perf_write_afpacket perf write -s 65536 -n 500 -- perf write -s 65536 -n 500
if ip -n "$B" neigh show 192.0.2.1 | grep -q lladdr; then echo "PASS peer MAC learned by ARP"; pass=$((pass+1)); else echo "FAIL no ARP entry"; fail=$((fail+1)); fi
# Link state changes reach softirdma through netlink. The watcher prints the state it starts
# from once it is subscribed; each change is made after the previous one was seen.
ip netns exec "$A" "$SI" links -watch va -for 120s > "$OUT/watch" 2>&1 &
wpid=$!
ups() { grep -c "va: up" "$OUT/watch" || true; }
seen() { [ "$(grep -c "$1" "$OUT/watch" || true)" -ge "$2" ] || ! kill -0 $wpid 2>/dev/null; }
if wait_until 60 "the watcher's first line" seen "va: up" 1 && ip -n "$A" link set va down &&
   wait_until 60 "va: down" seen "va: down" 1 && ip -n "$A" link set va up &&
   wait_until 60 "va: up again" seen "va: up" 2 && [ "$(ups)" -ge 2 ] && grep -q "va: down" "$OUT/watch"; then
  echo "PASS link state changes seen"; pass=$((pass+1))
else
  echo "FAIL link state changes:"; cat "$OUT/watch"; fail=$((fail+1))
fi
kill -INT $wpid 2>/dev/null || true; wait $wpid || true

# No kernel may have answered RoCE frames with "port unreachable": softirdma holds UDP 4791.
unreach() { ip netns exec "$1" awk '/^Icmp:/ { if (!h) { for (i=1;i<=NF;i++) col[$i]=i; h=1 } else print $col["OutDestUnreachs"] }' /proc/net/snmp; }
ua=$(unreach "$A") ub=$(unreach "$B")
if [ "$ua" = 0 ] && [ "$ub" = 0 ]; then echo "PASS no ICMP destination unreachable sent"; pass=$((pass+1)); else
  echo "FAIL ICMP destination unreachable sent: $ua / $ub"; fail=$((fail+1)); fi
echo "interop netns: $pass passed, $fail failed"
[ "$fail" = 0 ]
