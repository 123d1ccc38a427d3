//go:build interop

package wire

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
)

// tsharkUnknown are the opcodes tshark 4.0 (Debian bookworm) does not dissect: FLUSH and
// ATOMIC_WRITE (IBTA 1.5, 2021) and the RoCEv2 CNP. Their frames are still written to the pcap,
// but tshark's view of them is not compared.
var tsharkUnknown = map[Opcode]bool{RCFlush: true, RCAtomicWrite: true, CNP: true}

// TestTshark writes a pcap with a frame of every opcode (IPv4, IPv6, VLAN; several payload
// lengths) plus the captured rxe frames, has tshark dissect it, and requires tshark's BTH opcode,
// destination QP and PSN to equal ours, with no malformed packet. It runs under `make interop`,
// which installs tshark; a missing tshark fails the test rather than skipping it.
//
// --disable-heuristic rpcrdma_infiniband: tshark 4.0 otherwise takes short SEND_*_WITH_INV
// payloads for RPC-over-RDMA and reports them malformed.
func TestTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Fatalf("tshark not found (make interop needs it; .ci/run installs it): %v", err)
	}
	var frames [][]byte
	buf := make([]byte, 4096)
	for _, c := range allCases() {
		// tshark guesses the protocol inside a payload (Ethernet, IDP ...) from its first bytes
		// and calls the packet malformed when the guess does not parse: fill payloads with what
		// ibv_rc_pingpong sends, which no heuristic claims.
		fr, err := NewBuilder(c.path).Build(buf, &c.hdr, bytes.Repeat([]byte{0x7B}, len(c.payload)))
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, append([]byte(nil), fr...))
	}
	for _, name := range captureFiles {
		frames = append(frames, roceFrames(t, name)...)
	}

	var pc bytes.Buffer
	w, err := NewPcapWriter(&pc)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for i, fr := range frames {
		ci := gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * time.Microsecond), CaptureLength: len(fr), Length: len(fr)}
		if err := w.WritePacket(ci, fr); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(t.TempDir(), "every-opcode.pcap")
	if err := os.WriteFile(file, pc.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(tshark, "-r", file, "--disable-heuristic", "rpcrdma_infiniband", "-T", "fields",
		"-E", "separator=|", "-e", "frame.number", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp",
		"-e", "infiniband.bth.psn", "-e", "_ws.malformed")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(frames) {
		t.Fatalf("tshark printed %d lines for %d frames", len(lines), len(frames))
	}
	var p Parser
	var f Frame
	compared, exempt, quirks := 0, 0, 0
	for i, line := range lines {
		fields := strings.Split(line, "|")
		if len(fields) != 5 {
			t.Fatalf("frame %d: tshark line %q", i+1, line)
		}
		if err := p.Parse(&f, frames[i]); err != nil {
			t.Fatalf("frame %d: %v", i+1, err)
		}
		if tsharkUnknown[f.Opcode] {
			exempt++
			t.Logf("frame %d %v (exempt, unknown to tshark 4.0): tshark says %q", i+1, f.Opcode, line)
			continue
		}
		// tshark 4.0's Mellanox EoIB heuristic claims every UD payload, and an empty one then
		// fails as a malformed EoIB header: for those, compare the BTH only.
		eoibQuirk := f.Info.Transport == UD && len(f.Payload) == 0 && strings.Contains(fields[4], "Mellanox EoIB")
		if eoibQuirk {
			quirks++
		}
		if fields[4] != "" && !eoibQuirk {
			t.Errorf("frame %d %v: tshark reports it malformed: %q", i+1, f.Opcode, line)
		}
		op, err1 := strconv.ParseUint(fields[1], 0, 8)
		qp, err2 := strconv.ParseUint(fields[2], 0, 32)
		psn, err3 := strconv.ParseUint(fields[3], 0, 32)
		if err1 != nil || err2 != nil || err3 != nil {
			t.Errorf("frame %d %v: tshark fields %q", i+1, f.Opcode, line)
			continue
		}
		if Opcode(op) != f.Opcode || uint32(qp) != f.BTH.DestQP() || uint32(psn) != f.BTH.PSN() {
			t.Errorf("frame %d: tshark opcode %#x qp %#x psn %d, ours %#x qp %#x psn %d", i+1,
				op, qp, psn, uint8(f.Opcode), f.BTH.DestQP(), f.BTH.PSN())
		}
		compared++
	}
	t.Logf("%s: %d frames compared (%d empty UD payloads taken for EoIB by tshark), %d exempt (FLUSH, ATOMIC_WRITE, CNP)",
		tshark, compared, quirks, exempt)
}
