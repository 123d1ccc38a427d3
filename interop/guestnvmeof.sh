#!/usr/bin/env bash
# NVMe over Fabrics between two VMs (vm/), the kernel's own RDMA users on each end: a target
# (nvmet-rdma) serving a brd RAM disk and a host (nvme-rdma) that discovers it, connects, runs
# fio writing and verifying 64 MiB (4 KiB random writes, then 128 KiB sequential ones, crc32c)
# and disconnects; neither guest's kernel may warn. Each end is a guest on softirdma0 (the
# driver, hw/linux, over a `softirdma serve` of its own) or on Linux rxe (rxe0), the two joined
# by a dgram link. Prints PASS/FAIL device_guest_nvmeof_<case>_<check> and fio's figures.
#
# Usage: interop/guestnvmeof.sh [CASE...] (default softirdma_to_rxe). A CASE is
# TARGET_to_HOST[_srq][_loss|_kill_target|_kill_host], TARGET and HOST softirdma or rxe:
#   _srq          the target receives on shared receive queues (nvmet-rdma use_srq=1)
#   _loss         each softirdma end's serve drops 1% of the frames it receives; fio moves 16 MiB
#                 (4 MiB with an rxe end: rxe's host stalls on some losses and reconnects)
#   _kill_host    the host's serve (softirdma) SIGKILLed under fio (the host connected with
#                 --ctrl-loss-tmo 20): fio ends in error within 60 s
#   _kill_target  the target's serve (softirdma) killed: the host gives up after its two
#                 reconnect attempts (20 s / 10 s) and removes the controller, fio failing
#                 In both, both guests run with kernel.hung_task_timeout_secs=10, stay up, and
#                 log no hung task nor warning in the 30 s after fio ends.
# NVMEOF_QD1=1: before the verified writes, each host also reads 4 KiB at random one at a time
# for 10 s (fio iodepth 1), and the median and 99th percentile of its completion latency are
# printed beside rxe's where both hosts ran against the same target.
# NVMEOF_CQ_DIM=1: the softirdma guests load the driver with cq_dim=1 (the RDMA core's DIM
# moderates the kernel's CQ events).
# NVMEOF_PCAP=1: each serve writes its link's frames to <case>.<role>.pcap in the logs' folder.
# NVMEOF_PROFILE=1: each serve writes its CPU profile to <case>.<role>.prof there
# (`go tool pprof -top bin/softirdma FILE`).
# NVMEOF_PROCS=N: each serve runs with -procs N (0..1024; GOMAXPROCS, 0 for Go's own; serve's
# -procs auto by default).
# NVMEOF_CPU=1: what the 4 KiB random writes and their verification cost the machine, per I/O:
# the CPU time of each guest's virtual CPU, of its QEMU's other threads and of each serve, from
# the job's start to its end as the host guest marks them, and how many of the machine's cores
# that kept busy. With both hosts against one target, each host's total is printed beside the
# other's: where the machine's cores are all busy, IOPS go as the inverse of that total.
set -uo pipefail
cd "$(dirname "$0")/.."
for v in NVMEOF_QD1 NVMEOF_CQ_DIM NVMEOF_PROFILE NVMEOF_CPU; do
  [[ ${!v:-0} =~ ^[01]$ ]] || { echo "$v must be 0 or 1, not '${!v}'" >&2; exit 2; }
