# shellcheck shell=sh
# NVMe over Fabrics in a guest, the kernel's own RDMA users (nvmet-rdma, nvme-rdma): the host puts
# this file after lib.sh at the head of a guest script. Runs under the guest's /bin/sh (dash).

# nvmeof_target NQN ADDR SRQ: a 128 MiB brd disk as namespace 1 of subsystem NQN, any host
# allowed, on ADDR:4420 over RDMA (SRQ=1: nvmet-rdma receives on shared receive queues).
# Prints "VM: target ready" once the port serves the subsystem.
nvmeof_target() {
  modprobe brd rd_nr=1 rd_size=131072 && modprobe nvmet-rdma use_srq=$3 || echo "VM: target modules failed"
  N=/sys/kernel/config/nvmet
  mkdir $N/subsystems/$1 && echo 1 > $N/subsystems/$1/attr_allow_any_host
  mkdir $N/subsystems/$1/namespaces/1
  echo /dev/ram0 > $N/subsystems/$1/namespaces/1/device_path
  echo 1 > $N/subsystems/$1/namespaces/1/enable
  mkdir $N/ports/1
  echo rdma > $N/ports/1/addr_trtype; echo ipv4 > $N/ports/1/addr_adrfam
  echo $2 > $N/ports/1/addr_traddr; echo 4420 > $N/ports/1/addr_trsvcid
  ln -s $N/subsystems/$1 $N/ports/1/subsystems/$1 && echo "VM: target ready"
}

# nvmeof_connect NQN ADDR [OPTION...]: discover ADDR:4420 (again while the target is not up
# yet) and connect to NQN with nvme connect's OPTIONs; D is the namespace's block device (empty
# if none came). Prints "VM: discover rc=N", "VM: connect rc=N", their output, "VM: namespace D".
nvmeof_connect() {
  nqn=$1 addr=$2
  shift 2
  modprobe nvme-rdma || echo "VM: host modules failed"
  until_ok 120 nvme discover -t rdma -a $addr -s 4420; echo "VM: discover rc=$rc"
  sed 's/^/VM: discover: /' /tmp/out
  nvme connect -t rdma -n $nqn -a $addr -s 4420 "$@" > /tmp/out 2>&1; echo "VM: connect rc=$?"
  sed 's/^/VM: connect: /' /tmp/out
  D=
  for i in $(seq 100); do
    for n in /sys/class/nvme/nvme*; do
      [ "$(cat $n/subsysnqn 2>/dev/null)" = $nqn ] && [ -b /dev/${n##*/}n1 ] && D=/dev/${n##*/}n1
    done
    [ -n "$D" ] && break; sleep 0.1
  done
  echo "VM: namespace $D"
}

# nvmeof_fio_qd1 SIZE: 4 KiB random reads of the first SIZE of $D, one at a time for 10 s, the
# round trip an I/O waits for (command, transfer, completion, interrupt): "VM: qd1 rc=N", then
# fio's output as "VM: qd1: ..." lines (its completion latency percentiles among them).
nvmeof_fio_qd1() {
  fio --filename=$D --ioengine=libaio --direct=1 --iodepth=1 --rw=randread --bs=4k --size=$1 \
    --runtime=10 --time_based --name=qd1 > /tmp/out 2>&1
  echo "VM: qd1 rc=$?"
  sed "s/^/VM: qd1: /" /tmp/out
}

# nvmeof_mark NAME: the file /share/NAME, where the harness shares a folder: it marks a moment
# the harness can see (a job's start and end, to measure what the job cost the machine).
nvmeof_mark() { [ ! -d /share ] || touch /share/$1 2>/dev/null || true; }

# nvmeof_fio_verify NQN SIZE: fio writing and verifying SIZE of $D (4 KiB random writes, then
# 128 KiB sequential ones, crc32c), then the disconnect. Prints "VM: randwrite rc=N",
# "VM: seqwrite rc=N" with fio's output, and nvme disconnect's; marks <job>.start and <job>.end.
nvmeof_fio_verify() {
  for job in randwrite:4k seqwrite:128k; do
    rw=${job%:*}
    [ $rw = seqwrite ] && rw=write
    nvmeof_mark ${job%:*}.start
    fio --filename=$D --ioengine=libaio --direct=1 --iodepth=16 --size=$2 --verify=crc32c --do_verify=1 \
      --verify_fatal=1 --name=${job%:*} --rw=$rw --bs=${job#*:} > /tmp/out 2>&1
    rc=$?
    nvmeof_mark ${job%:*}.end
    echo "VM: ${job%:*} rc=$rc"
    sed "s/^/VM: ${job%:*}: /" /tmp/out
  done
  nvme disconnect -n $1 2>&1 | sed 's/^/VM: disconnect: /'
}
