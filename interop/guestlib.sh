# shellcheck shell=bash
# Sourced by the scripts that boot VMs with softirdma's PCI function (run from the repository's
# root): the VM tooling (vm/), the logs, guest_setup, waitfor, start_serve, check, and the
# background processes in pids killed on exit.
. vm/lib.sh
OUT=${INTEROP_OUT:-$(mktemp -d)}
mkdir -p "$OUT/share"

# guest_setup CASE [KERNEL]: QEMU, the VM root and the kernel (default $VM_KERNEL, else 6.12:
# vm/provision.sh), bin/softirdma, and the driver built with DKMS into the root; a driver that
# does not build is FAIL CASE.
guest_setup() {
  bash vm/provision.sh "${2:-${VM_KERNEL:-6.12}}" > "$OUT/provision.log" 2>&1 || { cat "$OUT/provision.log"; echo "FAIL $1"; exit 1; }
  go build -o bin/softirdma ./cmd/softirdma
  bash vm/driver.sh "${2:-${VM_KERNEL:-6.12}}" > "$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; echo "FAIL $1"; exit 1; }
}

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
fail=0

# waitfor FILE REGEX SECONDS PID: a line in a log, while its writer lives.
waitfor() {
  local i
  for i in $(seq $(($3 * 20))); do
    grep -qE "$2" "$1" 2>/dev/null && return 0
    kill -0 "$4" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
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
  waitfor "$OUT/serve.out" "listening on" 30 "$spid" ||
    { cat "$OUT/serve.log"; echo "FAIL serve is not listening"; exit 1; }
}

# check NAME REGEX: PASS if the guest said so in $OUT/vm.txt, else FAIL (and fail=1).
check() {
  if grep -qE "$2" "$OUT/vm.txt"; then echo "PASS $1"; else echo "FAIL $1"; fail=1; fi
}

# kernel_clean NAME EXTRA SENTINEL...: PASS when the guest printed every SENTINEL (so its dmesg
# was looked at: a guest that hung or died before says nothing, which is no pass) and neither
# the dmesg lines it printed ("VM: dmesg...") nor its console show a kernel warning, oops,
# BUG or hung task, nor a match of the regex EXTRA (empty: none). The guest's console is
# $KERNEL_LOG, by default $OUT/guest.log.
kernel_clean() {
  local name=$1 extra=$2 s log=${KERNEL_LOG:-$OUT/guest.log}
  shift 2
  for s in "$@"; do
    if ! grep -aqF "$s" "$log"; then
      echo "FAIL $name (the guest never said \"$s\")"; fail=1; return
    fi
  done
  # On the console a kernel message starts with its time stamp; tools print WARNING: lines too.
  local bad='\[ *[0-9]+\.[0-9]+\] (WARNING:|BUG:|Oops|Call Trace|.*blocked for more than)'
  if grep -aqE "VM: dmesg[0-9]*: .*(WARNING|BUG|Oops|Call Trace)|$bad${extra:+|$extra}" "$log"; then
    echo "FAIL $name"; grep -aE "VM: dmesg[0-9]*: .*(WARNING|BUG|Oops|Call Trace)|$bad${extra:+|$extra}" "$log" | head; fail=1
  else
    echo "PASS $name"
  fi
}
