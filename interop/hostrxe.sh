#!/usr/bin/env bash
# Host programs on softirdma against Linux Soft-RoCE in a VM, over a link: the unprivileged
# user's softirdma (`softirdma hostd -link ... -ip 192.168.77.1/24`) on a QEMU dgram link to a
# TCG guest (Linux 6.12, rxe0 on its eth1 at 192.168.77.2, rdma-core 56's tools). Each tool runs
# under `softirdma run` on the host against the same tool in the guest, both roles: PASS lines
# host_<tool>_<server|client>_vs_rxe (the host program's role), each with the host's capture of
# the link decoded clean. One guest runs the whole sequence; the host follows its lines.
set -euo pipefail
cd "$(dirname "$0")/.."
. interop/guestlib.sh
. interop/hostlib.sh
run_or_exit "$OUT/provision.log" "FAIL host_vs_rxe (provisioning the VM)" bash vm/provision.sh
echo "interop: host programs against Linux rxe in a VM; logs in $OUT"

read -r L R < <(free_udp_ports 2)
FWD=18516
as_user "$BIN/softirdma" stop > /dev/null 2>&1 || true
HOSTDIR=/tmp/softirdma-$(id -u "$U")
as_user "$BIN/softirdma" hostd -idle 0 -link "dgram:127.0.0.1:$R,127.0.0.1:$L" -ip 192.168.77.1/24 > "$OUT/hostd.log" 2>&1 &
pids+=($!)
waitfor "$OUT/hostd.log" 'serving host programs' 30 $! || abort "host_vs_rxe (softirdma hostd did not start)"
# rxe0's GID 3: 192.168.77.1 as RoCE v2.
grep -q '^0000:0000:0000:0000:0000:ffff:c0a8:4d01$' "$HOSTDIR/sys/class/infiniband/rxe0/ports/1/gids/3" ||
  abort "host_vs_rxe (rxe0's GID 3 is not 192.168.77.1)"

