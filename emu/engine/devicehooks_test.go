package engine_test

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
)

// What a device model plugs into the engine: inline data handed over as bytes, a receive
// source read only when a message needs a receive, the count of retired send WQEs, and a
// malformed descriptor posted as a failing work request.
func TestDeviceHooks(t *testing.T) {
	t.Run("inline_bytes", func(t *testing.T) {
		p := plainPair(t)
		data := []byte("carried in the WQE itself")
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled | engine.SendInline, InlineData: data,
			RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite, ByteLen: uint32(len(data))})
		if !bytes.Equal(p.bufB[:len(data)], data) {
			t.Fatalf("target %q", p.bufB[:len(data)])
		}
		big := make([]byte, 65)
		var pe *engine.PostError
		if err := p.qa.PostSend(engine.SendWR{Opcode: engine.WRSend, Flags: engine.SendInline, InlineData: big}); !errors.As(err, &pe) || pe.Err != syscall.EINVAL {
			t.Fatalf("65 bytes inline on a QP taking 64: %v", err)
		}
	})

	t.Run("recv_source", func(t *testing.T) {
		p := plainPair(t)
		var asked []int
		next := uint64(100)
		batch := 2 // receives the guest has posted since the last fetch
		p.qb.SetRecvSource(func(max int) []engine.RecvWR {
			asked = append(asked, max)
			var out []engine.RecvWR
			for range min(max, batch, int(107-next)) { // the guest posts receives 100 to 106
				out = append(out, engine.RecvWR{ID: next, SGL: sge(p.mrB, next*64, 64)})
				next++
			}
			return out
		})
		for id := uint64(1); id <= 3; id++ {
			must(t, p.qa.PostSend(engine.SendWR{ID: id, Opcode: engine.WRSend, SGL: sge(p.mrA, 0, 16)}))
		}
		p.run()
		wantWC(t, poll(p.cqB), engine.WC{WRID: 100, Opcode: engine.WCRecv, ByteLen: 16}, engine.WC{WRID: 101, Opcode: engine.WCRecv, ByteLen: 16},
			engine.WC{WRID: 102, Opcode: engine.WCRecv, ByteLen: 16})
		if len(asked) != 2 || asked[0] != 512 {
			t.Fatalf("the source was asked %v: only when the queue was empty, for its room", asked)
		}
		// Moved to ERR, the QP flushes what it holds (103) and what the source has now (104 on).
		batch = 7
		toErr(t, p.qb)
		wantWC(t, poll(p.cqB), engine.WC{WRID: 103, Status: engine.WCWRFlushErr, Opcode: engine.WCRecv}, engine.WC{WRID: 104, Status: engine.WCWRFlushErr, Opcode: engine.WCRecv},
			engine.WC{WRID: 105, Status: engine.WCWRFlushErr, Opcode: engine.WCRecv}, engine.WC{WRID: 106, Status: engine.WCWRFlushErr, Opcode: engine.WCRecv})
	})

	t.Run("retired_count", func(t *testing.T) {
		p := plainPair(t)
		total := 0
		p.qa.OnRetire(func(n int) { total += n })
		for id := uint64(1); id <= 5; id++ {
			must(t, p.qa.PostSend(engine.SendWR{ID: id, Opcode: engine.WRRDMAWrite, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
		}
		if total != 0 {
			t.Fatalf("%d retired before anything was acknowledged", total)
		}
		p.run()
		if total != 5 {
			t.Fatalf("%d retired, want 5 (unsignalled ones count)", total)
		}
	})

	t.Run("retired_before_its_completion", func(t *testing.T) {
		// rxe advances the send queue's consumer before it posts the CQE: a device model told
		// of the retirement first can free the slot before anyone sees the completion.
		p := plainPair(t)
		var order []string
		cq, err := p.a.CreateCQSink(func(wc engine.WC) bool { order = append(order, fmt.Sprint("cqe ", wc.WRID)); return true })
		must(t, err)
		qp, _ := connectedRC(t, rcEnd{pd: p.pdA, cq: cq, cap: engine.QPCap{MaxSendWR: 8, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}},
			rcEnd{pd: p.pdB, cq: p.cqB, cap: engine.QPCap{MaxSendWR: 8, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}, engine.ConnectOptions{})
		qp.OnRetire(func(n int) { order = append(order, fmt.Sprint("retire ", n)) })
		must(t, qp.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()},
			engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()},
			engine.SendWR{ID: 3, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
		p.run()
		if want := "[retire 1 cqe 1 retire 1 retire 1 cqe 3]"; fmt.Sprint(order) != want {
			t.Fatalf("order %v, want %s", order, want)
		}
	})

	t.Run("posted_error", func(t *testing.T) {
		p := plainPair(t)
		bad := errors.New("num_sge 99 in a WQE of 2")
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
		must(t, p.qa.PostSendError(engine.PostedError{ID: 2, Opcode: engine.WRSend, Status: engine.WCLocQPOpErr, Err: bad}))
		must(t, p.qa.PostSend(engine.SendWR{ID: 3, Opcode: engine.WRSend, SGL: sge(p.mrA, 0, 8)}))
		p.run()
		wcs := poll(p.cqA)
		if len(wcs) != 3 || wcs[1].WRID != 2 || wcs[1].Status != engine.WCLocQPOpErr || !errors.Is(wcs[1].Err, bad) ||
			wcs[2].Status != engine.WCWRFlushErr || wcs[0].WRID != 1 || (wcs[0].Status != engine.WCSuccess && wcs[0].Status != engine.WCWRFlushErr) {
			t.Fatalf("completions %s", fmtWC(wcs))
		}
		if p.qa.State() != engine.QPSErr {
			t.Fatalf("QP %s", p.qa.State())
		}
	})
}
