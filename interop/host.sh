#!/usr/bin/env bash
# Host programs on softirdma, unchanged: rdma-core's, librdmacm's and perftest's tools, qperf,
# UCX's and libfabric's perf tools, as Debian ships them,
# between two programs under `softirdma run`, as an unprivileged user this script creates, on a
# machine with no RDMA module and no /dev/infiniband. Each tool runs as server and as client;
# PASS lines host_<tool>_<server|client>. Installs the tools from the Debian mirror when missing
# (needs root).
set -euo pipefail
cd "$(dirname "$0")/.."
. interop/guestlib.sh
. interop/hostlib.sh

LOG=/tmp/softirdma-$(id -u "$U")/log
# cm_listens PORT: how many rdma_cm listeners on PORT softirdma's log has seen.
cm_listens() { grep -c "rdma_cm listening.* port=$1\b" "$LOG" 2> /dev/null || true; }
cm_listening() { [ "$(cm_listens "$1")" -gt "$2" ]; }
# ready SPEC PID SEEN: the server is ready: tcp:PORT listens, or cm:PORT has a new rdma_cm
# listener (SEEN is how many there were before it started).
ready() {
  case $1 in
    tcp:*) wait_until 60 "$2" listening "${1#tcp:}" ;;
    cm:*) wait_until 60 "$2" cm_listening "${1#cm:}" "$3" ;;
  esac
}
# pair NAME READY SERVER_ARGS... -- CLIENT_ARGS...: the server under softirdma run, then, once
# it is READY (tcp:PORT or cm:PORT), the client; the verdicts on each end's exit status.
pair() {
  local name=$1 spec=$2 spid src=0 crc=0 sargs=() seen
  shift 2
  while [ "$1" != -- ]; do sargs+=("$1"); shift; done
  shift
  seen=$(cm_listens "${spec#*:}")
  as_user env ${NLEMPTY:+LD_PRELOAD="$NLEMPTY"} ${NOPROCVM:-} "$BIN/softirdma" run ${RUNFLAGS:-} -- timeout 120 "${sargs[@]}" > "$OUT/$name.server" 2>&1 &
  spid=$!
  pids+=("$spid")
  ready "$spec" "$spid" "$seen" || true
  as_user env ${NLEMPTY:+LD_PRELOAD="$NLEMPTY"} ${NOPROCVM:-} "$BIN/softirdma" run ${RUNFLAGS:-} ${CAPTURE:+-pcap "$CAPTURE"} -- timeout 120 "$@" > "$OUT/$name.client" 2>&1 || crc=$?
  if [ "$crc" != 0 ] && [ -n "${RETRY_REJECTED:-}" ] && grep -q 'RDMA_CM_EVENT_REJECTED; error: 8' "$OUT/$name.client"; then
    # See write_bw_R below: perftest's own race, once more.
    echo "  note: $name: the client's test QP connected before the server listened for it (REJ reason 8, invalid service ID); once more"
    kill "$spid" 2> /dev/null || true
    wait "$spid" 2> /dev/null || true
    RETRY_REJECTED= pair "$name" "$spec" "${sargs[@]}" -- "$@"
    return
  fi
  wait "$spid" || src=$?
  why="exit $src" verdict "host_${name}_server" ended "$src" "$OUT/$name.server"
  why="exit $crc" verdict "host_${name}_client" ended "$crc" "$OUT/$name.client"
}
# same NAME READY ARGS...: pair with the client's arguments the server's and 127.0.0.1.
same() { local n=$1 r=$2; shift 2; pair "$n" "$r" "$@" -- "$@" 127.0.0.1; }
# ended STATUS LOG: the end exited 0 (else its log's last lines).
ended() {
  [ "$1" = 0 ] && return
  tail -5 "$2" | sed 's/^/  /'
  return 1
}
# The daemon first, so that its log is there to wait on.
as_user "$BIN/softirdma" run -- true
same rc_pingpong tcp:18515 ibv_rc_pingpong -g 1 -n 200 -c
same uc_pingpong tcp:18515 ibv_uc_pingpong -g 1 -n 200 -c
same ud_pingpong tcp:18515 ibv_ud_pingpong -g 1 -n 200 -c
same srq_pingpong tcp:18515 ibv_srq_pingpong -g 1 -n 200 -c
same write_bw tcp:18515 ib_write_bw -x 1 -n 500
same read_bw tcp:18515 ib_read_bw -x 1 -n 500
same send_bw tcp:18515 ib_send_bw -x 1 -n 500
same atomic_bw tcp:18515 ib_atomic_bw -x 1 -n 500
same send_bw_UD tcp:18515 ib_send_bw -x 1 -c UD -n 500
# perftest -R exchanges its parameters over a first rdma_cm connection, then the server listens
# again for the test QPs while the client connects them: a client quicker than the server meets
# no listener and is rejected (reason 8, invalid service ID, as the kernel's CM rejects it).
# perftest retries then, but Debian's 4.5+0.17 crashes in that retry: the case runs once more.
RETRY_REJECTED=1 same write_bw_R cm:18515 ib_write_bw -R -x 1 -n 500
pair rping cm:7174 rping -s -a 127.0.0.1 -C 20 -V -- rping -c -a 127.0.0.1 -C 20 -V
pair ucmatose cm:7471 ucmatose -c 4 -C 20 -- ucmatose -s 127.0.0.1 -c 4 -C 20
pair udaddy cm:7174 udaddy -C 20 -- udaddy -s 127.0.0.1 -C 20
# The device answers for all of 127.0.0.0/8 and for the host's own addresses, as rdma_cm binds
# them on a host whose rxe stands on lo (libfabric's verbs provider binds each interface's).
pair rping_lo8 cm:7174 rping -s -a 127.0.0.2 -C 10 -V -- rping -c -a 127.0.0.2 -C 10 -V
HOSTADDR=$(ip -o addr show scope global 2> /dev/null | awk '{ sub(/\/.*/, "", $4); print $4; exit }')
if [ -n "$HOSTADDR" ]; then
  pair rping_hostaddr cm:7174 rping -s -a "$HOSTADDR" -C 10 -V -- rping -c -a "$HOSTADDR" -C 10 -V