# The tools: NAME|HOW|host server|guest client|guest server|host client. HOW tcp: the exchange
# on TCP 18515 (the guest's client reaches the host as 10.0.2.2, the host's the guest through
# the forward $FWD); cm: through rdma_cm at the RoCE addresses. The guest's commands see GIDX,
# rxe0's IPv4 RoCE v2 GID index.
TOOLS=(
  "rc_pingpong|tcp|ibv_rc_pingpong -g 3 -n 50 -c|ibv_rc_pingpong -d rxe0 -g \$GIDX -n 50 -c 10.0.2.2|ibv_rc_pingpong -d rxe0 -g \$GIDX -n 50 -c|ibv_rc_pingpong -g 3 -n 50 -c -p $FWD 127.0.0.1"
  "uc_pingpong|tcp|ibv_uc_pingpong -g 3 -n 50 -c|ibv_uc_pingpong -d rxe0 -g \$GIDX -n 50 -c 10.0.2.2|ibv_uc_pingpong -d rxe0 -g \$GIDX -n 50 -c|ibv_uc_pingpong -g 3 -n 50 -c -p $FWD 127.0.0.1"
  "ud_pingpong|tcp|ibv_ud_pingpong -g 3 -n 50 -s 512 -c|ibv_ud_pingpong -d rxe0 -g \$GIDX -n 50 -s 512 -c 10.0.2.2|ibv_ud_pingpong -d rxe0 -g \$GIDX -n 50 -s 512 -c|ibv_ud_pingpong -g 3 -n 50 -s 512 -c -p $FWD 127.0.0.1"
  "srq_pingpong|tcp|ibv_srq_pingpong -g 3 -n 50 -c|ibv_srq_pingpong -d rxe0 -g \$GIDX -n 50 -c 10.0.2.2|ibv_srq_pingpong -d rxe0 -g \$GIDX -n 50 -c|ibv_srq_pingpong -g 3 -n 50 -c -p $FWD 127.0.0.1"
  "write_bw|tcp|ib_write_bw -x 3 -F -n 50|ib_write_bw -d rxe0 -x \$GIDX -F -n 50 10.0.2.2|ib_write_bw -d rxe0 -x \$GIDX -F -n 50|ib_write_bw -x 3 -F -n 50 -p $FWD 127.0.0.1"
  "read_bw|tcp|ib_read_bw -x 3 -F -n 50|ib_read_bw -d rxe0 -x \$GIDX -F -n 50 10.0.2.2|ib_read_bw -d rxe0 -x \$GIDX -F -n 50|ib_read_bw -x 3 -F -n 50 -p $FWD 127.0.0.1"
  "send_bw|tcp|ib_send_bw -x 3 -F -n 50|ib_send_bw -d rxe0 -x \$GIDX -F -n 50 10.0.2.2|ib_send_bw -d rxe0 -x \$GIDX -F -n 50|ib_send_bw -x 3 -F -n 50 -p $FWD 127.0.0.1"
  "atomic_bw|tcp|ib_atomic_bw -x 3 -F -n 50|ib_atomic_bw -d rxe0 -x \$GIDX -F -n 50 10.0.2.2|ib_atomic_bw -d rxe0 -x \$GIDX -F -n 50|ib_atomic_bw -x 3 -F -n 50 -p $FWD 127.0.0.1"
  "send_bw_UD|tcp|ib_send_bw -x 3 -F -c UD -n 50|ib_send_bw -d rxe0 -x \$GIDX -F -c UD -n 50 10.0.2.2|ib_send_bw -d rxe0 -x \$GIDX -F -c UD -n 50|ib_send_bw -x 3 -F -c UD -n 50 -p $FWD 127.0.0.1"
  # perftest -R connects a second time for the test's QPs at once after the first connection's
  # exchange, and perftest 4.5's client neither waits nor tries again: a server under TCG does
  # not listen that soon and rejects it (INVALID_SERVICE_ID; the 4.5 client then crashes).
  # rxe0's CM messages are held half a second (a fault: a slower link), time the guest's server takes.
  "write_bw_R|cm|ib_write_bw -R -F -n 50 -s 4096|ib_write_bw -d rxe0 -R -F -n 50 -s 4096 192.168.77.1|ib_write_bw -d rxe0 -R -F -n 50 -s 4096|ib_write_bw -R -F -n 50 -s 4096 192.168.77.2|delay from=rxe0 qp=1 delay=500ms|0"
  "rping|cm|rping -s -a 192.168.77.1 -C 10 -V|rping -c -a 192.168.77.1 -C 10 -V|rping -s -a 192.168.77.2 -C 10 -V|rping -c -a 192.168.77.2 -C 10 -V"
  "ucmatose|cm|ucmatose -c 2 -C 10|ucmatose -s 192.168.77.1 -c 2 -C 10|ucmatose -c 2 -C 10|ucmatose -s 192.168.77.2 -c 2 -C 10"
  "udaddy|cm|udaddy -C 10|udaddy -s 192.168.77.1 -C 10|udaddy -C 10|udaddy -s 192.168.77.2 -C 10"
  # Faults on demand (hostd's control socket): the fifth frame rxe0 sends is dropped, or the
  # fifth the guest sends corrupted (its ICRC then fails rxe0's check: the one bad frame in the
  # capture); the sender retransmits and rping ends well.
  "rping_drop|cm|rping -s -a 192.168.77.1 -C 10 -V|rping -c -a 192.168.77.1 -C 10 -V|rping -s -a 192.168.77.2 -C 10 -V|rping -c -a 192.168.77.2 -C 10 -V|drop from=rxe0 nth=5|0"
  "rping_corrupt|cm|rping -s -a 192.168.77.1 -C 10 -V|rping -c -a 192.168.77.1 -C 10 -V|rping -s -a 192.168.77.2 -C 10 -V|rping -c -a 192.168.77.2 -C 10 -V|corrupt from=uplink nth=5|1"
)
field() { cut -d'|' -f"$2" <<< "$1"; }

# The guest: for each tool its client against the host's server (run again each second until
# the server answers), then its server for the host's client ("VM: serving NAME" once a TCP
# server listens; before a cm server starts, its client trying again until it listens).
{
  cat interop/guest/rxe.sh
  cat interop/guest/lib.sh
  cat <<'SCRIPT'
ping -c 1 -W 1 192.168.77.1 > /dev/null 2>&1 # its MAC known before the first tool (it answers ARP, not ping)
guest_client() { # guest_client NAME CMD...
  name=$1; shift
  until_ok 60 timeout 60 "$@"
  echo "VM: ${name}_client rc=$rc"; sed "s/^/VM: ${name}_client: /" /tmp/out
}
guest_server() { # guest_server NAME HOW CMD...
  name=$1 how=$2; shift 2
  if [ "$how" = tcp ]; then
    timeout 120 "$@" > /tmp/out 2>&1 & t=$!
    i=0; until listening; do i=$((i+1)); kill -0 $t 2>/dev/null || break; [ $i -lt 2000 ] || break; sleep 0.05; done
    echo "VM: serving $name"
    wait $t; rc=$?
  else
    echo "VM: serving $name"
    timeout 120 "$@" > /tmp/out 2>&1; rc=$?
  fi
  echo "VM: ${name}_server rc=$rc"; sed "s/^/VM: ${name}_server: /" /tmp/out
}
SCRIPT
  for t in "${TOOLS[@]}"; do
    echo "guest_client $(field "$t" 1) $(field "$t" 4)"
    echo "guest_server $(field "$t" 1) $(field "$t" 2) $(field "$t" 5)"
  done
  echo 'echo "VM: done with the host"'
  echo "dmesg | grep -E 'WARNING|BUG|Oops|Call Trace' | sed 's/^/VM: dmesg: /'"
  echo 'echo "VM: dmesg checked"'
} > "$OUT/guest.sh"
VM_SCRIPT="$OUT/guest.sh" VM_LINK=$L,$R VM_FWD=$FWD VM_MAC0=52:54:00:00:0c:31 VM_MAC1=52:54:00:00:0c:32 \
  timeout 1500 bash vm/run.sh vm.rxe=1 vm.eth1=192.168.77.2/24 > "$OUT/guest.log" 2>&1 &
