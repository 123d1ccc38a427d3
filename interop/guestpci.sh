#!/usr/bin/env bash
# A Linux guest (vm/, TCG) boots with softirdma's PCI function attached over vfio-user, served
# by `softirdma serve`, and lists it with the documented IDs and class; QEMU reports no error but
# the harmless "Could not enable error recovery" warning; serve stops cleanly on SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
. interop/guestlib.sh
bash vm/provision.sh > "$OUT/provision.log" 2>&1 || { cat "$OUT/provision.log"; echo "FAIL provisioning"; exit 1; }
go build -o bin/softirdma ./cmd/softirdma
echo "interop guest pci; logs in $OUT"
start_serve

VM_SOCKET=$SOCK VM_CMD='for d in /sys/bus/pci/devices/*; do echo "VM: pci ${d##*/} $(cat $d/vendor):$(cat $d/device) class=$(cat $d/class)"; done' \
  timeout 180 bash vm/run.sh > "$OUT/guest.log" 2>&1 || true
want=$(printf 'VM: pci .* 0x%04x:0x%04x class=0x%06x' 0x1234 0x5352 0x020000)
if grep -qE "$want" "$OUT/guest.log"; then
  echo "PASS the guest lists the function: $(grep -E "$want" "$OUT/guest.log")"
else
  echo "FAIL the guest does not list 1234:5352 class 020000"; grep "VM:" "$OUT/guest.log" | head -20; fail=1
fi
if grep "qemu-system-x86_64:" "$OUT/guest.log" | grep -v "Could not enable error recovery" | grep -q .; then
  echo "FAIL QEMU reported errors:"; grep "qemu-system-x86_64:" "$OUT/guest.log"; fail=1
else
  echo "PASS QEMU reported nothing but the error-recovery warning"
fi
kill -TERM $spid
if wait $spid; then
  echo "PASS serve stopped cleanly on SIGTERM"
else
  echo "FAIL serve exited $? on SIGTERM"; cat "$OUT/serve.log"; fail=1
fi
trap - EXIT
[ -e "$SOCK" ] && { echo "FAIL the socket is left behind"; fail=1; }
exit $fail
