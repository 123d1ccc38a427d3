#!/usr/bin/env bash
# `make bench-host`: the host path's speed, figures not verdicts. In one run, alternating, three
# rounds of:
#   - ib_write_bw 64 KiB between two programs under softirdma run (process_vm_readv);
#   - the same with the programs serving their memory (hostd -memory service, the copy service);
#   - the baseline: two `softirdma perf write` Go peers over a UDP link on loopback, MTU 4096;
# then ib_send_lat 8 B busy-polling and with -e (events), medians and 99th percentiles. Each line
# names its figure; the ratios are against the Go peers' median of the same run. Runs as the
# user interop-host makes (the tools installed as interop-host installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
. interop/guestlib.sh
. interop/hostlib.sh
# hostd_with ARGS...: this user's softirdma started anew with ARGS.
hostd_with() {
  as_user "$BIN/softirdma" stop > /dev/null 2>&1 || true
  as_user "$BIN/softirdma" hostd -idle 0 "$@" > "$OUT/hostd.log" 2>&1 &
  pids+=($!)
  waitfor "$OUT/hostd.log" 'serving host programs' 30 $! > /dev/null
}
# tool_bw ARGS...: one run of perftest's ARGS between two programs; its BW average (MB/s).
tool_bw() {
  as_user "$BIN/softirdma" run -- timeout 120 "$@" > "$OUT/bw.server" 2>&1 &
  local s=$!
  wait_until 60 $s listening 18515
  as_user "$BIN/softirdma" run -- timeout 120 "$@" 127.0.0.1 > "$OUT/bw.client" 2>&1 || true
  wait $s || true
  awk '/BW average/ { getline; print $4 }' "$OUT/bw.client"
}
# go_bw: one run of two softirdma perf write peers, 64 KiB, over a dgram link; MB/s.
go_bw() {
  local a b
  read -r a b < <(free_udp_ports 2)
  bin/softirdma perf write -server -s 65536 -n 5000 -m 4096 -link "dgram:127.0.0.1:$a,127.0.0.1:$b" -ip 192.168.77.1 -timeout 120s > "$OUT/go.server" 2>&1 &
  local s=$!
  bin/softirdma perf write 127.0.0.1 -s 65536 -n 5000 -m 4096 -wait 30s -link "dgram:127.0.0.1:$b,127.0.0.1:$a" -ip 192.168.77.2 -timeout 120s > "$OUT/go.client" 2>&1 || true
  wait $s || true
  awk '/BW average/ { getline; print $4 }' "$OUT/go.client"
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
pv=() svc=() gop=()
for r in 1 2 3; do
  hostd_with
  pv+=("$(tool_bw ib_write_bw -x 1 -s 65536 -n 5000)")
  hostd_with -memory service
  svc+=("$(tool_bw ib_write_bw -x 1 -s 65536 -n 2000)")
  gop+=("$(go_bw)")
done
base=$(echo "${gop[@]}" | median)
ratio() { awk -v a="$1" -v b="$base" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "n/a" }'; }
echo "host ib_write_bw 64 KiB, two programs (process_vm): ${pv[*]} MB/s, median $(echo "${pv[@]}" | median) ($(ratio "$(echo "${pv[@]}" | median)") the Go peers)"
echo "host ib_write_bw 64 KiB, two programs (copy service): ${svc[*]} MB/s, median $(echo "${svc[@]}" | median) ($(ratio "$(echo "${svc[@]}" | median)") the Go peers)"
echo "Go perf peers write 64 KiB over a UDP link (baseline): ${gop[*]} MB/s, median $base"
hostd_with
for mode in busy events; do
  e=""
  [ $mode = events ] && e=-e
  as_user "$BIN/softirdma" run -- timeout 120 ib_send_lat -x 1 -s 8 -n 5000 $e > "$OUT/lat.server" 2>&1 &
  s=$!
  wait_until 60 $s listening 18515
  as_user "$BIN/softirdma" run -- timeout 120 ib_send_lat -x 1 -s 8 -n 5000 $e 127.0.0.1 > "$OUT/lat.client" 2>&1 || true
  wait $s || true
  # perftest's columns: bytes, iterations, t_min, t_max, t_typical (median), t_avg, t_stdev, 99%, 99.9%
  awk -v m=$mode '$1 == 8 && NF >= 9 { printf "host ib_send_lat 8 B (%s): median %s us, 99th percentile %s us\n", m, $5, $8 }' "$OUT/lat.client"
done
as_user "$BIN/softirdma" stop > /dev/null 2>&1 || true
