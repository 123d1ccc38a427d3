#!/usr/bin/env bash
# The guest driver (hw/linux), installed with DKMS, in a VM (vm/) whose softirdma PCI function is
# served by `softirdma serve` on a dgram link to a second VM running Linux rxe: the module loads, its Ethernet
# function's netdev pings the rxe guest, unmodified ibv_rc_pingpong runs on the device against the
# rxe guest in both roles (IPv4 RoCEv2 GIDs, again with completion events, and over IPv6
# link-local GIDs), ibv_ud_pingpong and ibv_uc_pingpong, rping, ucmatose, udaddy, rdma_server/rdma_client,
# ib_send_bw -c UD and ib_write_bw -R (through the GSI QP and kernel verbs) and perftest's ib_write_bw, ib_read_bw, ib_send_bw and
# ib_atomic_bw as clients of it, ibv_devices and ibv_devinfo (rdma-core's rxe provider)
# show the RDMA device with its port active on that netdev and its RoCEv2 GIDs from the netdev's
# addresses, the module unloads and loads again, and the guest's kernel logs no warning. Prints
# PASS/FAIL per case.
set -euo pipefail
cd "$(dirname "$0")/.."
. interop/guestlib.sh
guest_setup device_guest_module_build
verdict device_guest_module_build true
echo "interop guest driver; logs in $OUT"

# Guest B: Linux rxe at 192.168.77.2 on the link, up until this script is done with it.
# It serves one ibv_rc_pingpong, is the client of the device guest's, then serves perftest's
# bandwidth tools one by one. Ports and MACs of their own, so a VM with vm/run.sh's defaults may
# be running beside.
serve_with_rxe_peer 9201 9202 52:54:00:00:05:10 52:54:00:00:77:52 <<'SCRIPT'
# The device guest's pingpong runs plain, then with completion events (-e), both on the IPv4
# GID, then over IPv6 link-local GIDs (index 0).
for g in $GIDX $GIDX 0; do
  timeout 300 ibv_rc_pingpong -d rxe0 -g $g -n 20 2>&1 | sed "s/^/VM: peer server g$g: /"
  until_served 120 1 timeout 60 ibv_rc_pingpong -d rxe0 -g $g -n 20 192.168.77.1
  sed "s/^/VM: peer client g$g: /" /tmp/out
