# shellcheck shell=sh
# Helpers the guest scripts of interop/*.sh share: the host puts this file at the head of each
# script it hands to vm/run.sh. Runs under the guest's /bin/sh (dash).

# netdev: the name of the softirdma function's netdev.
netdev() { for d in /sys/class/net/*; do case $(readlink $d/device/driver) in *softirdma) basename $d;; esac; done; }

# softirdma_up ADDR/LEN: the function's netdev, $DEV, up with the address; fails unless
# softirdma0 has its IPv4 GID within 10 s.
softirdma_up() {
  DEV=$(netdev)
  ip link set $DEV up; ip addr add $1 dev $DEV
  for j in $(seq 100); do grep -q ffff /sys/class/infiniband/softirdma0/ports/1/gids/1 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

# said LABEL FILE: the last lines of a tool's output FILE, each as "VM: LABEL said: LINE", so a
# tool that failed says why in the log the host reads.
said() { tail -n 6 "$2" | sed "s/^/VM: $1 said: /"; }

# until_served TRIES PAUSE CMD...: a client tool, run again PAUSE seconds later while its server
# does not listen yet (rdma-core's tools say "Couldn't connect", perftest "Unable to init"), at
# most TRIES times. Its output of the last run is in /tmp/out.
until_served() {
  tries=$1 pause=$2
  shift 2
  for _try in $(seq $tries); do
    "$@" > /tmp/out 2>&1
    grep -q "Couldn't connect\|Unable to init" /tmp/out || return 0
    sleep $pause
  done
}

# until_ok TRIES CMD...: a client that fails while its server is not up yet (or a server whose
# client may have failed it), run again a second later until it exits 0, at most TRIES times.
# Its output of the last run is in /tmp/out, its status in $rc, the runs it took in $runs.
until_ok() {
  tries=$1
  shift
  for runs in $(seq $tries); do
    "$@" > /tmp/out 2>&1
    rc=$?
    [ $rc = 0 ] && return 0
    sleep 1
  done
  return $rc
}

# serve_pair LABEL CLIENT SERVER FIRST: one role of a tool pair whose other role runs in the
# other guest: the client (run again until its server listens) and the server, FIRST (client or
# server) first. A server that fails runs again, up to three times, each wait ended at 45 s, and
# its client keeps trying long enough for the next run. Prints "LABEL client|server rc=N", a
# server's runs when it took more than one, and each one's output under "LABEL client|server: ".
serve_pair() {
  label=$1 client=$2 server=$3 first=$4
  for role in $first $( [ $first = client ] && echo server || echo client ); do
    if [ $role = client ]; then
      until_ok 90 timeout 30 $client
    else
      until_ok 3 timeout 45 $server
      [ $runs = 1 ] || echo "$label server: runs=$runs"
    fi
    echo "$label $role rc=$rc"
    sed "s/^/$label $role: /" /tmp/out
  done
}

# cm_tools DEV GID PEER LABEL FIRST: rdma_cm's tools (ucmatose, udaddy, rdma_server with
# rdma_client) and perftest's UD and rdma_cm modes (ib_send_bw -c UD on GID index GID,
# ib_write_bw -R) on DEV against the other guest, at PEER: each a serve_pair labelled
# "LABEL NAME", FIRST the role taken first. A server that fails (a Linux rxe server's rdma_accept
# has been seen to fail with EINVAL under load) or whose client gave up (perftest's -R client
# tries the test QP's connection ten times 100 ms apart, and a loaded guest's server may listen
# later) runs again, its client trying on meanwhile: one such failure must not put the two
# guests' scripts out of step.
cm_tools() {
  for v in "ucmatose|ucmatose -s $3 -c 4|ucmatose -c 4" "udaddy|udaddy -s $3|udaddy" \
      "rdma_server_client|rdma_client -s $3|rdma_server" \
      "ib_send_bw_UD|ib_send_bw -d $1 -x $2 -F -c UD -n 20 $3|ib_send_bw -d $1 -x $2 -F -c UD -n 20" \
      "ib_write_bw_R|ib_write_bw -d $1 -F -R -n 20 -s 4096 $3|ib_write_bw -d $1 -F -R -n 20 -s 4096"; do
    name=${v%%|*} rest=${v#*|}
    serve_pair "$4 $name" "${rest%%|*}" "${rest#*|}" "$5"
  done
}
