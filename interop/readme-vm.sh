#!/usr/bin/env bash
# The README's VM section, run as written: each command of its sh block, the shell of a plain
# `make vm` fed a command on its terminal once it prompts. PASS lines readme_vm_<n> for the n-th command, when
# it exits 0 and shows what it is for: softirdma0 with its port active; both ends of the RC
# pingpong done; the shell running ibv_devices on softirdma0.
set -euo pipefail
cd "$(dirname "$0")/.."
. interop/guestlib.sh
# The first sh block after the section's heading.
mapfile -t cmds < <(awk '/^## softirdma as the RDMA NIC of a VM/ { s = 1 } s && /^```sh/ { b = 1; next } b && /^```/ { exit } b' README.md |
  sed -E 's/[[:space:]]+# [^'"'"']*$//')
[ ${#cmds[@]} = 3 ] || abort "readme_vm_section (${#cmds[@]} commands, not 3)"
want=('state:[[:space:]]+PORT_ACTIVE' 'iters in.*' 'softirdma0[[:space:]]+[0-9a-f]{16}')
# shows I NEED: command I exited 0 and showed what it is for, NEED times (else its output's end).
shows() {
  why="status $rc"
  [ $rc = 0 ] && [ "$(grep -cE "${want[$1]}" "$OUT/readme$1.log" || true)" -ge "$2" ] ||
    { tail -20 "$OUT/readme$1.log"; return 1; }
}
for i in 0 1 2; do
  c=${cmds[$i]} rc=0
  echo "readme: $c"
  if [ "$c" = "make vm" ]; then
    # Typed once the shell prompts: what reaches the serial port before the guest's kernel
    # has set it up is lost, as on a real one.
    rm -f "$OUT/tty"; mkfifo "$OUT/tty"
    timeout 600 bash -c "$c" < "$OUT/tty" > "$OUT/readme$i.log" 2>&1 & p=$!
    exec 4> "$OUT/tty"
    waitfor "$OUT/readme$i.log" 'softirdma-vm# ' 300 $p > /dev/null || true
    # A make that died before its prompt reads nothing: write only to one that lives.
    if kill -0 $p 2> /dev/null; then printf 'ibv_devices\nexit\n' >&4 || true; fi
    wait $p || rc=$?
    exec 4>&-
  else
    timeout 600 bash -c "$c" < /dev/null > "$OUT/readme$i.log" 2>&1 || rc=$?
  fi
  need=1; [ $i = 1 ] && need=2
  verdict "readme_vm_$((i + 1))" shows $i $need
done
finish
