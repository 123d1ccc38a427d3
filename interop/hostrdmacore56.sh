#!/usr/bin/env bash
# rdma-core 56's own test suite (Debian 13's python3-pyverbs) on the host under softirdma run:
# root sets up the VM tooling's trixie root (vm/provision.sh) as a chroot, an overlay over it so
# the root stays as it is, and the suite runs there as the unprivileged user of interop-host,
# against that user's softirdma outside (its folder bound in). The tally line
#   rdma-core tests on host rxe0 (rdma-core 56): N ok, N skipped, N failed, N errors, N modules crashed
# beside the project's Linux rxe reference (interop/testdata/rdma-core-tests-rxe-6.12.txt, rdma-core
# 56 on Linux 6.12); PASS host_rdma_core56_suite when nothing failed or errored and no module
# crashed that does not crash on rxe0, and
# host_rdma_core56_vs_rxe when every test that passes on rxe0 passes here.
set -euo pipefail
cd "$(dirname "$0")/.."
. interop/guestlib.sh
. interop/hostlib.sh
run_or_exit "$OUT/provision.log" "FAIL host_rdma_core56_suite (provisioning the trixie root)" bash vm/provision.sh

T=$(mktemp -d /tmp/softirdma-rc56.XXXXXX)
M=$T/root
mounts=()
chroot_cleanup() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2> /dev/null || true; done
  rm -rf "$T"
  host_cleanup
}
trap chroot_cleanup EXIT
# mnt ARGS... DIR: mount, remembered for the cleanup.
mnt() { mount "$@" && mounts+=("${!#}"); }
vm_lock # the root stays as it is while the overlay stands on it
mkdir -p "$T/upper" "$T/work" "$M"
mnt -t overlay overlay -o "lowerdir=$VM_ROOT,upperdir=$T/upper,workdir=$T/work" "$M"
mnt --bind /proc "$M/proc"
mnt --bind /dev "$M/dev"
mnt -t tmpfs -o mode=1777 tmpfs "$M/dev/shm" # the suite's multiprocessing barriers
# The user's softirdma runs outside; the chroot sees its folder (socket, sysfs tree) where run
# looks for it.
as_user "$BIN/softirdma" run -- true
UID_=$(id -u "$U") GID_=$(id -g "$U")
RUNDIR=/tmp/softirdma-$UID_
mkdir -p "$M$RUNDIR" "$M/opt/softirdma" "$M/tmp/home"
mnt --bind "$RUNDIR" "$M$RUNDIR"
cp "$BIN/softirdma" "$BIN/libsoftirdma-preload.so" interop/guest/rdma_core_suite.py "$M/opt/softirdma/"
chmod 755 "$M/opt/softirdma" "$M/opt/softirdma"/*
chown "$UID_:$GID_" "$M/tmp/home"
in_root() { chroot --userspec="$UID_:$GID_" "$M" env -i HOME=/tmp/home PATH=/usr/bin:/bin "$@"; }
RC_VERSION=$(chroot "$M" dpkg-query -W -f '${Version}' python3-pyverbs | sed 's/\..*//')
echo "interop: rdma-core $RC_VERSION's suite under softirdma run in a chroot; logs in $OUT"
in_root /opt/softirdma/softirdma run -- ibv_devices > "$OUT/devices.txt" 2>&1 || true
verdict host_rdma_core56_devices has_lines "$OUT/devices.txt" '^[[:space:]]+rxe0[[:space:]]+020000fffe000000'
mods=()
for m in addr atomic cq cq_events cqex device mr odp parent_domain pd qp qpex rdmacm relaxed_ordering shared_pd srq tag_matching; do
  ls "$M/usr/share/doc/rdma-core/tests/test_$m.py"* > /dev/null 2>&1 && mods+=("$m")
done
in_root RDMA_CORE_TOP=/tmp/home/rc /opt/softirdma/softirdma run -- timeout 1200 python3 /opt/softirdma/rdma_core_suite.py rxe0 1 "${mods[@]}" > "$OUT/rdma-core.txt" 2>&1 || true
cp -r "$M/tmp/home/rc"/*.log "$OUT/" 2> /dev/null || true
count() { grep -cE "^RDMA-CORE: .* $1\$" "$OUT/rdma-core.txt" || true; }
REF=interop/testdata/rdma-core-tests-rxe-6.12.txt
# crashes FILE: the modules whose interpreter died (a status other than 0 and 1), one a line.
crashes() { awk '/^RDMA-CORE-MODULE: / && $3 !~ /^rc=(0|1)$/ { print $2 }' "$1" | sort; }
crashed=$(crashes "$OUT/rdma-core.txt" | grep -c . || true)
echo "rdma-core tests on host rxe0 (rdma-core $RC_VERSION): $(count ok) ok, $(count skipped) skipped, $(count FAIL) failed, $(count ERROR) errors, $crashed modules crashed"
grep -E '^RDMA-CORE: .* (FAIL|ERROR)$' "$OUT/rdma-core.txt" | sed 's/^/  /' || true
# A module that crashes on rxe0 too (the reference's test_parent_domain: SIGSEGV in python) is
# named, not failed.
newcrash=$(comm -23 <(crashes "$OUT/rdma-core.txt") <(crashes "$REF"))
comm -12 <(crashes "$OUT/rdma-core.txt") <(crashes "$REF") | sed 's/^/  crashed here as on rxe0: /'
[ -z "$newcrash" ] || sed 's/^/  crashed here, not on rxe0: /' <<< "$newcrash"
verdict "host_rdma_core56_suite|host_rdma_core56_suite (failures, errors or crashes rxe0 does not have)" test "$(count FAIL)$(count ERROR)${newcrash:-0}" = 000
# against_reference: every test that passes on rxe0 in the reference passes here.
against_reference() {
  local ref=$REF missing
  missing=$(comm -23 <(awk '/^RDMA-CORE: .* ok$/ { print $2 }' "$ref" | sort) <(awk '/^RDMA-CORE: .* ok$/ { print $2 }' "$OUT/rdma-core.txt" | sort))
  echo "  rxe0's reference: $(grep -c '^RDMA-CORE: .* ok$' "$ref") ok; here $(count ok) ok"
  [ -z "$missing" ] || { echo "  passing on rxe0, not here:"; sed 's/^/    /' <<< "$missing"; return 1; }
}
verdict host_rdma_core56_vs_rxe against_reference
finish "interop host rdma-core $RC_VERSION"
