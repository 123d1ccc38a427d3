package engine_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/keys"
	"github.com/softirdma/softirdma/wire"
)

// capturedFrame is one frame of a fabric capture, parsed.
type capturedFrame struct {
	t      time.Duration
	src    string // sender's IP
	op     wire.Opcode
	psn    uint32
	syn    wire.Syndrome
	hasAET bool
	n      int
}

// eachCapturedFrame parses every frame of a fabric capture in order and hands it to fn; a frame
// that does not parse fails the test. fn must copy what it keeps: the frame's views are reused.
func eachCapturedFrame(t testing.TB, pcap *bytes.Buffer, fn func(f *wire.Frame, ci gopacket.CaptureInfo)) {
	t.Helper()
	r, err := wire.NewPcapReader(bytes.NewReader(pcap.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var parser wire.Parser
	for {
		data, ci, err := r.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		var f wire.Frame
		if err := parser.Parse(&f, data); err != nil {
			t.Fatalf("captured frame does not parse: %v", err)
		}
		fn(&f, ci)
	}
}

func captureOf(t testing.TB, pcap *bytes.Buffer) []capturedFrame {
	t.Helper()
	var out []capturedFrame
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	eachCapturedFrame(t, pcap, func(f *wire.Frame, ci gopacket.CaptureInfo) {
		c := capturedFrame{t: ci.Timestamp.Sub(epoch), src: f.SrcIP().String(), op: f.Opcode, psn: f.BTH.PSN(), n: len(f.Payload)}
		if f.AETH != nil {
			c.syn, c.hasAET = f.AETH.Syndrome(), true
		}
		out = append(out, c)
	})
	return out
}

// TestConformance holds the engine's half of the checks of the semantics reference (§9); the
// key-space half of the K and W checks is in keys.
func TestConformance(t *testing.T) {
	t.Run("K4_key8_plus_one_leaves_memory_and_errors_both_qps", func(t *testing.T) {
		p := plainPair(t)
		fill(p.bufA[:64], 3)
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, SGL: sge(p.mrA, 0, 64), RemoteAddr: p.mrB.Addr(),
			RKey: uint32(keys.Key(p.mrB.RKey()).Inc())}, engine.SendWR{ID: 2, Opcode: engine.WRSend, SGL: sge(p.mrA, 0, 8)}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRemAccessErr, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 2, Status: engine.WCWRFlushErr, Opcode: engine.WCSend})
		if !bytes.Equal(p.bufB[:64], make([]byte, 64)) {
			t.Fatal("target memory changed")
		}
		if p.qa.State() != engine.QPSErr || p.qb.State() != engine.QPSErr {
			t.Fatalf("states %s %s, want ERR ERR", p.qa.State(), p.qb.State())
		}
		if len(p.eventsLike(engine.EvNAK, "NAK_REM_ACCESS")) == 0 {
			t.Fatal("no NAK 0x62 recorded")
		}
	})

	t.Run("K7_zero_length_with_bogus_rkey", func(t *testing.T) {
		p := plainPair(t)
		must(t, p.qa.PostSend(
			engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, RemoteAddr: 0x1234, RKey: 0xdeadbeef},
			engine.SendWR{ID: 2, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, RemoteAddr: 0x1234, RKey: 0xdeadbeef}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 2, Opcode: engine.WCRDMARead})
	})

	t.Run("K10_qp_without_remote_atomic", func(t *testing.T) {
		p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{Access: engine.AccessRemoteWrite | engine.AccessRemoteRead})
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRAtomicFetchAndAdd, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey(), CompareAdd: 1}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRemInvReqErr, Opcode: engine.WCFetchAdd})
		if le64(p.bufB) != 0 {
			t.Fatal("target changed")
		}
	})

	t.Run("K12_misaligned_atomic", func(t *testing.T) {
		p := plainPair(t)
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRAtomicCmpAndSwp, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr() + 1, RKey: p.mrB.RKey()}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRemInvReqErr, Opcode: engine.WCCompSwap})
		if len(p.eventsLike(engine.EvNAK, "NAK_INV_REQ")) == 0 {
			t.Fatal("no NAK 0x61 recorded")
		}
	})

	t.Run("K13_bad_lkey_is_loc_prot_err", func(t *testing.T) {
		p := plainPair(t)
		bad := sge(p.mrA, 0, 64)
		bad[0].LKey = uint32(keys.Key(bad[0].LKey).Inc())
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, SGL: bad}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCLocProtErr, Opcode: engine.WCSend})
		if p.a.Stats().TxFrames != 0 {
			t.Fatalf("%d frames sent for a request with a bad lkey", p.a.Stats().TxFrames)
		}
	})

	t.Run("K14_receive_mr_in_other_pd", func(t *testing.T) {
		p := plainPair(t)
		other, _ := p.b.AllocPD()
		must(t, p.mrB.Rereg(keys.ChangePD, other, nil, 0))
		must(t, p.qb.PostRecv(engine.RecvWR{ID: 9, SGL: sge(p.mrB, 0, 64)}))
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, SGL: sge(p.mrA, 0, 64)}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRemOpErr, Opcode: engine.WCSend})
		wantWC(t, poll(p.cqB), engine.WC{WRID: 9, Status: engine.WCLocProtErr, Opcode: engine.WCRecv})
	})

	t.Run("W2_type1_bind_verb", func(t *testing.T) {
		p := plainPair(t)
		mr, err := p.pdB.RegMR(make([]byte, 4096), engine.AccessLocalWrite|engine.AccessMWBind)
		must(t, err)
		mw, err := p.pdB.AllocMW(engine.MWType1)
		must(t, err)
		old := mw.RKey()
		must(t, p.qb.BindMW(mw, engine.MWBind{ID: 5, Flags: engine.SendSignaled, MR: mr, Addr: mr.Addr(), Length: 4096, Access: engine.AccessRemoteWrite}))
		if mw.RKey() != uint32(keys.Key(old).Inc()) {
			t.Fatalf("handle rkey %#x after posting, want %#x", mw.RKey(), keys.Key(old).Inc())
		}
		p.run()
		wantWC(t, poll(p.cqB), engine.WC{WRID: 5, Opcode: engine.WCBindMW})
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 64), RemoteAddr: mr.Addr(), RKey: mw.RKey()}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite})
	})

	t.Run("W9_type1_bind_failure_rolls_back_the_handle", func(t *testing.T) {
		p := plainPair(t)
		noBind, mw := unbindable(t, p.pdB, engine.MWType1)
		old := mw.RKey()
		must(t, p.qb.BindMW(mw, engine.MWBind{ID: 5, MR: noBind, Addr: noBind.Addr(), Length: 64, Access: engine.AccessRemoteRead}))
		p.run()
		wantWC(t, poll(p.cqB), engine.WC{WRID: 5, Status: engine.WCMWBindErr, Opcode: engine.WCBindMW})
		if mw.RKey() != old || p.qb.State() != engine.QPSErr {
			t.Fatalf("rkey %#x (want %#x), state %s", mw.RKey(), old, p.qb.State())
		}
	})

	t.Run("W2_type1_queued_binds_move_the_handle_when_posted", func(t *testing.T) {
		p := plainPair(t)
		mw, err := p.pdB.AllocMW(engine.MWType1)
		must(t, err)
		old := keys.Key(mw.RKey())
		must(t, p.qb.BindMW(mw, engine.MWBind{ID: 5, MR: p.mrB, Addr: p.mrB.Addr(), Length: 4096, Access: engine.AccessRemoteWrite}))
		must(t, p.qb.BindMW(mw, engine.MWBind{ID: 6, Flags: engine.SendSignaled, MR: p.mrB, Addr: p.mrB.Addr(), Length: 64, Access: engine.AccessRemoteRead}))
		want := old.Inc().Inc()
		if got := keys.Key(mw.RKey()); got != want {
			t.Fatalf("handle rkey %s with two binds posted, want %s", got, want)
		}
		// The device's key space moves only when the binds run.
		if _, ok := p.b.MW(uint32(old)); !ok {
			t.Fatalf("lookup of %s before the binds ran found nothing", old)
		}
		p.run()
		wantWC(t, poll(p.cqB), engine.WC{WRID: 6, Opcode: engine.WCBindMW})
		if got := keys.Key(mw.RKey()); got != want {
			t.Fatalf("handle rkey %s after the binds ran, want %s", got, want)
		}
		if _, ok := p.b.MW(uint32(want)); !ok {
			t.Fatalf("lookup of %s after the binds ran found nothing", want)
		}
		if info, err := p.b.QueryMW(mw); err != nil || info.Key != want || info.Len != 64 || info.Access != engine.AccessRemoteRead {
			t.Fatalf("query %+v, %v", info, err)
		}
		must(t, mw.Dealloc())
		if got := keys.Key(mw.RKey()); got != want {
			t.Fatalf("handle rkey %s after dealloc, want the last one %s", got, want)
		}
	})

	t.Run("W9_type1_bind_dropped_before_it_runs_rolls_back_the_handle", func(t *testing.T) {
		for _, drop := range []struct {
			name string
			do   func(qp *engine.QP) error
		}{
			{"reset", func(qp *engine.QP) error { return qp.Modify(engine.QPAttr{State: engine.QPSReset}, engine.AttrState) }},
			{"destroy", (*engine.QP).Destroy},
		} {
			p := plainPair(t)
			mw, err := p.pdB.AllocMW(engine.MWType1)
			must(t, err)
			old := mw.RKey()
			must(t, p.qb.BindMW(mw, engine.MWBind{ID: 5, MR: p.mrB, Addr: p.mrB.Addr(), Length: 4096, Access: engine.AccessRemoteWrite}))
			must(t, drop.do(p.qb))
			p.run()
			if mw.RKey() != old {
				t.Errorf("%s: handle rkey %#x, want %#x: the bind never ran", drop.name, mw.RKey(), old)
			}
			if info, err := p.b.QueryMW(mw); err != nil || info.Bound {
				t.Errorf("%s: query %+v, %v", drop.name, info, err)
			}
		}
	})

	t.Run("W11_type2_bind_writes_rkey_back", func(t *testing.T) {
		p := plainPair(t)
		mw, err := p.pdB.AllocMW(engine.MWType2)
		must(t, err)
		newKey := uint32(keys.Key(mw.RKey()).Inc())
		must(t, p.qb.PostSend(engine.SendWR{ID: 7, Opcode: engine.WRBindMW, Flags: engine.SendSignaled,
			Bind: engine.BindInfo{MW: mw, RKey: newKey, MR: p.mrB, Addr: p.mrB.Addr(), Length: 4096, Access: engine.AccessRemoteWrite}}))
		p.run()
		wantWC(t, poll(p.cqB), engine.WC{WRID: 7, Opcode: engine.WCBindMW})
		if mw.RKey() != newKey {
			t.Fatalf("handle rkey %#x, want %#x", mw.RKey(), newKey)
		}
	})

	t.Run("W17_send_with_inv", func(t *testing.T) {
		p := plainPair(t)
		rkey := p.windowOnB(7, 4096, engine.AccessRemoteWrite).RKey()
		must(t, p.qb.PostRecv(engine.RecvWR{ID: 8, SGL: sge(p.mrB, 8192, 64)}))
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSendWithInv, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 32), Imm: rkey}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCSend})
		wantWC(t, poll(p.cqB), engine.WC{WRID: 8, Opcode: engine.WCRecv, ByteLen: 32, Flags: engine.WCWithInv, Imm: rkey})
		must(t, p.qa.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: rkey}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 2, Status: engine.WCRemAccessErr, Opcode: engine.WCRDMAWrite})
		inv := p.eventsLike(engine.EvKey, "SEND_WITH_INV psn")
		if len(inv) != 1 {
			t.Fatalf("%d invalidations recorded", len(inv))
		}
		why := fmt.Sprintf("was revoked by SEND_WITH_INV on QP 0x%06x at t=%v", p.qb.Num(), inv[0].T)
		if len(p.eventsLike(engine.EvAccess, why)) != 1 {
			t.Fatalf("no refusal says the rkey %s", why)
		}
	})

	t.Run("W18_send_with_inv_bad_rkey_is_naked", func(t *testing.T) {
		p := plainPair(t)
		must(t, p.qb.PostRecv(engine.RecvWR{ID: 8, SGL: sge(p.mrB, 0, 64)}))
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSendWithInv, SGL: sge(p.mrA, 0, 32), Imm: 0x00c0ff01}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRemInvReqErr, Opcode: engine.WCSend})
		wantWC(t, poll(p.cqB), engine.WC{WRID: 8, Status: engine.WCRemInvReqErr, Opcode: engine.WCRecv})
		if p.qb.State() != engine.QPSErr {
			t.Fatalf("responder %s", p.qb.State())
		}
	})

	t.Run("W23_unsignalled_failing_bind_then_send", func(t *testing.T) {
		p := plainPair(t)
		noBind, mw := unbindable(t, p.pdA, engine.MWType2)
		must(t, p.qa.PostSend(
			engine.SendWR{ID: 1, Opcode: engine.WRBindMW, Bind: engine.BindInfo{MW: mw, RKey: mw.RKey() + 1, MR: noBind, Addr: noBind.Addr(), Length: 64, Access: engine.AccessRemoteRead}},
			engine.SendWR{ID: 2, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8)}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCMWBindErr, Opcode: engine.WCBindMW}, engine.WC{WRID: 2, Status: engine.WCWRFlushErr, Opcode: engine.WCSend})
	})

	t.Run("T2_read_response_segmentation", func(t *testing.T) {
		p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024, PSNA: 100})
		var pcap bytes.Buffer
		must(t, p.fab.CapturePcap(&pcap))
		must(t, p.qa.PostSend(
			engine.SendWR{ID: 1, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 3073), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()},
			engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMARead, ByteLen: 3073}, engine.WC{WRID: 2, Opcode: engine.WCRDMAWrite})
		frames := captureOf(t, &pcap)
		want := []struct {
			op   wire.Opcode
			psn  uint32
			aeth bool
			n    int
		}{
			{wire.RCReadRequest, 100, false, 0},
			{wire.RCWriteOnly, 104, false, 8}, // the next request takes p+4
			{wire.RCReadResponseFirst, 100, true, 1024},
			{wire.RCReadResponseMiddle, 101, false, 1024},
			{wire.RCReadResponseMiddle, 102, false, 1024},
			{wire.RCReadResponseLast, 103, true, 1},
			{wire.RCAcknowledge, 104, true, 0},
		}
		if len(frames) != len(want) {
			t.Fatalf("%d frames, want %d: %+v", len(frames), len(want), frames)
		}
		for i, w := range want {
			f := frames[i]
			if f.op != w.op || f.psn != w.psn || f.hasAET != w.aeth || f.n != w.n {
				t.Fatalf("frame %d: %s psn %d aeth %v %d bytes, want %s psn %d aeth %v %d bytes", i, f.op, f.psn, f.hasAET, f.n, w.op, w.psn, w.aeth, w.n)
			}
		}
	})

	t.Run("T3_lost_request_packet", func(t *testing.T) {
		p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024})
		var pcap bytes.Buffer
		must(t, p.fab.CapturePcap(&pcap))
		ft := p.fab.AddFault(sim.Fault{Name: "drop psn 1", Src: "A", MatchPSN: true, PSN: 1, Nth: 1, Action: sim.FaultDrop})
		fill(p.bufA[:4096], 5)
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 4096), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite})
		if ft.Fired() != 1 || !bytes.Equal(p.bufA[:4096], p.bufB[:4096]) {
			t.Fatalf("fault fired %d, data equal %v", ft.Fired(), bytes.Equal(p.bufA[:4096], p.bufB[:4096]))
		}
		var naks []capturedFrame
		for _, f := range captureOf(t, &pcap) {
			if f.op == wire.RCAcknowledge && f.syn == wire.NAKPSNSeqError {
				naks = append(naks, f)
			}
		}
		if len(naks) != 1 || naks[0].psn != 1 {
			t.Fatalf("sequence NAKs %+v, want one for psn 1", naks)
		}
		if p.b.Stats().SeqNAKsSent != 1 || p.b.Stats().RxDropped != 2 {
			t.Fatalf("responder stats %+v: want 1 NAK and the 2 later packets dropped", p.b.Stats())
		}
	})

	t.Run("T4_replayed_send_and_atomic", func(t *testing.T) {
		p := plainPair(t)
		p.fab.AddFault(sim.Fault{Name: "dup", Src: "A", Opcodes: []wire.Opcode{wire.RCSendOnly, wire.RCFetchAdd}, Action: sim.FaultDuplicate})
		binary.LittleEndian.PutUint64(p.bufB[4096:], 10)
		must(t, p.qb.PostRecv(engine.RecvWR{ID: 8, SGL: sge(p.mrB, 0, 64)}, engine.RecvWR{ID: 9, SGL: sge(p.mrB, 64, 64)}))
		must(t, p.qa.PostSend(
			engine.SendWR{ID: 1, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 16)},
			engine.SendWR{ID: 2, Opcode: engine.WRAtomicFetchAndAdd, Flags: engine.SendSignaled, SGL: sge(p.mrA, 64, 8), RemoteAddr: p.mrB.Addr() + 4096, RKey: p.mrB.RKey(), CompareAdd: 5}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCSend}, engine.WC{WRID: 2, Opcode: engine.WCFetchAdd})
		wantWC(t, poll(p.cqB), engine.WC{WRID: 8, Opcode: engine.WCRecv, ByteLen: 16})
		if got := le64(p.bufB[4096:]); got != 15 {
			t.Fatalf("target %d: the atomic ran %d times", got, (got-10)/5)
		}
		if le64(p.bufA[64:]) != 10 || len(p.eventsLike(engine.EvRecv, "saved result replayed")) != 1 {
			t.Fatalf("original value %d; replays %d", le64(p.bufA[64:]), len(p.eventsLike(engine.EvRecv, "saved result replayed")))
		}
	})

	t.Run("T5_rnr", func(t *testing.T) {
		for _, c := range []struct {
			rnrRetry uint8
			want     engine.WCStatus
		}{{0, engine.WCRNRRetryExcErr}, {7, engine.WCSuccess}} {
			p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MinRNRTimer: 1, RNRRetry: c.rnrRetry, NoDefaults: true,
				MTU: engine.MTU1024, Timeout: 14, RetryCnt: 7, MaxRdAtomic: 4, Access: engine.AccessRemoteWrite})
			must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 16)}))
			if c.rnrRetry == 7 {
				p.sim.RunFor(5 * time.Millisecond) // 0.01 ms per retry: hundreds of RNR NAKs
				if n := len(p.eventsLike(engine.EvNAK, "RNR NAK (timer 1)")); n < 100 {
					t.Fatalf("only %d RNR NAKs in 5 ms", n)
				}
				must(t, p.qb.PostRecv(engine.RecvWR{ID: 8, SGL: sge(p.mrB, 0, 64)}))
			}
			p.run()
			wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: c.want, Opcode: engine.WCSend})
		}
	})

	t.Run("T6_retry_exhausted", func(t *testing.T) {
		p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{Timeout: 14, RetryCnt: 2})
		ft := p.fab.AddFault(sim.Fault{Name: "lose ACKs", Src: "B", Opcodes: []wire.Opcode{wire.RCAcknowledge}, Action: sim.FaultDrop})
		must(t, p.qb.PostRecv(engine.RecvWR{ID: 8, SGL: sge(p.mrB, 0, 64)}))
		start := p.sim.Now()
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, SGL: sge(p.mrA, 0, 16)}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRetryExcErr, Opcode: engine.WCSend})
		timeout := time.Duration(4096<<14) * time.Nanosecond
		if el := p.sim.Now() - start; el < 3*timeout || el > 3*timeout+time.Millisecond {
			t.Fatalf("RETRY_EXC_ERR after %v, want 3 timeouts of %v", el, timeout)
		}
		if ft.Fired() != 3 || p.a.Stats().Timeouts != 3 {
			t.Fatalf("ACKs lost %d, timeouts %d; want 3 and 3", ft.Fired(), p.a.Stats().Timeouts)
		}
	})

	t.Run("T7_bad_opcode_sequence", func(t *testing.T) {
		p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024})
		must(t, p.qb.PostRecv(engine.RecvWR{ID: 8, SGL: sge(p.mrB, 0, 8192)}))
		// A's SEND_FIRST never arrives; in its place comes a SEND_LAST with the same PSN.
		p.fab.AddFault(sim.Fault{Src: "A", Opcodes: []wire.Opcode{wire.RCSendFirst}, Nth: 1, Action: sim.FaultDrop})
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, SGL: sge(p.mrA, 0, 2048)}))
		p.sim.Step() // the requester's run: both packets are on the wire
		h := wire.Header{Opcode: wire.RCSendLast, DestQP: p.qb.Num(), PSN: 0, AckReq: true}
		frame, err := p.qa.Builder().Build(make([]byte, 2048), &h, make([]byte, 100))
		must(t, err)
		p.b.Receive(frame)
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRemInvReqErr, Opcode: engine.WCSend})
		if len(p.eventsLike(engine.EvNAK, "without a FIRST")) == 0 {
			t.Fatal("the NAK's reason was not recorded")
		}
	})
}
