#!/usr/bin/env bash
# A Linux guest (vm/, TCG) boots with softirdma's PCI function attached over vfio-user, served
# by `softirdma serve`, and lists it with the documented IDs and class; QEMU reports no error but
# the harmless "Could not enable error recovery" warning; serve stops cleanly on SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
. interop/guestlib.sh
run_or_exit "$OUT/provision.log" "FAIL provisioning" bash vm/provision.sh
go build -o bin/softirdma ./cmd/softirdma
echo "interop guest pci; logs in $OUT"
start_serve

VM_SOCKET=$SOCK VM_CMD='for d in /sys/bus/pci/devices/*; do echo "VM: pci ${d##*/} $(cat $d/vendor):$(cat $d/device) class=$(cat $d/class)"; done' \
  timeout 180 bash vm/run.sh > "$OUT/guest.log" 2>&1 || true
want=$(printf 'VM: pci .* 0x%04x:0x%04x class=0x%06x' 0x1234 0x5352 0x020000)
lists() { grep -qE "$want" "$OUT/guest.log" || { grep "VM:" "$OUT/guest.log" | head -20; return 1; }; }
verdict "the guest lists the function: $(grep -E "$want" "$OUT/guest.log")|the guest does not list 1234:5352 class 020000" lists
# quiet: QEMU said nothing but the harmless warning (else all it said is shown).
quiet() {
  [ -z "$(grep "qemu-system-x86_64:" "$OUT/guest.log" | grep -v "Could not enable error recovery")" ] ||
    { grep "qemu-system-x86_64:" "$OUT/guest.log"; return 1; }
}
verdict "QEMU reported nothing but the error-recovery warning|QEMU reported errors:" quiet
kill -TERM $spid
rc=0
wait $spid || rc=$?
stopped() { [ $rc = 0 ] || { cat "$OUT/serve.log"; return 1; }; }
verdict "serve stopped cleanly on SIGTERM|serve exited $rc on SIGTERM" stopped
trap - EXIT
[ ! -e "$SOCK" ] || verdict "the socket is left behind" false
finish
