#!/usr/bin/env bash
# softirdma run beside the kernel's own RDMA devices. A VM (Linux 6.12, rdma-core 56) has Linux
# rxe (rxe0 on a dummy netdev), and runs softirdma's host path from this clone's bin/ (shared at
# /share) as an unprivileged user of the guest: softirdma's device is named rxe1 there, its
# netlink index and uverbs number after the kernel's. Without -kernel a program sees softirdma's
# device alone, with -kernel the kernel's too (ibv_devices, rdma link); under -kernel two
# programs pingpong on the kernel's rxe0 (its uverbs opened as the kernel's, untouched) and two
# on softirdma's rxe1, and rping meets through rdma_cm on softirdma's. PASS lines
# host_kernel_<case>.
set -euo pipefail
cd "$(dirname "$0")/.."
. interop/guestlib.sh
run_or_exit "$OUT/provision.log" "FAIL host_kernel_provision" bash vm/provision.sh 6.12
run_or_exit "$OUT/build.log" "FAIL host_kernel_build" make --no-print-directory build
SHARE=$(mktemp -d /tmp/softirdma-hostkernel.XXXXXX)
cp bin/softirdma bin/libsoftirdma-preload.so "$SHARE/"
chmod 755 "$SHARE" "$SHARE"/*
echo "interop host programs beside the kernel's devices; logs in $OUT"
cat interop/guest/lib.sh - > "$OUT/guest.sh" <<'SCRIPT'
# rxe0 on a netdev of its own (its GUID from its MAC, not lo's, which softirdma's device has).
modprobe dummy; ip link add dummy0 type dummy && ip addr add 10.9.9.1/24 dev dummy0 && ip link set dummy0 up
modprobe rdma_rxe && rdma link add rxe0 type rxe netdev dummy0 && echo "VM: kernel rxe0 on dummy0"
chmod 666 /dev/infiniband/* # as rdma-core's udev rules leave them
# as_user CMD...: CMD as uid 1000, who owns nothing here (the guest's /etc is read-only).
as_user() { setpriv --reuid=1000 --regid=1000 --clear-groups env HOME=/tmp XDG_RUNTIME_DIR= "$@"; }
S=/share/softirdma
as_user $S run -- ibv_devices > /tmp/out 2>&1; sed 's/^/VM: alone: /' /tmp/out
as_user $S run -kernel -- ibv_devices > /tmp/out 2>&1; sed 's/^/VM: joined: /' /tmp/out
as_user $S run -kernel -- rdma link show > /tmp/out 2>&1; sed 's/^/VM: link: /' /tmp/out
as_user $S run -kernel -- ibv_devinfo -d rxe1 > /tmp/out 2>&1; echo "VM: devinfo rxe1 rc=$?"
# pingpong DEV PORT GID: two programs under run -kernel on DEV, on its GID index GID (an IPv4
# address's RoCE v2 GID: Linux rxe has RoCE v2 GIDs alone, softirdma's device v1 and v2).
pingpong() {
  as_user $S run -kernel -- timeout 60 ibv_rc_pingpong -d $1 -g $3 -p $2 -n 100 -c > /tmp/srv.$1 2>&1 &
  for i in $(seq 200); do ss -ltn | grep -q ":$2 " && break; sleep 0.1; done
  as_user $S run -kernel -- timeout 60 ibv_rc_pingpong -d $1 -g $3 -p $2 -n 100 -c 127.0.0.1 > /tmp/cli.$1 2>&1
  echo "VM: pingpong $1 client rc=$?"
  wait $!; echo "VM: pingpong $1 server rc=$?"
  tail -1 /tmp/cli.$1 | sed "s/^/VM: pingpong $1: /"
  grep -iE 'fail|error|couldn' /tmp/cli.$1 /tmp/srv.$1 | head -4 | sed "s/^/VM: pingpong $1: /"
}
# The kernel's sysfs, read through the library's joined tree, is the kernel's.
echo "VM: kernel rxe0 GID 1: $(cat /sys/class/infiniband/rxe0/ports/1/gids/1)"
as_user $S run -kernel -- cat /sys/class/infiniband/rxe0/ports/1/gids/1 | sed 's/^/VM: through the library: rxe0 GID 1: /' 
pingpong rxe0 18515 1
pingpong rxe1 18516 3
as_user $S run -kernel -- timeout 60 rping -s -a 127.0.0.1 -C 10 -V > /tmp/rps 2>&1 &
for i in $(seq 100); do grep -q 'rdma_cm listening' /tmp/softirdma-1000/log 2> /dev/null && break; sleep 0.1; done
as_user $S run -kernel -- timeout 60 rping -c -a 127.0.0.1 -C 10 -V > /tmp/rpc 2>&1; echo "VM: rping client rc=$?"
wait $!; echo "VM: rping server rc=$?"
grep -E 'kernel.s RDMA devices' /tmp/softirdma-1000/log | sed 's/^/VM: log: /'
as_user $S stop
dmesg | grep -E 'WARNING|BUG|Oops|Call Trace' | sed 's/^/VM: dmesg: /'
echo "VM: dmesg checked"
SCRIPT
st=0
VM_SHARE=$SHARE VM_SCRIPT=$OUT/guest.sh timeout 600 bash vm/run.sh > "$OUT/vm.log" 2>&1 || st=$?
rm -rf "$SHARE"
V=$OUT/vm.log
why="vm exit $st" verdict host_kernel_vm_ran has_lines "$V" "VM: kernel rxe0 on dummy0" "$V" "VM: dmesg checked"
# Without -kernel softirdma's list replaces the kernel's; with it both, the kernel's first.
verdict host_kernel_alone has_lines "$V" "VM: alone: +rxe1 "
verdict host_kernel_alone_hides_the_kernels no_lines "$V" "VM: alone: +rxe0 "
verdict host_kernel_joined has_lines "$V" "VM: joined: +rxe0 " "$V" "VM: joined: +rxe1 "
verdict host_kernel_rdma_link has_lines "$V" "VM: link: link rxe0/1 state ACTIVE .*netdev dummy0" "$V" "VM: link: link rxe1/1 state ACTIVE .*netdev lo"
verdict host_kernel_devinfo_rxe1 has_lines "$V" "VM: devinfo rxe1 rc=0"
gid=$(sed -nE 's/.*VM: kernel rxe0 GID 1: ([0-9a-f:]+).*/\1/p' "$V")
why="the kernel's GID 1: '$gid'" verdict host_kernel_sysfs_through_the_library has_lines "$V" "VM: through the library: rxe0 GID 1: ${gid:-none}"
for d in rxe0 rxe1; do
  verdict host_kernel_pingpong_$d has_lines "$V" "VM: pingpong $d client rc=0" "$V" "VM: pingpong $d server rc=0" "$V" "VM: pingpong $d: 100 iters in"
done
verdict host_kernel_rping has_lines "$V" "VM: rping client rc=0" "$V" "VM: rping server rc=0"
KERNEL_LOG=$V kernel_clean host_kernel_no_kernel_warning "" "VM: dmesg checked"
finish "interop host beside the kernel's devices"
