# shellcheck shell=bash
# Sourced (after interop/guestlib.sh) by the interop scripts of host programs (interop/host.sh,
# interop/hostrxe.sh): the distribution's RDMA tools, installed from the Debian mirror when
# missing (needs root); bin/ built; the unprivileged user $U the programs run as (as_user) and
# a copy of bin/ it can read in $BIN; at exit that user's softirdma stopped and $BIN removed;
# listening, to wait for a tool's exchange port.
missing=()
for t in ibv_rc_pingpong:ibverbs-utils ib_write_bw:perftest rping:rdmacm-utils qperf:qperf ucx_perftest:ucx-utils fi_pingpong:libfabric-bin mpirun:openmpi-bin mpicc:libopenmpi-dev strace:strace; do
  command -v "${t%%:*}" > /dev/null || missing+=("${t#*:}")
done
[ -d /usr/lib/python3/dist-packages/pyverbs ] || missing+=(python3-pyverbs)
[ -e /usr/include/infiniband/verbs.h ] || missing+=(libibverbs-dev)
[ -e /usr/include/rdma/rdma_cma.h ] || missing+=(librdmacm-dev)
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
