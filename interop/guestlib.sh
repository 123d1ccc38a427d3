# shellcheck shell=bash
# Sourced by the interop scripts (run from the repository's root): the VM tooling (vm/), the
# logs in $OUT, the background processes in pids killed on exit, waiting for a line or a state,
# the verdicts (PASS/FAIL lines, counted, and the script's end), and for the scripts that boot
# VMs with softirdma's PCI function guest_setup and start_serve.
. vm/lib.sh
OUT=${INTEROP_OUT:-$(mktemp -d)}
mkdir -p "$OUT/share"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
pass=0 fail=0

# verdict NAME COMMAND...: runs COMMAND and prints "PASS NAME" when it succeeds, else
# "FAIL NAME", then what COMMAND printed (its evidence); counts the verdict in pass or fail and
# returns 0 either way. The PASS line ends " (note)" and the FAIL line " (why)" when note or why
# is set, before the call (why=... verdict ...) or by COMMAND. A NAME of the form
# PASS_TEXT|FAIL_TEXT gives the two lines texts of their own.
verdict() {
  local name=$1 note=${note-} why=${why-} out=$OUT/verdict.out
  shift
  if "$@" > "$out" 2>&1; then
    echo "PASS ${name%%|*}${note:+ ($note)}"
    pass=$((pass + 1))
  else
    echo "FAIL ${name#*|}${why:+ ($why)}"
    fail=$((fail + 1))
  fi
  cat "$out"
}

# check NAME REGEX [FILE]: the verdict on FILE (default $OUT/vm.txt, the guest's VM lines)
# having a line that matches REGEX (extended).
check() { verdict "$1" has_lines "${3:-$OUT/vm.txt}" "$2"; }

# has_lines FILE REGEX [FILE REGEX]...: each FILE has a line that matches its REGEX (extended).
has_lines() {
  while [ $# -ge 2 ]; do
    grep -aqE -- "$2" "$1" 2>/dev/null || return 1
    shift 2
  done
}

# no_lines FILE REGEX: FILE has no line that matches REGEX (extended); those it has, the first
# ten, are printed.
no_lines() {
  grep -aqE -- "$2" "$1" || return 0
  grep -aE -- "$2" "$1" | head
  return 1
}

# finish [TALLY]: the script's end: the line "TALLY: N passed, M failed" when TALLY is given,
# and status 1 when a verdict was FAIL.
finish() {
  [ $# = 0 ] || echo "$1: $pass passed, $fail failed"
  exit $((fail > 0))
}

# abort TEXT: "FAIL TEXT", and the script ends (status 1): what comes after cannot run.
abort() {
  echo "FAIL $*"
  exit 1
}

# run_or_exit LOG MESSAGE COMMAND...: COMMAND with its output in LOG; when it fails, LOG and then
# MESSAGE are printed and the script ends (status 1).
run_or_exit() {
  local log=$1 msg=$2
  shift 2
  "$@" > "$log" 2>&1 || { cat "$log"; echo "$msg"; exit 1; }
}

# wait_until SECONDS PID COMMAND...: COMMAND again every POLL seconds (default 0.05) until it
# succeeds; fails after SECONDS, or once process PID (- for none) has ended and COMMAND, run a
# last time, still fails.
wait_until() {
  local deadline=$((SECONDS + $1)) pid=$2
  shift 2
  until "$@"; do
    if [ "$pid" != - ] && ! kill -0 "$pid" 2>/dev/null; then
      "$@"
      return
    fi
    [ $SECONDS -lt $deadline ] || return 1
    sleep "${POLL:-0.05}"
  done
}

# waitfor FILE REGEX SECONDS PID: FILE, which process PID writes, shows a line that matches
# REGEX (extended) within SECONDS, the wait cut short when PID ends; says so when it does not.
waitfor() {
  wait_until "$3" "$4" has_lines "$1" "$2" && return
  echo "  no line '$2' in $1 within $3 s (or its writer ended)"
  return 1
}

# need_iproute2 TOOL: TOOL (ip, ss) is there, iproute2 installed for it if not.
need_iproute2() {
  command -v "$1" > /dev/null || { apt-get update -qq && apt-get install -y -qq iproute2; }
}

# guest_setup CASE [KERNEL]: QEMU, the VM root and the kernel (default $VM_KERNEL, else 6.12:
# vm/provision.sh), bin/softirdma, and the driver built with DKMS into the root; a driver that
# does not build is FAIL CASE.
guest_setup() {
  local k=${2:-${VM_KERNEL:-6.12}}
  run_or_exit "$OUT/provision.log" "FAIL $1" bash vm/provision.sh "$k"
  go build -o bin/softirdma ./cmd/softirdma
  run_or_exit "$OUT/build.log" "FAIL $1" bash vm/driver.sh "$k"
}

# free_udp_ports N: N UDP ports on 127.0.0.1 free now, on one line (the two ends of a QEMU
# dgram link, without a fixed port another script may hold).
free_udp_ports() {
  python3 -c 'import socket, sys
s = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(int(sys.argv[1]))]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])' "$1"
}

# start_serve ARGS...: `softirdma serve` on a fresh socket, $SOCK, with ARGS; its pid in $spid
# and in pids. Not listening within 30 s is a FAIL that ends the script.
start_serve() {
  SOCK=$(mktemp -u /tmp/softirdma-XXXXXX.sock)
  bin/softirdma serve -socket "$SOCK" "$@" > "$OUT/serve.out" 2> "$OUT/serve.log" &
  spid=$!
  pids+=("$spid")
  waitfor "$OUT/serve.out" "listening on" 30 "$spid" || { cat "$OUT/serve.log"; abort "serve is not listening"; }
}