gpid=$!
pids+=($gpid)

# host LOG CMD...: CMD under softirdma run as the user, capturing the link to $OUT/LOG.pcap.
host() {
  local log=$1
  shift
  as_user "$BIN/softirdma" run -pcap "$CAPDIR/$log.pcap" -- timeout 120 "$@" > "$OUT/$log.log" 2>&1
}
CAPDIR=$(as_user mktemp -d)
# ended RC LOG GUESTLINE CAP BAD: the host's tool exited 0, the guest printed GUESTLINE (its
# end, status 0), the capture holds RoCE frames, BAD of them with a bad ICRC and nothing
# malformed, and the fault of the case, if any, fired.
ended() {
  local rc=$1 log=$2 line=$3 cap=$4 bad=$5
  [ "$rc" = 0 ] || { echo "  the host's exited $rc:"; tail -5 "$OUT/$log.log" | sed 's/^/    /'; return 1; }
  waitfor "$OUT/guest.log" "$line" 180 $gpid || { grep "VM: " "$OUT/guest.log" | tail -8 | sed 's/^/    /'; return 1; }
  "$BIN/softirdma" decode "$CAPDIR/$cap.pcap" > "$OUT/$cap.decode" 2>&1 || [ "$bad" != 0 ] || { tail -3 "$OUT/$cap.decode"; return 1; }
  has_lines "$OUT/$cap.decode" "^summary: frames=[0-9]+ rocev2=[1-9][0-9]* .* icrc_bad=$bad malformed=0" || { tail -1 "$OUT/$cap.decode"; return 1; }
  if [ -n "$FAULT" ]; then
    as_user "$BIN/softirdma" fault -socket "$HOSTDIR/control" list > "$OUT/$cap.faults" 2>&1
    has_lines "$OUT/$cap.faults" '^[0-9]+ fired=[1-9]' || { cat "$OUT/$cap.faults"; return 1; }
    grep -E '^[0-9]+ fired' "$OUT/$cap.faults" | sed 's/^/  fault /'
  fi
}
# fault SPEC: the case's fault (none for an empty SPEC), the previous one removed.
fault() {
  as_user "$BIN/softirdma" fault -socket "$HOSTDIR/control" list 2> /dev/null | awk '{ print $1 }' |
    while read -r n; do as_user "$BIN/softirdma" fault -socket "$HOSTDIR/control" remove "$n" > /dev/null; done
  FAULT=$1
  [ -z "$FAULT" ] || read -ra spec <<< "$FAULT"
  [ -z "$FAULT" ] || as_user "$BIN/softirdma" fault -socket "$HOSTDIR/control" add "${spec[@]}" > /dev/null
}
# guest_done NAME ROLE: the guest printed its NAME_ROLE line (whatever the status).
guest_done() { has_lines "$OUT/guest.log" "VM: $1_$2 rc="; }

for t in "${TOOLS[@]}"; do
  name=$(field "$t" 1) how=$(field "$t" 2) bad=$(field "$t" 8)
  bad=${bad:-0}
  # The host's server for the guest's client.
  rc=0
  fault "$(field "$t" 7)"
  read -ra cmd <<< "$(field "$t" 3)"
  host "${name}_server" "${cmd[@]}" || rc=$?
  verdict "host_${name}_server_vs_rxe" ended "$rc" "${name}_server" "VM: ${name}_client rc=0" "${name}_server" "$bad"
  fault "$(field "$t" 7)"
  # The host's client for the guest's server; through rdma_cm tried again while the guest's
  # server runs and has not been reached.
  rc=1
  read -ra cmd <<< "$(field "$t" 6)"
  if waitfor "$OUT/guest.log" "VM: serving $name\b" 300 $gpid; then
    for _ in $(seq 30); do
      rc=0
      host "${name}_client" "${cmd[@]}" || rc=$?
      [ "$rc" != 0 ] && [ "$how" = cm ] && ! guest_done "$name" server || break
      sleep 1
    done
  fi
  verdict "host_${name}_client_vs_rxe" ended "$rc" "${name}_client" "VM: ${name}_server rc=0" "${name}_client" "$bad"
done
fault ""
waitfor "$OUT/guest.log" 'VM: dmesg checked' 120 $gpid || true
kernel_clean host_vs_rxe_no_kernel_warning '' 'VM: dmesg checked'
finish "interop host against rxe"
