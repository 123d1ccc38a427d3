package vfiouser

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/softirdma/softirdma/internal/sockguard"
	"golang.org/x/sys/unix"
)

var updateCorpus = flag.Bool("vfiouser.update-corpus", false, "rewrite testdata/fuzz/FuzzServer from the seed messages")

// seedStreams are valid messages of every command, alone and as QEMU's start-up sequence,
// each with the descriptor mode it needs (see FuzzServer), and first messages of clients that
// are not vfio-user.
func seedStreams() []struct {
	name   string
	stream []byte
	fds    uint8
} {
	dmaMap := func(iova, size, off uint64, flags uint32) []byte {
		b := make([]byte, dmaMapSize)
		le.PutUint32(b, dmaMapSize)
		le.PutUint32(b[4:], flags)
		le.PutUint64(b[8:], off)
		le.PutUint64(b[16:], iova)
		le.PutUint64(b[24:], size)
		return b
	}
	version := append(append(make([]byte, 4), QEMUVersionJSON...), 0)
	regionInfo := func(argsz, index uint32) []byte { return append(u32s(argsz, 0, index), make([]byte, 20)...) }
	multi := make([]byte, 8+2*multiWrEntry)
	le.PutUint64(multi, 2)
	le.PutUint32(multi[8+12:], 4)
	le.PutUint32(multi[8+multiWrEntry+8:], PCIConfigRegion)
	le.PutUint32(multi[8+multiWrEntry+12:], 8)
	cat := func(ms ...[]byte) (out []byte) {
		for _, m := range ms {
			out = append(out, m...)
		}
		return out
	}
	type seed = struct {
		name   string
		stream []byte
		fds    uint8
	}
	return []seed{
		{"version", rawMsg(1, CmdVersion, 0, version), 0},
		{"dma-map-memfd", rawMsg(1, CmdDMAMap, 0, dmaMap(0, 0x1000, 0, DMARead|DMAWrite)), 1 | 4},
		{"dma-map-rom", rawMsg(1, CmdDMAMap, 0, dmaMap(0xfffc0000, 0x40000, 0, DMARead)), 0},
		{"dma-map-unmap", cat(rawMsg(1, CmdDMAMap, 0, dmaMap(0x2000, 0x1000, 0, DMARead)), rawMsg(2, CmdDMAUnmap, 0, unmapBody(0x2000, 0x1000, 0))), 1 | 4},
		{"dma-unmap-all", rawMsg(1, CmdDMAUnmap, 0, unmapBody(0, 0, DMAUnmapAll)), 0},
		{"device-info", rawMsg(1, CmdDeviceGetInfo, 0, u32s(16, 0, 0, 0)), 0},
		{"region-info-sparse", cat(rawMsg(1, CmdRegionInfo, 0, regionInfo(32, 2)), rawMsg(2, CmdRegionInfo, 0, regionInfo(64, 2))), 0},
		{"irq-info", rawMsg(1, CmdIRQInfo, 0, u32s(16, 0, PCIMSIXIRQ, 0)), 0},
		{"set-irqs-eventfds", rawMsg(1, CmdSetIRQs, 0, u32s(20, IRQDataEventfd|IRQActionTrig, PCIMSIXIRQ, 1, 2)), 2},
		{"set-irqs-deassign", rawMsg(1, CmdSetIRQs, 0, u32s(20, IRQDataEventfd|IRQActionTrig, PCIMSIXIRQ, 0, 4)), 0},
		{"set-irqs-disable", rawMsg(1, CmdSetIRQs, 0, u32s(20, IRQDataNone|IRQActionTrig, PCIMSIXIRQ, 0, 0)), 0},
		{"set-irqs-mask-bool", cat(rawMsg(1, CmdSetIRQs, 0, u32s(20, IRQDataNone|IRQActionMask, PCIINTxIRQ, 0, 1)), rawMsg(2, CmdSetIRQs, 0, append(u32s(21, IRQDataBool|IRQActionUnmask, PCIINTxIRQ, 0, 1), 1))), 0},
		{"region-read", rawMsg(1, CmdRegionRead, 0, rw(0, PCIConfigRegion, 4096, nil)), 0},
		{"region-write", rawMsg(1, CmdRegionWrite, 0, rw(8, 0, 4, []byte{1, 2, 3, 4})), 0},
		{"region-write-posted", rawMsg(1, CmdRegionWrite, FlagNoReply, rw(0x1008, 2, 4, []byte{1, 2, 3, 4})), 0},
		{"region-write-multi", rawMsg(1, CmdRegionWriteMulti, FlagNoReply, multi), 0},
		{"reset", rawMsg(1, CmdDeviceReset, 0, nil), 0},
		// QEMU's start-up, but with the memfd's DMA_MAP first: the seed's descriptor rides on
		// the stream's first bytes.
		{"qemu-startup", cat(
			rawMsg(2, CmdDMAMap, 0, dmaMap(0, 0x2000, 0, DMARead|DMAWrite)),
			rawMsg(1, CmdVersion, 0, version),
			rawMsg(3, CmdDeviceGetInfo, 0, u32s(16, 0, 0, 0)),
			rawMsg(4, CmdRegionInfo, 0, regionInfo(32, 0)),
			rawMsg(5, CmdRegionInfo, 0, regionInfo(32, 7)),
			rawMsg(6, CmdRegionRead, 0, rw(0, PCIConfigRegion, 4096, nil)),
			rawMsg(7, CmdIRQInfo, 0, u32s(16, 0, PCIErrIRQ, 0)),
			rawMsg(8, CmdRegionWrite, FlagNoReply, rw(0, 0, 4, []byte{0xff, 0xff, 0xff, 0xff})),
			rawMsg(9, CmdIRQInfo, 0, u32s(16, 0, PCIMSIXIRQ, 0)),
			rawMsg(10, CmdDeviceReset, 0, nil)), 1 | 4},
		{"short-header-then-valid", cat(rawMsg(1, CmdDeviceGetInfo, 0, nil)[:HeaderSize-4], []byte{8, 0, 0, 0}, rawMsg(2, CmdDeviceGetInfo, 0, u32s(16, 0, 0, 0))), 0},
		// The connection's first bytes (fds bit 3): QEMU's VERSION, then what stray clients send.
		{"first-version", cat(rawMsg(1, CmdVersion, 0, version), rawMsg(2, CmdDeviceGetInfo, 0, u32s(16, 0, 0, 0))), firstBytes},
		{"first-not-version", rawMsg(1, CmdDeviceGetInfo, 0, u32s(16, 0, 0, 0)), firstBytes},
		{"first-version-with-fd", rawMsg(1, CmdVersion, 0, version), firstBytes | 1},
		{"first-text", []byte("status\n"), firstBytes},
	}
}