else
  echo "  note: this machine has no global address: no host_rping_hostaddr case"
fi
# qperf's server serves until stopped: the verdicts are the client's, one per test.
as_user "$BIN/softirdma" run -- qperf -lp 19765 > "$OUT/qperf.server" 2>&1 &
qpid=$!
pids+=("$qpid")
wait_until 60 "$qpid" listening 19765 || true
for t in rc_bw rc_lat rc_rdma_write_bw rc_rdma_read_lat; do
  st=0
  as_user "$BIN/softirdma" run -- timeout 60 qperf 127.0.0.1 -lp 19765 -cm1 -t 2 "$t" > "$OUT/qperf.$t" 2>&1 || st=$?
  why="exit $st" verdict "host_qperf_$t" has_lines "$OUT/qperf.$t" '(bw|latency) +='
  grep -hE '(bw|latency) +=' "$OUT/qperf.$t" | sed "s/^ */  qperf $t: /" || true
done
# qperf's UD tests address the peer by LID alone, never through rdma_cm (-cm1 does not reach
# them): on any RoCE device the kernel refuses an address handle without a GRH with EINVAL
# (rdma_check_ah_attr), and softirdma does as it does.
st=0
as_user "$BIN/softirdma" run -- timeout 60 qperf 127.0.0.1 -lp 19765 -t 2 ud_lat > "$OUT/qperf.ud_lat" 2>&1 || st=$?
why="exit $st" verdict host_qperf_ud_lat_refused_as_rxe has_lines "$OUT/qperf.ud_lat" 'failed to create address handle: Invalid argument'
pkill -TERM -u "$U" -x qperf 2> /dev/null || true
pair ucx_rc_verbs tcp:13337 ucx_perftest -p 13337 -d rxe0:1 -x rc_verbs -- ucx_perftest 127.0.0.1 -p 13337 -d rxe0:1 -x rc_verbs -t put_bw -D zcopy -s 65536 -n 2000
# UCX 1.13's ud_verbs reads a datagram's IP version from the completion's SL, as mlx5 reports
# it; rxe (the kernel's and softirdma's alike) leaves SL 0 there, so UCX takes an IPv4
# datagram's GRH area for an IPv6 header and drops it (its DGID check). On the IPv6 GID
# (index 1) the check holds, on the kernel's rxe as here (docs/host-programs.md).
UCX_IB_GID_INDEX=1 pair ucx_ud_verbs tcp:13338 ucx_perftest -p 13338 -d rxe0:1 -x ud_verbs -- ucx_perftest 127.0.0.1 -p 13338 -d rxe0:1 -x ud_verbs -t am_lat -n 2000
# Open MPI over UCX, two ranks on rxe0 (rc_verbs for the data, ud_verbs for UCX's wire-up):
# messages of 1 B to 4 MiB both ways, every byte checked (interop/host/mpipingpong.c); the
# capture shows that they crossed the device: RDMA READs carry the rendezvous messages.
mpicc -O2 -Wall -o "$BIN/mpipingpong" interop/host/mpipingpong.c > "$OUT/mpipingpong.build" 2>&1 || cat "$OUT/mpipingpong.build"
chmod 755 "$BIN/mpipingpong" 2> /dev/null || true
MPICAP=$(as_user mktemp -d)
st=0
as_user "$BIN/softirdma" run -pcap "$MPICAP/mpi.pcap" -- timeout 300 mpirun --oversubscribe -np 2 --mca pml ucx --mca btl self --mca osc ^ucx \
  -x UCX_TLS=rc_verbs,ud_verbs -x UCX_NET_DEVICES=rxe0:1 -x UCX_IB_GID_INDEX=1 "$BIN/mpipingpong" > "$OUT/mpi.txt" 2>&1 || st=$?
