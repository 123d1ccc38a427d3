# shellcheck shell=sh
# The head of the guest's script in each case of interop/rxe.sh: Linux rxe's guest, one rdma-core
# or perftest tool against softirdma on the host. Runs under the guest's /bin/sh (dash).

# Before a tool starts: eth1 has its IPv6 link-local address and none of its addresses is still
# tentative (duplicate address detection), so GID 0 is usable.
settled() {
  seen=1
  while read -r _a _i _p _s f n; do
    [ "$n" = eth1 ] || continue
    seen=0; [ $((0x$f & 0x40)) = 0 ] || return 1
  done < /proc/net/if_inet6
  return $seen
}
i=0; until settled; do i=$((i+1)); [ $i -lt 600 ] || { echo "VM: eth1 still tentative"; break; }; sleep 0.05; done
echo "VM: eth1 addresses settled after $i polls"

# listening: a tool listens on rdma-core's exchange port, 18515 (4853 in /proc/net/tcp's hex).
listening() { cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$2 ~ /:4853$/ && $4 == "0A" { f = 1 } END { exit !f }'; }

# serve TAG COMMAND...: a server tool; "VM: listening" once its exchange port listens, then
# "VM: TAG rc=N", its exit status.
serve() {
  tag=$1; shift
  "$@" & t=$!
  i=0; until listening; do i=$((i+1)); kill -0 $t 2>/dev/null || break; [ $i -lt 2000 ] || break; sleep 0.05; done
  listening && echo "VM: listening"
  wait $t; echo "VM: $tag rc=$?"
}

# serve_cm TAG COMMAND...: a server tool reached through rdma_cm (no exchange port): "VM: TAG
# server starting" before it starts, then "VM: TAG rc=N".
serve_cm() {
  tag=$1; shift
  echo "VM: $tag server starting"
  "$@"; echo "VM: $tag rc=$?"
}

# client TAG COMMAND...: a client tool, once softirdma's address answers a ping (its MAC known),
# then "VM: TAG rc=N".
client() {
  tag=$1; shift
  ping -c 1 -W 2 192.168.77.1 >/dev/null
  "$@"; echo "VM: $tag rc=$?"
}
