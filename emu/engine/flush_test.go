package engine_test

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/google/gopacket"
	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/wire"
)

// mpeFrame is a captured frame with the headers FLUSH and ATOMIC_WRITE use, copied out.
type mpeFrame struct {
	src     string
	op      wire.Opcode
	psn     uint32
	syn     wire.Syndrome
	hasAETH bool
	feth    []byte // the FETH's 4 bytes, nil without one
	va      uint64
	rkey    uint32
	dmaLen  uint32
	hasRETH bool
	payload []byte
}

func mpeCapture(t testing.TB, pcap *bytes.Buffer) []mpeFrame {
	t.Helper()
	var out []mpeFrame
	eachCapturedFrame(t, pcap, func(f *wire.Frame, _ gopacket.CaptureInfo) {
		m := mpeFrame{src: f.SrcIP().String(), op: f.Opcode, psn: f.BTH.PSN(), payload: append([]byte(nil), f.Payload...)}
		if f.AETH != nil {
			m.syn, m.hasAETH = f.AETH.Syndrome(), true
		}
		if f.FETH != nil {
			m.feth = append([]byte(nil), f.FETH...)
		}
		if f.RETH != nil {
			m.va, m.rkey, m.dmaLen, m.hasRETH = f.RETH.VA(), f.RETH.RKey(), f.RETH.DMALen(), true
		}
		out = append(out, m)
	})
	return out
}

// answerFrom returns the first frame the responder (B, 192.0.2.2) sent.
func answerFrom(t testing.TB, fs []mpeFrame) mpeFrame {
	t.Helper()
	for _, f := range fs {
		if f.src == "192.0.2.2" {
			return f
		}
	}
	t.Fatalf("no answer in %+v", fs)
	return mpeFrame{}
}

func mpeOps(fs []mpeFrame) []wire.Opcode {
	var ops []wire.Opcode
	for _, f := range fs {
		ops = append(ops, f.op)
	}
	return ops
}

func wantOps(t testing.TB, fs []mpeFrame, want ...wire.Opcode) {
	t.Helper()
	got := mpeOps(fs)
	if len(got) != len(want) {
		t.Fatalf("frames %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("frames %v, want %v", got, want)
		}
	}
}

const flushAccess = engine.AccessLocalWrite | engine.AccessRemoteWrite | engine.AccessRemoteRead | engine.AccessFlushGlobal | engine.AccessFlushPersistent

// newMPEPair is a pair with pcap capture and an MR on B with the rights given.
func newMPEPair(t *testing.T, o engine.ConnectOptions, access engine.Access) (*pair, *bytes.Buffer, *engine.MR) {
	t.Helper()
	p := newPair(t, 1, sim.LinkConfig{}, o)
	var pcap bytes.Buffer
	must(t, p.fab.CapturePcap(&pcap))
	mr, err := p.pdB.RegMR(make([]byte, 4096), access)
	must(t, err)
	return p, &pcap, mr
}

