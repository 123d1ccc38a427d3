package engine_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/wire"
)

// Send-queue completions come in the order the work requests were posted, and once the QP has
// failed, the failing request completes with its error and every later one with WR_FLUSH_ERR,
// even those the responder executed and answered (IBTA 10.8.3; rxe flushes the same way). An
// atomic answered while the READ before it waits for its lost response used to keep its
// SUCCESS and complete between the flushed ones.
func TestSQCompletionsInOrderAfterFailure(t *testing.T) {
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024, Timeout: 8, RetryCnt: 1, MaxRdAtomic: 4})
	ft := p.fab.AddFault(sim.Fault{Name: "every READ response", Src: "B", Opcodes: []wire.Opcode{wire.RCReadResponseOnly}, Action: sim.FaultDrop})
	binary.LittleEndian.PutUint64(p.bufB[4096:], 10)
	atomic := func(id uint64, off uint64) engine.SendWR {
		return engine.SendWR{ID: id, Opcode: engine.WRAtomicFetchAndAdd, Flags: engine.SendSignaled, SGL: sge(p.mrA, off, 8), RemoteAddr: p.mrB.Addr() + 4096, RKey: p.mrB.RKey(), CompareAdd: 5}
	}
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 1, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 64), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()},
		atomic(2, 128),
		engine.SendWR{ID: 3, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 256, 8), RemoteAddr: p.mrB.Addr() + 8192, RKey: p.mrB.RKey()},
		atomic(4, 136),
	))
	p.run()
	wantWC(t, poll(p.cqA),
		engine.WC{WRID: 1, Status: engine.WCRetryExcErr, Opcode: engine.WCRDMARead},
		engine.WC{WRID: 2, Status: engine.WCWRFlushErr, Opcode: engine.WCFetchAdd},
		engine.WC{WRID: 3, Status: engine.WCWRFlushErr, Opcode: engine.WCRDMAWrite},
		engine.WC{WRID: 4, Status: engine.WCWRFlushErr, Opcode: engine.WCFetchAdd})
	// Each atomic ran once at the responder, whatever its completion says. A sent the four
	// requests, the READ once more when the WRITE's ACK passed it, and once after the one
	// timeout retry_cnt 1 allows; B answered each.
	if v := le64(p.bufB[4096:]); v != 20 || ft.Fired() != 3 || p.a.Stats().TxFrames != 6 || p.b.Stats().TxFrames != 6 || p.a.Stats().Timeouts != 2 {
		t.Fatalf("target %d (want 20: each atomic once); fault fired %d, A sent %d frames, B %d, %d timeouts (want 3, 6, 6, 2)",
			v, ft.Fired(), p.a.Stats().TxFrames, p.b.Stats().TxFrames, p.a.Stats().Timeouts)
	}
}

// The same when the consumer moves the QP to ERR while a READ waits for its lost response and
// the atomic after it has its answer: both are flushed, the atomic's SUCCESS is not kept.
func TestSQFlushKeepsPostingOrder(t *testing.T) {
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024, MaxRdAtomic: 4})
	p.fab.AddFault(sim.Fault{Name: "every READ response", Src: "B", Opcodes: []wire.Opcode{wire.RCReadResponseOnly}, Action: sim.FaultDrop})
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 1, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 64), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()},
		engine.SendWR{ID: 2, Opcode: engine.WRAtomicFetchAndAdd, Flags: engine.SendSignaled, SGL: sge(p.mrA, 128, 8), RemoteAddr: p.mrB.Addr() + 4096, RKey: p.mrB.RKey(), CompareAdd: 5},
	))
	p.sim.RunFor(time.Millisecond) // the atomic is answered; the READ waits
	toErr(t, p.qa)
	must(t, p.qa.PostSend(engine.SendWR{ID: 3, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 256, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA),
		engine.WC{WRID: 1, Status: engine.WCWRFlushErr, Opcode: engine.WCRDMARead},
		engine.WC{WRID: 2, Status: engine.WCWRFlushErr, Opcode: engine.WCFetchAdd},
		engine.WC{WRID: 3, Status: engine.WCWRFlushErr, Opcode: engine.WCRDMAWrite})
	if v := le64(p.bufB[4096:]); v != 5 {
		t.Fatalf("target %d, want 5 (the atomic ran once)", v)
	}
}

// Sequence NAKs exhaust retry_cnt while a READ before the NAKed WRITE still waits for its lost
// response: RETRY_EXC_ERR goes to the oldest unfinished WR, the READ, as it does when the
// timeouts exhaust the retries, and the WRITEs after it are flushed. The READ used to be
// flushed ahead of the WRITE's RETRY_EXC_ERR, the first error entry saying nothing of the cause.
func TestSeqNAKRetryExhaustionFailsOldest(t *testing.T) {
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024, Timeout: 14, RetryCnt: 0, RNRRetry: 7, MinRNRTimer: 1, MaxRdAtomic: 4,
		Access: engine.AccessRemoteWrite | engine.AccessRemoteRead, NoDefaults: true})
	p.fab.AddFault(sim.Fault{Name: "READ response", Src: "B", Opcodes: []wire.Opcode{wire.RCReadResponseOnly}, Nth: 1, Action: sim.FaultDrop})
	p.fab.AddFault(sim.Fault{Name: "first WRITE", Src: "A", Opcodes: []wire.Opcode{wire.RCWriteOnly}, Nth: 1, Action: sim.FaultDrop})
	w := func(id uint64) engine.SendWR {
		return engine.SendWR{ID: id, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 8192, 8), RemoteAddr: p.mrB.Addr() + 8192, RKey: p.mrB.RKey()}
	}
	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 64), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}, w(2), w(3)))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRetryExcErr, Opcode: engine.WCRDMARead}, engine.WC{WRID: 2, Status: engine.WCWRFlushErr, Opcode: engine.WCRDMAWrite},
		engine.WC{WRID: 3, Status: engine.WCWRFlushErr, Opcode: engine.WCRDMAWrite})
	// A: the READ, two WRITEs, the READ asked for again when the NAK passed it; B: the lost
	// response and the NAK (the READ's second response finds A in ERR).
	if got, b := p.frames(), p.b.Stats(); got != [3]uint64{4, 3, 0} || b.SeqNAKsSent != 1 || b.NAKsSent != 1 || p.a.Stats().NAKsSent != 0 {
		t.Fatalf("A sent %d frames, B %d, %d timeouts, %d NAKs (%d on the wire, A %d); want 4, 3, 0, 1 (1, A 0)",
			got[0], got[1], got[2], b.SeqNAKsSent, b.NAKsSent, p.a.Stats().NAKsSent)
	}
}
