#!/usr/bin/env bash
# vm/run.sh [KERNEL-ARG...] -- boot one VM of vm/provision.sh's making under TCG, its serial
# console on standard output. With VM_SCRIPT or VM_CMD it runs that in the guest, powers off and
# exits with its status (125: the guest ended without reporting one); without, a shell on the
# console (leave it with poweroff, exit or Ctrl-D; Ctrl-A X stops QEMU). KERNEL-ARGs are vm/guest.sh's
# vm.* settings (vm.softirdma=ADDR/LEN, vm.mtu=N, vm.rxe=1, vm.eth1=ADDR/LEN, vm.modules=A,B).
#
#   VM_KERNEL=6.12     a provisioned kernel: 6.1, 6.12 or newest (or its major.minor)
#   VM_MEM=1G          guest RAM; also the size of the shared memfd a vfio-user device maps
#   VM_NUMA=1          NUMA nodes, 1 or 2: with 2 the RAM is split between two nodes (each its own
#                      memory backend), so that a guest can migrate pages between them
#   VM_SMP=1           virtual CPUs. More than one, under TCG's threads, now and then oopses
#                      the guest's kernel at boot (an int3 left by the kernel's live patching of
#                      its own code seen by the other vCPU after the patch): 1 unless you want them
#   VM_SOCKET=PATH     attach softirdma's PCI function, served by `softirdma serve -socket PATH`
#   VM_LINK=L,R        a second NIC, eth1: QEMU -netdev dgram, frames from the guest to UDP
#                      127.0.0.1:R, frames to the guest at 127.0.0.1:L (a `serve -link
#                      dgram:127.0.0.1:R,127.0.0.1:L`, or another VM with L and R swapped)
#   VM_PCAP=FILE       eth1's frames, both ways, written to FILE as QEMU sees them (filter-dump)
#   VM_FWD=PORT        host 127.0.0.1:PORT forwarded to the guest's TCP 18515 (rdma-core's tools)
#   VM_SHARE=DIR       DIR read-write at /share in the guest
#   VM_MAC0, VM_MAC1   eth0's and eth1's MACs (default 52:54:00:00:00:10, 52:54:00:00:77:02)
#   VM_SCRIPT=FILE     a shell script to run (handed over in fw_cfg: any length)
#   VM_CMD='...'       a command line to run (instead of VM_SCRIPT)
#   VM_QEMU_ARGS='...' more QEMU arguments (word-split)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
KNAME=${VM_KERNEL:-6.12}
vm_check_kernel_name "$KNAME"
KV=$(vm_kernel_release "$KNAME") || vm_die "kernel $KNAME is not provisioned: sudo vm/provision.sh $KNAME"
K=$VM_DIR/kernels/$KV
MEM=${VM_MEM:-1G}
[[ $MEM =~ ^[1-9][0-9]*[MG]$ ]] || vm_die "VM_MEM must be a size like 512M or 2G, not '$MEM'"
port() { [[ $1 =~ ^[1-9][0-9]{0,4}$ ]] && [ "$1" -le 65535 ] || vm_die "$2 must be a port 1..65535, not '$1'"; }
mac() { [[ $1 =~ ^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$ ]] || vm_die "$2 must be a MAC like 52:54:00:00:00:10, not '$1'"; }
NUMA=${VM_NUMA:-1}
[[ $NUMA =~ ^[12]$ ]] || vm_die "VM_NUMA must be 1 or 2, not '$NUMA'"
SMP=${VM_SMP:-1}
[[ $SMP =~ ^[1-8]$ ]] || vm_die "VM_SMP must be 1..8, not '$SMP'"
MAC0=${VM_MAC0:-52:54:00:00:00:10} MAC1=${VM_MAC1:-52:54:00:00:77:02}
mac "$MAC0" VM_MAC0
mac "$MAC1" VM_MAC1

X=()
FWD=
if [ -n "${VM_FWD:-}" ]; then port "$VM_FWD" VM_FWD; FWD=",hostfwd=tcp:127.0.0.1:$VM_FWD-:18515"; fi
X+=(-netdev "user,id=n0$FWD" -device "virtio-net-pci,netdev=n0,mac=$MAC0")
if [ -n "${VM_LINK:-}" ]; then
  IFS=, read -r L R <<< "$VM_LINK"
  port "$L" "VM_LINK's first port"
  port "${R:-}" "VM_LINK's second port"
  X+=(-netdev "dgram,id=n1,local.type=inet,local.host=127.0.0.1,local.port=$L,remote.type=inet,remote.host=127.0.0.1,remote.port=$R"
    -device "virtio-net-pci,netdev=n1,mac=$MAC1")
  if [ -n "${VM_PCAP:-}" ]; then
    case $VM_PCAP in *,*) vm_die "VM_PCAP must be a path without commas, not '$VM_PCAP'" ;; esac
    X+=(-object "filter-dump,id=d1,netdev=n1,file=$VM_PCAP,maxlen=65535")
  fi