// TestAtomicWrite covers ATOMIC_WRITE (0x1D): a RETH of length 8 and 8 bytes of payload, stored
// as one aligned write under REMOTE_WRITE and answered by an ACK.
func TestAtomicWrite(t *testing.T) {
	val := []byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}

	t.Run("stores_8_bytes_acked", func(t *testing.T) {
		p, pcap, mr := newMPEPair(t, engine.ConnectOptions{}, engine.AccessLocalWrite|engine.AccessRemoteWrite)
		copy(p.bufA, val)
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRAtomicWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8),
			RemoteAddr: mr.Addr() + 16, RKey: mr.RKey()}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCAtomicWrite, ByteLen: 8})
		if got := mr.Buf()[16:24]; !bytes.Equal(got, val) {
			t.Fatalf("target % x, want % x", got, val)
		}
		if !bytes.Equal(mr.Buf()[:16], make([]byte, 16)) || !bytes.Equal(mr.Buf()[24:32], make([]byte, 8)) {
			t.Fatal("bytes around the target changed")
		}
		fs := mpeCapture(t, pcap)
		wantOps(t, fs, wire.RCAtomicWrite, wire.RCAcknowledge)
		req, ack := fs[0], fs[1]
		if byte(req.op) != 0x1D || !req.hasRETH || req.va != mr.Addr()+16 || req.rkey != mr.RKey() || req.dmaLen != 8 ||
			!bytes.Equal(req.payload, val) || req.feth != nil {
			t.Fatalf("request %+v", req)
		}
		if !ack.hasAETH || ack.syn != wire.ACKUnlimited || ack.psn != req.psn {
			t.Fatalf("answer %+v", ack)
		}
	})

	t.Run("inline", func(t *testing.T) {
		p, _, mr := newMPEPair(t, engine.ConnectOptions{}, engine.AccessLocalWrite|engine.AccessRemoteWrite)
		copy(p.bufA, val)
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRAtomicWrite, Flags: engine.SendSignaled | engine.SendInline, SGL: sge(p.mrA, 0, 8),
			RemoteAddr: mr.Addr(), RKey: mr.RKey()}))
		copy(p.bufA, make([]byte, 8)) // inline data was taken at post time
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCAtomicWrite, ByteLen: 8})
		if !bytes.Equal(mr.Buf()[:8], val) {
			t.Fatalf("target % x", mr.Buf()[:8])
		}
	})

	t.Run("mr_without_remote_write_is_rem_access_err", func(t *testing.T) {
		p, pcap, mr := newMPEPair(t, engine.ConnectOptions{}, engine.AccessLocalWrite|engine.AccessRemoteRead|engine.AccessRemoteAtomic)
		copy(p.bufA, val)
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRAtomicWrite, SGL: sge(p.mrA, 0, 8), RemoteAddr: mr.Addr(), RKey: mr.RKey()},
			engine.SendWR{ID: 2, Opcode: engine.WRSend, SGL: sge(p.mrA, 0, 8)}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRemAccessErr, Opcode: engine.WCAtomicWrite}, engine.WC{WRID: 2, Status: engine.WCWRFlushErr, Opcode: engine.WCSend})
		if !bytes.Equal(mr.Buf()[:8], make([]byte, 8)) {
			t.Fatal("target changed")
		}
		fs := mpeCapture(t, pcap)
		if a := answerFrom(t, fs); fs[0].op != wire.RCAtomicWrite || a.op != wire.RCAcknowledge || a.psn != fs[0].psn ||
			a.syn != wire.NAKRemoteAccess || byte(a.syn) != 0x62 {
			t.Fatalf("frames %+v, want ATOMIC_WRITE answered by NAK 0x62", fs)
		}
		if p.qa.State() != engine.QPSErr || p.qb.State() != engine.QPSErr {
			t.Fatalf("states %s %s", p.qa.State(), p.qb.State())
		}
	})

	t.Run("qp_without_remote_write_is_rem_inv_req_err", func(t *testing.T) {
		p, pcap, mr := newMPEPair(t, engine.ConnectOptions{Access: engine.AccessRemoteRead | engine.AccessRemoteAtomic}, engine.AccessLocalWrite|engine.AccessRemoteWrite)
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRAtomicWrite, SGL: sge(p.mrA, 0, 8), RemoteAddr: mr.Addr(), RKey: mr.RKey()}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRemInvReqErr, Opcode: engine.WCAtomicWrite})
		fs := mpeCapture(t, pcap)
		if len(fs) != 2 || fs[1].syn != wire.NAKInvalidRequest {
			t.Fatalf("frames %+v, want NAK 0x61", fs)
		}
	})

	t.Run("misaligned_is_rem_inv_req_err", func(t *testing.T) {
		p, pcap, mr := newMPEPair(t, engine.ConnectOptions{}, engine.AccessLocalWrite|engine.AccessRemoteWrite)
		copy(p.bufA, val)
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRAtomicWrite, SGL: sge(p.mrA, 0, 8), RemoteAddr: mr.Addr() + 4, RKey: mr.RKey()}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRemInvReqErr, Opcode: engine.WCAtomicWrite})
		if !bytes.Equal(mr.Buf()[:16], make([]byte, 16)) {
			t.Fatal("target changed")
		}
		fs := mpeCapture(t, pcap)
		if len(fs) != 2 || fs[1].syn != wire.NAKInvalidRequest || byte(fs[1].syn) != 0x61 {
			t.Fatalf("frames %+v, want NAK 0x61", fs)
		}
	})

	t.Run("post_checks", func(t *testing.T) {
		p := plainPair(t)
		for _, sgl := range [][]engine.SGE{nil, sge(p.mrA, 0, 4), sge(p.mrA, 0, 16)} {
			err := p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRAtomicWrite, SGL: sgl, RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()})
			if !errors.Is(err, syscall.EINVAL) {
				t.Errorf("ATOMIC_WRITE of %v: %v, want EINVAL", sgl, err)
			}
		}
		// Two SGEs making 8 bytes are fine.
		two := append(sge(p.mrA, 0, 4), sge(p.mrA, 100, 4)...)
		must(t, p.qa.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRAtomicWrite, Flags: engine.SendSignaled, SGL: two, RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 2, Opcode: engine.WCAtomicWrite, ByteLen: 8})
	})

	t.Run("lost_ack_replays_without_storing_again", func(t *testing.T) {
		p, pcap, mr := newMPEPair(t, engine.ConnectOptions{}, engine.AccessLocalWrite|engine.AccessRemoteWrite)
		copy(p.bufA, val)
		sentinel := []byte{9, 9, 9, 9, 9, 9, 9, 9}
		ft := p.fab.AddFault(sim.Fault{Name: "lose the ACK", Src: "B", Opcodes: []wire.Opcode{wire.RCAcknowledge}, Nth: 1, Action: sim.FaultDrop})
		p.fab.OnEvent(func(e engine.Event) {
			p.events = append(p.events, e)
			if e.Kind == engine.EvFault {
				// B's memory moves on after the store; a second store would undo that.
				copy(mr.Buf()[:8], sentinel)
			}
		})
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRAtomicWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8), RemoteAddr: mr.Addr(), RKey: mr.RKey()}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCAtomicWrite, ByteLen: 8})
		if ft.Fired() != 1 {
			t.Fatalf("fault fired %d times", ft.Fired())
		}
		if !bytes.Equal(mr.Buf()[:8], sentinel) {
			t.Fatalf("target % x: the duplicate was stored again", mr.Buf()[:8])
		}
		if len(p.eventsLike(engine.EvRecv, "duplicate RC_ATOMIC_WRITE")) == 0 {
			t.Fatal("no replay recorded")
		}
		fs := mpeCapture(t, pcap)
		wantOps(t, fs, wire.RCAtomicWrite, wire.RCAcknowledge, wire.RCAtomicWrite, wire.RCAcknowledge)
	})
}

