#!/usr/bin/env bash
# vm/provision.sh [KERNEL...] -- everything a softirdma VM needs, from the Debian mirror, into
# $VM_DIR (see vm/lib.sh): QEMU with the vfio-user-pci client (trixie-backports: 11.1 or later),
# a trixie root for the guests with rdma-core (the rxe provider drives softirdma's device),
# ibverbs-utils, rdmacm-utils, perftest, python3-pyverbs with rdma-core's test suite, nvme-cli,
# fio, the kernel's other RDMA users' tools (nfs-kernel-server, nfs-common, targetcli-fb,
# open-iscsi, srptools), iproute2 and kmod, and each KERNEL asked for (default 6.12): its image, its modules in the
# root (modprobe works in the guest), an initrd that mounts the root over virtio-9p, and its
# headers with DKMS in a root of its own Debian release, so vm/driver.sh can build the driver.
# KERNEL is 6.1 (Debian 12), 6.12 (Debian 13) or newest (trixie-backports; 7.3 in December 2026).
#
# Needs root (debootstrap, chroot) and the mirror; the host's own packages are left alone but for
# debootstrap. Idempotent: what is there is kept, so a second run takes about a second; a kernel
# name keeps the release it first resolved to until VM_REFRESH=1 asks the mirror again. A change
# to vm/init.sh or vm/guest.sh rebuilds the initrds only.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"

KERNELS=("$@")
[ ${#KERNELS[@]} -gt 0 ] || KERNELS=(6.12)
for k in "${KERNELS[@]}"; do vm_check_kernel_name "$k"; done
[ "$(id -u)" = 0 ] || vm_die "provisioning needs root (debootstrap and chroot): sudo $0 ${KERNELS[*]}"
case ${VM_REFRESH:-0} in 0 | 1) ;; *) vm_die "VM_REFRESH is 0 or 1, not '$VM_REFRESH'" ;; esac

# The guests' root. Tools the interop cases and a developer in the VM use; gcc, make, dkms and
# libibverbs-dev build the driver and test programs in the root, on the host.
ROOT_PKGS="qemu-system-x86 busybox-static kmod iproute2 iputils-ping procps psmisc pciutils xz-utils zstd
  ibverbs-utils ibverbs-providers rdmacm-utils perftest python3 python3-pyverbs nvme-cli fio
  nfs-kernel-server nfs-common targetcli-fb open-iscsi srptools
  gcc make libc6-dev libibverbs-dev dkms"
BOOKWORM_PKGS="gcc make libc6-dev dkms xz-utils"
MIRROR=$(vm_mirror)
t0=$SECONDS
step() { vm_log "[+$((SECONDS - t0))s] $*"; }
mkdir -p "$VM_DIR/kernels" "$VM_DIR/bin"
vm_lock

command -v debootstrap > /dev/null || {
  step "installing debootstrap on the host"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap > /dev/null
}

# debootstrap_root DIR SUITE: a minbase tree; a half-made one (debootstrap's own folder left) is
# made again.
debootstrap_root() {
  local dir=$1 suite=$2
  if [ -x "$dir/usr/bin/apt-get" ] && [ ! -d "$dir/debootstrap" ]; then return; fi
  step "debootstrap $suite -> $dir"
  if mountpoint -q "$dir/proc"; then umount "$dir/proc"; fi # left by a run that was killed
  rm -rf --one-file-system "$dir"
  debootstrap --variant=minbase "$suite" "$dir" "$MIRROR" > "$VM_DIR/debootstrap-$suite.log" 2>&1 ||
    { tail -20 "$VM_DIR/debootstrap-$suite.log" >&2; vm_die "debootstrap $suite failed"; }
}

# proc DIR: /proc in the tree while this script runs. Package scripts want it: a kernel's
# headers run DKMS's autoinstall, and Linux 7.x's objtool reads /proc/self/maps.
mounted=() tmps=()
trap 'for m in "${mounted[@]}"; do umount "$m" || true; done; rm -rf "${tmps[@]}"' EXIT
proc() {
  mountpoint -q "$1/proc" && return
  mount -t proc proc "$1/proc"
  mounted+=("$1/proc")
}

