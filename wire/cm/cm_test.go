package cm_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/softirdma/softirdma/wire"
	"github.com/softirdma/softirdma/wire/cm"
	"github.com/softirdma/softirdma/wire/internal/pcaptest"
	"github.com/softirdma/softirdma/wire/mad"
)

// captured is one CM message of testdata/pcap/rxe-rdmacm.pcap: two Linux 6.12 guests on rxe running
// rping, ucmatose, udaddy and ib_write_bw -R against each other.
type captured struct {
	src, dst netip.Addr
	attr     uint16
	data     []byte
}

func capturedCM(t *testing.T) []captured {
	t.Helper()
	var out []captured
	var p wire.Parser
	var fr wire.Frame
	for _, data := range pcaptest.Frames(t, "../../testdata/pcap/rxe-rdmacm.pcap") {
		if p.Parse(&fr, data) != nil || fr.DETH == nil || fr.BTH.DestQP() != 1 {
			continue
		}
		h, err := mad.Parse(fr.Payload)
		if err != nil || h.MgmtClass != mad.ClassCM {
			t.Fatalf("QP1 datagram is not a CM MAD: %v %+v", err, h)
		}
		out = append(out, captured{fr.SrcIP(), fr.DstIP(), h.AttrID, bytes.Clone(fr.Payload[mad.HeaderLen:])})
	}
	return out
}

// TestLinuxMessages reads every CM message Linux sent in the capture, checks what rdma_cm and
// the tools put in them, and writes each back byte for byte.
func TestLinuxMessages(t *testing.T) {
	msgs := capturedCM(t)
	counts := map[uint16]int{}
	a, b := netip.MustParseAddr("192.168.77.3"), netip.MustParseAddr("192.168.77.2")
	var firstREQ cm.REQ
	for i, m := range msgs {
		counts[m.attr]++
		buf := make([]byte, cm.DataLen)
		var err error
		switch m.attr {
		case cm.AttrREQ:
			var q cm.REQ
			q, err = cm.ParseREQ(m.data)
			if err == nil {
				err = q.Put(buf)
			}
			if counts[cm.AttrREQ] == 1 {
				firstREQ = q
			}
		case cm.AttrREP:
			var q cm.REP
			q, err = cm.ParseREP(m.data)
			if err == nil {
				err = q.Put(buf)
			}
		case cm.AttrRTU, cm.AttrDREP, cm.AttrDREQ:
			var q cm.Pair
			put := q.PutRTU
			switch m.attr {
			case cm.AttrRTU:
				q, err = cm.ParseRTU(m.data)
			case cm.AttrDREP:
				q, err = cm.ParseDREP(m.data)
				put = q.PutDREP
			default:
				q, err = cm.ParseDREQ(m.data)
				put = q.PutDREQ
			}
			if err == nil {
				q.Private = bytes.Clone(q.Private)
				err = put(buf)
			}
		case cm.AttrSIDRREQ:
			var q cm.SIDRREQ
			q, err = cm.ParseSIDRREQ(m.data)
			if err == nil {
				err = q.Put(buf)
			}
		case cm.AttrSIDRREP:
			var q cm.SIDRREP
			q, err = cm.ParseSIDRREP(m.data)
			if err == nil {
				err = q.Put(buf)
			}
		default:
			t.Fatalf("message %d: attribute 0x%x", i, m.attr)
		}
		if err != nil {
			t.Fatalf("message %d (0x%x): %v", i, m.attr, err)
		}
		if !bytes.Equal(buf, m.data) {
			t.Fatalf("message %d (attribute 0x%x) written back differs:\n% x\n% x", i, m.attr, buf, m.data)
		}
	}
	// rping, ucmatose's two connections, ib_write_bw -R: five REQs, REPs and RTUs; udaddy: one SIDR.
	if counts[cm.AttrREQ] != 5 || counts[cm.AttrREP] != 5 || counts[cm.AttrRTU] != 5 || counts[cm.AttrSIDRREQ] != 1 ||
		counts[cm.AttrSIDRREP] != 1 || counts[cm.AttrDREQ] != 5 || counts[cm.AttrDREP] != 5 {
		t.Fatalf("messages by attribute: %v", counts)
	}
	// rping's REQ: RC, to port 7174 in the TCP port space, rdma_cm's header with both addresses.
	ps, port, ok := cm.SplitServiceID(firstREQ.ServiceID)
	if !ok || ps != cm.PSTCP || port != 7174 || firstREQ.ServiceID != 0x0000000001061c06 {
		t.Fatalf("service ID 0x%x: %s %d %v", firstREQ.ServiceID, ps, port, ok)
	}
	h, err := cm.ParseHeader(firstREQ.Private[:])
	if err != nil || h.IPv6 || h.Src != a || h.Dst != b || h.SrcPort == 0 {
		t.Fatalf("rdma_cm header %+v: %v", h, err)
	}
	if firstREQ.TransportServiceType != 0 || firstREQ.LocalQPN == 0 || firstREQ.PKey != 0xffff ||
		firstREQ.Primary.LocalGID != a.As16() && firstREQ.Primary.LocalGID != netip.AddrFrom16(a.As16()).As16() {
		t.Fatalf("REQ %+v", firstREQ)
	}
}