done
[[ -z ${NVMEOF_PROCS:-} || ( $NVMEOF_PROCS =~ ^[0-9]{1,4}$ && 10#$NVMEOF_PROCS -le 1024 ) ]] ||
  { echo "NVMEOF_PROCS must be 0..1024, not '$NVMEOF_PROCS'" >&2; exit 2; }
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(softirdma_to_rxe)
for c in "${cases[@]}"; do
  [[ $c =~ ^(softirdma|rxe)_to_(softirdma|rxe)(_srq)?(_loss|_kill_target|_kill_host)?$ ]] ||
    { echo "unknown case '$c' (TARGET_to_HOST[_srq][_loss|_kill_target|_kill_host], each softirdma or rxe)" >&2; exit 2; }
  [[ $c =~ ^rxe_.*_kill_target$ || $c =~ _to_rxe.*_kill_host$ ]] &&
    { echo "case '$c': the end whose serve is killed must be softirdma" >&2; exit 2; }
done
. interop/guestlib.sh
guest_setup device_guest_nvmeof_module_build
echo "interop NVMe over Fabrics; logs in $OUT"
NQN=softirdma.test TIP=192.168.77.1 HIP=192.168.77.2

# The target: a 128 MiB brd disk as namespace 1 of $NQN on $TIP:4420 over RDMA. It stays up until
# the host's guest has ended (the harness then creates /share/done), then reports its kernel log.
# With SRQ=1 its queues receive on shared receive queues, which it shows once they are there.
target_script() {
  cat interop/guest/lib.sh interop/guest/nvmeof.sh - <<SCRIPT
sysctl -qw kernel.hung_task_timeout_secs=10
if [ $SRQ = 1 ]; then
  ( for i in \$(seq 1200); do
      rdma resource show srq > /tmp/srq 2>&1
      grep -q nvmet /tmp/srq && { sed 's/^/VM: srq: /' /tmp/srq; break; }
      sleep 0.5
    done ) &
fi
nvmeof_target $NQN $TIP $SRQ
for i in \$(seq 9000); do [ -e /share/done ] && break; sleep 0.1; done
echo "VM: host done"
dmesg | grep -E 'WARNING|BUG|Oops|Call Trace|blocked for more than|nvmet' | sed 's/^/VM: dmesg: /'
echo "VM: dmesg checked"
SCRIPT
}

# The host: discover, connect, fio, disconnect. Under KILL it connects with a 20 s controller
# loss timeout and runs fio until it fails, saying when it runs, then waits 30 s.
host_script() {
  cat interop/guest/lib.sh interop/guest/nvmeof.sh - <<SCRIPT
sysctl -qw kernel.hung_task_timeout_secs=10
nvmeof_connect $NQN $TIP ${KILL:+--ctrl-loss-tmo 20}
if [ -n "\$D" ] && [ -z "$KILL" ]; then
  [ "${NVMEOF_QD1:-0}" != 1 ] || nvmeof_fio_qd1 $SIZE
  nvmeof_fio_verify $NQN $SIZE
elif [ -n "\$D" ]; then
  fio --filename=\$D --ioengine=libaio --direct=1 --iodepth=16 --rw=randwrite --bs=4k --size=64M \
    --time_based --runtime=300 --status-interval=1 --name=killed > /tmp/fio 2>&1 &
  f=\$!
  for i in \$(seq 1500); do grep -q 'IOPS=' /tmp/fio && break; sleep 0.2; done
  echo "VM: fio running"
  wait \$f; echo "VM: fio ended rc=\$?"
  grep -E 'error|err=' /tmp/fio | tail -5 | sed 's/^/VM: fio: /'
  sleep 30
  echo "VM: alive 30 s after fio"
  echo "VM: controllers left: \$(cat /sys/class/nvme/nvme*/subsysnqn 2>/dev/null | grep -c $NQN)"
fi
dmesg | grep -E 'WARNING|BUG|Oops|Call Trace|blocked for more than|nvme' | sed 's/^/VM: dmesg: /'
echo "VM: dmesg checked"
SCRIPT
}

# boot ROLE DEVICE IP MINE THEIRS MAC SERVE_ARGS...: one guest in the background, its console in
# $OUT/<case>.<role>.log, its pid in <role>_pid; a softirdma guest gets a serve of its own on
# the link (its pid in <role>_serve).
boot() {
  local role=$1 dev=$2 ip=$3 mine=$4 theirs=$5 mac=$6 sock args=() env=()
  shift 6
  if [ "$dev" = softirdma ]; then
    sock=$(mktemp -u /tmp/softirdma-XXXXXX.sock)
    bin/softirdma serve -socket "$sock" -link "dgram:127.0.0.1:$mine,127.0.0.1:$theirs" -ip "$ip" "$@" \
      ${NVMEOF_PCAP:+-pcap "$OUT/$case.$role.pcap"} \
      $([ "${NVMEOF_PROFILE:-0}" = 1 ] && echo -cpuprofile "$OUT/$case.$role.prof") \
      ${NVMEOF_PROCS:+-procs $((10#$NVMEOF_PROCS))} \
      > "$OUT/$case.$role.serve.out" 2> "$OUT/$case.$role.serve.log" &
    pids+=($!) serves+=($!)
    eval "${role}_serve=$!"
    waitfor "$OUT/$case.$role.serve.out" "listening on" 30 $! || { cat "$OUT/$case.$role.serve.log"; return 1; }
    args=(vm.softirdma=$ip/24 ${NVMEOF_CQ_DIM:+softirdma.cq_dim=$NVMEOF_CQ_DIM}) env=(VM_SOCKET="$sock" VM_MAC0=$mac)
  else
    args=(vm.rxe=1 vm.eth1=$ip/24) env=(VM_LINK="$mine,$theirs" VM_MAC0=$mac VM_MAC1=52:54:00:00:77:${mac##*:})
  fi
  "${role}_script" > "$OUT/$case.$role.sh"
  env "${env[@]}" VM_SHARE="$OUT/$case.share" VM_SCRIPT="$OUT/$case.$role.sh" \
    timeout 900 bash vm/run.sh "${args[@]}" > "$OUT/$case.$role.log" 2>&1 &
  pids+=($!)
  eval "${role}_pid=$!"
}

# qemu_of PID: the QEMU process among PID's descendants (vm/run.sh runs it through a loader).
qemu_of() {
  local c
  for c in $(pgrep -P "$1"); do
    if tr '\0' ' ' < "/proc/$c/cmdline" 2>/dev/null | grep -q qemu-system; then echo "$c"; return 0; fi
    qemu_of "$c" && return 0
  done
  return 1
}
# ticks PID [vcpu|other]: the CPU time, in clock ticks, PID's threads have taken: its virtual CPUs
# (QEMU's TCG threads), the rest, or all of them.
ticks() {
  local f s comm sum=0 which=${2:-}
  for f in /proc/$1/task/*/stat; do
    s=$(cat "$f" 2>/dev/null) || continue
    comm=${s#*(} comm=${comm%)*}
    case $which in
      vcpu) [[ $comm == *TCG* ]] || continue ;;
      other) [[ $comm != *TCG* ]] || continue ;;
    esac
    set -- ${s##*) }
    sum=$((sum + ${12} + ${13}))
  done
  echo $sum
}
# cpu_watch IOS: waits for the host guest's randwrite.start and .end marks and writes to
# $OUT/$case.cpu what each part took over that time, in microseconds per I/O of IOS, then the
# total (which main reads back), the length of the window and the cores it kept busy.
cpu_watch() {
  local ios=$1 share="$OUT/$case.share" hz hq tq parts=() a=() b=() t0 t1 i
  hz=$(getconf CLK_TCK)
  until [ -e "$share/randwrite.start" ]; do kill -0 "$host_pid" 2>/dev/null || return 0; sleep 0.05; done
  hq=$(qemu_of "$host_pid") tq=$(qemu_of "$target_pid") || { echo "no QEMU found" > "$OUT/$case.cpu"; return 0; }
  parts=("host guest's vCPU:$hq vcpu" "host QEMU's other threads:$hq other" "host serve:${host_serve:-}"
    "target guest's vCPU:$tq vcpu" "target QEMU's other threads:$tq other" "target serve:${target_serve:-}")
  sample() { local p; for p in "${parts[@]}"; do [ -n "${p#*:}" ] && ticks ${p#*:} || echo 0; done; }
  t0=$EPOCHREALTIME; mapfile -t a < <(sample)
  until [ -e "$share/randwrite.end" ]; do kill -0 "$host_pid" 2>/dev/null || return 0; sleep 0.05; done
  t1=$EPOCHREALTIME; mapfile -t b < <(sample)
  for i in "${!parts[@]}"; do
    [ -n "${parts[i]#*:}" ] || continue
    echo "${parts[i]%%:*} $(((b[i] - a[i]) * 1000000 / hz / ios))"
  done | awk -v w="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" -v ios="$ios" -v n="$(nproc)" '
    { us = $NF; $NF = ""; sub(/ $/, ""); line = line sep $0 " " us " us"; sep = ", "; all += us }
    END { printf "%s; all %d us (%d I/Os in %.1f s: %.2f of %d cores busy)\n", line, all, ios, w, all * ios / 1000000 / w, n }' > "$OUT/$case.cpu"
}

# ok CHECK REGEX: the verdict <case>_CHECK on the host guest's console showing a line REGEX.
ok() { check "${n}_$1" "$2" "$h"; }
# fio_failed: fio ended in error within limit seconds of the kill.
fio_failed() {
  waitfor "$h" "VM: fio ended rc=[1-9]" $limit "$host_pid" || { grep -a "VM: fio" "$h"; return 1; }
  note="$((SECONDS - killed)) s"
}
declare -A iops mbs qd1 cpu
port=9301
for case in "${cases[@]}"; do
  base=$case serve_args=() serves=() SRQ=0 KILL= SIZE=64M host_serve= target_serve= watch=
  case $case in
    *_loss) base=${case%_loss} serve_args=(-loss 0.01) SIZE=16M
      [[ $base != *rxe* ]] || SIZE=4M ;;
    *_kill_target) base=${case%_kill_target} KILL=target ;;
    *_kill_host) base=${case%_kill_host} KILL=host ;;
  esac
  [ "${base%_srq}" = "$base" ] || { SRQ=1; base=${base%_srq}; }
  target=${base%%_to_*} host=${base##*_to_}
  mkdir -p "$OUT/$case.share"
  boot target "$target" $TIP $port $((port + 1)) 52:54:00:00:0a:10 "${serve_args[@]}" &&
    boot host "$host" $HIP $((port + 1)) $port 52:54:00:00:0a:20 "${serve_args[@]}" ||
    { verdict "device_guest_nvmeof_${case}_serve" false; continue; }
  port=$((port + 2))
  # The random writes and their verification: two I/Os a 4 KiB block.
  if [ "${NVMEOF_CPU:-0}" = 1 ] && [ -z "$KILL" ]; then
    cpu_watch $(($(numfmt --from=iec "$SIZE") / 4096 * 2)) &
    watch=$!
  fi
  t="$OUT/$case.target.log" h="$OUT/$case.host.log" n=device_guest_nvmeof_$case
  if [ -n "$KILL" ]; then
    # Under fio, the serve goes. The host's own: fio ends in error within 60 s. The target's:
    # the host tries again as often as its controller loss timeout allows (20 s / 10 s), then
    # removes the controller and fio ends in error; each try at a target that answers nothing
    # waits out ib_cm's REQ retries (rdma_cm's 15, ~4 s each), so that takes up to 240 s.
    limit=60; [ "$KILL" = host ] || limit=240
    if waitfor "$h" "VM: fio running" 300 "$host_pid"; then
      eval "kill -9 \$${KILL}_serve; wait \$${KILL}_serve 2>/dev/null"
      killed=$SECONDS
      verdict "${n}_fio_fails_within_${limit}s" fio_failed
    else
      verdict "${n}_fio_running" false
    fi
  fi
  wait "$host_pid"
  [ -z "$watch" ] || wait "$watch"
  touch "$OUT/$case.share/done"
  wait "$target_pid"
  [ ${#serves[@]} = 0 ] || kill "${serves[@]}" 2>/dev/null
  grep -aq "VM: target ready" "$t" || tail -20 "$t"
  ok discover "VM: discover: .*subnqn: +$NQN"
  ok connect "VM: connect rc=0"
  if [ -z "$KILL" ]; then
    ok fio_randwrite_verify "VM: randwrite rc=0"
    ok fio_seqwrite_verify "VM: seqwrite rc=0"
    ok disconnect "VM: disconnect: .*disconnected 1 controller"
    grep -aE "VM: (randwrite|seqwrite): +(write|read): IOPS" "$h" | sed "s/^VM: /$case /"
    # The write phases' figures: IOPS of the 4 KiB random writes, MB/s of the sequential ones.
    iops[$case]=$(grep -aoE "VM: randwrite: +write: IOPS=[0-9.k]+" "$h" | sed 's/.*IOPS=//')
    mbs[$case]=$(grep -aoE "VM: seqwrite: +write: IOPS=[^(]*\([0-9.]+[kMG]B/s\)" "$h" |
      sed -E 's/.*\(([0-9.]+)([kMG])B\/s\)/\1 \2/' | awk '{ print $1 * ($2 == "k" ? 0.001 : $2 == "G" ? 1000 : 1) }')
    # QD1: fio's completion latency percentiles, in their unit (nsec, usec or msec), to us.
    qd1[$case]=$(grep -a "VM: qd1: " "$h" | awk '
      /clat percentiles \(/ { u = $0; sub(/.*clat percentiles \(/, "", u); sub(/\).*/, "", u); on = 1; next }
      on && /^VM: qd1: +\|/ { for (i = 1; i <= NF; i++) { v = ($i ~ /]/ ? $i : $(i + 1)); sub(/.*\[/, "", v)
          if ($i ~ /^50\.00th=/) m = v; if ($i ~ /^99\.00th=/) p = v } next }
      on { on = 0 }
      END { gsub(/[^0-9.]/, "", m); gsub(/[^0-9.]/, "", p); f = (u == "nsec" ? 0.001 : u == "msec" ? 1000 : 1)
        if (m != "" && p != "") printf "median %.1f us, p99 %.1f us", m * f, p * f }')
    if [ -s "$OUT/$case.cpu" ]; then
      echo "$case CPU per I/O of the 4 KiB random writes and their verification: $(cat "$OUT/$case.cpu")"
      cpu[$case]=$(grep -oE 'all [0-9]+ us' "$OUT/$case.cpu" | grep -oE '[0-9]+')
    fi
  else
    ok host_stays_up "VM: alive 30 s after fio"
    ok controller_removed "VM: controllers left: 0"
    [ "$KILL" = host ] || ok host_gave_up_after_ctrl_loss_tmo "VM: dmesg: .*Failed reconnect attempt 2/2"
    check "${n}_target_stays_up" "VM: host done" "$t"
  fi
  [ $SRQ = 0 ] || check "${n}_target_srq" "VM: srq: .*nvmet" "$t"
  KERNEL_LOG=$t kernel_clean "${n}_target_no_kernel_warning" "" "VM: dmesg checked"
  KERNEL_LOG=$h kernel_clean "${n}_host_no_kernel_warning" "" "VM: dmesg checked"
done
# With the same target, the host on softirdma0 against the host on rxe0.
num() { case $1 in *k) awk -v v="${1%k}" 'BEGIN { print v * 1000 }';; *) echo "$1";; esac; }
for tg in softirdma rxe; do
  a=${tg}_to_softirdma b=${tg}_to_rxe
  [ -n "${iops[$a]:-}" ] && [ -n "${iops[$b]:-}" ] && [ -n "${mbs[$a]:-}" ] && [ -n "${mbs[$b]:-}" ] || continue
  echo "target on $tg: host on softirdma0 $(num "${iops[$a]}") IOPS (4 KiB random writes), ${mbs[$a]} MB/s (128 KiB sequential);" \
    "on rxe0 $(num "${iops[$b]}") IOPS, ${mbs[$b]} MB/s; ratios $(awk -v a="$(num "${iops[$a]}")" -v b="$(num "${iops[$b]}")" 'BEGIN { printf "%.2f", a / b }')" \
    "and $(awk -v a="${mbs[$a]}" -v b="${mbs[$b]}" 'BEGIN { printf "%.2f", a / b }')"
  [ -n "${qd1[$a]:-}" ] && [ -n "${qd1[$b]:-}" ] &&
    echo "target on $tg: QD1 4 KiB random reads: host on softirdma0 ${qd1[$a]}; on rxe0 ${qd1[$b]}"
  [ -n "${cpu[$a]:-}" ] && [ -n "${cpu[$b]:-}" ] &&
    echo "target on $tg: CPU per I/O of the 4 KiB random writes and their verification: host on softirdma0 ${cpu[$a]} us; on rxe0 ${cpu[$b]} us; rxe0's over softirdma0's $(awk -v a="${cpu[$a]}" -v b="${cpu[$b]}" 'BEGIN { printf "%.2f", b / a }')"
done
finish
