#!/usr/bin/env bash
# In-process latency for `make bench-guest`: ib_send_lat and ib_write_lat between two devices of
# one process on serve's switch (emu/engine's BenchmarkSendLat and BenchmarkWriteLat), one line
# per figure: "in-process ib_send_lat 8B: median N us, p99 N us".
# Usage: interop/inprocesslat.sh [ITERATIONS] (default 20000).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
. vm/lib.sh
vm_check_number iterations "$N" 100 10000000
N=$((10#$N))
out=$(go test -run '^$' -bench 'SendLat|WriteLat' -benchtime "${N}x" ./emu/engine)
echo "$out" | awk '
  /^Benchmark(Send|Write)Lat\// {
    split($1, p, "[/-]"); test = p[1] == "BenchmarkSendLat" ? "ib_send_lat" : "ib_write_lat"
    for (i = 3; i < NF; i++) { if ($(i+1) == "median-us") med = $i; if ($(i+1) == "p99-us") p99 = $i }
    printf "in-process %s %s: median %.2f us, p99 %.2f us\n", test, p[2], med, p99; n++
  }
  END { if (n != 4) { print "in-process latency: expected 4 figures, got " n > "/dev/stderr"; exit 1 } }'