"$BIN/softirdma" decode "$MPICAP/mpi.pcap" > "$OUT/mpi.decode" 2>&1 || true
why="exit $st" verdict host_mpi_ucx_pingpong has_lines "$OUT/mpi.txt" '^mpipingpong: ok' "$OUT/mpi.decode" 'RC_RDMA_READ_RESPONSE' "$OUT/mpi.decode" '^summary: .* icrc_bad=0 malformed=0'
grep -h '^mpipingpong: ok' "$OUT/mpi.txt" | sed 's/^/  /' || tail -5 "$OUT/mpi.txt"
rm -rf "$MPICAP"
# libfabric's fi_pingpong over its verbs provider: MSG endpoints (connected through rdma_cm) and
# RDM endpoints over rxd (UD datagrams), messages of 64 B to 1 MiB.
pair libfabric_verbs_msg tcp:47592 fi_pingpong -p verbs -e msg -I 100 -- fi_pingpong -p verbs -e msg -I 100 127.0.0.1
pair libfabric_rxd tcp:47592 fi_pingpong -p 'verbs;ofi_rxd' -e rdm -I 100 -- fi_pingpong -p 'verbs;ofi_rxd' -e rdm -I 100 127.0.0.1
grep -h 'BW average' -A1 "$OUT/write_bw.client" | tail -1 | sed 's/^/  ib_write_bw 64 KiB: /' || true

# fork: both processes hold the device, each its own answers; the child's exit frees nothing
# of the parent's (interop/host/forkcheck.c).
gcc -O2 -Wall -o "$BIN/forkcheck" interop/host/forkcheck.c -libverbs > "$OUT/forkcheck.build" 2>&1 || cat "$OUT/forkcheck.build"
chmod 755 "$BIN/forkcheck" 2> /dev/null || true
st=0
as_user "$BIN/softirdma" run -- timeout 60 "$BIN/forkcheck" > "$OUT/forkcheck.txt" 2>&1 || st=$?
why="exit $st" verdict host_fork has_lines "$OUT/forkcheck.txt" '^forkcheck: ok$'

