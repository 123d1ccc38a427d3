package nldev_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/softirdma/softirdma/host/nldev"
)

// A program's netlink datagrams are outside input: whatever it sends, the answers are whole
// netlink messages from this socket's port id, of the types the kernel answers with, and the
// same each time.
func FuzzAnswer(f *testing.F) {
	for _, seed := range []string{
		"10000000 0114 0103 2a000000 34120000",
		"24000000 0f14 0100 07000000 34120000 0800 0100 03000000 0b00 4500 75766572 62730000",
		"1c000000 0f14 0100 08000000 34120000 0c00 4500 72646d61 5f636d00",
		"20000000 0514 0500 09000000 34120000 0800 0100 03000000 0800 0300 01000000",
		"10000000 0614 0100 01000000 00000000 10000000 0614 0100 02000000 00000000",
		"14000000 0514 0103 01000000 00000000 0800 0100 03000000",
	} {
		f.Add(unhex(f, seed), false)
	}
	f.Fuzz(func(t *testing.T, req []byte, capAck bool) {
		s := nldev.Socket{PortID: 77, CapAck: capAck}
		got := table.Answer(req, s)
		for i, d := range got {
			for len(d) > 0 {
				if len(d) < 16 {
					t.Fatalf("datagram %d ends in %d stray bytes", i, len(d))
				}
				n := binary.LittleEndian.Uint32(d)
				if n < 16 || uint64(n) > uint64(len(d)) {
					t.Fatalf("datagram %d: a message of %d bytes in %d", i, n, len(d))
				}
				switch typ := binary.LittleEndian.Uint16(d[4:]); typ {
				case 2, 3, 0x1401, 0x1405, 0x1406, 0x140f:
				default:
					t.Fatalf("datagram %d: type %#x", i, typ)
				}
				if pid := binary.LittleEndian.Uint32(d[12:]); pid != 77 {
					t.Fatalf("datagram %d: pid %d", i, pid)
				}
				d = d[min(int(n+3)&^3, len(d)):]
			}
		}
		again := table.Answer(req, s)
		if len(again) != len(got) {
			t.Fatalf("answered %d datagrams, then %d", len(got), len(again))
		}
		for i := range got {
			if !bytes.Equal(got[i], again[i]) {
				t.Fatalf("datagram %d differs between two answers", i)
			}
		}
	})
}
