#!/usr/bin/env bash
# `make interop-long`: host programs against Linux rxe in a VM (interop/hostrxe.sh); NVMe over
# Fabrics' cases that make interop leaves out (on Linux 6.12); NFS over RDMA, iSER, SRP and RDS
# with rxe at one end or both (interop/guestulp.sh);
# then the guest cases of interop-guestdriver, -guesthostpeer, -guestrobust, -rdmacore and
# -fabric, which make interop runs on Linux 6.12, and NVMe over Fabrics, NFS over RDMA, iSER, SRP
# and RDS between two guests on softirdma0, again with every VM on Linux 6.1 and on the newest
# kernel Debian ships (VM_KERNEL). Those PASS/FAIL lines are renamed
# device_guest_k<major>.<minor>_<case> (fabric2_k..., fault_k...); the last line is the tally.
# About an hour on two cores.
set -uo pipefail
cd "$(dirname "$0")/.."
. vm/lib.sh
pass=0 failed=0
# run LABEL CMD...: one script's PASS/FAIL lines (each device_guest_ case renamed by SED, if
# set) and its share of the tally.
run() {
  local label=$1 out rc n
  shift
  out=$("$@" 2>&1)
  rc=$?
  [ -z "${SED:-}" ] || out=$(sed -E "$SED" <<< "$out")
  grep -E '^(PASS|FAIL|NOTE)|^rdma-core tests on|^target on| server on |logs in' <<< "$out"
  pass=$((pass + $(grep -c '^PASS' <<< "$out")))
  n=$(grep -c '^FAIL' <<< "$out")
  [ "$rc" = 0 ] || [ "$n" -gt 0 ] || { n=1; echo "FAIL $label (exit $rc)"; }
  failed=$((failed + n))
}
# Host programs under softirdma run against Linux rxe in a VM, over a link (host_*_vs_rxe).
SED= run hostrxe bash interop/hostrxe.sh
# NVMe over Fabrics on Linux 6.12 beyond make interop's case: the host on softirdma0, both ends
# on it with the target's SRQs, 1% loss (fio moves 16 MiB, 4 MiB where an end is rxe, whose
# recovery from loss takes its host seconds), a killed serve on either side.
SED= run guestnvmeof bash interop/guestnvmeof.sh rxe_to_softirdma softirdma_to_softirdma_srq \
  softirdma_to_softirdma_loss softirdma_to_rxe_loss rxe_to_softirdma_kill_host softirdma_to_rxe_kill_target
# NFS over RDMA, iSER, SRP and RDS with rxe at one end or both (make interop runs both ends on
# softirdma0): the client on softirdma0 against an rxe server and the reverse, beside both on rxe
# and both on softirdma0 (so that each server has both clients in one run).
cases=()
for p in nfsrdma iser srp rds; do
  cases+=(${p}_rxe_to_softirdma ${p}_softirdma_to_rxe ${p}_rxe_to_rxe ${p}_softirdma_to_softirdma)
done
SED= run guestulp bash interop/guestulp.sh "${cases[@]}"
for k in 6.1 newest; do
  log=$(mktemp)
  bash vm/provision.sh 6.12 "$k" > "$log" 2>&1 || { tail -20 "$log"; echo "FAIL provisioning $k"; failed=$((failed + 1)); continue; }
  rm -f "$log"
  series=$(vm_series "$(vm_kernel_release "$k")")
  # A case of the 6.12 run, device_guest_X, is device_guest_kS_X here; other lines as they are.
  SED="s/^(PASS|FAIL) (device_guest|fabric2|fault)_/\1 \2_k${series}_/"
  for t in guestdriver guesthostpeer guestrobust rdmacore guestfabric; do
    run "$t" env VM_KERNEL="$k" bash "interop/$t.sh"
  done
  run guestnvmeof env VM_KERNEL="$k" bash interop/guestnvmeof.sh softirdma_to_softirdma
  run guestulp env VM_KERNEL="$k" bash interop/guestulp.sh nfsrdma_softirdma_to_softirdma iser_softirdma_to_softirdma \
    srp_softirdma_to_softirdma rds_softirdma_to_softirdma
done
echo "interop-long: $pass passed, $failed failed"
[ "$failed" = 0 ]