func corpusFile(stream []byte, fds uint8) string {
	return fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbyte(%q)\n", stream, fds)
}

// The checked-in corpus holds every seed; -vfiouser.update-corpus rewrites it.
func TestFuzzCorpusHasEverySeed(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzServer")
	for _, s := range seedStreams() {
		path := filepath.Join(dir, s.name)
		if err := corpusEntry(path, corpusFile(s.stream, s.fds)); err != nil {
			t.Errorf("%s is missing or stale (go test ./hw/vfiouser -run TestFuzzCorpus -vfiouser.update-corpus): %v", path, err)
		}
	}
	dir = filepath.Join("testdata", "fuzz", "FuzzParseRegionInfo")
	for _, s := range regionInfoSeeds() {
		path := filepath.Join(dir, s.name)
		if err := corpusEntry(path, fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nuint32(%d)\n", s.reply, s.asked)); err != nil {
			t.Errorf("%s is missing or stale: %v", path, err)
		}
	}
}

// corpusEntry writes want to path with -vfiouser.update-corpus; without, it fails unless path
// holds want.
func corpusEntry(path, want string) error {
	if *updateCorpus {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		return os.WriteFile(path, []byte(want), 0o644)
	}
	got, err := os.ReadFile(path)
	if err == nil && string(got) != want {
		err = errors.New("stale")
	}
	return err
}

// firstBytes in FuzzServer's fds: the stream is the connection's first bytes, with no VERSION
// exchange before it.
const firstBytes = 8

