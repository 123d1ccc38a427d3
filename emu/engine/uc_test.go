package engine_test

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/wire"
)

// ucPair is two devices on a simulated fabric with a UC connection at MTU 1024 between them.
type ucPair struct {
	*dgNet
	a, b *dgNode
}

func newUCPair(t *testing.T) *ucPair {
	t.Helper()
	s := sim.NewSim()
	dn := &dgNet{t: t, sim: s, fab: sim.NewFabric(s, 1)}
	must(t, dn.fab.CapturePcap(&dn.pcap))
	p := &ucPair{dgNet: dn}
	for _, name := range []string{"A", "B"} {
		dev := dn.fab.AddDevice(name, sim.LinkConfig{})
		dn.nodes = append(dn.nodes, newNode(t, dev, engine.QPTypeUC, engine.AccessLocalWrite|engine.AccessRemoteWrite))
	}
	p.a, p.b = dn.nodes[0], dn.nodes[1]
	must(t, engine.ConnectUC(p.a.qp, p.b.qp, engine.MTU1024))
	return p
}

// post posts signalled work requests on a's QP.
func (p *ucPair) post(wrs ...engine.SendWR) {
	p.t.Helper()
	for i := range wrs {
		wrs[i].Flags |= engine.SendSignaled
	}
	must(p.t, p.a.qp.PostSend(wrs...))
}

func (p *ucPair) sendWR(id, off uint64, n uint32) engine.SendWR {
	return engine.SendWR{ID: id, Opcode: engine.WRSend, SGL: sge(p.a.mr, off, n)}
}

func (p *ucPair) writeWR(id, off uint64, n uint32, op engine.WROpcode) engine.SendWR {
	return engine.SendWR{ID: id, Opcode: op, SGL: sge(p.a.mr, off, n), RemoteAddr: p.b.mr.Addr() + off, RKey: p.b.mr.RKey(), Imm: uint32(id)}
}

