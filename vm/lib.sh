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
VM_DIR=$(realpath -m "${VM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/softirdma-vm}")
# QEMU's -virtfs and -fw_cfg take it inside comma-separated options, a wrapper script embeds it.
case $VM_DIR in *[[:space:],\"\'\\]*)
  echo "vm: VM_DIR must be a path without spaces, commas, quotes or backslashes, not '$VM_DIR'" >&2
  exit 2 ;;
esac
VM_ROOT=$VM_DIR/root
export VM_DIR

vm_log() { echo "vm: $*" >&2; }
vm_die() { echo "vm: $*" >&2; exit 1; }

# vm_check_number NAME VALUE MIN MAX: VALUE is a whole number in MIN..MAX, or the script ends
# with status 2 saying what NAME must be.
vm_check_number() {
  [[ $2 =~ ^[0-9]{1,9}$ ]] || { echo "$1 must be a number, not '$2'" >&2; exit 2; }
  [ "$((10#$2))" -ge "$3" ] && [ "$((10#$2))" -le "$4" ] || { echo "$1 must be $3..$4, not $2" >&2; exit 2; }
}

# vm_lock: one provisioning or driver build at a time on $VM_DIR (they change the shared root;
# a second waits for the first).
vm_lock() {
  exec 9> "$VM_DIR/lock"
  flock 9
}

# The Debian mirror debootstrap and the roots' apt use: VM_MIRROR, else the first http(s) or ftp
# mirror of the host's apt sources (deb822 or one-line, options skipped), else Debian's own.
# mirror+file: and cdrom: sources of the host are of no use to debootstrap.
vm_mirror() {
  local m
  if [ -n "${VM_MIRROR:-}" ]; then
    [[ $VM_MIRROR =~ ^(https?|ftp)://[^[:space:]]+$ ]] || vm_die "VM_MIRROR must be an http(s) or ftp URL, not '$VM_MIRROR'"
    echo "$VM_MIRROR"
    return
  fi
  m=$( { awk '/^URIs:/ { for (i = 2; i <= NF; i++) print $i }' /etc/apt/sources.list.d/*.sources
    awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) { print $i; break } }' /etc/apt/sources.list /etc/apt/sources.list.d/*.list
  } 2> /dev/null | grep -E '^(https?|ftp)://' | grep -v -- '-security' | grep -E '/debian/?$' | head -1 || true)
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

# vm_pkg_version PKG: the version of PKG installed in the VM root.
vm_pkg_version() { chroot "$VM_ROOT" dpkg-query -W -f='${Version}' "$1"; }

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

# vm_initrd_stamp: what an initrd is built from (vm/provision.sh rebuilds it when this changes).
vm_initrd_stamp() {
  local here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  cat "$here/init.sh" "$here/guest.sh" "$here/provision.sh" | sha256sum | cut -c1-16
}

# vm_current NAME: the kernel is provisioned and its initrd is of the current scripts.
vm_current() {
  local kv
  kv=$(vm_kernel_release "$1") || return 1
  [ -f "$VM_DIR/kernels/$kv/vmlinuz" ] && [ "$(cat "$VM_DIR/kernels/$kv/initrd.stamp" 2> /dev/null)" = "$(vm_initrd_stamp)" ]
}