# A program's buffers of every kind: the heap, huge pages (hugetlbfs, 8 more reserved for the
# case) and transparent huge pages; and an ASan build of a program (interop/host/bufcheck.c).
gcc -O2 -Wall -o "$BIN/bufcheck" interop/host/bufcheck.c -libverbs > "$OUT/bufcheck.build" 2>&1 || cat "$OUT/bufcheck.build"
gcc -O1 -g -fsanitize=address -Wall -o "$BIN/bufcheck-asan" interop/host/bufcheck.c -libverbs >> "$OUT/bufcheck.build" 2>&1 || cat "$OUT/bufcheck.build"
chmod 755 "$BIN"/bufcheck* 2> /dev/null || true
HUGEPAGES=$(cat /proc/sys/vm/nr_hugepages)
echo $((HUGEPAGES + 8)) > /proc/sys/vm/nr_hugepages || echo "  note: could not reserve huge pages"
for k in heap hugetlb thp; do
  st=0
  as_user "$BIN/softirdma" run -- timeout 60 "$BIN/bufcheck" "$k" > "$OUT/bufcheck.$k" 2>&1 || st=$?
  why="exit $st" verdict "host_buffers_$k" has_lines "$OUT/bufcheck.$k" "^bufcheck: ok $k\$"
done
echo "$HUGEPAGES" > /proc/sys/vm/nr_hugepages || true
# RLIMIT_MEMLOCK, held as the kernel holds it with run -memlock: under a limit of 8 MiB a
# 16 MiB registration fails with ENOMEM, and programs with small ones run; without the flag
# (the default, as every case above runs) the limit means nothing.
st=0
as_user bash -c "ulimit -S -l 8192 && exec \"\$0\" run -memlock -- timeout 60 \"\$1\" heap" "$BIN/softirdma" "$BIN/bufcheck" > "$OUT/memlock.over" 2>&1 || st=$?
why="exit $st" verdict host_memlock_refused has_lines "$OUT/memlock.over" 'ibv_reg_mr of 16777216 bytes failed: Cannot allocate memory'
RUNFLAGS=-memlock same memlock_rc_pingpong tcp:18515 ibv_rc_pingpong -g 1 -n 50 -c
st=0
as_user "$BIN/softirdma" run -- timeout 60 "$BIN/bufcheck-asan" heap > "$OUT/bufcheck.asan" 2>&1 || st=$?
why="exit $st" verdict host_asan has_lines "$OUT/bufcheck.asan" '^bufcheck: ok heap$'

# Under Yama's ptrace_scope 1 softirdma reaches a program's memory only as the ptracer the
# program names: the library names the daemon (its pid from the socket's SO_PEERCRED). Without
# Yama prctl answers EINVAL, as here; the call and its pid are what this checks.
st=0
as_user "$BIN/softirdma" run -- timeout 60 strace -f -e trace=prctl ibv_devinfo > "$OUT/ptracer.txt" 2>&1 || st=$?
HOSTD=$(cat "/tmp/softirdma-$(id -u "$U")/pid" 2> /dev/null || echo none)
why="exit $st" verdict host_ptracer has_lines "$OUT/ptracer.txt" "prctl\(PR_SET_PTRACER, $HOSTD\)"

# 1,000 programs come and go, 20 at a time: half run to their end and exit holding everything
# they made (device, PD, MR, channel, CQ, RC and UD QPs, SRQ, an rdma_cm ID; the RC QP sent
# through), half are killed, holding it all or in the middle of making it (interop/host/churn.c).
# softirdma's heap after a collection and its open files come back to where they were (after
# 200 such programs first, whose high-water marks its maps keep), no program is left connected,
# and the device still serves.
gcc -O2 -Wall -o "$BIN/churn" interop/host/churn.c -libverbs -lrdmacm > "$OUT/churn.build" 2>&1 || cat "$OUT/churn.build"
chmod 755 "$BIN/churn" 2> /dev/null || true
# churn_round N: N programs, 20 at a time, each fourth killed at once, each fourth once it holds all.
churn_round() {
  local b j i
  for ((b = 0; b < $1 / 20; b++)); do
    for ((j = 0; j < 20; j++)); do
      i=$((b * 20 + j))
      case $((i % 4)) in
        0 | 1) as_user "$BIN/softirdma" run -- "$BIN/churn" > /dev/null 2>&1 & ;;
        2) as_user "$BIN/softirdma" run -- timeout -s KILL 0.3 "$BIN/churn" wait > /dev/null 2>&1 & ;;
        3) as_user "$BIN/softirdma" run -- timeout -s KILL "0.0$((RANDOM % 90 + 10))" "$BIN/churn" > /dev/null 2>&1 & ;;
      esac
    done
    wait
  done
}
# status_of FIELD: a field of softirdma status (programs, heap_kib, files).
status_of() { as_user "$BIN/softirdma" status | awk -v f="$1" '{ for (i = 1; i < NF; i++) if ($i == f) print $(i + 1) }'; }
churn_round 200
heap0=$(status_of heap_kib) files0=$(status_of files)
churn_round 1000
idle() { [ "$(status_of programs)" = 0 ]; }
# left_nothing: no program connected, files as before, the heap within 10% (at least 256 KiB) of
# where it was, and one more program works.
left_nothing() {
  local heap files
  wait_until 30 - idle || { echo "  programs still connected: $(status_of programs)"; return 1; }
  heap=$(status_of heap_kib) files=$(status_of files)
  echo "  softirdma: heap $heap0 KiB before, $heap KiB after; open files $files0 before, $files after"
  [ "$files" = "$files0" ] && [ "$heap" -le $((heap0 + (heap0 / 10 > 256 ? heap0 / 10 : 256))) ] || return 1
  as_user "$BIN/softirdma" run -- timeout 30 "$BIN/churn" | grep -qx 'churn: ok'
}
verdict host_churn_1000_programs left_nothing