// TestRoundTrip: every message type written and read back gives what was written.
func TestRoundTrip(t *testing.T) {
	buf := make([]byte, cm.DataLen)
	req := cm.REQ{LocalCommID: 0x12345678, ServiceID: cm.ServiceID(cm.PSTCP, 7174), LocalCAGUID: 0x0252540000007702,
		LocalQPN: 0xabcdef, ResponderResources: 16, InitiatorDepth: 16, RemoteCMResponseTimeout: 20, TransportServiceType: 1,
		EndToEndFlowControl: true, StartingPSN: 0x123456, LocalCMResponseTimeout: 20, RetryCount: 7, PKey: 0xffff, PathMTU: 3,
		RNRRetryCount: 7, MaxCMRetries: 15, SRQ: true, ExtendedTransportType: 0,
		Primary:      cm.Path{FlowLabel: 0xfffff, PacketRate: 0x3f, TrafficClass: 0x20, HopLimit: 64, SL: 15, SubnetLocal: true, LocalACKTimeout: 18},
		SAPSupported: true}
	req.Private[0] = 0x42
	must(t, req.Put(buf))
	if got, err := cm.ParseREQ(buf); err != nil || got != req {
		t.Fatalf("REQ: %+v %v", got, err)
	}
	rep := cm.REP{LocalCommID: 1, RemoteCommID: 2, LocalQKey: 3, LocalQPN: 0xffffff, LocalEECN: 5, StartingPSN: 0xfffffe, ResponderResources: 7,
		InitiatorDepth: 8, TargetACKDelay: 31, FailoverAccepted: 3, EndToEndFlowControl: true, RNRRetryCount: 7, SRQ: true, LocalCAGUID: 9}
	must(t, rep.Put(buf))
	if got, err := cm.ParseREP(buf); err != nil || got != rep {
		t.Fatalf("REP: %+v %v", got, err)
	}
	rej := cm.REJ{LocalCommID: 1, RemoteCommID: 2, MessageRejected: 2, RejectedInfoLength: 72, Reason: cm.RejConsumerDefined}
	rej.Private[147] = 9
	must(t, rej.Put(buf))
	if got, err := cm.ParseREJ(buf); err != nil || got != rej || got.Reason.String() != "CONSUMER_DEFINED" {
		t.Fatalf("REJ: %+v %v", got, err)
	}
	mra := cm.MRA{LocalCommID: 1, RemoteCommID: 2, MessageMRAed: 1, ServiceTimeout: 31}
	must(t, mra.Put(buf))
	if got, err := cm.ParseMRA(buf); err != nil || got != mra {
		t.Fatalf("MRA: %+v %v", got, err)
	}
	dreq := cm.Pair{LocalCommID: 1, RemoteCommID: 2, RemoteQPN: 0x123456, Private: []byte("bye")}
	must(t, dreq.PutDREQ(buf))
	if got, err := cm.ParseDREQ(buf); err != nil || got.RemoteQPN != 0x123456 || string(got.Private[:3]) != "bye" {
		t.Fatalf("DREQ: %+v %v", got, err)
	}
	if err := (&cm.Pair{Private: make([]byte, 221)}).PutDREQ(buf); err == nil {
		t.Fatal("a DREQ with 221 bytes of private data")
	}
	sreq := cm.SIDRREQ{RequestID: 7, PKey: 0xffff, ServiceID: cm.ServiceID(cm.PSUDP, 7174)}
	must(t, sreq.Put(buf))
	if got, err := cm.ParseSIDRREQ(buf); err != nil || got != sreq {
		t.Fatalf("SIDR_REQ: %+v %v", got, err)
	}
	srep := cm.SIDRREP{RequestID: 7, Status: cm.SIDRNoQP, AddInfoLen: 3, QPN: 0x11, ServiceID: sreq.ServiceID, QKey: 0x01234567}
	must(t, srep.Put(buf))
	if got, err := cm.ParseSIDRREP(buf); err != nil || got != srep || got.Status.String() != "NO_QP" {
		t.Fatalf("SIDR_REP: %+v %v", got, err)
	}
	for _, h := range []cm.Header{
		{SrcPort: 40000, Src: netip.MustParseAddr("192.168.77.3"), Dst: netip.MustParseAddr("192.168.77.2")},
		{IPv6: true, SrcPort: 1, Src: netip.MustParseAddr("fe80::1"), Dst: netip.MustParseAddr("fe80::2")},
	} {
		p := make([]byte, cm.REQPrivateLen)
		must(t, h.Put(p))
		if got, err := cm.ParseHeader(p); err != nil || got != h {
			t.Fatalf("header %+v: %+v %v", h, got, err)
		}
	}
	if _, err := cm.ParseREQ(buf[:100]); err == nil {
		t.Fatal("a 100-byte REQ parsed")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// FuzzMessages: any 232 bytes parse as every message type without a panic, and what parses
// writes back to the same bytes in every field the message has (reserved bits aside: written
// back, then parsed again, it is the same message).
func FuzzMessages(f *testing.F) {
	seed := make([]byte, cm.DataLen)
	f.Add(seed)
	for i := range seed {
		seed[i] = byte(i * 37)
	}
	f.Add(seed)
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		buf := make([]byte, cm.DataLen)
		if len(b) != cm.DataLen {
			if _, err := cm.ParseREQ(b); err == nil {
				t.Fatal("wrong length parsed")
			}
			return
		}
		roundTrip(t, "REQ", b, cm.ParseREQ, (*cm.REQ).Put)
		roundTrip(t, "REP", b, cm.ParseREP, (*cm.REP).Put)
		roundTrip(t, "REJ", b, cm.ParseREJ, (*cm.REJ).Put)
		roundTrip(t, "MRA", b, cm.ParseMRA, (*cm.MRA).Put)
		roundTrip(t, "SIDR_REQ", b, cm.ParseSIDRREQ, (*cm.SIDRREQ).Put)
		roundTrip(t, "SIDR_REP", b, cm.ParseSIDRREP, (*cm.SIDRREP).Put)
		if m, err := cm.ParseREJ(b); err == nil {
			_ = m.Reason.String()
		}
		if m, err := cm.ParseSIDRREP(b); err == nil {
			_ = m.Status.String()
		}
		if m, err := cm.ParseDREQ(b); err == nil {
			m.Private = bytes.Clone(m.Private)
			must(t, m.PutDREQ(buf))
			if n, _ := cm.ParseDREQ(buf); n.RemoteQPN != m.RemoteQPN || !bytes.Equal(n.Private, m.Private) {
				t.Fatal("DREQ")
			}
		}
	})
}

// roundTrip checks that the message parse reads from b writes back with put and parses again to
// itself.
func roundTrip[T comparable](t *testing.T, name string, b []byte, parse func([]byte) (T, error), put func(*T, []byte) error) {
	t.Helper()
	m, err := parse(b)
	if err != nil {
		return
	}
	buf := make([]byte, cm.DataLen)
	must(t, put(&m, buf))
	if n, err := parse(buf); err != nil || n != m {
		t.Fatalf("%s %+v != %+v (%v)", name, n, m, err)
	}
}

// FuzzHeader: any private data gives rdma_cm's header or an error, never a panic; a header that
// parses writes back and parses to itself.
func FuzzHeader(f *testing.F) {
	p := make([]byte, cm.HeaderLen)
	p[1] = 0x40
	f.Add(p)
	q := make([]byte, cm.HeaderLen)
	q[1] = 0x60
	f.Add(q)
	f.Add([]byte{0, 0x40})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := cm.ParseHeader(b)
		if err != nil {
			return
		}
		out := make([]byte, cm.HeaderLen)
		must(t, h.Put(out))
		if g, err := cm.ParseHeader(out); err != nil || g != h {
			t.Fatalf("%+v -> %+v %v", h, g, err)
		}
	})
}
