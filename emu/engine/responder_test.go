package engine_test

import (
	"bytes"
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/wire"
)

// injectRequest puts a request from A straight into B's receive path, with B's next expected
// PSN, as a peer that breaks the rules would send it.
func (p *pair) injectRequest(h wire.Header, payload []byte) {
	p.t.Helper()
	h.DestQP, h.PSN, h.AckReq = p.qb.Num(), p.qb.ExpectedPSN(), true
	frame, err := p.qa.Builder().Build(make([]byte, 8192), &h, payload)
	must(p.t, err)
	p.b.Receive(frame)
	p.run()
}

// acksOf returns the syndromes of the acknowledgements in a capture, in order.
func acksOf(t testing.TB, pcap *bytes.Buffer) []wire.Syndrome {
	t.Helper()
	var out []wire.Syndrome
	for _, c := range captureOf(t, pcap) {
		if c.op == wire.RCAcknowledge {
			out = append(out, c.syn)
		}
	}
	return out
}

// TestResponderCheckOrder sends requests that break two of the responder's rules at once: the
// check that comes first in the responder's order (reference §5: CHK_OP_SEQ, CHK_OP_VALID,
// CHK_RESOURCE, CHK_LENGTH, CHK_RKEY, EXECUTE) decides the NAK.
func TestResponderCheckOrder(t *testing.T) {
	all := engine.AccessRemoteWrite | engine.AccessRemoteRead | engine.AccessRemoteAtomic
	std := engine.ConnectOptions{MTU: engine.MTU1024, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1, MaxRdAtomic: 4, Access: all, NoDefaults: true}
	for _, c := range []struct {
		name   string
		opts   func(*engine.ConnectOptions)
		recv   bool // a receive is posted at B
		header func(p *pair) wire.Header
		n      int // payload bytes
		want   wire.Syndrome
	}{
		// A SEND too long for the path MTU with no receive posted: the packet is not looked at
		// before a receive is there to take, so the requester hears "not ready" (and retries
		// after the RNR timer), not "invalid".
		{name: "T5_no_receive_before_T7_length", header: func(*pair) wire.Header { return wire.Header{Opcode: wire.RCSendOnly} },
			n: 2048, want: 0x21},
		{name: "T7_opcode_sequence_before_T5_no_receive", header: func(*pair) wire.Header { return wire.Header{Opcode: wire.RCSendLast} },
			n: 100, want: wire.NAKInvalidRequest},
		{name: "K10_qp_rights_before_rkey", opts: func(o *engine.ConnectOptions) { o.Access = engine.AccessRemoteRead },
			header: func(p *pair) wire.Header {
				return wire.Header{Opcode: wire.RCWriteOnly, VA: p.mrB.Addr(), RKey: p.mrB.RKey() + 1, DMALen: 8}
			}, n: 8, want: wire.NAKInvalidRequest},
		{name: "max_dest_rd_atomic_0_before_rkey", opts: func(o *engine.ConnectOptions) { o.MaxRdAtomic = 0 },
			header: func(p *pair) wire.Header {
				return wire.Header{Opcode: wire.RCReadRequest, VA: p.mrB.Addr(), RKey: p.mrB.RKey() + 1, DMALen: 8}
			}, want: wire.NAKInvalidRequest},
		{name: "T7_length_before_rkey", header: func(p *pair) wire.Header {
			return wire.Header{Opcode: wire.RCWriteFirst, VA: p.mrB.Addr(), RKey: p.mrB.RKey() + 1, DMALen: 4096}
		}, n: 100, want: wire.NAKInvalidRequest},
		{name: "K4_rkey_before_write_payload_length", header: func(p *pair) wire.Header {
			return wire.Header{Opcode: wire.RCWriteOnly, VA: p.mrB.Addr(), RKey: p.mrB.RKey() + 1, DMALen: 8}
		}, n: 16, want: wire.NAKRemoteAccess},
		// rxe finds a misaligned atomic when it runs it (RESPST_ERR_MISALIGNED_ATOMIC from the
		// atomic reply), after check_rkey: a bad rkey wins.
		{name: "K4_rkey_before_K12_alignment", header: func(p *pair) wire.Header {
			return wire.Header{Opcode: wire.RCCompareSwap, VA: p.mrB.Addr() + 1, RKey: p.mrB.RKey() + 1}
		}, want: wire.NAKRemoteAccess},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := std
			if c.opts != nil {
				c.opts(&o)
			}
			p := newPair(t, 1, sim.LinkConfig{}, o)
			var pcap bytes.Buffer
			must(t, p.fab.CapturePcap(&pcap))
			p.injectRequest(c.header(p), make([]byte, c.n))
			if got := acksOf(t, &pcap); len(got) != 1 || got[0] != c.want {
				t.Fatalf("B answered %v, want [%s]", got, c.want)
			}
			wantState := engine.QPSErr
			if c.want&0xe0 == 0x20 {
				wantState = engine.QPSRTS
			}
			if s := p.qb.State(); s != wantState {
				t.Fatalf("B's QP is %s, want %s", s, wantState)
			}
		})
	}
}

// TestResponderRNRThenLengthNAK: a SEND too long for the path MTU is RNR NAKed while no receive
// is posted and refused (NAK 0x61) when it comes again with one there. It is refused before
// its receive is taken, so the receive is flushed with the QP, not completed with the error.
func TestResponderRNRThenLengthNAK(t *testing.T) {
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024, MinRNRTimer: 1})
	var pcap bytes.Buffer
	must(t, p.fab.CapturePcap(&pcap))
	p.injectRequest(wire.Header{Opcode: wire.RCSendOnly}, make([]byte, 2048))
	if s := p.qb.State(); s != engine.QPSRTS {
		t.Fatalf("B's QP is %s after the RNR NAK, want RTS", s)
	}
	must(t, p.qb.PostRecv(engine.RecvWR{ID: 8, SGL: sge(p.mrB, 0, 4096)}, engine.RecvWR{ID: 9, SGL: sge(p.mrB, 0, 4096)}))
	p.injectRequest(wire.Header{Opcode: wire.RCSendOnly}, make([]byte, 2048)) // the RNR retry
	if got := acksOf(t, &pcap); !bytes.Equal(syndromeBytes(got), []byte{0x21, byte(wire.NAKInvalidRequest)}) {
		t.Fatalf("B answered %v, want an RNR NAK and then NAK 0x61", got)
	}
	wantWC(t, poll(p.cqB), engine.WC{WRID: 8, Status: engine.WCWRFlushErr, Opcode: engine.WCRecv}, engine.WC{WRID: 9, Status: engine.WCWRFlushErr, Opcode: engine.WCRecv})
}

func syndromeBytes(s []wire.Syndrome) []byte {
	b := make([]byte, len(s))
	for i, v := range s {
		b[i] = byte(v)
	}
	return b
}