// TestConformanceUC holds the UC checks, U1 on.
func TestConformanceUC(t *testing.T) {
	t.Run("U1_send_and_write_unacknowledged", func(t *testing.T) {
		p := newUCPair(t)
		fill(p.a.buf[:16384], 7)
		p.b.recv(t, 1, 0, 4096)
		p.b.recv(t, 2, 4096, 4096)
		p.b.recv(t, 3, 8192, 4096)
		p.post(p.sendWR(1, 0, 3000), engine.SendWR{ID: 2, Opcode: engine.WRSendWithImm, SGL: sge(p.a.mr, 0, 10), Imm: 0xAB},
			p.writeWR(3, 16384, 2500, engine.WRRDMAWrite), p.writeWR(4, 20480, 100, engine.WRRDMAWriteWithImm))
		p.run()
		wantWC(t, poll(p.a.cq), engine.WC{WRID: 1, Opcode: engine.WCSend}, engine.WC{WRID: 2, Opcode: engine.WCSend},
			engine.WC{WRID: 3, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 4, Opcode: engine.WCRDMAWrite})
		got := poll(p.b.cq)
		wantWC(t, got, engine.WC{WRID: 1, Opcode: engine.WCRecv, ByteLen: 3000},
			engine.WC{WRID: 2, Opcode: engine.WCRecv, ByteLen: 10, Flags: engine.WCWithImm, Imm: 0xAB},
			engine.WC{WRID: 3, Opcode: engine.WCRecvRDMAWithImm, ByteLen: 100, Flags: engine.WCWithImm, Imm: 4})
		if got[0].SrcQP != p.a.qp.Num() {
			t.Fatalf("source QP 0x%x", got[0].SrcQP)
		}
		if !bytes.Equal(p.b.buf[:3000], p.a.buf[:3000]) || !bytes.Equal(p.b.buf[4096:4106], p.a.buf[:10]) ||
			!bytes.Equal(p.b.buf[16384:16384+2500], p.a.buf[16384:16384+2500]) {
			t.Fatal("data differs")
		}
		var ops []wire.Opcode
		for _, f := range p.frames() {
			if f.hdr.AckReq || f.src != p.a.dev.IP() {
				t.Fatalf("%s from %s with AckReq %v: UC asks for and sends no acknowledgement", f.hdr.Opcode, f.src, f.hdr.AckReq)
			}
			ops = append(ops, f.hdr.Opcode)
		}
		want := []wire.Opcode{wire.UCSendFirst, wire.UCSendMiddle, wire.UCSendLast, wire.UCSendOnlyImm,
			wire.UCWriteFirst, wire.UCWriteMiddle, wire.UCWriteLast, wire.UCWriteOnlyImm}
		if len(ops) != len(want) {
			t.Fatalf("opcodes %v, want %v", ops, want)
		}
		for i := range want {
			if ops[i] != want[i] {
				t.Fatalf("opcodes %v, want %v", ops, want)
			}
		}
	})

	t.Run("U2_lost_middle_drops_that_message_only", func(t *testing.T) {
		for _, c := range []struct {
			name string
			lose wire.Opcode
		}{{"middle", wire.UCSendMiddle}, {"first", wire.UCSendFirst}, {"last", wire.UCSendLast}} {
			t.Run(c.name, func(t *testing.T) {
				p := newUCPair(t)
				fill(p.a.buf[:9216], 3)
				p.b.recv(t, 1, 0, 4096)
				p.b.recv(t, 2, 4096, 4096)
				// Messages of three packets: the second loses one.
				p.fab.AddFault(sim.Fault{Src: "A", Opcodes: []wire.Opcode{c.lose}, Nth: 2, Action: sim.FaultDrop})
				p.post(p.sendWR(1, 0, 3000), p.sendWR(2, 3072, 3000), p.sendWR(3, 6144, 3000))
				p.run()
				wantWC(t, poll(p.a.cq), engine.WC{WRID: 1, Opcode: engine.WCSend}, engine.WC{WRID: 2, Opcode: engine.WCSend},
					engine.WC{WRID: 3, Opcode: engine.WCSend})
				// The receive the lost message had taken holds the next one.
				wantWC(t, poll(p.b.cq), engine.WC{WRID: 1, Opcode: engine.WCRecv, ByteLen: 3000},
					engine.WC{WRID: 2, Opcode: engine.WCRecv, ByteLen: 3000})
				if !bytes.Equal(p.b.buf[:3000], p.a.buf[:3000]) || !bytes.Equal(p.b.buf[4096:7096], p.a.buf[6144:9144]) {
					t.Fatal("the first and third messages are not in the receives")
				}
				if p.b.qp.State() != engine.QPSRTS {
					t.Fatalf("receiver %s", p.b.qp.State())
				}
			})
		}
		// A WRITE_WITH_IMM that loses its middle packet places its first and completes nothing.
		p := newUCPair(t)
		fill(p.a.buf[:8192], 9)
		p.b.recv(t, 1, 0, 64)
		p.fab.AddFault(sim.Fault{Src: "A", Opcodes: []wire.Opcode{wire.UCWriteMiddle}, Nth: 1, Action: sim.FaultDrop})
		p.post(p.writeWR(1, 0, 3000, engine.WRRDMAWriteWithImm), p.writeWR(2, 4096, 1000, engine.WRRDMAWriteWithImm))
		p.run()
		wantWC(t, poll(p.b.cq), engine.WC{WRID: 1, Opcode: engine.WCRecvRDMAWithImm, ByteLen: 1000, Flags: engine.WCWithImm, Imm: 2})
		if !bytes.Equal(p.b.buf[4096:5096], p.a.buf[4096:5096]) || !bytes.Equal(p.b.buf[:1024], p.a.buf[:1024]) || p.b.buf[2048] != 0 {
			t.Fatal("memory after a WRITE that lost its middle packet")
		}
	})

	t.Run("U3_read_and_atomics_refused_at_post", func(t *testing.T) {
		p := newUCPair(t)
		for _, op := range []engine.WROpcode{engine.WRRDMARead, engine.WRAtomicCmpAndSwp, engine.WRAtomicFetchAndAdd,
			engine.WRSendWithInv, engine.WRFlush, engine.WRAtomicWrite} {
			wr := engine.SendWR{Opcode: op, SGL: sge(p.a.mr, 0, 8), RemoteAddr: p.b.mr.Addr(), RKey: p.b.mr.RKey()}
			if err := p.a.qp.PostSend(wr); !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("%s on UC: %v, want EINVAL", op, err)
			}
		}
	})

	t.Run("U4_no_receive_drops_the_message", func(t *testing.T) {
		p := newUCPair(t)
		p.post(p.sendWR(1, 0, 2000))
		p.run()
		if st := p.b.dev.Stats(); st.RxNoRecv != 1 || st.RxDropped != 2 || p.b.qp.State() != engine.QPSRTS {
			t.Fatalf("stats %+v, state %s: want the message's two packets dropped", st, p.b.qp.State())
		}
		p.b.recv(t, 1, 0, 4096)
		p.post(p.sendWR(2, 0, 2000))
		p.run()
		wantWC(t, poll(p.b.cq), engine.WC{WRID: 1, Opcode: engine.WCRecv, ByteLen: 2000})
	})

	t.Run("U5_bad_rkey_drops_the_message", func(t *testing.T) {
		p := newUCPair(t)
		fill(p.a.buf[:100], 1)
		bad := p.writeWR(1, 0, 100, engine.WRRDMAWrite)
		bad.RKey ^= 0x80
		p.post(bad, p.writeWR(2, 0, 100, engine.WRRDMAWrite))
		p.run()
		wantWC(t, poll(p.a.cq), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 2, Opcode: engine.WCRDMAWrite})
		if p.b.qp.State() != engine.QPSRTS || !bytes.Equal(p.b.buf[:100], p.a.buf[:100]) || len(poll(p.b.cq)) != 0 {
			t.Fatalf("receiver %s after a WRITE with a bad rkey", p.b.qp.State())
		}
	})

	t.Run("U6_send_longer_than_receive", func(t *testing.T) {
		p := newUCPair(t)
		p.b.recv(t, 1, 0, 1000)
		p.post(p.sendWR(1, 0, 2000))
		p.run()
		got := poll(p.b.cq)
		if len(got) != 1 || got[0].WRID != 1 || got[0].Status != engine.WCLocLenErr || p.b.qp.State() != engine.QPSErr {
			t.Fatalf("completions %s, state %s: want LOC_LEN_ERR and ERR", fmtWC(got), p.b.qp.State())
		}
	})

	t.Run("U7_state_machine", func(t *testing.T) {
		p := newUCPair(t)
		q, err := p.a.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeUC, SendCQ: p.a.cq, RecvCQ: p.a.cq, Cap: engine.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
		must(t, err)
		must(t, q.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1}, engine.AttrState|engine.AttrPKeyIndex|engine.AttrPort|engine.AttrAccessFlags))
		rtr := engine.QPAttr{State: engine.QPSRTR, AH: engine.AHAttr{DGID: p.b.dev.IP()}, PathMTU: engine.MTU1024, DestQPN: p.b.qp.Num()}
		base := engine.AttrState | engine.AttrAV | engine.AttrPathMTU | engine.AttrDestQPN | engine.AttrRQPSN
		if err := q.Modify(rtr, base|engine.AttrMaxDestRdAtomic); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("RTR with max_dest_rd_atomic: %v", err)
		}
		must(t, q.Modify(rtr, base))
		if err := q.Modify(engine.QPAttr{State: engine.QPSRTS, Timeout: 14}, engine.AttrState|engine.AttrSQPSN|engine.AttrTimeout); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("RTS with a timeout: %v", err)
		}
		must(t, q.Modify(engine.QPAttr{State: engine.QPSRTS}, engine.AttrState|engine.AttrSQPSN))
	})
}
