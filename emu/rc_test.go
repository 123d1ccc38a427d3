package emu

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestRCBasicOperations(t *testing.T) {
	p := newPair(t, 1, LinkConfig{}, ConnectOptions{})
	fill(p.bufA[:8192], 1)

	// SEND of 64 B and of 5000 B (five packets at MTU 1024).
	for i, n := range []uint32{64, 5000} {
		if err := p.qb.PostRecv(RecvWR{ID: uint64(100 + i), SGL: sge(p.mrB, uint64(i)*8192, 8192)}); err != nil {
			t.Fatal(err)
		}
		if err := p.qa.PostSend(SendWR{ID: uint64(i + 1), Opcode: WRSend, Flags: SendSignaled, SGL: sge(p.mrA, 0, n)}); err != nil {
			t.Fatal(err)
		}
	}
	p.run()
	wantWC(t, poll(p.cqA), WC{WRID: 1, Opcode: WCSend}, WC{WRID: 2, Opcode: WCSend})
	wantWC(t, poll(p.cqB), WC{WRID: 100, Opcode: WCRecv, ByteLen: 64}, WC{WRID: 101, Opcode: WCRecv, ByteLen: 5000})
	if !bytes.Equal(p.bufB[:64], p.bufA[:64]) || !bytes.Equal(p.bufB[8192:8192+5000], p.bufA[:5000]) {
		t.Fatal("SEND data differs")
	}

	// WRITE 10000 B, then READ it back into another place.
	fill(p.bufA[16384:26384], 9)
	must(t, p.qa.PostSend(SendWR{ID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: sge(p.mrA, 16384, 10000),
		RemoteAddr: p.mrB.Addr() + 100000, RKey: p.mrB.RKey()}))
	must(t, p.qa.PostSend(SendWR{ID: 4, Opcode: WRRDMARead, Flags: SendSignaled, SGL: sge(p.mrA, 65536, 10000),
		RemoteAddr: p.mrB.Addr() + 100000, RKey: p.mrB.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), WC{WRID: 3, Opcode: WCRDMAWrite}, WC{WRID: 4, Opcode: WCRDMARead, ByteLen: 10000})
	if !bytes.Equal(p.bufB[100000:110000], p.bufA[16384:26384]) || !bytes.Equal(p.bufA[65536:75536], p.bufA[16384:26384]) {
		t.Fatal("WRITE/READ data differs")
	}

	// Atomics on a little-endian word.
	binary.LittleEndian.PutUint64(p.bufB[200000:], 40)
	must(t, p.qa.PostSend(SendWR{ID: 5, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGL: sge(p.mrA, 300000, 8),
		RemoteAddr: p.mrB.Addr() + 200000, RKey: p.mrB.RKey(), CompareAdd: 2}))
	must(t, p.qa.PostSend(SendWR{ID: 6, Opcode: WRAtomicCmpAndSwp, Flags: SendSignaled, SGL: sge(p.mrA, 300008, 8),
		RemoteAddr: p.mrB.Addr() + 200000, RKey: p.mrB.RKey(), CompareAdd: 42, Swap: 7}))
	p.run()
	wantWC(t, poll(p.cqA), WC{WRID: 5, Opcode: WCFetchAdd}, WC{WRID: 6, Opcode: WCCompSwap})
	if got := le64(p.bufB[200000:]); got != 7 {
		t.Fatalf("target word %d, want 7", got)
	}
	if a, b := le64(p.bufA[300000:]), le64(p.bufA[300008:]); a != 40 || b != 42 {
		t.Fatalf("atomic results %d %d, want 40 42", a, b)
	}

	// WRITE_WITH_IMM and SEND_WITH_IMM consume receives and carry the immediate.
	must(t, p.qb.PostRecv(RecvWR{ID: 200, SGL: sge(p.mrB, 0, 64)}, RecvWR{ID: 201, SGL: sge(p.mrB, 64, 64)}))
	must(t, p.qa.PostSend(
		SendWR{ID: 7, Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, SGL: sge(p.mrA, 0, 3000), RemoteAddr: p.mrB.Addr() + 400000, RKey: p.mrB.RKey(), Imm: 0xabcd},
		SendWR{ID: 8, Opcode: WRSendWithImm, Flags: SendSignaled, SGL: sge(p.mrA, 0, 16), Imm: 0x1234}))
	p.run()
	wantWC(t, poll(p.cqA), WC{WRID: 7, Opcode: WCRDMAWrite}, WC{WRID: 8, Opcode: WCSend})
	wantWC(t, poll(p.cqB), WC{WRID: 200, Opcode: WCRecvRDMAWithImm, ByteLen: 3000, Flags: WCWithImm, Imm: 0xabcd},
		WC{WRID: 201, Opcode: WCRecv, ByteLen: 16, Flags: WCWithImm, Imm: 0x1234})
	if p.a.Stats().Retransmits != 0 || p.b.Stats().RxDropped != 0 {
		t.Fatalf("clean link but stats %+v %+v", p.a.Stats(), p.b.Stats())
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
