package engine_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
)

func TestRCBasicOperations(t *testing.T) {
	p := plainPair(t)
	fill(p.bufA[:8192], 1)

	// SEND of 64 B and of 5000 B (five packets at MTU 1024).
	for i, n := range []uint32{64, 5000} {
		if err := p.qb.PostRecv(engine.RecvWR{ID: uint64(100 + i), SGL: sge(p.mrB, uint64(i)*8192, 8192)}); err != nil {
			t.Fatal(err)
		}
		if err := p.qa.PostSend(engine.SendWR{ID: uint64(i + 1), Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, n)}); err != nil {
			t.Fatal(err)
		}
	}
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCSend}, engine.WC{WRID: 2, Opcode: engine.WCSend})
	wantWC(t, poll(p.cqB), engine.WC{WRID: 100, Opcode: engine.WCRecv, ByteLen: 64}, engine.WC{WRID: 101, Opcode: engine.WCRecv, ByteLen: 5000})
	if !bytes.Equal(p.bufB[:64], p.bufA[:64]) || !bytes.Equal(p.bufB[8192:8192+5000], p.bufA[:5000]) {
		t.Fatal("SEND data differs")
	}

	// WRITE 10000 B, then READ it back into another place.
	fill(p.bufA[16384:26384], 9)
	must(t, p.qa.PostSend(engine.SendWR{ID: 3, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 16384, 10000),
		RemoteAddr: p.mrB.Addr() + 100000, RKey: p.mrB.RKey()}))
	must(t, p.qa.PostSend(engine.SendWR{ID: 4, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 65536, 10000),
		RemoteAddr: p.mrB.Addr() + 100000, RKey: p.mrB.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 3, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 4, Opcode: engine.WCRDMARead, ByteLen: 10000})
	if !bytes.Equal(p.bufB[100000:110000], p.bufA[16384:26384]) || !bytes.Equal(p.bufA[65536:75536], p.bufA[16384:26384]) {
		t.Fatal("WRITE/READ data differs")
	}

	// Atomics on a little-endian word.
	binary.LittleEndian.PutUint64(p.bufB[200000:], 40)
	must(t, p.qa.PostSend(engine.SendWR{ID: 5, Opcode: engine.WRAtomicFetchAndAdd, Flags: engine.SendSignaled, SGL: sge(p.mrA, 300000, 8),
		RemoteAddr: p.mrB.Addr() + 200000, RKey: p.mrB.RKey(), CompareAdd: 2}))
	must(t, p.qa.PostSend(engine.SendWR{ID: 6, Opcode: engine.WRAtomicCmpAndSwp, Flags: engine.SendSignaled, SGL: sge(p.mrA, 300008, 8),
		RemoteAddr: p.mrB.Addr() + 200000, RKey: p.mrB.RKey(), CompareAdd: 42, Swap: 7}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 5, Opcode: engine.WCFetchAdd}, engine.WC{WRID: 6, Opcode: engine.WCCompSwap})
	if got := le64(p.bufB[200000:]); got != 7 {
		t.Fatalf("target word %d, want 7", got)
	}
	if a, b := le64(p.bufA[300000:]), le64(p.bufA[300008:]); a != 40 || b != 42 {
		t.Fatalf("atomic results %d %d, want 40 42", a, b)
	}

	// WRITE_WITH_IMM and SEND_WITH_IMM consume receives and carry the immediate.
	must(t, p.qb.PostRecv(engine.RecvWR{ID: 200, SGL: sge(p.mrB, 0, 64)}, engine.RecvWR{ID: 201, SGL: sge(p.mrB, 64, 64)}))
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 7, Opcode: engine.WRRDMAWriteWithImm, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 3000), RemoteAddr: p.mrB.Addr() + 400000, RKey: p.mrB.RKey(), Imm: 0xabcd},
		engine.SendWR{ID: 8, Opcode: engine.WRSendWithImm, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 16), Imm: 0x1234}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 7, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 8, Opcode: engine.WCSend})
	wantWC(t, poll(p.cqB), engine.WC{WRID: 200, Opcode: engine.WCRecvRDMAWithImm, ByteLen: 3000, Flags: engine.WCWithImm, Imm: 0xabcd},
		engine.WC{WRID: 201, Opcode: engine.WCRecv, ByteLen: 16, Flags: engine.WCWithImm, Imm: 0x1234})
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