# As on a host whose kernel has ib_core: a shim (interop/host/nlempty.c) makes NETLINK_RDMA open
# and answer an empty list. Alone it hides every device; after softirdma's library, the tools run.
gcc -shared -fPIC -O2 -Wall -o "$BIN/nlempty.so" interop/host/nlempty.c -ldl -lpthread > "$OUT/nlempty.build" 2>&1 || cat "$OUT/nlempty.build"
chmod 755 "$BIN/nlempty.so" 2> /dev/null || true
as_user env LD_PRELOAD="$BIN/nlempty.so" ibv_devices > "$OUT/nlempty.devices" 2>&1 || true
verdict "host_nlempty_shim|host_nlempty_shim (the shim alone shows a device)" no_lines "$OUT/nlempty.devices" 'rxe0'
NLEMPTY=$BIN/nlempty.so same nlempty_rc_pingpong tcp:18515 ibv_rc_pingpong -g 1 -n 100 -c
NLEMPTY=$BIN/nlempty.so pair nlempty_rping cm:7174 rping -s -a 127.0.0.1 -C 10 -V -- rping -c -a 127.0.0.1 -C 10 -V
NLEMPTY=$BIN/nlempty.so same nlempty_write_bw tcp:18515 ib_write_bw -x 1 -n 500

# Captures: softirdma run -pcap holds every frame of the run, between two programs on one
# device too; each decodes with every ICRC good and nothing malformed.
CAPDIR=$(as_user mktemp -d)
# decoded NAME REGEX: the capture decodes clean, with frames, and names what REGEX matches.
decoded() {
  "$BIN/softirdma" decode "$CAPDIR/$1.pcap" > "$OUT/$1.decode" 2>&1 || { tail -3 "$OUT/$1.decode"; return 1; }
  has_lines "$OUT/$1.decode" '^summary: frames=[1-9][0-9]* .* icrc_bad=0 malformed=0' "$OUT/$1.decode" "$2" || { tail -3 "$OUT/$1.decode"; return 1; }
  grep '^summary' "$OUT/$1.decode" | sed 's/^/  /' || true
}
CAPTURE=$CAPDIR/rc_pingpong.pcap same capture_rc_pingpong tcp:18515 ibv_rc_pingpong -g 1 -n 50 -c
verdict host_capture_rc_pingpong decoded rc_pingpong 'RC_SEND_(ONLY|LAST)'
CAPTURE=$CAPDIR/rping.pcap pair capture_rping cm:7174 rping -s -a 127.0.0.1 -C 10 -V -- rping -c -a 127.0.0.1 -C 10 -V
verdict host_capture_rping decoded rping 'RDMA_READ_RE'
CAPTURE=$CAPDIR/ud_pingpong.pcap same capture_ud_pingpong tcp:18515 ibv_ud_pingpong -g 1 -n 50 -c
verdict host_capture_ud_pingpong decoded ud_pingpong 'UD_SEND_ONLY'