// TestFlush covers FLUSH (0x1C): FETH and RETH, checked against the MR's FLUSH rights for the
// placement type and answered by an empty RDMA READ RESPONSE ONLY.
func TestFlush(t *testing.T) {
	t.Run("range_global_after_write", func(t *testing.T) {
		p, pcap, mr := newMPEPair(t, engine.ConnectOptions{}, flushAccess)
		fill(p.bufA[:64], 5)
		must(t, p.qa.PostSend(
			engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 64), RemoteAddr: mr.Addr(), RKey: mr.RKey()},
			engine.SendWR{ID: 2, Opcode: engine.WRFlush, Flags: engine.SendSignaled, RemoteAddr: mr.Addr(), RKey: mr.RKey(),
				Flush: engine.FlushInfo{Type: engine.FlushGlobal, Level: engine.FlushRange, Length: 64}}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite, ByteLen: 64}, engine.WC{WRID: 2, Opcode: engine.WCFlush})
		if !bytes.Equal(mr.Buf()[:64], p.bufA[:64]) {
			t.Fatal("WRITE before the FLUSH not placed")
		}
		fs := mpeCapture(t, pcap)
		// The FLUSH follows the WRITE without waiting: the responder executes in PSN order,
		// so the WRITE is placed before the FLUSH is answered.
		wantOps(t, fs, wire.RCWriteOnly, wire.RCFlush, wire.RCAcknowledge, wire.RCReadResponseOnly)
		req, resp := fs[1], fs[3]
		if byte(req.op) != 0x1C || !bytes.Equal(req.feth, []byte{0, 0, 0, 0x01}) || !req.hasRETH || req.va != mr.Addr() ||
			req.rkey != mr.RKey() || req.dmaLen != 64 || len(req.payload) != 0 {
			t.Fatalf("request %+v", req)
		}
		if byte(resp.op) != 0x10 || resp.psn != req.psn || !resp.hasAETH || resp.syn != wire.ACKUnlimited || len(resp.payload) != 0 {
			t.Fatalf("response %+v", resp)
		}
	})

	t.Run("mr_level_persistent_ignores_range", func(t *testing.T) {
		p, pcap, mr := newMPEPair(t, engine.ConnectOptions{}, engine.AccessLocalWrite|engine.AccessFlushPersistent)
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRFlush, Flags: engine.SendSignaled, RemoteAddr: 0x10, RKey: mr.RKey(),
			Flush: engine.FlushInfo{Type: engine.FlushPersistent, Level: engine.FlushMR, Length: 1 << 20}}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCFlush})
		fs := mpeCapture(t, pcap)
		wantOps(t, fs, wire.RCFlush, wire.RCReadResponseOnly)
		if !bytes.Equal(fs[0].feth, []byte{0, 0, 0, 0x12}) {
			t.Fatalf("FETH % x, want 00 00 00 12", fs[0].feth)
		}
	})

	for _, c := range []struct {
		name   string
		access engine.Access
		info   engine.FlushInfo
		off    uint64
		rkey   func(mr *engine.MR) uint32
	}{
		{"mr_without_flush_rights", engine.AccessLocalWrite | engine.AccessRemoteWrite | engine.AccessRemoteRead, engine.FlushInfo{Type: engine.FlushGlobal, Length: 8}, 0, nil},
		{"global_rights_persistent_flush", engine.AccessLocalWrite | engine.AccessFlushGlobal, engine.FlushInfo{Type: engine.FlushPersistent, Length: 8}, 0, nil},
		{"persistent_rights_global_flush_mr_level", engine.AccessLocalWrite | engine.AccessFlushPersistent, engine.FlushInfo{Type: engine.FlushGlobal, Level: engine.FlushMR}, 0, nil},
		{"range_beyond_mr", flushAccess, engine.FlushInfo{Type: engine.FlushGlobal, Length: 64}, 4096 - 32, nil},
		{"bad_rkey_mr_level", flushAccess, engine.FlushInfo{Type: engine.FlushGlobal, Level: engine.FlushMR}, 0, func(mr *engine.MR) uint32 { return mr.RKey() ^ 0x100 }},
	} {
		t.Run(c.name+"_is_rem_access_err", func(t *testing.T) {
			p, pcap, mr := newMPEPair(t, engine.ConnectOptions{}, c.access)
			rkey := mr.RKey()
			if c.rkey != nil {
				rkey = c.rkey(mr)
			}
			must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRFlush, RemoteAddr: mr.Addr() + c.off, RKey: rkey, Flush: c.info},
				engine.SendWR{ID: 2, Opcode: engine.WRSend, SGL: sge(p.mrA, 0, 8)}))
			p.run()
			wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRemAccessErr, Opcode: engine.WCFlush}, engine.WC{WRID: 2, Status: engine.WCWRFlushErr, Opcode: engine.WCSend})
			fs := mpeCapture(t, pcap)
			if a := answerFrom(t, fs); fs[0].op != wire.RCFlush || a.op != wire.RCAcknowledge || a.psn != fs[0].psn ||
				a.syn != wire.NAKRemoteAccess || byte(a.syn) != 0x62 {
				t.Fatalf("frames %+v, want FLUSH answered by NAK 0x62", fs)
			}
			if p.qb.State() != engine.QPSErr {
				t.Fatalf("responder in %s", p.qb.State())
			}
		})
	}

	t.Run("post_checks", func(t *testing.T) {
		p := plainPair(t)
		for _, wr := range []engine.SendWR{
			{Opcode: engine.WRFlush, SGL: sge(p.mrA, 0, 8), Flush: engine.FlushInfo{Type: engine.FlushGlobal}},
			{Opcode: engine.WRFlush, Flush: engine.FlushInfo{Type: 0}},
			{Opcode: engine.WRFlush, Flush: engine.FlushInfo{Type: 4}},
			{Opcode: engine.WRFlush, Flush: engine.FlushInfo{Type: engine.FlushGlobal, Level: 2}},
			{Opcode: engine.WRFlush, Flags: engine.SendInline, Flush: engine.FlushInfo{Type: engine.FlushGlobal}},
		} {
			if err := p.qa.PostSend(wr); !errors.Is(err, syscall.EINVAL) {
				t.Errorf("%+v: %v, want EINVAL", wr.Flush, err)
			}
		}
	})

	t.Run("lost_response_replays", func(t *testing.T) {
		p, pcap, mr := newMPEPair(t, engine.ConnectOptions{}, flushAccess)
		ft := p.fab.AddFault(sim.Fault{Name: "lose the response", Src: "B", Opcodes: []wire.Opcode{wire.RCReadResponseOnly}, Nth: 1, Action: sim.FaultDrop})
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRFlush, Flags: engine.SendSignaled, RemoteAddr: mr.Addr(), RKey: mr.RKey(),
			Flush: engine.FlushInfo{Type: engine.FlushGlobal | engine.FlushPersistent, Length: 4096}}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCFlush})
		if ft.Fired() != 1 {
			t.Fatalf("fault fired %d times", ft.Fired())
		}
		if len(p.eventsLike(engine.EvRecv, "duplicate RC_FLUSH")) == 0 {
			t.Fatal("no replay recorded")
		}
		fs := mpeCapture(t, pcap)
		wantOps(t, fs, wire.RCFlush, wire.RCReadResponseOnly, wire.RCFlush, wire.RCReadResponseOnly)
		if !bytes.Equal(fs[0].feth, []byte{0, 0, 0, 0x03}) {
			t.Fatalf("FETH % x", fs[0].feth)
		}
	})

	t.Run("count_against_max_rd_atomic", func(t *testing.T) {
		// With one outstanding READ or atomic allowed, each FLUSH and ATOMIC_WRITE waits for
		// the answer to the one before.
		p, pcap, mr := newMPEPair(t, engine.ConnectOptions{MaxRdAtomic: 1}, flushAccess)
		fl := engine.SendWR{Opcode: engine.WRFlush, Flags: engine.SendSignaled, RemoteAddr: mr.Addr(), RKey: mr.RKey(), Flush: engine.FlushInfo{Type: engine.FlushGlobal, Length: 8}}
		aw := engine.SendWR{ID: 2, Opcode: engine.WRAtomicWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8), RemoteAddr: mr.Addr(), RKey: mr.RKey()}
		fl1, fl3 := fl, fl
		fl1.ID, fl3.ID = 1, 3
		must(t, p.qa.PostSend(fl1, aw, fl3))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCFlush}, engine.WC{WRID: 2, Opcode: engine.WCAtomicWrite, ByteLen: 8}, engine.WC{WRID: 3, Opcode: engine.WCFlush})
		wantOps(t, mpeCapture(t, pcap), wire.RCFlush, wire.RCReadResponseOnly, wire.RCAtomicWrite, wire.RCAcknowledge,
			wire.RCFlush, wire.RCReadResponseOnly)
	})
}