# apt_install DIR RELEASE PKG...: the packages not yet installed in the tree, from RELEASE. A
# run interrupted in dpkg is finished first. A kernel's headers run DKMS's autoinstall of what is
# registered: the driver is taken out of DKMS first (vm/driver.sh builds it when asked), so that
# sources that do not build for that kernel cannot fail the headers' installation.
apt_install() {
  local dir=$1 rel=$2 p missing=()
  shift 2
  proc "$dir"
  chroot "$dir" dpkg --configure -a > /dev/null 2>&1 || true
  for p in "$@"; do
    chroot "$dir" dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  step "installing into $(basename "$dir"): ${missing[*]}"
  case " ${missing[*]}" in
    *" linux-headers-"*)
      if [ -x "$dir/usr/sbin/dkms" ] && [ -n "$(chroot "$dir" dkms status softirdma 2> /dev/null)" ]; then
        chroot "$dir" dkms remove softirdma --all > /dev/null 2>&1 || true
        rm -f "$VM_DIR"/kernels/*/driver.stamp
      fi ;;
  esac
  chroot "$dir" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive chroot "$dir" apt-get install -y -qq --no-install-recommends -t "$rel" "${missing[@]}" \
    > "$VM_DIR/install.log" 2>&1 || { tail -20 "$VM_DIR/install.log" >&2; vm_die "apt-get install in $dir failed"; }
  chroot "$dir" apt-get clean
}

debootstrap_root "$VM_ROOT" trixie
printf 'deb %s trixie main\ndeb %s trixie-backports main\n' "$MIRROR" "$MIRROR" > "$VM_ROOT/etc/apt/sources.list"
# shellcheck disable=SC2086
apt_install "$VM_ROOT" trixie-backports $ROOT_PKGS
# Mount points the guest needs in its read-only root.
mkdir -p "$VM_ROOT/share" "$VM_ROOT/sys/kernel/config"

# kernel NAME: the image, modules, headers and initrd of a kernel name.
kernel() {
  local name=$1 dir rel kv pkg x img src
  read -r dir rel <<< "$(vm_kernel_suite "$name")"
  if [ "$dir" != "$VM_ROOT" ]; then
    debootstrap_root "$dir" "$rel"
    printf 'deb %s %s main\n' "$MIRROR" "$rel" > "$dir/etc/apt/sources.list"
    # shellcheck disable=SC2086
    apt_install "$dir" "$rel" $BOOKWORM_PKGS
  fi
  kv=$(cat "$VM_DIR/kernels/$name" 2> /dev/null || true)
  if [ -z "$kv" ] || [ "${VM_REFRESH:-0}" = 1 ]; then
    chroot "$dir" apt-get update -qq
    kv=$(chroot "$dir" apt-cache depends -t "$rel" linux-image-amd64 | grep -oE 'linux-image-[0-9][^ ]*-amd64' | head -1 || true)
    kv=${kv#linux-image-}
    [ -n "$kv" ] || vm_die "cannot tell which kernel $rel ships (linux-image-amd64)"
    case $name in 6.1 | 6.12) [ "$(vm_series "$kv")" = "$name" ] || vm_die "$rel ships $kv, not $name" ;; esac
  fi
  x=$VM_DIR/kernels/$kv
  if [ ! -f "$x/vmlinuz" ] || [ ! -f "$VM_ROOT/usr/lib/modules/$kv/modules.dep" ]; then
    step "kernel $kv ($rel)"
    rm -rf "$x" "$VM_ROOT/usr/lib/modules/$kv/kernel"
    mkdir -p "$x"
    # Debian 13's kernels from 7.x on split linux-image-KV into linux-binary(-unsigned)-KV (the
    # image), linux-modules-KV and linux-base-KV: take whichever of these the mirror has (apt
    # knows it without downloading), and fail on any of those that does not download.
    for pkg in linux-image-$kv linux-binary-$kv linux-binary-unsigned-$kv linux-modules-$kv linux-base-$kv; do
      chroot "$dir" apt-cache show "$pkg" > /dev/null 2>&1 || continue
      rm -f "$dir"/tmp/"$pkg"_*.deb
      chroot "$dir" sh -c "cd /tmp && apt-get download -qq $pkg" > /dev/null 2>&1 ||
        vm_die "cannot download $pkg (VM_REFRESH=1 asks the mirror for its current kernel)"
      dpkg-deb -x "$dir"/tmp/"$pkg"_*.deb "$x/pkg"
      rm -f "$dir"/tmp/"$pkg"_*.deb
    done
    # The image is /boot/vmlinuz-KV, or (7.x) /usr/lib/modules/KV/vmlinuz.
    img=$(ls "$x/pkg/boot/vmlinuz-$kv" "$x/pkg/usr/lib/modules/$kv/vmlinuz" 2> /dev/null | head -1 || true)
    [ -n "$img" ] || vm_die "no image of $kv on the mirror (VM_REFRESH=1 asks it for its current kernel)"
    cp "$img" "$x/vmlinuz"
    # Debian 12 packages modules under /lib, Debian 13 under /usr/lib: both end in the root's.
    src=$(ls -d "$x"/pkg/lib/modules/"$kv"/kernel "$x"/pkg/usr/lib/modules/"$kv"/kernel 2> /dev/null | head -1 || true)
    [ -n "$src" ] || vm_die "the packages of $kv hold no modules"
    rm -f "${src%/kernel}"/vmlinuz*
    mkdir -p "$VM_ROOT/usr/lib/modules/$kv"
    cp -a "${src%/kernel}/." "$VM_ROOT/usr/lib/modules/$kv/"
    rm -rf "$x/pkg"
    chroot "$VM_ROOT" depmod "$kv"
  fi
  # In the VM root everything comes from trixie-backports where it is newer: QEMU pulled
  # backports' libelf, and the headers' tools must agree with it.
  if [ "$dir" = "$VM_ROOT" ]; then rel=trixie-backports; fi
  apt_install "$dir" "$rel" "linux-headers-$kv"
  initrd "$kv"
  echo "$kv" > "$VM_DIR/kernels/$name"
  step "kernel $name is $kv"
}

# initrd KV: busybox, the modules that mount the root over virtio-9p (virtio_pci too: 6.1 has it
# as a module) with their dependencies, in modprobe's order and uncompressed for busybox's
# insmod, vm/init.sh as /init and vm/guest.sh, which /init hands the root to.
initrd() {
  local kv=$1 x=$VM_DIR/kernels/$1 stamp w m f
  stamp=$(vm_initrd_stamp)
  [ -f "$x/initrd.gz" ] && [ "$(cat "$x/initrd.stamp" 2> /dev/null)" = "$stamp" ] && return
  w=$(mktemp -d)
  tmps+=("$w")
  mkdir -p "$w"/{bin,dev,proc,sys,newroot,modules}
  cp "$VM_ROOT/usr/bin/busybox" "$w/bin/busybox"
  : > "$w/modules/order"
  # (modprobe --show-depends takes one module: the words after it are its parameters)
  for m in $(for n in virtio_pci 9p 9pnet_virtio; do chroot "$VM_ROOT" modprobe -S "$kv" --show-depends $n; done | awk '$1 == "insmod" { print $2 }'); do
    f=$(basename "$m"); f=${f%.xz}; f=${f%.zst}; f=${f%.ko}.ko
    grep -qx "$f" "$w/modules/order" && continue
    case $m in
      *.xz) chroot "$VM_ROOT" xz -dc "$m" > "$w/modules/$f" ;;
      *.zst) chroot "$VM_ROOT" zstd -qdc "$m" > "$w/modules/$f" ;;
      *) cp "$VM_ROOT$m" "$w/modules/$f" ;;
    esac
    echo "$f" >> "$w/modules/order"
  done
  cp "$HERE/init.sh" "$w/init"
  cp "$HERE/guest.sh" "$w/guest.sh"
  chmod +x "$w/init"
  (cd "$w" && find . | "$VM_ROOT/usr/bin/busybox" cpio -o -H newc 2> /dev/null | gzip -1) > "$x/initrd.gz"
  rm -rf "$w"
  echo "$stamp" > "$x/initrd.stamp"
}

for k in "${KERNELS[@]}"; do
  case $k in 6.1 | 6.12 | newest) kernel "$k" ;; *) kernel newest ;; esac
done

Q=$VM_DIR/bin/qemu-system-x86_64
cat > "$Q" << W
#!/bin/sh
# QEMU from $VM_ROOT, through the root's own dynamic loader and libraries.
export QEMU_MODULE_DIR=$VM_ROOT/usr/lib/x86_64-linux-gnu/qemu
exec $VM_ROOT/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path $VM_ROOT/usr/lib/x86_64-linux-gnu \\
  $VM_ROOT/usr/bin/qemu-system-x86_64 -L $VM_ROOT/usr/share/qemu -L $VM_ROOT/usr/share/seabios "\$@"
W
chmod +x "$Q"
devices=$("$Q" -device help)
grep -q '"vfio-user-pci"' <<< "$devices" || vm_die "$("$Q" --version | head -1) has no vfio-user-pci"
step "ready: $("$Q" --version | head -1); kernels $(cd "$VM_DIR/kernels" && for n in 6.1 6.12 newest; do [ -f $n ] && printf '%s=%s ' $n "$(cat $n)"; done)"
