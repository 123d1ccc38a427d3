#!/bin/busybox sh
# /init of a softirdma VM's initrd (vm/provision.sh builds one per kernel): loads the modules that
# mount the root, mounts the root file system QEMU shares over virtio-9p (tag "root", read-only,
# vm/run.sh) with tmpfs where the guest writes, and hands over to vm/guest.sh inside it.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules/order); do insmod /modules/$m || echo "VM: insmod $m failed"; done
# cache=loose: nothing changes the root while a guest runs, and python reads many small files.
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=loose,ro root /newroot; then
  echo "VM: cannot mount the root (virtio-9p tag 'root'); powering off"
  echo "VM: exit 125"
  poweroff -f
fi
for d in tmp run var/tmp root; do
  [ -d /newroot/$d ] && mount -t tmpfs -o mode=1777 tmpfs /newroot/$d
done
mkdir -p /newroot/tmp/.vm
cp /guest.sh /newroot/tmp/.vm/init
for d in dev proc sys; do mount --move /$d /newroot/$d; done
exec switch_root /newroot /bin/sh /tmp/.vm/init
