#!/usr/bin/env bash
# vm/driver.sh [KERNEL] -- build the guest driver (hw/linux) with DKMS for a provisioned kernel
# (default 6.12) and install it into the VM root, where the guest's `modprobe softirdma` finds it.
# The build runs on the host, in the root of the kernel's own Debian release (bookworm for 6.1:
# its headers want bookworm's kbuild and gcc), the way a distribution's DKMS would; for 6.1 the
# module is then copied into the VM root. Skipped when the sources and kernel are the ones last
# installed. Needs root. A failed build prints DKMS's make.log and exits 1.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../hw/linux" && pwd)
. "$HERE/lib.sh"
KNAME=${1:-${VM_KERNEL:-6.12}}
vm_check_kernel_name "$KNAME"
KV=$(vm_kernel_release "$KNAME") || vm_die "kernel $KNAME is not provisioned: sudo vm/provision.sh $KNAME"
read -r DIR _ <<< "$(vm_kernel_suite "$KNAME")"
VER=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$SRC/dkms.conf")
[[ $VER =~ ^[0-9][0-9.]*$ ]] || vm_die "no PACKAGE_VERSION in $SRC/dkms.conf"
FILES=$(cd "$SRC" && ls Kbuild Makefile dkms.conf ./*.c ./*.h)
STAMP=$( (cd "$SRC" && cat $FILES; echo "$KV") | sha256sum | cut -c1-16)
MOD=$VM_ROOT/usr/lib/modules/$KV/updates/dkms
current() { [ "$(cat "$VM_DIR/kernels/$KV/driver.stamp" 2> /dev/null)" = "$STAMP" ] && ls "$MOD"/softirdma.ko* > /dev/null 2>&1; }
if current; then
  vm_log "softirdma/$VER for $KV is installed and current"
  exit 0
fi
[ "$(id -u)" = 0 ] || vm_die "the driver for $KV is missing or older than hw/linux; the DKMS build installs into $VM_ROOT and needs root: sudo $0 $KNAME"
vm_lock
if current; then exit 0; fi # built by the run this one waited for
rm -rf "$DIR/usr/src/softirdma-$VER"
mkdir -p "$DIR/usr/src/softirdma-$VER"
(cd "$SRC" && cp $FILES "$DIR/usr/src/softirdma-$VER/")
# Linux 7.x's objtool reads /proc/self/maps: the build root gets a /proc while it builds.
if ! mountpoint -q "$DIR/proc"; then
  mount -t proc proc "$DIR/proc"
  trap 'umount "$DIR/proc"' EXIT
fi
# This kernel's build only: the root serves other kernels, whose drivers stay installed.
chroot "$DIR" dkms remove "softirdma/$VER" -k "$KV" > /dev/null 2>&1 || true
if [ -z "$(chroot "$DIR" dkms status "softirdma/$VER" 2> /dev/null)" ]; then
  chroot "$DIR" dkms add "softirdma/$VER" > /dev/null
fi
if ! chroot "$DIR" dkms install "softirdma/$VER" -k "$KV" > "$VM_DIR/dkms.log" 2>&1; then
  cat "$VM_DIR/dkms.log" >&2
  cat "$DIR/var/lib/dkms/softirdma/$VER/build/make.log" >&2 2> /dev/null || true
  vm_die "DKMS build of softirdma/$VER for $KV failed"
fi
if [ "$DIR" != "$VM_ROOT" ]; then
  rm -rf "$MOD"
  mkdir -p "$MOD"
  cp "$DIR/usr/lib/modules/$KV/updates/dkms"/softirdma.ko* "$MOD/" 2> /dev/null ||
    cp "$DIR/lib/modules/$KV/updates/dkms"/softirdma.ko* "$MOD/"
  chroot "$VM_ROOT" depmod "$KV"
fi
echo "$STAMP" > "$VM_DIR/kernels/$KV/driver.stamp"
vm_log "softirdma/$VER built with DKMS for $KV: $(cd "$MOD" && ls softirdma.ko*)"
