# shellcheck shell=bash
# Sourced by vm/*.sh: where a VM's state lives, the Debian mirror, and which kernel a name means.
#
# State is in $VM_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/softirdma-vm), never in the
# repository:
#   root/               Debian trixie: QEMU (trixie-backports), the guests' root file system (shared
#                       read-only into every guest over virtio-9p), every guest kernel's modules and
#                       the headers and DKMS that build the driver for 6.12 and the newest kernel
#   bookworm/           Debian 12, only for Linux 6.1: its headers need bookworm's kbuild and gcc
#   kernels/KV/         vmlinuz and initrd.gz of kernel release KV
#   kernels/NAME        the release a kernel name (6.1, 6.12, newest) resolved to
#   bin/qemu-system-x86_64  runs the root's QEMU through the root's own loader (no chroot)
VM_DIR=${VM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/softirdma-vm}
VM_ROOT=$VM_DIR/root
export VM_DIR

vm_log() { echo "vm: $*" >&2; }
vm_die() { echo "vm: $*" >&2; exit 1; }

# The mirror the host's apt uses (deb822 or one-line form), else Debian's own.
vm_mirror() {
  local m
  m=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$m" ] || m=$(awk '$1 == "deb" && $2 !~ /security/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
  echo "${m:-http://deb.debian.org/debian}"
}

# vm_kernel_suite NAME: the Debian root and apt target release a kernel name comes from, as
# "ROOT RELEASE". 6.1 is bookworm's, 6.12 trixie's, newest trixie-backports' (a major.minor
# equal to the newest's is accepted as well, once vm_kernel_release has resolved it).
vm_kernel_suite() {
  case $1 in
    6.1) echo "$VM_DIR/bookworm bookworm" ;;
    6.12) echo "$VM_ROOT trixie" ;;
    newest) echo "$VM_ROOT trixie-backports" ;;
    *)
      if [ -f "$VM_DIR/kernels/newest" ] && [ "$(vm_series "$(cat "$VM_DIR/kernels/newest")")" = "$1" ]; then
        echo "$VM_ROOT trixie-backports"
      else
        return 1
      fi ;;
  esac
}

# vm_series RELEASE: 6.12.117+deb13-amd64 -> 6.12
vm_series() { echo "$1" | sed -E 's/^([0-9]+\.[0-9]+).*/\1/'; }

# vm_kernel_release NAME: the kernel release (uname -r) a provisioned kernel name stands for.
vm_kernel_release() {
  local n=${1:-6.12} f
  f=$VM_DIR/kernels/$n
  if [ ! -f "$f" ] && [ -f "$VM_DIR/kernels/newest" ] &&
    [ "$(vm_series "$(cat "$VM_DIR/kernels/newest")")" = "$n" ]; then
    f=$VM_DIR/kernels/newest
  fi
  [ -f "$f" ] || return 1
  cat "$f"
}

# vm_check_kernel_name NAME: one line and status 2 for a name that is none of the three.
vm_check_kernel_name() {
  case $1 in
    6.1 | 6.12 | newest) return 0 ;;
  esac
  if [ -f "$VM_DIR/kernels/newest" ] && [ "$(vm_series "$(cat "$VM_DIR/kernels/newest")")" = "$1" ]; then
    return 0
  fi
  echo "vm: kernel '$1' is not one of 6.1 (Debian 12), 6.12 (Debian 13), newest (trixie-backports)" >&2
  exit 2
}
