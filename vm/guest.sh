#!/bin/sh
# The guest's first process once vm/init.sh has mounted the root: kernel modules, network, the
# softirdma device, then the script vm/run.sh handed over (fw_cfg opt/softirdma/script) or a
# shell on the console; the guest powers off when it ends. Kernel command-line settings:
#   vm.modules=A,B     modules loaded at boot beside the default set (virtio_net, configfs,
#                      ib_uverbs, rdma_ucm: the RDMA core with rdma_cm)
#   vm.eth1=ADDR/LEN   eth1's address (vm/run.sh's VM_LINK NIC)
#   vm.rxe=1           a Linux Soft-RoCE device rxe0 on eth1
#   vm.softirdma=ADDR/LEN  modprobe softirdma; its netdev up with ADDR, the RDMA device's GIDs in place
#   vm.mtu=N           the softirdma netdev's MTU (9000: jumbo frames, the port's active MTU 4096)
# A script runs under /bin/sh (dash) with GIDX (rxe0's IPv4 RoCEv2 GID index) and
# SOFTIRDMA_NETDEV set, in /tmp.
# Lines for the host to read start with "VM: "; the last is "VM: exit STATUS".
export PATH=/tmp/.vm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root PYTHONDONTWRITEBYTECODE=1 TERM=${TERM:-vt220}
mkdir -p /tmp/.vm/bin /dev/shm /dev/pts
# No init to signal here (busybox's poweroff without -f signals PID 1, this shell, which ignores
# it): the commands act at once, after a sync. QEMU runs with -no-reboot, so halt stops it too.
for b in poweroff reboot halt; do
  printf '#!/bin/sh\nsync\nexec /usr/bin/busybox %s -f\n' $b > /tmp/.vm/bin/$b
  chmod +x /tmp/.vm/bin/$b
done
mount -t tmpfs -o mode=1777 shm /dev/shm
mount -t devpts devpts /dev/pts
hostname softirdma-vm

MODS= ETH1= RXE=0 SI= MTU= SOFTIRDMA_NETDEV= GIDX=
for a in $(cat /proc/cmdline); do
  case $a in
    vm.modules=*) MODS=$(echo "${a#vm.modules=}" | tr , ' ') ;;
    vm.eth1=*) ETH1=${a#vm.eth1=} ;;
    vm.rxe=*) RXE=${a#vm.rxe=} ;;
    vm.softirdma=*) SI=${a#vm.softirdma=} ;;
    vm.mtu=*) MTU=${a#vm.mtu=} ;;
  esac
done
# shellcheck disable=SC2086
modprobe -a virtio_net qemu_fw_cfg configfs ib_uverbs rdma_ucm $MODS || echo "VM: modprobe failed"
mount -t configfs configfs /sys/kernel/config

# 9p tags QEMU offers beside the root: "share" (vm/run.sh's VM_SHARE) at /share.
for t in /sys/bus/virtio/drivers/9pnet_virtio/*/mount_tag; do
  [ "$(tr -d '\0' < "$t" 2> /dev/null)" = share ] || continue
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 share /share && echo "VM: share at /share"
done

ip link set lo up
# eth0: QEMU's user-mode network (the host is 10.0.2.2; vm/run.sh forwards a host port to 18515).
for i in $(seq 100); do [ -e /sys/class/net/eth0 ] && break; sleep 0.05; done
ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2
if [ -n "$ETH1" ]; then ip link set eth1 up && ip addr add "$ETH1" dev eth1; fi

# gid_ready DEV: the device's IPv4-mapped RoCEv2 GID is in its table (the netdev's address is
# there only once the RDMA core saw it).
gid_index() {
  for g in /sys/class/infiniband/$1/ports/1/gids/*; do
    i=${g##*/}
    case "$(cat "$g" 2> /dev/null):$(cat /sys/class/infiniband/$1/ports/1/gid_attrs/types/$i 2> /dev/null)" in
      0000:0000:0000:0000:0000:ffff:*"RoCE v2") echo "$i"; return 0 ;;
    esac
  done 2> /dev/null
  return 1
}
wait_gid() {
  for i in $(seq 200); do gid_index "$1" > /dev/null && return 0; sleep 0.05; done
  echo "VM: $1 has no IPv4 RoCEv2 GID"; return 1
}
if [ "$RXE" = 1 ]; then
  modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth1 && echo "VM: rxe0 on eth1"
  wait_gid rxe0
  GIDX=$(gid_index rxe0)
fi
if [ -n "$SI" ]; then
  if modprobe softirdma; then
    for d in /sys/class/net/*; do
      case $(readlink "$d/device/driver") in */softirdma) SOFTIRDMA_NETDEV=${d##*/} ;; esac
    done
    if [ -z "$SOFTIRDMA_NETDEV" ]; then
      echo "VM: softirdma is loaded but has no netdev (no function, or its probe failed: dmesg)"
    else
      # No duplicate address detection: the addresses are usable (GID 0 too) at once.
      sysctl -qw "net.ipv6.conf.$SOFTIRDMA_NETDEV.accept_dad=0"
      if [ -n "$MTU" ]; then ip link set "$SOFTIRDMA_NETDEV" mtu "$MTU" || echo "VM: MTU $MTU refused"; fi
      ip link set "$SOFTIRDMA_NETDEV" up && ip addr add "$SI" dev "$SOFTIRDMA_NETDEV"
      wait_gid softirdma0 && echo "VM: softirdma0 on $SOFTIRDMA_NETDEV ($SI)"
    fi
  else
    echo "VM: modprobe softirdma failed"
  fi
fi
export GIDX SOFTIRDMA_NETDEV
echo "VM: ready after $(cut -d' ' -f1 /proc/uptime) s, Linux $(uname -r)"

cd /tmp
F=/sys/firmware/qemu_fw_cfg/by_name/opt/softirdma/script/raw
if [ -r $F ]; then
  cat $F > /tmp/.vm/script
  sh /tmp/.vm/script < /dev/null
  rc=$?
else
  echo "softirdma VM (Linux $(uname -r))${SOFTIRDMA_NETDEV:+: softirdma0 is the RDMA NIC, $SOFTIRDMA_NETDEV its netdev}."
  echo "poweroff, exit or Ctrl-D leaves it."
  PS1='softirdma-vm# ' setsid -w -c bash --norc -i < /dev/ttyS0 > /dev/ttyS0 2>&1
  rc=$?
fi
echo "VM: exit $rc"
sync
poweroff -f
