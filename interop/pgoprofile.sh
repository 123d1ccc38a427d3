#!/usr/bin/env bash
# The profile the product is compiled with (Go's profile-guided optimisation): the Go toolchain
# builds cmd/softirdma with cmd/softirdma/default.pgo, which says where the product spends its
# time, and inlines and lays out the hot paths by it. This script measures it again from the
# product's own busy paths and writes it there:
#   - the engine in-process (emu/engine's BenchmarkRCWrite at 64 KiB and BenchmarkRCWriteStream);
#   - serve with two guests moving 64 KiB WRITEs through it at MTU 1500 (interop/fabricperf.sh);
#   - two serves on a dgram link under NVMe over Fabrics, one per guest (interop/guestnvmeof.sh).
# Each part's CPU profile is kept in the logs' folder; the merge is the new default.pgo. Run it
# after a change that moves the hot paths; a profile left behind by the code only loses some of
# its gain (the compiler matches it to the code by function and line offset).
# Usage: interop/pgoprofile.sh (needs the VM images: make vm). PGO_VM=0 profiles the engine alone.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ ${PGO_VM:-1} =~ ^[01]$ ]] || { echo "PGO_VM must be 0 or 1, not '$PGO_VM'" >&2; exit 2; }
OUT=$(mktemp -d /tmp/softirdma-pgo.XXXXXX)
echo "profiles in $OUT"
go test -c -o "$OUT/engine.test" ./emu/engine
"$OUT/engine.test" -test.run '^$' -test.bench '^BenchmarkRCWrite$/^64KiB$' -test.benchtime 300000x \
  -test.cpuprofile "$OUT/rcwrite.prof" > "$OUT/rcwrite.out"
"$OUT/engine.test" -test.run '^$' -test.bench '^BenchmarkRCWriteStream$' -test.benchtime 300000x \
  -test.cpuprofile "$OUT/stream.prof" > "$OUT/stream.out"
profiles=("$OUT/rcwrite.prof" "$OUT/stream.prof")
if [ "${PGO_VM:-1}" = 1 ]; then
  make build
  FABRIC_PROFILE="$OUT/fabric.prof" FABRIC_MTU=1500 FABRIC_RXE=0 FABRIC_LAT=0 INTEROP_OUT="$OUT/fabric" \
    bash interop/fabricperf.sh 60000
  NVMEOF_PROFILE=1 INTEROP_OUT="$OUT/nvmeof" bash interop/guestnvmeof.sh softirdma_to_softirdma
  profiles+=("$OUT/fabric.prof" "$OUT/nvmeof/softirdma_to_softirdma.host.prof"
    "$OUT/nvmeof/softirdma_to_softirdma.target.prof")
fi
for p in "${profiles[@]}"; do [ -s "$p" ] || { echo "no profile at $p" >&2; exit 1; }; done
go tool pprof -proto "${profiles[@]}" > "$OUT/merged.pgo"
mv "$OUT/merged.pgo" cmd/softirdma/default.pgo
echo "wrote cmd/softirdma/default.pgo from ${#profiles[@]} profiles"
