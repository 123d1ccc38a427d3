#!/usr/bin/env bash
# Host programs on softirdma, unchanged: rdma-core's and perftest's tools, as Debian ships them,
# between two programs under `softirdma run`, as an unprivileged user this script creates, on a
# machine with no RDMA module and no /dev/infiniband. Each tool runs as server and as client;
# PASS lines host_<tool>_<server|client>. Installs the tools from the Debian mirror when missing
# (needs root).
set -euo pipefail
cd "$(dirname "$0")/.."
. interop/guestlib.sh
missing=()
for t in ibv_rc_pingpong:ibverbs-utils ib_write_bw:perftest rping:rdmacm-utils; do
  command -v "${t%%:*}" > /dev/null || missing+=("${t#*:}")
done
[ -e /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so ] || [ -e /usr/lib/aarch64-linux-gnu/libibverbs/librxe-rdmav34.so ] || missing+=(ibverbs-providers)
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" > "$OUT/apt.log" 2>&1 || { cat "$OUT/apt.log"; abort "host: installing ${missing[*]}"; }
fi
make --no-print-directory build > "$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; abort "host: make build"; }

# The user, and a copy of bin/ it can read (a clone under root's home is not).
U=softirdma-host
id "$U" > /dev/null 2>&1 || useradd -m -s /bin/bash "$U"
BIN=$(mktemp -d /tmp/softirdma-host-bin.XXXXXX)
cp bin/softirdma bin/libsoftirdma-preload.so "$BIN/"
chmod 755 "$BIN" "$BIN"/*
as_user() { runuser -u "$U" -- env -u XDG_RUNTIME_DIR HOME="$(getent passwd "$U" | cut -d: -f6)" "$@"; }
host_cleanup() {
  cleanup
  as_user "$BIN/softirdma" stop > /dev/null 2>&1 || true
  rm -rf "$BIN"
}
trap host_cleanup EXIT
[ ! -e /dev/infiniband ] || echo "  note: this machine has /dev/infiniband; the programs use softirdma's devices all the same"

# listening PORT: something listens on TCP PORT (the tools' exchange).
listening() {
  awk -v p="$(printf ':%04X$' "$1")" '$2 ~ p && $4 == "0A" { f = 1 } END { exit !f }' /proc/net/tcp /proc/net/tcp6
}
# pair NAME PORT ARGS...: ARGS as server, then as client of 127.0.0.1, each under softirdma run;
# the verdicts on each end's exit status and on the client's output naming the transfer.
pair() {
  local name=$1 port=$2 spid src=0 crc=0
  shift 2
  as_user "$BIN/softirdma" run -- timeout 120 "$@" > "$OUT/$name.server" 2>&1 &
  spid=$!
  pids+=("$spid")
  wait_until 60 "$spid" listening "$port" || true
  as_user "$BIN/softirdma" run -- timeout 120 "$@" 127.0.0.1 > "$OUT/$name.client" 2>&1 || crc=$?
  wait "$spid" || src=$?
  why="exit $src" verdict "host_${name}_server" ended "$src" "$OUT/$name.server"
  why="exit $crc" verdict "host_${name}_client" ended "$crc" "$OUT/$name.client"
}
# ended STATUS LOG: the end exited 0 (else its log's last lines).
ended() {
  [ "$1" = 0 ] && return
  tail -5 "$2" | sed 's/^/  /'
  return 1
}
pair rc_pingpong 18515 ibv_rc_pingpong -g 1 -n 200 -c
pair uc_pingpong 18515 ibv_uc_pingpong -g 1 -n 200 -c
pair ud_pingpong 18515 ibv_ud_pingpong -g 1 -n 200 -c
pair srq_pingpong 18515 ibv_srq_pingpong -g 1 -n 200 -c
pair write_bw 18515 ib_write_bw -x 1 -n 500
pair read_bw 18515 ib_read_bw -x 1 -n 500
pair send_bw 18515 ib_send_bw -x 1 -n 500
pair atomic_bw 18515 ib_atomic_bw -x 1 -n 500
pair send_bw_UD 18515 ib_send_bw -x 1 -c UD -n 500
grep -h 'BW average' -A1 "$OUT/write_bw.client" | tail -1 | sed 's/^/  ib_write_bw 64 KiB: /'
finish "interop host"
