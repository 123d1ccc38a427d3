# softirdma — build, test and measure. Every target works on a fresh Debian machine with Go and gcc.
GO       ?= go
PKGS     ?= ./...
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME ?= 10s
BIN      := bin/softirdma

SOAK_SEEDS ?= 5000

.PHONY: all build test bench bench-guest fuzz lint run demo soak clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/softirdma

# The race detector needs cgo (gcc) for the tests; the product itself is built without cgo.
test:
	CGO_ENABLED=1 $(GO) test -race -count=1 $(PKGS)

bench:
	$(GO) test -run='^$$' -bench=. -benchmem $(PKGS)

# ib_write_bw and ib_send_bw from a rig guest on the softirdma device (hw/linux) beside the same
# from a rig guest on Linux rxe, both against `softirdma perf` on the host: a measurement, with
# the ratio; not part of interop.
bench-guest:
	bash interop/guestperf.sh

# The seeded soak test over thousands of seeds (make test runs 200). A failure prints the seed;
# go test ./emu -run TestSoak -soak.seed=N -soak.trace reproduces it with the engine's events.
soak:
	$(GO) test -count=1 -run '^TestSoak$$' ./emu -soak.seeds=$(SOAK_SEEDS)

# A short, bounded run of every fuzz target (go test -fuzz takes one target at a time).
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
	    $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg; \
	  done; \
	done

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

# The README's "run" command: softirdma on its embedded default, no QEMU, no adapter, no root.
run demo:
	$(GO) run ./cmd/softirdma demo -pcap demo.pcap

clean:
	rm -rf bin

# Checks against peers we did not write (tshark here). .ci/run installs what they need.
.PHONY: interop interop-tshark interop-rxe interop-netns interop-qtest interop-guestpci interop-guestdriver interop-guesthostpeer interop-guestrobust interop-rdmacore
interop: interop-tshark interop-qtest interop-guestpci interop-guestdriver interop-guesthostpeer interop-guestrobust interop-rdmacore interop-rxe interop-netns

# tshark dissects a pcap of every opcode and must agree with wire on opcode, QP and PSN.
# Installs tshark from the Debian mirror when it is missing (needs root).
interop-tshark:
	@command -v tshark >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tshark; }
	$(GO) test -count=1 -tags interop -run TestTshark ./wire/...

# softirdma against Linux Soft-RoCE in a TCG guest: ibv_rc_pingpong both ways, IPv4 and IPv6
# link-local GIDs, 64 B and 4 KiB, and with 2% of received frames lost; every pcap decoded.
# Provisions QEMU and the guest into $$RIG_DIR on first use (needs root and the Debian mirror).
interop-rxe:
	bash interop/rxe.sh

# softirdma on AF_PACKET in two network namespaces joined by veth: pingpong (IPv4 and IPv6
# link-local) and perf write, peer MACs by the kernels' ARP, no ICMP port unreachable. Needs root.
interop-netns:
	bash interop/netns.sh

# hw/qtest against QEMU 11.1 under qtest (no guest OS): memory, ports, clock, PCI scan, BARs and an
# MSI-X interrupt landing in guest RAM. Provisions QEMU into $$RIG_DIR first (needs root and the
# Debian mirror); SOFTIRDMA_INTEROP makes a missing QEMU a failure instead of a skip.
interop-qtest:
	bash $${RIG_SRC:-../shared/rig}/ensure.sh
	SOFTIRDMA_INTEROP=1 $(GO) test -count=1 ./hw/qtest/...

# A Linux guest of the rig boots with softirdma's PCI function attached by `softirdma serve` over
# vfio-user and lists it with the documented IDs.
interop-guestpci:
	bash interop/guestpci.sh

# The Linux driver (hw/linux), built against the rig guest's kernel, in a guest whose function
# `softirdma serve` serves on a dgram link to a second guest running Linux rxe: probe, the
# Ethernet function's netdev pinging the rxe guest, unmodified ibv_rc_pingpong and perftest
# against rxe, module reloads, no kernel warning. Provisions the rig's full tree (kernel headers)
# first.
interop-guestdriver:
	bash interop/guestdriver.sh

# The same driver against softirdma's own peer on the host (softirdma pingpong and perf), both
# roles, IPv4 and IPv6 link-local GIDs.
interop-guesthostpeer:
	bash interop/guesthostpeer.sh

# The same driver under abuse: reloads with killed QP holders, rmmod under a holder, a reboot
# and a killed `softirdma serve` with traffic in flight, and a process resizing a CQ and an SRQ
# with the driver's part of the answer unwritable (interop/guest/resize_fault.c, built with gcc
# against libibverbs-dev, installed when missing).
interop-guestrobust:
	bash interop/guestrobust.sh

# rdma-core's own test suite (pyverbs) on the driver's device, with rxe0's result beside it.
interop-rdmacore:
	bash interop/rdmacore.sh
