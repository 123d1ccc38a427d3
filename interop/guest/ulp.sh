# shellcheck shell=sh
# The kernel's RDMA storage users in a guest: NFS over RDMA (nfsd with svcrdma, the NFS client with
# xprtrdma), iSER (LIO's isert target, open-iscsi with ib_iser), SRP (ib_srpt over rdma_cm, ib_srp)
# and RDS (rds_rdma, interop/guest/rds_check.py). The host puts this file after lib.sh at the head
# of a guest script; interop/guestulp.sh drives it. Runs under the guest's /bin/sh (dash).
#
# The host sets SIP and CIP, the server's and the client's addresses. Each protocol has
# PROTO_server (prints "VM: server ready"), PROTO_client (prints "VM: client ready" and sets $M,
# what the I/O goes to: a mounted folder, a block device, or rds:ADDR) and PROTO_down (prints
# "VM: teardown rc=N"). ulp_io LABEL SIZE moves SIZE through $M, every byte checked, and prints
# "VM: io LABEL rc=N" and the figures.

# writable DIR: DIR of the read-only root becomes writable, its changes kept in /tmp (an overlay):
# the daemons keep their state there.
writable() {
  mkdir -p /tmp/rw$1/upper /tmp/rw$1/work
  mount -t overlay overlay -o lowerdir=$1,upperdir=/tmp/rw$1/upper,workdir=/tmp/rw$1/work $1 || echo "VM: $1 stays read-only"
}

# wait_for SECONDS CMD...: CMD again every 0.2 s until it succeeds, at most SECONDS.
wait_for() {
  n=$(($1 * 5))
  shift
  for _i in $(seq $n); do "$@" > /dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}

# NFSv4.2 over RDMA on port 20049: a tmpfs exported as the pseudo root, nfsd's grace and lease
# times at their least (10 s) so that the client's first open does not wait 90 s.
nfsrdma_server() {
  modprobe -a nfsd rpcrdma || echo "VM: server modules failed"
  mount -t tmpfs -o mode=0755,size=8m nfsstate /var/lib/nfs
  touch /var/lib/nfs/etab /var/lib/nfs/rmtab
  mkdir -m 0700 /var/lib/nfs/v4recovery
  mount -t tmpfs -o size=400m export /srv
  mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd
  # -i: no /etc/exports; mountd answers the kernel's export upcalls (v4 needs it, not rpcbind).
  exportfs -i -o rw,sync,no_subtree_check,no_root_squash,fsid=0 '*:/srv'
  rpc.mountd -N 3 || echo "VM: rpc.mountd failed"
  rpc.nfsd -N 3 -V 4.2 -G 10 -L 10 --rdma=20049 4 || echo "VM: rpc.nfsd failed"
  sed 's/^/VM: portlist: /' /proc/fs/nfsd/portlist
  grep -q 'rdma 20049' /proc/fs/nfsd/portlist && echo "VM: server ready"
}
nfsrdma_client() {
  modprobe rpcrdma || echo "VM: client modules failed"
  mkdir -p /tmp/mnt
  until_ok 60 mount -t nfs -o vers=4.2,proto=rdma,port=20049 $SIP:/ /tmp/mnt
  echo "VM: mount rc=$rc"
  sed 's/^/VM: mount: /' /tmp/out
  grep " /tmp/mnt " /proc/mounts | sed 's/^/VM: mounted: /'
  M=/tmp/mnt
  [ $rc = 0 ] && echo "VM: client ready"
}
nfsrdma_down() {
  umount /tmp/mnt; echo "VM: teardown rc=$?"
}

# ibdev: the guest's RDMA device, softirdma0 or rxe0.
ibdev() { if [ -e /sys/class/infiniband/softirdma0 ]; then echo softirdma0; else echo rxe0; fi; }
# gid0: GID 0 of that device, 32 hex digits.
gid0() { tr -d : < /sys/class/infiniband/$(ibdev)/ports/1/gids/0; }