# rdma-core's own suite (python3-pyverbs's copy), each module the installed suite has, both ends
# of each test on rxe0, as the user; the tally beside the rxe reference of the project's VM.
RC_VERSION=$(dpkg-query -W -f '${Version}' python3-pyverbs | sed 's/\..*//')
mods=()
for m in addr atomic cq cq_events cqex device mr odp parent_domain pd qp qpex rdmacm relaxed_ordering shared_pd srq tag_matching; do
  ls /usr/share/doc/rdma-core/tests/test_$m.py* > /dev/null 2>&1 && mods+=("$m")
done
RCTOP=$(as_user mktemp -d)
as_user env RDMA_CORE_TOP="$RCTOP" "$BIN/softirdma" run -- timeout 1200 /usr/bin/python3 interop/guest/rdma_core_suite.py rxe0 1 "${mods[@]}" > "$OUT/rdma-core.txt" 2>&1 || true
count() { grep -cE "^RDMA-CORE: .* $1\$" "$OUT/rdma-core.txt" || true; }
crashed=$(grep -E '^RDMA-CORE-MODULE: ' "$OUT/rdma-core.txt" | grep -cvE 'rc=(0|1)$' || true)
echo "rdma-core tests on host rxe0 (rdma-core $RC_VERSION): $(count ok) ok, $(count skipped) skipped, $(count FAIL) failed, $(count ERROR) errors, $crashed modules crashed"
grep -E '^RDMA-CORE: .* (FAIL|ERROR)$' "$OUT/rdma-core.txt" | sed 's/^/  /' || true
verdict "host_rdma_core_suite|host_rdma_core_suite (failures, errors or crashes)" test "$(count FAIL)$(count ERROR)$crashed" = 000

# Where softirdma may not use process_vm_readv (Docker's default seccomp profile denies it without
# CAP_SYS_PTRACE), the programs serve their memory themselves: softirdma and the programs run
# under a seccomp filter that denies process_vm_readv and process_vm_writev
# (interop/host/noprocvm.c), and the tools work as before.
gcc -O2 -Wall -o "$BIN/noprocvm" interop/host/noprocvm.c > "$OUT/noprocvm.build" 2>&1 || cat "$OUT/noprocvm.build"
chmod 755 "$BIN/noprocvm" 2> /dev/null || true
as_user "$BIN/softirdma" stop > /dev/null 2>&1 || true
served0=$(grep -c 'serving host programs' "$LOG" 2> /dev/null || true)
as_user "$BIN/noprocvm" "$BIN/softirdma" hostd -idle 0 >> "$LOG" 2>&1 &
pids+=($!)
served() { [ "$(grep -c 'serving host programs' "$LOG")" -gt "$served0" ]; }
wait_until 30 $! served || true
NOPROCVM=$BIN/noprocvm same copyservice_rc_pingpong tcp:18515 ibv_rc_pingpong -g 1 -n 200 -c
NOPROCVM=$BIN/noprocvm same copyservice_write_bw tcp:18515 ib_write_bw -x 1 -n 1000
NOPROCVM=$BIN/noprocvm pair copyservice_rping cm:7174 rping -s -a 127.0.0.1 -C 20 -V -- rping -c -a 127.0.0.1 -C 20 -V
st=0
as_user "$BIN/noprocvm" "$BIN/softirdma" run -- timeout 60 "$BIN/forkcheck" > "$OUT/copyservice_fork.txt" 2>&1 || st=$?
why="exit $st" verdict host_copyservice_fork has_lines "$OUT/copyservice_fork.txt" '^forkcheck: ok$'
verdict host_copyservice_used has_lines "$LOG" 'the program serves its memory \(copy service\)'
grep -h 'BW average' -A1 "$OUT/copyservice_write_bw.client" | tail -1 | sed 's/^/  ib_write_bw 64 KiB through the copy service: /' || true
as_user "$BIN/softirdma" stop > /dev/null 2>&1 || true

# Devices of a serve's fabric (serve -host), the user's serve in the folder softirdma run uses,
# so a plain run joins it: rxe1 and rxe2 have addresses of their own and no netdev. Programs on
# the two meet through the fabric's switch, two on one device through its loopback; one capture
# holds all of it; a fault added through the control socket drops a WRITE packet of rxe2's, which
# rxe2 sends again.
as_user "$BIN/softirdma" serve -host name=rxe1,ip=192.0.2.201/24 -host name=rxe2,ip=192.0.2.202/24 \
  -pcap "$CAPDIR/serve.pcap" -control "$CAPDIR/serve.ctl" > "$OUT/serve_host.out" 2> "$OUT/serve_host.log" &