elif [ -n "${VM_PCAP:-}" ]; then
  vm_die "VM_PCAP captures eth1, which only VM_LINK gives"
fi
if [ -n "${VM_SHARE:-}" ]; then
  [ -d "$VM_SHARE" ] || vm_die "VM_SHARE $VM_SHARE is not a folder"
  X+=(-virtfs "local,path=$VM_SHARE,mount_tag=share,security_model=none")
fi
if [ -n "${VM_SOCKET:-}" ]; then
  [ -S "$VM_SOCKET" ] || vm_die "VM_SOCKET $VM_SOCKET is not a socket (start softirdma serve -socket $VM_SOCKET first)"
  # QEMU's vfio-user client passes file descriptors of guest RAM only for shared memory: serve
  # maps them; and only the JSON form of -device takes the socket.
  if [ "$NUMA" = 1 ]; then
    X+=(-object "memory-backend-memfd,id=mem,size=$MEM,share=on" -machine memory-backend=mem)
  fi
  X+=(-device "{\"driver\":\"vfio-user-pci\",\"socket\":{\"type\":\"unix\",\"path\":\"$VM_SOCKET\"}}")
fi
if [ "$NUMA" = 2 ]; then
  # Half the RAM on each node, in MiB; with a device, shared as one node's RAM would be.
  mib=${MEM%?}
  [ "${MEM: -1}" = G ] && mib=$((mib * 1024))
  backend=memory-backend-ram share=
  [ -z "${VM_SOCKET:-}" ] || { backend=memory-backend-memfd share=,share=on; }
  for n in 0 1; do
    X+=(-object "$backend,id=node$n,size=$((mib / 2))M$share" -numa "node,nodeid=$n,memdev=node$n")
  done
fi
SCRIPT=
if [ -n "${VM_CMD:-}" ]; then
  SCRIPT=$(mktemp)
  printf '%s\n' "$VM_CMD" > "$SCRIPT"
elif [ -n "${VM_SCRIPT:-}" ]; then
  [ -f "$VM_SCRIPT" ] || vm_die "VM_SCRIPT $VM_SCRIPT is not a file"
  SCRIPT=$VM_SCRIPT
fi
[ -z "$SCRIPT" ] || X+=(-fw_cfg "name=opt/softirdma/script,file=$SCRIPT")
# shellcheck disable=SC2206
X+=(${VM_QEMU_ARGS:-})
QEMU=("$VM_DIR/bin/qemu-system-x86_64" -accel tcg -machine q35 -cpu max -smp "$SMP" -m "$MEM" -nodefaults
  -display none -no-reboot -kernel "$K/vmlinuz" -initrd "$K/initrd.gz"
  -append "console=ttyS0 quiet loglevel=4 panic=-1 $*"
  -virtfs "local,path=$VM_ROOT,mount_tag=root,security_model=none,readonly=on" "${X[@]}")
[ -n "$SCRIPT" ] || exec "${QEMU[@]}" -serial mon:stdio
# The status is the guest's last "VM: exit N" line; the console goes through as it comes. QEMU
# goes when this script does (a caller's timeout stops the guest too).
rc=125
exec 3< <(exec "${QEMU[@]}" -serial stdio < /dev/null 2>&1)
qpid=$!
trap 'kill $qpid 2> /dev/null || true; rm -f "${VM_CMD:+$SCRIPT}"' EXIT
trap 'exit 143' TERM INT HUP
# A guest that said its last word gets 15 s to power off: a kernel wedged by a driver's oops
# may never get there.
said=0
while :; do
  if [ $said = 1 ]; then IFS= read -r -t 15 line <&3 || break; else IFS= read -r line <&3 || break; fi
  printf '%s\n' "$line"
  case $line in "VM: exit "*) rc=${line#VM: exit }; rc=${rc%$'\r'}; said=1 ;; esac
done
[[ $rc =~ ^[0-9]+$ ]] || rc=125
exit "$rc"