# ramdisk: a 256 MiB brd disk, /dev/ram0, as LIO's block backstore iblock_0/ram0 (configfs, as
# targetcli does it; targetcli itself wants D-Bus, which the guest has not).
LIO=/sys/kernel/config/target
ramdisk() {
  modprobe brd rd_nr=1 rd_size=262144 && modprobe -a target_core_mod target_core_iblock || echo "VM: target modules failed"
  mkdir -p $LIO/core/iblock_0/ram0
  echo udev_path=/dev/ram0 > $LIO/core/iblock_0/ram0/control
  echo 1 > $LIO/core/iblock_0/ram0/enable || echo "VM: backstore failed"
}

# lun TPG: the ram disk as LUN 0 of the target portal group TPG.
lun() {
  mkdir -p $1/lun/lun_0 && ln -s $LIO/core/iblock_0/ram0 $1/lun/lun_0/ram0 || echo "VM: lun failed"
}

# block_disk HOSTS: the one SCSI disk of the SCSI hosts whose proc_name is HOSTS ($M), waited
# for while the kernel scans it (10 s at most). sd_mod must be loaded: no udev loads it here.
block_disk() {
  M=
  for _i in $(seq 100); do
    for b in /sys/block/sd*; do
      h=$(readlink -f $b/device | grep -o '/host[0-9]*/' | tr -d /)
      [ -n "$h" ] && [ "$(cat /sys/class/scsi_host/$h/proc_name)" = $1 ] && [ -b /dev/${b##*/} ] && M=/dev/${b##*/}
    done
    [ -n "$M" ] && break; sleep 0.1
  done
  echo "VM: disk $M"
}

# iSER: LIO's iSCSI target on ADDR:3260 with iSER on its portal, the ram disk its LUN 0, any
# initiator admitted (demo mode); open-iscsi's initiator on the iser interface.
ISER_IQN=iqn.2026-12.test.softirdma:ram0
iser_server() {
  ramdisk
  modprobe -a iscsi_target_mod ib_isert || echo "VM: server modules failed"
  T=$LIO/iscsi/$ISER_IQN/tpgt_1
  mkdir -p $T && lun $T
  mkdir "$T/np/$SIP:3260" && echo 1 > "$T/np/$SIP:3260/iser" || echo "VM: iser portal failed"
  echo 0 > $T/attrib/authentication; echo 1 > $T/attrib/generate_node_acls
  echo 1 > $T/attrib/cache_dynamic_acls; echo 0 > $T/attrib/demo_mode_write_protect
  echo 1 > $T/enable
  [ "$(cat "$T/np/$SIP:3260/iser" 2>/dev/null)" = 1 ] && [ "$(cat $T/enable)" = 1 ] && echo "VM: server ready"
}
iser_client() {
  modprobe -a sd_mod ib_iser || echo "VM: client modules failed"
  writable /etc/iscsi
  writable /var/lib
  mkdir -p /var/lib/iscsi
  echo "InitiatorName=iqn.2026-12.test.softirdma:client" > /etc/iscsi/initiatorname.iscsi
  mkdir -p /run/lock/iscsi
  iscsid || echo "VM: iscsid failed"
  until_ok 120 iscsiadm -m discovery -t st -p $SIP:3260 -I iser
  echo "VM: discovery rc=$rc"
  sed 's/^/VM: discovery: /' /tmp/out
  iscsiadm -m node -T $ISER_IQN -p $SIP:3260 -I iser --login > /tmp/out 2>&1
  echo "VM: login rc=$?"
  sed 's/^/VM: login: /' /tmp/out
  iscsiadm -m session -P 1 2>&1 | grep -E 'Iface Transport|Target:' | sed 's/^/VM: session: /'
  block_disk iscsi_iser
  [ -n "$M" ] && echo "VM: client ready"
}
iser_down() {
  iscsiadm -m node -T $ISER_IQN -p $SIP:3260 -I iser --logout > /tmp/out 2>&1
  echo "VM: teardown rc=$?"
  sed 's/^/VM: logout: /' /tmp/out
}

# SRP: ib_srpt over rdma_cm on port 5555, its target port named by GID 0, the ram disk its LUN
# 0 for the one initiator named in /share/srp-initiator (the client's GID 0, which srp_hello
# writes before the client waits for the server); ib_srp logs in through rdma_cm with the
# target's service GUID (/share/srp-target).
srp_server() {
  ramdisk
  modprobe ib_srpt || echo "VM: server modules failed"
  W=0x$(gid0)
  wait_for 300 test -s /share/srp-initiator || echo "VM: no initiator"
  I=0x$(cat /share/srp-initiator)
  T=$LIO/srpt/$W/tpgt_1
  mkdir -p $T && lun $T
  mkdir -p $T/acls/$I/lun_0 && ln -s $T/lun/lun_0 $T/acls/$I/lun_0/lun_0 || echo "VM: acl failed"
  echo 5555 > $LIO/srpt/discovery_auth/rdma_cm_port
  echo 1 > $T/enable
  cat /sys/module/ib_srpt/parameters/srpt_service_guid > /share/srp-target
  [ "$(cat $T/enable 2>/dev/null)" = 1 ] && echo "VM: server ready"
}
srp_hello() {
  gid0 > /share/srp-initiator.tmp && mv /share/srp-initiator.tmp /share/srp-initiator
}
srp_client() {
  modprobe -a sd_mod ib_srp || echo "VM: client modules failed"
  S=$(cat /share/srp-target)
  echo "id_ext=$S,ioc_guid=$S,initiator_ext=$(gid0 | cut -c1-16),dest=$SIP:5555" > /sys/class/infiniband_srp/srp-$(ibdev)-1/add_target
  echo "VM: login rc=$?"
  ls /sys/class/srp_remote_ports/ | sed 's/^/VM: rport: /'
  block_disk ib_srp
  [ -n "$M" ] && echo "VM: client ready"
}
srp_down() {
  rc=1
  for p in /sys/class/srp_remote_ports/port-*; do [ -e $p/delete ] && echo 1 > $p/delete && rc=0; done
  wait_for 30 sh -c '! ls -d /sys/class/srp_remote_ports/port-* 2>/dev/null' || rc=1
  echo "VM: teardown rc=$rc"
}

# RDS: rds_rdma, and interop/guest/rds_check.py (from /share) receiving on RDS_SOCKETS sockets of
# ADDR from port 4000 on and checking each message; the client's sockets send to them ($M says
# so: rds:ADDR).
RDS_SOCKETS=8
rds_server() {
  modprobe rds_rdma || echo "VM: server modules failed"
  python3 /share/rds_check.py serve $SIP 4000 $RDS_SOCKETS > /tmp/rds.log 2>&1 &
  wait_for 60 grep -q "listening" /tmp/rds.log && echo "VM: server ready"
}
rds_client() {
  modprobe rds_rdma || echo "VM: client modules failed"
  M=rds:$SIP
  echo "VM: client ready"
}
rds_down() {
  python3 /share/rds_check.py stop $CIP $SIP 4000 $RDS_SOCKETS > /tmp/out 2>&1
  echo "VM: teardown rc=$?"
  sed 's/^/VM: rds: /' /tmp/out
}

# ulp_io LABEL SIZE: fio writes SIZE to $M (a folder: a file in it; a block device: the device)
# in 128 KiB writes, 16 in flight, then reads all of it back, every block verified (crc32c); to
# rds:ADDR, rds_check.py sends SIZE of messages to the server's sockets, each checked there.
ulp_io() {
  case $M in rds:*)
    python3 /share/rds_check.py send $CIP $SIP 4000 $RDS_SOCKETS $2 $1 > /tmp/rds 2>&1
    echo "VM: io $1 rc=$?"
    sed "s/^/VM: io $1: /" /tmp/rds
    return ;;
  esac
  if [ -d "$M" ]; then target="--directory=$M --filename=fio.$1"; else target="--filename=$M"; fi
  fio $target --ioengine=libaio --direct=1 --iodepth=16 --size=$2 --bs=128k --rw=write \
    --verify=crc32c --do_verify=1 --verify_fatal=1 --name=$1 > /tmp/fio 2>&1
  echo "VM: io $1 rc=$?"
  sed "s/^/VM: io $1: /" /tmp/fio
}