spid=$!
pids+=("$spid")
waitfor "$OUT/serve_host.out" "host device rxe2" 30 "$spid" || true
LOG=$OUT/serve_host.log
as_user "$BIN/softirdma" run -- ibv_devinfo -v > "$OUT/serve_devinfo.txt" 2>&1 || true
verdict host_serve_devices has_lines "$OUT/serve_devinfo.txt" 'hca_id:[[:space:]]+rxe1' "$OUT/serve_devinfo.txt" 'hca_id:[[:space:]]+rxe2' \
  "$OUT/serve_devinfo.txt" 'GID\[  3\]:[[:space:]]+::ffff:192.0.2.202, RoCE v2'
as_user "$BIN/softirdma" run -- rdma link show > "$OUT/serve_link.txt" 2>&1 || true
verdict host_serve_no_netdev has_lines "$OUT/serve_link.txt" '^link rxe1/1 state ACTIVE physical_state LINK_UP *$' \
  "$OUT/serve_link.txt" '^link rxe2/1 state ACTIVE physical_state LINK_UP *$'
pair serve_rc_pingpong tcp:18515 ibv_rc_pingpong -d rxe1 -g 3 -n 200 -c -- ibv_rc_pingpong -d rxe2 -g 3 -n 200 -c 127.0.0.1
pair serve_rping cm:7174 rping -s -a 192.0.2.201 -C 20 -V -- rping -c -I 192.0.2.202 -a 192.0.2.201 -C 20 -V
pair serve_write_bw_loopback tcp:18515 ib_write_bw -d rxe1 -x 3 -n 500 -- ib_write_bw -d rxe1 -x 3 -n 500 127.0.0.1
as_user "$BIN/softirdma" fault -socket "$CAPDIR/serve.ctl" add 'drop from=rxe2 opcode=RDMA_WRITE_MIDDLE nth=5 name=serve-drop' > "$OUT/serve_fault.txt" 2>&1 || true
pair serve_write_bw_drop tcp:18515 ib_write_bw -d rxe1 -x 3 -n 500 -- ib_write_bw -d rxe2 -x 3 -n 500 127.0.0.1
as_user "$BIN/softirdma" fault -socket "$CAPDIR/serve.ctl" list >> "$OUT/serve_fault.txt" 2>&1 || true
verdict host_serve_fault_fired has_lines "$OUT/serve_fault.txt" '^[0-9]+ fired=1 .*name=serve-drop$'
# softirdma stop stops the serve that serves in the user's folder; its capture is then whole.
st=0
as_user "$BIN/softirdma" stop > "$OUT/serve_stop.txt" 2>&1 || st=$?
wait "$spid" 2> /dev/null || st=$?
why="exit $st" verdict host_serve_stopped has_lines "$OUT/serve_host.log" 'msg=stopped'
# The one capture: frames between the devices both ways, rxe1's loopback, and the frame the
# fault dropped under the number the fault reported, though loopback frames came before it.
verdict host_capture_serve decoded serve '192\.0\.2\.202 -> 192\.0\.2\.201 .*RC_RDMA_WRITE'
dropped=$(sed -nE 's/^[0-9]+ fired=1 seen=[0-9]+ frames=([0-9]+) .*name=serve-drop$/\1/p' "$OUT/serve_fault.txt")
verdict host_capture_serve_whole has_lines "$OUT/serve.decode" '192\.0\.2\.201 -> 192\.0\.2\.202 .*RC_ACKNOWLEDGE' \
  "$OUT/serve.decode" '192\.0\.2\.201 -> 192\.0\.2\.201 .*RC_RDMA_WRITE' "$OUT/serve.decode" 'RDMA_READ_RESPONSE' \
  "$OUT/serve.decode" "#${dropped:-none} 192\.0\.2\.202 -> 192\.0\.2\.201 .*RC_RDMA_WRITE_MIDDLE"
finish "interop host"
