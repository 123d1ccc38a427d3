#!/usr/bin/env bash
# vm/vm.sh -- `make vm`: a VM whose RDMA NIC is softirdma. Provisions what is missing (first use:
# root and the Debian mirror, a few minutes), builds bin/softirdma and the guest driver (DKMS,
# vm/driver.sh), starts `softirdma serve` on a socket of its own, and boots the VM with the
# driver loaded, softirdma0 on its netdev at 192.168.77.1/24 (GID 0 its IPv6 link-local address,
# GID 1 the IPv4 one). serve stands on its embedded default: the device's QPs reach each other
# over its loopback, so both ends of an RC connection can run in the VM.
#   CMD='...'          run that in the VM and exit with its status; without, a shell on the terminal
#   VM_KERNEL=6.12     the guest kernel (6.1, 6.12, newest)
#   VM_SERVE_ARGS='...'  more `softirdma serve` flags (say -link dgram:...,... -pcap FILE)
#   and vm/run.sh's VM_* settings (VM_MEM, VM_SHARE, VM_FWD, VM_LINK, ...)
set -euo pipefail
cd "$(dirname "$0")/.."
. vm/lib.sh
KNAME=${VM_KERNEL:-6.12}
vm_check_kernel_name "$KNAME"
if [ "$(id -u)" = 0 ]; then
  bash vm/provision.sh "$KNAME" > /dev/null
  bash vm/driver.sh "$KNAME"
elif ! vm_kernel_release "$KNAME" > /dev/null; then
  vm_die "no VM yet: run this once as root (it provisions QEMU, the guest root and kernel $KNAME)"
fi
go build -o bin/softirdma ./cmd/softirdma
W=$(mktemp -d)
SOCK=$W/softirdma.sock
spid=
trap '[ -z "$spid" ] || kill $spid 2> /dev/null || true; wait 2> /dev/null || true; rm -rf "$W"' EXIT
# shellcheck disable=SC2086
bin/softirdma serve -socket "$SOCK" -ip 192.168.77.1 ${VM_SERVE_ARGS:-} > "$W/serve.out" 2> "$W/serve.log" &
spid=$!
for _ in $(seq 600); do
  grep -q "listening on" "$W/serve.out" && break
  kill -0 $spid 2> /dev/null || { cat "$W/serve.log" >&2; vm_die "softirdma serve did not start"; }
  sleep 0.05
done
grep -q "listening on" "$W/serve.out" || vm_die "softirdma serve is not listening after 30 s"
export VM_SOCKET=$SOCK VM_KERNEL=$KNAME
if [ -n "${CMD:-}" ]; then
  rc=0
  VM_CMD=$CMD bash vm/run.sh vm.softirdma=192.168.77.1/24 | grep -av '^VM: ' || rc=${PIPESTATUS[0]}
  exit "$rc"
fi
bash vm/run.sh vm.softirdma=192.168.77.1/24
