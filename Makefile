# softirdma — build, test and measure. Every target works on a fresh Debian machine with Go and gcc.
GO       ?= go
PKGS     ?= ./...
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME ?= 10s
BIN      := bin/softirdma
PRELOAD  := bin/libsoftirdma-preload.so
CC       ?= gcc

SOAK_SEEDS ?= 5000

.PHONY: all build test bench bench-guest fuzz lint run demo soak clean vm vm-provision rdma-core-reference pgo

# The profile the product is compiled with (profile-guided optimisation): go build takes
# cmd/softirdma/default.pgo by itself; make bench compiles the benchmarks with it too, so that
# they measure the code the product runs (BENCH_PGO=off: as a plain go test compiles it).
BENCH_PGO ?= $(CURDIR)/cmd/softirdma/default.pgo

all: build

# The product links no C: a static binary, which the build checks it made. Beside it the
# preload library that host programs under `softirdma run` take (C, the host path's one).
build: $(PRELOAD)
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/softirdma
	@$(GO) version -m $(BIN) | grep -q 'CGO_ENABLED=0' || { echo "$(BIN) was built with cgo"; exit 1; }

$(PRELOAD): $(wildcard host/preload/*.c host/preload/*.h)
	@mkdir -p bin
	$(CC) -shared -fPIC -O2 -g -Wall -Wextra -Wno-unused-parameter -Werror -o $@ host/preload/*.c -ldl -lpthread

# The race detector needs cgo (gcc) for the tests; the product itself is built without cgo.
# The race run, then the engine and its users again with the lock-order check compiled in
# (emu/engine/locks.go): a lock taken out of order panics naming both locks. Two runs, because
# the check's own bookkeeping is shared by every goroutine, and the race detector would count
# it as synchronisation between them and miss races the first run finds.
# -pgo=off: the profile changes how the code is compiled, not what it does, and with it the
# race build would compile every package a second time for cmd/softirdma's tests; the interop
# tiers run the product as make build compiles it, profile and all.
test:
	CGO_ENABLED=1 $(GO) test -race -count=1 -pgo=off $(PKGS)
	CGO_ENABLED=1 $(GO) test -race -count=1 -pgo=off -tags lockcheck ./emu/... ./hw/...

bench:
	$(GO) test -run='^$$' -bench=. -benchmem -pgo=$(BENCH_PGO) $(PKGS)

# Measure cmd/softirdma/default.pgo again from the product's busy paths (interop/pgoprofile.sh:
# the engine's benchmarks, serve under guest-to-guest traffic and under NVMe over Fabrics).
pgo:
	bash interop/pgoprofile.sh

# ib_write_bw, ib_send_bw (RC and UD) and ib_write_bw -R from a VM on the softirdma device
# (hw/linux) beside the same from a VM on Linux rxe, both against `softirdma perf` on the host;
# then fio over NVMe over Fabrics with the host on softirdma0 and on rxe0, the same target on
# softirdma0 (IOPS, MB/s, and the latency of 4 KiB reads one at a time); then guest to guest,
# two VMs on one serve beside two rxe VMs (interop/fabricperf.sh: ib_write_bw 64 KiB and
# ib_send_lat 8 B), and ib_write_bw again with the netdevs at MTU 1500:
# measurements, with the ratios; not part of interop. First the in-process latency of two devices
# on serve's switch (interop/inprocesslat.sh: ib_send_lat and ib_write_lat, 8 B and 4 KiB).
# The host path's speed (interop/hostperf.sh): ib_write_bw between two programs under
# softirdma run, with process_vm_readv and with the copy service, beside two Go perf peers in
# the same run; ib_send_lat busy-polling and with events.
bench-host:
	bash interop/hostperf.sh

bench-guest:
	bash interop/inprocesslat.sh
	bash interop/guestperf.sh
	GUESTPERF_SEND_WINDOW=1024 bash interop/guestperf.sh
	NVMEOF_QD1=1 NVMEOF_CPU=1 bash interop/guestnvmeof.sh softirdma_to_softirdma softirdma_to_rxe
	bash interop/fabricperf.sh
	FABRIC_MTU=1500 FABRIC_RXE=0 FABRIC_LAT=0 bash interop/fabricperf.sh

# The seeded soak test over thousands of seeds (make test runs 200). A failure prints the seed;
# go test ./emu/engine -run TestSoak -soak.seed=N -soak.trace reproduces it with the engine's events.
soak:
	$(GO) test -count=1 -run '^TestSoak$$' ./emu/engine -soak.seeds=$(SOAK_SEEDS)

# A bounded run of every fuzz target, about FUZZTIME each (tools/fuzz.sh): each gets a count of
# executions, its execs/s measured on the project's machine (tools/fuzz-rates.txt) times
# FUZZTIME, since a duration races Go 1.26's fuzz coordinator into failures without a failing
# input. Every target runs even when one fails; the failed ones are named at the end.
# FUZZTIME=5000x gives every target that count.
fuzz:
	@FUZZTIME='$(FUZZTIME)' GO='$(GO)' bash tools/fuzz.sh $(PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

# The README's "run" command: softirdma on its embedded default, no QEMU, no adapter, no root.
run demo:
	$(GO) run ./cmd/softirdma demo -pcap demo.pcap

clean:
	rm -rf bin

# A VM whose RDMA NIC is softirdma (vm/vm.sh): a shell on the terminal, or CMD='...' run in it
# (the make exits with its status). VM_KERNEL=6.1|6.12|newest picks the guest kernel. The first
# use provisions QEMU, the guest root and kernel into ~/.cache/softirdma-vm (root or sudo, the
# Debian mirror, about two minutes); the driver is built with DKMS when it is missing or older
# than hw/linux. make
# exports CMD to the recipe; as everywhere on make's command line, a $ in it is written $$.
vm:
	@bash vm/vm.sh

# Provisions the VMs without booting one: KERNELS='6.1 6.12 newest' for all three guest kernels.
KERNELS ?= 6.12
vm-provision:
	bash vm/provision.sh $(KERNELS)

# rdma-core's own tests on Linux rxe in the project's VM on guest kernel KERNEL (6.1, 6.12 or
# newest; 6.12 unless given), written to interop/testdata/rdma-core-tests-rxe-<series>.txt: the
# reference interop-rdmacore compares softirdma0 with on that kernel.
rdma-core-reference:
	KERNEL=$(or $(KERNEL),6.12) bash interop/rdmacore-reference.sh

# NFS over RDMA, iSER, SRP and RDS with both ends on Linux rxe, measured again into
# interop/testdata/ulp-rxe.txt (interop/ulp-reference.sh).
ulp-reference:
	bash interop/ulp-reference.sh

# Checks against peers we did not write (tshark here). .ci/run installs what they need.
.PHONY: bench-host interop interop-host interop-host-kernel interop-host-rxe interop-host-rdmacore56 interop-tshark interop-rxe interop-netns interop-qtest interop-guestpci interop-guestdriver interop-guesthostpeer interop-guestrobust interop-rdmacore interop-nvmeof interop-ulp interop-fabric interop-readme-vm interop-long interop-kernels ulp-reference
# Every tier runs, whatever the ones before it did (interop/tiers.sh): the last line tallies the
# tiers and names those that failed, and the exit status is 1 if any did.
INTEROP_TIERS ?= interop-host interop-host-kernel interop-tshark interop-qtest interop-readme-vm interop-guestpci interop-guestdriver interop-guesthostpeer interop-guestrobust interop-rdmacore interop-host-rdmacore56 interop-nvmeof interop-ulp interop-fabric interop-kernels interop-rxe interop-netns
interop:
	@MAKE="$(MAKE)" bash interop/tiers.sh $(INTEROP_TIERS)

# Host programs on softirdma: rdma-core's and perftest's tools between two programs under
# `softirdma run`, as an unprivileged user the tier creates (interop/host.sh): PASS lines
# host_<tool>_<server|client>. Installs the tools from the Debian mirror when missing (root).
interop-host:
	bash interop/host.sh

# softirdma run beside the kernel's own RDMA devices (Linux rxe in a VM, the host path run inside
# it from /share): without -kernel softirdma's list alone, with it both, each device's programs
# working (interop/hostkernel.sh): PASS lines host_kernel_<case>.
interop-host-kernel:
	bash interop/hostkernel.sh

# rdma-core 56's own suite (Debian 13's) under `softirdma run` as the unprivileged user, in a
# chroot of the VM tooling's trixie root (interop/hostrdmacore56.sh): the tally beside the rxe
# reference, PASS host_rdma_core56_suite and host_rdma_core56_vs_rxe.
interop-host-rdmacore56:
	bash interop/hostrdmacore56.sh

# Host programs under `softirdma run` against Linux rxe in a VM over a link (hostd -link), each
# tool in both roles, and faults on the link (interop/hostrxe.sh): PASS lines
# host_<tool>_<server|client>_vs_rxe. Part of interop-long.
interop-host-rxe:
	bash interop/hostrxe.sh

# The driver built with DKMS for Linux 6.1 and for the newest kernel Debian ships, and a subset
# of the guest cases on each (interop/kernel.sh), against Linux rxe on 6.12: PASS lines
# device_guest_k<major>.<minor>_<case>.
interop-kernels:
	@f=0; for k in 6.1 newest; do bash interop/kernel.sh $$k || f=1; done; exit $$f

# What does not fit in CI's time: host programs against Linux rxe in a VM (interop-host-rxe);
# NVMe over Fabrics with the host on softirdma0, both ends on it
# (the target on SRQs), under 1% loss and with a serve killed under fio; then every guest case of
# interop-guestdriver, -guesthostpeer, -guestrobust, -rdmacore and NVMe over Fabrics between two
# guests on softirdma0 on Linux 6.1 and on the newest kernel (every VM of a case on that kernel),
# each PASS line named device_guest_k<major>.<minor>_<case>; then a tally.
interop-long:
	@bash interop/long.sh

# The README's VM section, run as written (interop/readme-vm.sh).
interop-readme-vm:
	bash interop/readme-vm.sh

# tshark dissects a pcap of every opcode and must agree with wire on opcode, QP and PSN, and
# the CM messages of Linux and of emu/rdmacm, agreeing on every CM field it dissects.
# Installs tshark from the Debian mirror when it is missing (needs root).
interop-tshark:
	@command -v tshark >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tshark; }
	$(GO) test -count=1 -tags interop -run TestTshark ./wire/... ./emu/rdmacm

# softirdma against Linux Soft-RoCE in a TCG guest: ibv_rc_pingpong both ways, IPv4 and IPv6
# link-local GIDs, 64 B and 4 KiB, and with 2% of received frames lost; every pcap decoded.
# Provisions QEMU and the guest (vm/provision.sh) on first use (needs root and the Debian mirror).
interop-rxe:
	bash interop/rxe.sh

# softirdma on AF_PACKET in two network namespaces joined by veth: pingpong (IPv4 and IPv6
# link-local) and perf write, peer MACs by the kernels' ARP, no ICMP port unreachable. Needs root.
interop-netns:
	bash interop/netns.sh

# hw/qtest against QEMU 11.1 under qtest (no guest OS): memory, ports, clock, PCI scan, BARs and an
# MSI-X interrupt landing in guest RAM. Provisions QEMU (vm/provision.sh) first (needs root and
# the Debian mirror); SOFTIRDMA_INTEROP makes a missing QEMU a failure instead of a skip.
interop-qtest:
	bash vm/provision.sh
	SOFTIRDMA_INTEROP=1 $(GO) test -count=1 ./hw/qtest/...

# A Linux VM (vm/) boots with softirdma's PCI function attached by `softirdma serve` over
# vfio-user and lists it with the documented IDs.
interop-guestpci:
	bash interop/guestpci.sh

# The Linux driver (hw/linux), built with DKMS for the VM's kernel, in a VM whose function
# `softirdma serve` serves on a dgram link to a second guest running Linux rxe: probe, the
# Ethernet function's netdev pinging the rxe guest, unmodified ibv_rc_pingpong and perftest
# against rxe, module reloads, no kernel warning.
interop-guestdriver:
	bash interop/guestdriver.sh

# The same driver against softirdma's own peer on the host (softirdma pingpong and perf), both
# roles, IPv4 and IPv6 link-local GIDs.
interop-guesthostpeer:
	bash interop/guesthostpeer.sh

# The same driver under abuse: reloads with killed QP holders, rmmod under a holder, a reboot
# and a killed `softirdma serve` with traffic in flight, and a process resizing a CQ and an SRQ
# with the driver's part of the answer unwritable (interop/guest/resize_fault.c, built in the
# VM root).
interop-guestrobust:
	bash interop/guestrobust.sh

# rdma-core's own test suite (pyverbs) on the driver's device, with rxe0's result beside it.
interop-rdmacore:
	bash interop/rdmacore.sh

# NVMe over Fabrics: nvmet-rdma in a guest on softirdma0 serving a RAM disk to nvme-rdma in a
# guest on Linux rxe: discover, connect, fio writing and verifying 64 MiB, disconnect, no kernel
# warning (interop/guestnvmeof.sh; its other cases run in interop-long).
interop-nvmeof:
	bash interop/guestnvmeof.sh

# The kernel's other RDMA storage users between two guests on softirdma0, two functions of one
# serve: NFS over RDMA, iSER, SRP and RDS set up, moving 64 MiB with every byte verified, torn
# down; then each again under a dropped, a corrupted frame, a short and a long link flap, each
# proved from the fabric's capture (interop/guestulp.sh; the cases with rxe at one end or both
# run in interop-long). PASS lines device_guest_<proto>_softirdma_to_softirdma[_fault]_<check>.
ULP_CASES = nfsrdma iser srp rds
interop-ulp:
	bash interop/guestulp.sh $(foreach p,$(ULP_CASES),$(p)_softirdma_to_softirdma $(p)_softirdma_to_softirdma_fault)

# Two VMs on one serve (-function a, -function b, the fabric inside serve) and an rxe VM on its
# uplink: ibv_rc_pingpong and perftest's four bandwidth tools both ways, rping and NVMe over
# Fabrics, the uplink, a QEMU killed under traffic, the faults, the fabric's pcap decoded: PASS
# lines fabric2_<case> and fault_<kind>_fired (interop/guestfabric.sh).
interop-fabric:
	bash interop/guestfabric.sh
