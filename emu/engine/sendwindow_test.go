package engine_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/wire"
)

// A device's send window is how many packets an RC requester sends past the oldest one not
// acknowledged: with every ACK lost, a WRITE of 2,048 packets puts exactly the window on the
// wire before the retransmission timer fires, then goes back to its first PSN. The default is
// rxe's 128.
func TestSendWindowBoundsUnackedPackets(t *testing.T) {
	for _, tc := range []struct {
		name      string
		set, want int
	}{
		{"default is rxe's", 0, 128},
		{"negative is the default", -5, 128},
		{"small", 16, 16},
		{"one", 1, 1},
		{"large", 1000, 1000},
		{"past the most", engine.MaxSendWindow + 1, engine.MaxSendWindow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 2 << 20 // 2,048 packets at MTU 1024
			p := newPairOn(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024, Timeout: 14, RetryCnt: 7},
				make([]byte, n), make([]byte, n), func(f *sim.Fabric) { f.SetSendWindow(tc.set) })
			if got := p.a.SendWindow(); got != tc.want {
				t.Fatalf("SendWindow() = %d, want %d", got, tc.want)
			}
			p.fab.AddFault(sim.Fault{Name: "lose ACKs", Src: "B", Opcodes: []wire.Opcode{wire.RCAcknowledge}, Action: sim.FaultDrop,
				Until: p.sim.Now() + 60*time.Millisecond})
			fill(p.bufA, 3)
			must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, n),
				RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
			p.sim.RunFor(50 * time.Millisecond) // short of the 67 ms timeout
			if sent, want := p.a.Stats().TxFrames, uint64(min(tc.want, 2048)); sent != want || p.a.Stats().Timeouts != 0 {
				t.Fatalf("A sent %d frames with no ACK, timed out %d times; want %d and 0", sent, p.a.Stats().Timeouts, want)
			}
			// The ACKs get through from 60 ms on: the timer sends the window again and the
			// WRITE completes with every byte.
			p.run()
			wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite, ByteLen: n})
			if !bytes.Equal(p.bufA, p.bufB) {
				t.Fatal("WRITE data differs")
			}
			// With nothing lost a WRITE goes through its window without waiting on a timer:
			// AckReq comes at least every half window (every 64 packets from a window of 128),
			// so the window never fills with nothing asked to be acknowledged.
			timeouts, sent := p.a.Stats().Timeouts, p.a.Stats().TxFrames
			fill(p.bufA, 4)
			must(t, p.qa.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, n),
				RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
			p.run()
			wantWC(t, poll(p.cqA), engine.WC{WRID: 2, Opcode: engine.WCRDMAWrite, ByteLen: n})
			if !bytes.Equal(p.bufA, p.bufB) || p.a.Stats().Timeouts != timeouts || p.a.Stats().TxFrames-sent != 2048 {
				t.Fatalf("second WRITE: data equal %v, %d timeouts, %d frames; want true, 0, 2048",
					bytes.Equal(p.bufA, p.bufB), p.a.Stats().Timeouts-timeouts, p.a.Stats().TxFrames-sent)
			}
		})
	}
}

// A large window loses more to one lost frame (the requester goes back to it and sends the rest
// of the window again) and still delivers every byte: WRITEs and READs of 2 MiB at MTU 1024 with
// a window of 1,024 over a link that loses 2% of the frames each way.
func TestSendWindowLargeUnderLoss(t *testing.T) {
	const n = 2 << 20
	for seed := uint64(1); seed <= 5; seed++ {
		for _, op := range []engine.WROpcode{engine.WRRDMAWrite, engine.WRRDMARead} {
			p := newPairOn(t, seed, sim.LinkConfig{Loss: 0.02}, engine.ConnectOptions{MTU: engine.MTU1024, RetryCnt: 7},
				make([]byte, n), make([]byte, n), func(f *sim.Fabric) { f.SetSendWindow(1024) })
			p.fab.OnEvent(nil)
			src, dst := p.bufA, p.bufB
			if op == engine.WRRDMARead {
				src, dst = p.bufB, p.bufA
			}
			fill(src, byte(seed))
			must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: op, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, n),
				RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
			if steps := p.sim.RunUntilIdle(50_000_000); steps == 50_000_000 {
				t.Fatalf("seed %d %v: still busy", seed, op)
			}
			got := poll(p.cqA)
			if len(got) != 1 || got[0].Status != engine.WCSuccess || got[0].ByteLen != n {
				t.Fatalf("seed %d %v: completions %s, want one success of %d bytes", seed, op, fmtWC(got), n)
			}
			if !bytes.Equal(src, dst) {
				t.Fatalf("seed %d %v: data differs", seed, op)
			}
			if p.a.Stats().Retransmits == 0 && p.b.Stats().Retransmits == 0 {
				t.Fatalf("seed %d %v: nothing sent again at 2%% loss", seed, op)
			}
		}
	}
}