// FuzzServer feeds a byte stream, with descriptors on its first bytes (fds: bits 0-1 how
// many, bit 2 the first is a memfd of 8 KiB, the others eventfds), to a server over a
// socketpair, after QEMU's VERSION (unless bit 3, firstBytes, is set), then hangs up. Whatever
// the bytes, the server must not panic, must leave no descriptor open and no DMA region with
// the device once the client is gone.
func FuzzServer(f *testing.F) {
	for _, s := range seedStreams() {
		f.Add(s.stream, s.fds)
	}
	dev := newFakeDev(f)
	srv := newServer(f, dev)
	f.Fuzz(func(t *testing.T, stream []byte, fds uint8) {
		before := openFDs(t)
		a, b := socketpair(t)
		done := make(chan error, 1)
		go func() { done <- srv.ServeConn(context.Background(), a) }()
		drained := make(chan struct{})
		go func() { // read and drop every reply, closing the descriptors that come with them
			defer close(drained)
			buf, oob := make([]byte, 64<<10), make([]byte, unix.CmsgSpace(4*4))
			for {
				n, oobn, _, _, err := b.ReadMsgUnix(buf, oob)
				sockguard.CloseFDs(sockguard.Rights(oob[:oobn]))
				if n == 0 || err != nil {
					return
				}
			}
		}()
		var send []int
		for i := range int(fds & 3) {
			if i == 0 && fds&4 != 0 {
				send = append(send, memfd(t, 8192, nil))
			} else {
				send = append(send, eventfd(t))
			}
		}
		var oob []byte
		if len(send) > 0 {
			oob = unix.UnixRights(send...)
		}
		if fds&firstBytes == 0 {
			writeMsg(b, rawMsg(0xffff, CmdVersion, 0, append(append(make([]byte, 4), QEMUVersionJSON...), 0)), nil)
		}
		if len(stream) > 0 || len(oob) > 0 {
			if len(stream) == 0 {
				stream = []byte{0} // descriptors need a byte to ride on
			}
			writeMsg(b, stream, oob)
		}
		sockguard.CloseFDs(send)
		b.CloseWrite()
		if err := <-done; err != nil {
			t.Logf("server: %v", err)
		}
		<-drained
		b.Close()
		if after := openFDs(t); after != before {
			t.Fatalf("%d descriptors open after the client left, %d before", after, before)
		}
		dev.mu.Lock()
		left := len(dev.dma)
		dev.mu.Unlock()
		if left != 0 {
			t.Fatalf("%d DMA regions left with the device", left)
		}
	})
}

// The seeds are valid: every message in them (but in those meant to be refused) is answered
// without error, so the fuzzer starts from the paths that do work.
func TestFuzzSeedsAreValid(t *testing.T) {
	refused := map[string]bool{"short-header-then-valid": true, "first-not-version": true, "first-text": true, "first-version-with-fd": true}
	for _, s := range seedStreams() {
		if refused[s.name] {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			serve := serve
			if s.fds&firstBytes != 0 {
				serve = serveFresh
			}
			c, _ := serve(t, newServer(t, newFakeDev(t)))
			var fds []int
			for i := range int(s.fds & 3) {
				if i == 0 && s.fds&4 != 0 {
					fds = append(fds, memfd(t, 8192, nil))
				} else {
					fds = append(fds, eventfd(t))
				}
			}
			defer sockguard.CloseFDs(fds)
			replies := 0
			for m := s.stream; len(m) > 0; m = m[parseHeader(m).Size:] {
				if parseHeader(m).Flags&FlagNoReply == 0 {
					replies++
				}
			}
			if _, _, _, err := c.CallRaw(s.stream, fds, false); err != nil {
				t.Fatal(err)
			}
			for range replies {
				h, _, rfds, err := c.recv()
				sockguard.CloseFDs(rfds)
				if err != nil || h.Flags != FlagReply {
					t.Fatalf("reply %+v, %v", h, err)
				}
			}
		})
	}
}

type regionInfoSeed struct {
	name  string
	reply []byte
	asked uint32
}

func regionInfoSeeds() []regionInfoSeed {
	return []regionInfoSeed{
		{"sparse", append(u32s(64, 15, 2, 32, 8192, 0, 0, 0), append(u32s(1|1<<16, 0, 1, 0), u32s(4096, 0, 4096, 0)...)...), 64},
		{"needs-more", append(u32s(64, 15, 2, 0, 8192, 0), 0, 0, 0, 0, 0, 0, 0, 0), 32},
		{"areas-past-the-end", append(u32s(64, 15, 2, 32, 8192, 0, 0, 0), u32s(1, 0, 0xffffffff, 0)...), 64},
	}
}

// FuzzParseRegionInfo: the client reads a server's region info reply without trusting it.
func FuzzParseRegionInfo(f *testing.F) {
	for _, s := range regionInfoSeeds() {
		f.Add(s.reply, s.asked)
	}
	f.Fuzz(func(t *testing.T, r []byte, asked uint32) {
		ri, _, err := parseRegionInfo(r, asked)
		if err == nil && len(ri.Sparse)*sparseAreaSize > len(r) {
			t.Fatalf("%d sparse areas from a reply of %d bytes", len(ri.Sparse), len(r))
		}
	})
}