done
# ibv_ud_pingpong (1024 bytes: the port MTU of a 1500-byte link) and ibv_uc_pingpong, each
# served and then the client of the device guest's.
for t in "ud|-s 1024" "uc|"; do
  set -- ${t#*|}; t=${t%%|*}
  timeout 300 ibv_${t}_pingpong -d rxe0 -g $GIDX -n 20 "$@" 2>&1 | sed "s/^/VM: peer server $t: /"
  until_served 120 1 timeout 60 ibv_${t}_pingpong -d rxe0 -g $GIDX -n 20 "$@" 192.168.77.1
  sed "s/^/VM: peer client $t: /" /tmp/out
done
# rping through rdma_cm: the rxe guest serves the device guest's client, then is the client of
# its server (trying until it listens).
timeout 120 rping -s -a 192.168.77.2 -v -C 10 > /tmp/rp 2>&1; echo "VM: peer rping server rc=$?"
sed "s/^/VM: peer rping server: /" /tmp/rp
for i in $(seq 60); do timeout 60 rping -c -a 192.168.77.1 -v -V -C 10 > /tmp/rp 2>&1; rc=$?; [ $rc = 0 ] && break; sleep 1; done
echo "VM: peer rping client rc=$rc"
sed "s/^/VM: peer rping client: /" /tmp/rp
# rdma_cm's other tools, perftest's UD and rdma_cm modes: serve the device guest's client, then
# be the client of its server.
cm_tools rxe0 $GIDX 192.168.77.1 "VM: peer" server
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw; do
  s="-s 4096"; [ $t = ib_atomic_bw ] && s=""
  timeout 120 $t -d rxe0 -x $GIDX -F -n 20 $s 2>&1 | sed "s/^/VM: peer $t: /"
done
# Then the clients of the device guest's servers.
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw; do
  s="-s 4096"; [ $t = ib_atomic_bw ] && s=""
  until_served 120 0.5 timeout 60 $t -d rxe0 -x $GIDX -F -n 20 $s 192.168.77.1
  sed "s/^/VM: peer $t client: /" /tmp/out
done
sleep 600
SCRIPT

# Guest A: the driver DKMS installed, rdma_rxe loaded beside it (it must leave softirdma0 alone).
cat interop/guest/lib.sh - > "$OUT/guest.sh" <<'SCRIPT'
grep -q '^rdma_rxe ' /proc/modules && echo "VM: rdma_rxe loaded"
modprobe softirdma || echo "VM: modprobe failed"
softirdma_up 192.168.77.1/24; echo "VM: netdev $DEV"
for i in $(seq 60); do ping -c 1 -W 1 192.168.77.2 > /dev/null 2>&1 && break; done
ping -c 5 -i 0.2 -W 2 192.168.77.2 | sed 's/^/VM: ping: /'
# rdma-core's ibv_rc_pingpong, unmodified, on softirdma0 against the rxe guest, client then
# server: over the IPv4 GIDs, again with completion events (-e: a completion channel, CQ arm,
# MSI-X), then over the IPv6 link-local GIDs. Each is "LABEL|OPTIONS".
for v in "pp|-g 1" "pp e|-g 1 -e" "pp ipv6|-g 0"; do
  label=${v%%|*}; set -- ${v#*|}
  until_served 60 1 timeout 60 ibv_rc_pingpong -d softirdma0 "$@" -n 20 192.168.77.2
  sed "s/^/VM: $label client: /" /tmp/out
  timeout 120 ibv_rc_pingpong -d softirdma0 "$@" -n 20 2>&1 | sed "s/^/VM: $label server: /"
done
# UD and UC QPs (ABI 1.1): ibv_ud_pingpong through an address handle, ibv_uc_pingpong.
for t in "ud|-s 1024" "uc|"; do
  set -- ${t#*|}; t=${t%%|*}
  until_served 60 1 timeout 60 ibv_${t}_pingpong -d softirdma0 -g 1 -n 20 "$@" 192.168.77.2
  sed "s/^/VM: $t client: /" /tmp/out
  timeout 120 ibv_${t}_pingpong -d softirdma0 -g 1 -n 20 "$@" 2>&1 | sed "s/^/VM: $t server: /"
done
# rping through rdma_cm (ib_cm's MADs on the GSI QP, the kernel's): client (trying until the
# rxe guest's server listens), then server; ten pings, validated by the client.
for i in $(seq 60); do timeout 60 rping -c -a 192.168.77.2 -v -V -C 10 > /tmp/rp 2>&1; rc=$?; [ $rc = 0 ] && break; sleep 1; done
echo "VM: rping client rc=$rc"
sed "s/^/VM: rping client: /" /tmp/rp
timeout 120 rping -s -a 192.168.77.1 -v -C 10 > /tmp/rp 2>&1; echo "VM: rping server rc=$?"
sed "s/^/VM: rping server: /" /tmp/rp
# rdma_cm's other tools, perftest's UD and rdma_cm modes: the client of the rxe guest's server,
# then the server of its client.
cm_tools softirdma0 1 192.168.77.2 VM: client
# perftest's bandwidth tools on softirdma0 as clients of the rxe guest's servers.
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw; do
  s="-s 4096"; [ $t = ib_atomic_bw ] && s=""
  until_served 60 1 timeout 60 $t -d softirdma0 -x 1 -F -n 20 $s 192.168.77.2
  grep -E '^ +[0-9]+ +20 ' /tmp/out | sed "s/^/VM: perf $t: /"
done
# ... and as servers for the rxe guest's clients.
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw; do
  s="-s 4096"; [ $t = ib_atomic_bw ] && s=""
  timeout 120 $t -d softirdma0 -x 1 -F -n 20 $s 2>&1 | grep -E '^ +[0-9]+ +20 ' | sed "s/^/VM: perf $t server: /"
done
ibv_devices | sed 's/^/VM: devices: /'
ibv_devinfo -d softirdma0 | sed 's/^/VM: devinfo: /'
rdma link | sed 's/^/VM: rdma: /'
P=/sys/class/infiniband/softirdma0/ports/1
for i in 0 1; do echo "VM: gid $i $(cat $P/gids/$i) $(cat $P/gid_attrs/types/$i)"; done
ok=0
for i in 1 2 3 4 5; do
  # Odd rounds unload a downed interface; even ones one that is up, with pings going out.
  bg=
  if [ $((i % 2)) = 1 ]; then ip link set $DEV down; else ping -i 0.2 192.168.77.2 > /dev/null 2>&1 & bg=$!; fi
  rmmod softirdma && modprobe softirdma || break
  [ -n "$bg" ] && kill $bg
  softirdma_up 192.168.77.1/24
  ping -c 1 -w 10 192.168.77.2 > /dev/null 2>&1 && ok=$((ok+1))
done
echo "VM: reloads pinging $ok of 5"
rmmod softirdma && echo "VM: rmmod ok"
dmesg | grep -E 'WARNING|BUG|Oops|Call Trace|softirdma' | sed 's/^/VM: dmesg: /'
echo "VM: dmesg checked"
SCRIPT
VM_SCRIPT="$OUT/guest.sh" VM_SOCKET="$SOCK" VM_MAC0=52:54:00:00:06:10 \
  timeout 600 bash vm/run.sh vm.modules=rdma_rxe > "$OUT/guest.log" 2>&1 || true
grep "VM: " "$OUT/guest.log" > "$OUT/vm.txt" || true

check device_guest_probe 'VM: dmesg: .*softirdma .*ABI 1\.3, caps 0x307ff'
check device_guest_netdev 'VM: netdev eth[0-9]+'
check device_guest_ping_vs_rxe 'VM: ping: 5 packets transmitted, 5 received'
check device_guest_ibv_rc_pingpong_ipv4_client_vs_rxe 'VM: pp client: 20 iters in'
check device_guest_ibv_rc_pingpong_ipv4_server_vs_rxe 'VM: pp server: 20 iters in'
check device_guest_ibv_rc_pingpong_events_client_vs_rxe 'VM: pp e client: 20 iters in'
check device_guest_ibv_rc_pingpong_events_server_vs_rxe 'VM: pp e server: 20 iters in'
check device_guest_ibv_rc_pingpong_ipv6_linklocal_client_vs_rxe 'VM: pp ipv6 client: 20 iters in'
check device_guest_ibv_rc_pingpong_ipv6_linklocal_server_vs_rxe 'VM: pp ipv6 server: 20 iters in'
check device_guest_ibv_ud_pingpong_client_vs_rxe 'VM: ud client: 20 iters in'
check device_guest_ibv_ud_pingpong_server_vs_rxe 'VM: ud server: 20 iters in'
check device_guest_ibv_uc_pingpong_client_vs_rxe 'VM: uc client: 20 iters in'
check device_guest_ibv_uc_pingpong_server_vs_rxe 'VM: uc server: 20 iters in'
# rping_ended FILE WHO ROLE: WHO's rping, the ROLE (client or server), printed its ten pings to
# FILE (the client's validated) and ended with status 0.
rping_ended() {
  local data="ping data: "
  [ "$3" = client ] || data="server $data"
  [ "$(grep -c "VM: $2 $3: ${data}rdma-ping-" "$1")" = 10 ] && grep -q "VM: $2 $3 rc=0" "$1"
}
# vs_rxe TOOL ROLE OTHER: the device guest's TOOL as ROLE and the rxe guest's as OTHER ended well.
vs_rxe() {
  if [ "$1" = rping ]; then
    rping_ended "$OUT/vm.txt" rping "$2" && rping_ended "$OUT/peer.log" "peer rping" "$3"
    return
  fi
  has_lines "$OUT/vm.txt" "VM: $1 $2 rc=0" "$OUT/peer.log" "VM: peer $1 $3 rc=0" ||
    { grep -E "VM: (peer )?$1 ($2|$3)" "$OUT/vm.txt" "$OUT/peer.log" | tail -4; return 1; }
}
verdict device_guest_rping_client_vs_rxe vs_rxe rping client server
for t in ucmatose udaddy rdma_server_client ib_send_bw_UD ib_write_bw_R; do
  verdict "device_guest_${t}_client_vs_rxe" vs_rxe $t client server
  verdict "device_guest_${t}_server_vs_rxe" vs_rxe $t server client
done
verdict device_guest_rping_server_vs_rxe vs_rxe rping server client
check device_guest_ib_write_bw_client_vs_rxe 'VM: perf ib_write_bw: +4096 +20 '
check device_guest_ib_read_bw_client_vs_rxe 'VM: perf ib_read_bw: +4096 +20 '
check device_guest_ib_send_bw_client_vs_rxe 'VM: perf ib_send_bw: +4096 +20 '
check device_guest_ib_atomic_bw_client_vs_rxe 'VM: perf ib_atomic_bw: +8 +20 '
check device_guest_ib_write_bw_server_vs_rxe 'VM: perf ib_write_bw server: +4096 +20 '
check device_guest_ib_read_bw_server_vs_rxe 'VM: perf ib_read_bw server: +4096 +20 '
check device_guest_ib_send_bw_server_vs_rxe 'VM: perf ib_send_bw server: +4096 +20 '
check device_guest_ib_atomic_bw_server_vs_rxe 'VM: perf ib_atomic_bw server: +8 +20 '
check device_guest_ibv_devices 'VM: devices: [[:space:]]*softirdma0[[:space:]]'
check device_guest_ibv_devinfo_port 'VM: devinfo: [[:space:]]*state:[[:space:]]+PORT_ACTIVE'
check device_guest_ibv_devinfo_ethernet 'VM: devinfo: [[:space:]]*link_layer:[[:space:]]+Ethernet'
check device_guest_rdma_link 'VM: rdma: link softirdma0/1 state ACTIVE .*netdev eth[0-9]+'
check device_guest_gid_ipv6_linklocal 'VM: gid 0 fe80:0000:0000:0000:[0-9a-f:]+ RoCE v2'
check device_guest_gid_ipv4 'VM: gid 1 0000:0000:0000:0000:0000:ffff:c0a8:4d01 RoCE v2'
check device_guest_module_reload 'VM: reloads pinging 5 of 5'
check device_guest_rmmod 'VM: rmmod ok'
# said_not FIRST NOT: the guest's VM lines have one matching FIRST and none matching NOT.
said_not() { has_lines "$OUT/vm.txt" "$1" && no_lines "$OUT/vm.txt" "$2"; }
# The MAD layer opens the port (a kernel PD with its DMA MR, a kernel CQ, the GSI QP): no
# "Couldn't create ib_mad PD" or "Couldn't open port" at any of the loads.
verdict device_guest_mad_port_open said_not 'VM: dmesg checked' "Couldn't (create ib_mad PD|open port)"
# rdma_rxe, loaded beside the driver, must not take softirdma0 for one of its devices when the
# netdev goes up and down (it would say "softirdma0: set active" and write into memory not its own).
verdict device_guest_not_taken_by_rdma_rxe said_not 'VM: rdma_rxe loaded' 'VM: dmesg: .*softirdma[0-9]+: set (active|down)'
kernel_clean device_guest_no_kernel_warning '' 'VM: dmesg checked'
[ $fail = 0 ] || grep "VM: " "$OUT/guest.log" | tail -30
kill -TERM $spid
verdict device_guest_serve_stops wait $spid
finish
