#!/usr/bin/env bash
# vm/vm.sh -- `make vm`: a VM whose RDMA NIC is softirdma. Provisions what is missing (first use:
# root or sudo, and the Debian mirror, about two minutes), builds bin/softirdma and the guest driver (DKMS,
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
# Provisioning and the driver's DKMS build write the VM root and need root: as root they run
# here, otherwise through sudo (asked only when something is missing or out of date), into this
# user's VM_DIR; bin/softirdma is built as the user.
SUDO=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo > /dev/null || vm_die "the VM is provisioned and its driver built as root: run this as root, or install sudo"
  SUDO=(sudo "VM_DIR=$VM_DIR" ${VM_MIRROR:+"VM_MIRROR=$VM_MIRROR"} ${VM_REFRESH:+"VM_REFRESH=$VM_REFRESH"})
  mkdir -p "$VM_DIR" # the user's, with its parents (root would make ~/.cache its own)
fi
if [ ${#SUDO[@]} = 0 ] || ! vm_current "$KNAME"; then
  "${SUDO[@]}" bash vm/provision.sh "$KNAME" > /dev/null
fi
if [ ${#SUDO[@]} = 0 ]; then
  bash vm/driver.sh "$KNAME"
else
  bash vm/driver.sh "$KNAME" 2> /dev/null || "${SUDO[@]}" bash vm/driver.sh "$KNAME"
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
  # The routine lines of the guest's start and end go; what it says went wrong stays.
  VM_CMD=$CMD bash vm/run.sh vm.softirdma=192.168.77.1/24 |
    grep -avE '^VM: (exit [0-9]+|ready after|softirdma0 on|share at)' || rc=${PIPESTATUS[0]}
  exit "$rc"
fi
bash vm/run.sh vm.softirdma=192.168.77.1/24
