#!/usr/bin/env bash
# softirdma on real adapters: two network namespaces joined by a veth pair, one softirdma in
# each on an AF_PACKET socket. The kernels own the addresses and answer ARP; softirdma learns its
# peer's MAC from the kernel's neighbour table. Runs softirdma pingpong and softirdma perf write
# between them, then checks that ARP resolved the peer and that no RoCE frame was answered with
# ICMP port unreachable. Needs root (ip netns).
set -euo pipefail
cd "$(dirname "$0")/.."
. interop/guestlib.sh
need_iproute2 ip
go build -o bin/softirdma ./cmd/softirdma
SI=$PWD/bin/softirdma
A=si-a-$$ B=si-b-$$
netns_cleanup() {
  cleanup
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
}
trap netns_cleanup EXIT
ip netns add "$A"; ip netns add "$B"
ip link add va netns "$A" type veth peer name vb netns "$B"
ip -n "$A" addr add 192.0.2.1/24 dev va; ip -n "$B" addr add 192.0.2.2/24 dev vb
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set va up; ip -n "$B" link set vb up
# The IPv6 link-local addresses must be out of duplicate address detection before GID 0 is used.
settled() { ip -n "$1" -6 addr show dev "$2" | grep -q fe80 && ! ip -n "$1" -6 addr show dev "$2" | grep -q tentative; }
for end in "$A va" "$B vb"; do
  # shellcheck disable=SC2086 # the namespace and its device
  wait_until 60 - settled $end || { echo "interop netns: gave up waiting for ${end#* }'s IPv6 link-local address" >&2; exit 1; }
done
# listening NS: softirdma listens on the exchange port 18515 inside namespace NS.
listening() {
  ip netns exec "$1" awk '$2 ~ /:4853$/ && $4 == "0A" { f = 1 } END { exit !f }' /proc/net/tcp /proc/net/tcp6
}
# ended_well NAME SERVER_STATUS CLIENT_STATUS: both ends exited 0 (else the ends of their output).
ended_well() {
  [ "$2" = 0 ] && [ "$3" = 0 ] && return
  why="server $2, client $3"
  sed 's/^/  server: /' "$OUT/$1.server" | tail -5; sed 's/^/  client: /' "$OUT/$1.client" | tail -5
  return 1
}
run() { # NAME SERVER_ARGS... -- CLIENT_ARGS...
  local name=$1 sargs=() spid src=0 crc=0
  shift
  while [ "$1" != -- ]; do sargs+=("$1"); shift; done
  shift
  ip netns exec "$A" "$SI" "${sargs[@]}" -server -link afpacket:va -timeout 60s > "$OUT/$name.server" 2>&1 &
  spid=$!
  wait_until 60 $spid listening "$A" || true
  ip netns exec "$B" "$SI" "$@" 192.0.2.1 -link afpacket:vb -timeout 60s > "$OUT/$name.client" 2>&1 || crc=$?
  wait $spid || src=$?
  verdict "$name" ended_well "$name" $src $crc
  tail -2 "$OUT/$name.client" | sed 's/^/  /'
}
run pingpong_afpacket_4KiB pingpong -s 4096 -n 500 -- pingpong -s 4096 -n 500
run pingpong_afpacket_ipv6_linklocal pingpong -g 0 -s 4096 -n 200 -- pingpong -g 0 -s 4096 -n 200
run perf_write_afpacket perf write -s 65536 -n 500 -- perf write -s 65536 -n 500
arp_learned() { ip -n "$B" neigh show 192.0.2.1 | grep -q lladdr; }
verdict "peer MAC learned by ARP|no ARP entry" arp_learned
# Link state changes reach softirdma through netlink. The watcher prints the state it starts
# from once it is subscribed; each change is made after the previous one was seen.
ip netns exec "$A" "$SI" links -watch va -for 120s > "$OUT/watch" 2>&1 &
wpid=$!
seen() { [ "$(grep -c "$1" "$OUT/watch" || true)" -ge "$2" ]; }
changes_seen() {
  wait_until 60 $wpid seen "va: up" 1 && ip -n "$A" link set va down &&
    wait_until 60 $wpid seen "va: down" 1 && ip -n "$A" link set va up &&
    wait_until 60 $wpid seen "va: up" 2 || { cat "$OUT/watch"; return 1; }
}
verdict "link state changes seen|link state changes:" changes_seen
kill -INT $wpid 2>/dev/null || true; wait $wpid || true

# No kernel may have answered RoCE frames with "port unreachable": softirdma holds UDP 4791.
unreach() { ip netns exec "$1" awk '/^Icmp:/ { if (!h) { for (i=1;i<=NF;i++) col[$i]=i; h=1 } else print $col["OutDestUnreachs"] }' /proc/net/snmp; }
ua=$(unreach "$A") ub=$(unreach "$B")
verdict "no ICMP destination unreachable sent|ICMP destination unreachable sent: $ua / $ub" [ "$ua,$ub" = 0,0 ]
finish "interop netns"