# serve_with_rxe_peer QEMU_PORT PEER_PORT MAC0 MAC1 < SCRIPT: start_serve on a dgram link to the
# peer guest, Linux rxe at 192.168.77.2, which runs SCRIPT after interop/guest/lib.sh (its eth0
# and eth1 at MAC0 and MAC1); the guest's console in $OUT/peer.log, its pid in bpid and pids. A
# peer not up within 300 s ends the script.
serve_with_rxe_peer() {
  { cat interop/guest/lib.sh; echo 'echo "VM: peer up"'; cat; } > "$OUT/peer.sh"
  start_serve -link "dgram:127.0.0.1:$2,127.0.0.1:$1" -ip 192.168.77.1
  VM_SCRIPT="$OUT/peer.sh" VM_LINK=$1,$2 VM_MAC0=$3 VM_MAC1=$4 \
    timeout 900 bash vm/run.sh vm.rxe=1 vm.eth1=192.168.77.2/24 > "$OUT/peer.log" 2>&1 &
  bpid=$!
  pids+=("$bpid")
  waitfor "$OUT/peer.log" "VM: peer up" 300 "$bpid" || { tail -20 "$OUT/peer.log"; abort "the rxe peer guest did not come up"; }
}

# lat_figures FILE: "median M us, p99 P us" from the first of perftest's latency result lines in
# FILE ("#bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%"; the median is
# t_typical), nothing if FILE has none.
lat_figures() {
  awk 'NF >= 9 && $1 ~ /^[0-9]+$/ && $5 ~ /^[0-9.]+$/ { printf "median %s us, p99 %s us", $5, $8; exit }' "$1" 2> /dev/null
}

# goroutine_summary LOG: the goroutine dump a Go program wrote to LOG on SIGQUIT, one line per
# kind of goroutine: how many, their state, and the first two of the project's frames each is in
# (the innermost first), most numerous first.
goroutine_summary() {
  awk '/^goroutine [0-9]+ .*\[.*\]:$/ { state = $0; sub(/^.*\[/, "", state); sub(/[],].*/, "", state); n = 0; frames = ""; next }
    state != "" && /^github\.com\/softirdma\/softirdma\// && n < 2 {
      f = $0; sub(/^github\.com\/softirdma\/softirdma\//, "", f); sub(/\(0x.*|\(\.\.\.\)$|\(\)$/, "", f)
      frames = frames (n ? " < " : "") f; n++
      if (n == 2) { print state " | " frames; state = "" } }
    /^$/ && state != "" { if (frames != "") print state " | " frames; state = "" }' "$1" | sort | uniq -c | sort -rn
}

# kernel_clean NAME EXTRA SENTINEL...: PASS when the guest printed every SENTINEL (so its dmesg
# was looked at: a guest that hung or died before says nothing, which is no pass) and neither
# the dmesg lines it printed ("VM: dmesg...") nor its console show a kernel warning, oops,
# BUG or hung task, nor a match of the regex EXTRA (empty: none). The guest's console is
# $KERNEL_LOG, by default $OUT/guest.log.
kernel_clean() {
  local name=$1
  shift
  verdict "$name" kernel_quiet "${KERNEL_LOG:-$OUT/guest.log}" "$@"
}

# kernel_quiet LOG EXTRA SENTINEL...: kernel_clean's verdict on LOG.
kernel_quiet() {
  local log=$1 extra=$2 s
  shift 2
  for s in "$@"; do
    grep -aqF -- "$s" "$log" || { why="the guest never said \"$s\""; return 1; }
  done
  # On the console a kernel message starts with its time stamp; tools print WARNING: lines too.
  local bad='\[ *[0-9]+\.[0-9]+\] (WARNING:|BUG:|Oops|Call Trace|.*blocked for more than)'
  no_lines "$log" "VM: dmesg[0-9]*: .*(WARNING|BUG|Oops|Call Trace)|$bad${extra:+|$extra}"
}

# probed CONTROL NAME...: the probe faults NAME... (count=1 each) of the fabric whose control
# socket is CONTROL have fired. (The list is read whole first: grep -q ending the pipe early
# would cut the list's writer off, and pipefail take that for a failure.)
probed() {
  local faults n
  faults=$(bin/softirdma fault -socket "$1" list) || return 1
  shift
  for n in "$@"; do grep -q "fired=1 .*name=$n\$" <<< "$faults" || return 1; done
}

# What a fault of a fabric did, read from its capture: FAULT_LIST is `softirdma fault list`'s
# output, CAPTURE_TXT `softirdma decode`'s of the fabric's -pcap.
# frames_of NAME: the capture's numbers of the frames fault NAME fired on (list's frames=).
frames_of() { sed -nE "s/^[0-9]+ fired=[0-9]+ seen=[0-9]+ frames=([0-9,.]+) .*name=$1\$/\1/p" "$FAULT_LIST"; }
# frame_line N: decode's line for frame N of the capture.
frame_line() { awk -v n="#$1" '$2 == n { print; exit }' "$CAPTURE_TXT"; }
# frame_psn LINE: the PSN of a frame's decode line.
frame_psn() { sed -nE 's/.* psn=([0-9]+) .*/\1/p' <<< "$1"; }
# after N FROM TO OPCODES PSN: the first frame after frame N from FROM to TO of one of OPCODES (a
# regular expression) with PSN PSN and a good ICRC, as decode printed it.
after() {
  awk -v n="$1" -v from="$2" -v to="$3" -v ops="^($4)\$" -v psn="psn=$5" \
    'substr($2, 2) + 0 > n && $3 == from && $5 == to && $7 ~ ops && $9 == psn && / icrc=ok$/ { print; exit }' "$CAPTURE_TXT"
}