// A FLUSH needs the QP's FLUSH_* right of each placement type it asks for, besides the MR's
// (rxe's check_qp_attr_access): without it the responder refuses the request as invalid, NAK
// 0x61, and the requester completes REM_INV_REQ_ERR.
func TestFlushNeedsQPRights(t *testing.T) {
	for _, c := range []struct {
		name   string
		qp     engine.Access
		typ    engine.FlushType
		refuse bool
	}{
		{"no_flush_rights_global", engine.AccessRemoteWrite | engine.AccessRemoteRead, engine.FlushGlobal, true},
		{"global_right_persistent_flush", engine.AccessRemoteWrite | engine.AccessFlushGlobal, engine.FlushPersistent, true},
		{"persistent_right_both_types", engine.AccessFlushPersistent, engine.FlushGlobal | engine.FlushPersistent, true},
		{"global_right_global_flush", engine.AccessFlushGlobal, engine.FlushGlobal, false},
		{"both_rights_both_types", engine.AccessFlushGlobal | engine.AccessFlushPersistent, engine.FlushGlobal | engine.FlushPersistent, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, pcap, mr := newMPEPair(t, engine.ConnectOptions{Access: c.qp}, flushAccess)
			must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRFlush, Flags: engine.SendSignaled, RemoteAddr: mr.Addr(), RKey: mr.RKey(),
				Flush: engine.FlushInfo{Type: c.typ, Length: 8}}))
			p.run()
			fs := mpeCapture(t, pcap)
			a := answerFrom(t, fs)
			if !c.refuse {
				wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCFlush})
				if a.op != wire.RCReadResponseOnly {
					t.Fatalf("answer %+v, want a READ RESPONSE ONLY", a)
				}
				return
			}
			wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRemInvReqErr, Opcode: engine.WCFlush})
			if a.op != wire.RCAcknowledge || a.syn != wire.NAKInvalidRequest || byte(a.syn) != 0x61 || a.psn != fs[0].psn {
				t.Fatalf("answer %+v, want NAK 0x61 for the FLUSH", a)
			}
			if p.qb.State() != engine.QPSErr {
				t.Fatalf("responder in %s", p.qb.State())
			}
		})
	}
}
