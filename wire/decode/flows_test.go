package decode

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/wire"
)

// conversation builds an RC conversation between A (10.0.0.1, QP 0x11) and B (10.0.0.2, QP 0x22)
// and feeds it to a Flows, frame by frame, one millisecond apart.
type conversation struct {
	t     *testing.T
	fl    *Flows
	ab    *wire.Builder
	ba    *wire.Builder
	now   time.Time
	p     wire.Parser
	f     wire.Frame
	buf   []byte
	count int
}

func newConversation(t *testing.T) *conversation {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	return &conversation{
		t: t, fl: NewFlows(),
		ab:  wire.NewBuilder(wire.Path{SrcIP: a, DstIP: b, SrcPort: 50001}),
		ba:  wire.NewBuilder(wire.Path{SrcIP: b, DstIP: a, SrcPort: 50002}),
		now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
		buf: make([]byte, 2048),
	}
}

// send adds one frame; from A when fromA, else from B. corrupt flips a payload bit.
func (c *conversation) send(fromA bool, h wire.Header, payload int, corrupt bool) {
	c.t.Helper()
	bl := c.ba
	h.DestQP = 0x11
	if fromA {
		bl, h.DestQP = c.ab, 0x22
	}
	fr, err := bl.Build(c.buf, &h, make([]byte, payload))
	if err != nil {
		c.t.Fatal(err)
	}
	if corrupt {
		fr[len(fr)-5] ^= 1
	}
	err = c.p.Parse(&c.f, fr)
	if err != nil && !corrupt {
		c.t.Fatal(err)
	}
	c.now = c.now.Add(time.Millisecond)
	c.fl.Add(&c.f, c.now, len(fr), err == nil)
	c.count++
}

func (c *conversation) wait(d time.Duration) { c.now = c.now.Add(d) }

func TestFlows(t *testing.T) {
	c := newConversation(t)
	A, B := true, false
	ack := func(psn, msn uint32) wire.Header {
		return wire.Header{Opcode: wire.RCAcknowledge, PSN: psn, Syndrome: wire.ACKUnlimited, MSN: msn}
	}
	c.send(A, wire.Header{Opcode: wire.RCSendFirst, PSN: 100}, 1024, false)
	c.send(A, wire.Header{Opcode: wire.RCSendLast, PSN: 101, AckReq: true}, 10, false)
	c.send(B, ack(101, 1), 0, false)
	c.send(A, wire.Header{Opcode: wire.RCWriteOnly, PSN: 102, RKey: 0x1234, DMALen: 8, AckReq: true}, 8, false)
	c.send(B, ack(102, 2), 0, false)
	// A READ of 2048 bytes uses PSNs 103 and 104 at MTU 1024.
	c.send(A, wire.Header{Opcode: wire.RCReadRequest, PSN: 103, RKey: 0x5678, DMALen: 2048}, 0, false)
	c.send(B, wire.Header{Opcode: wire.RCReadResponseFirst, PSN: 103, Syndrome: wire.ACKUnlimited, MSN: 3}, 1024, false)
	c.send(B, wire.Header{Opcode: wire.RCReadResponseLast, PSN: 104, Syndrome: wire.ACKUnlimited, MSN: 3}, 1024, false)
	c.send(A, wire.Header{Opcode: wire.RCFetchAdd, PSN: 105, RKey: 0x1234, SwapAdd: 1}, 0, false)
	c.send(B, wire.Header{Opcode: wire.RCAtomicAcknowledge, PSN: 105, Syndrome: wire.ACKUnlimited, MSN: 4, Orig: 7}, 0, false)
	// Left unanswered: a READ and a compare-and-swap.
	c.send(A, wire.Header{Opcode: wire.RCReadRequest, PSN: 106, RKey: 0x5678, DMALen: 100}, 0, false)
	c.send(A, wire.Header{Opcode: wire.RCCompareSwap, PSN: 107, RKey: 0x1234}, 0, false)
	// PSN 108 is lost: B NAKs the sequence error, A goes back to 108.
	c.send(A, wire.Header{Opcode: wire.RCSendOnly, PSN: 109, AckReq: true}, 4, false)
	c.send(B, wire.Header{Opcode: wire.RCAcknowledge, PSN: 108, Syndrome: wire.NAKPSNSeqError, MSN: 4}, 0, false)
	c.send(A, wire.Header{Opcode: wire.RCSendOnly, PSN: 108}, 4, false)
	c.send(A, wire.Header{Opcode: wire.RCSendOnly, PSN: 109, AckReq: true}, 4, false)
	c.send(B, ack(109, 6), 0, false)
	c.send(B, ack(109, 6), 0, false) // a re-ACK
	// RNR: B has no receive buffer, asks for 0.01 ms; A comes back 5 ms later.
	c.send(A, wire.Header{Opcode: wire.RCSendOnly, PSN: 110, AckReq: true}, 4, false)
	c.send(B, wire.Header{Opcode: wire.RCAcknowledge, PSN: 110, Syndrome: 0x21, MSN: 6}, 0, false)
	c.wait(4 * time.Millisecond)
	c.send(A, wire.Header{Opcode: wire.RCSendOnly, PSN: 110, AckReq: true}, 4, false)
	c.send(B, ack(110, 7), 0, false)
	c.send(A, wire.Header{Opcode: wire.RCSendOnlyInv, PSN: 111, InvRKey: 0x9999, AckReq: true}, 4, true)
	c.send(A, wire.Header{Opcode: wire.RCSendOnlyInv, PSN: 111, InvRKey: 0x9999, AckReq: true}, 4, false)
	c.send(B, ack(111, 8), 0, false)
	// A remote access error on a WRITE.
	c.send(A, wire.Header{Opcode: wire.RCWriteOnly, PSN: 112, RKey: 0x1234, DMALen: 4, AckReq: true}, 4, false)
	c.send(B, wire.Header{Opcode: wire.RCAcknowledge, PSN: 112, Syndrome: wire.NAKRemoteAccess, MSN: 8}, 0, false)

	conns := c.fl.Conns()
	if len(conns) != 1 || conns[0].B == nil {
		t.Fatalf("want one paired connection, got %d (%+v)", len(conns), conns)
	}
	a, b := conns[0].A, conns[0].B
	if a.Src != netip.MustParseAddr("10.0.0.1") || a.DestQP != 0x22 || b.DestQP != 0x11 {
		t.Fatalf("directions: %v->%v %#x / %#x", a.Src, a.Dst, a.DestQP, b.DestQP)
	}
	check := func(name string, got, want int) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	check("A packets", a.Packets, 15)
	check("A requests", a.Requests, 14)
	check("A responses", a.Responses, 0)
	// SEND, WRITE, READ, FETCH_ADD, READ, CMP_SWAP, SEND 109, SEND 110, SEND_INV, WRITE. The
	// sends of 108, 109 and 110 after the NAK and the RNR NAK are resends (108's first
	// transmission is the one the capture missed), not new messages.
	check("A messages", a.Messages, 10)
	check("A first PSN", int(a.FirstPSN), 100)
	check("A last PSN", int(a.LastPSN), 112)
	check("A retransmits", a.Retransmits, 3)
	check("A gaps", a.Gaps, 1)
	check("A missing PSNs", a.MissingPSNs, 1)
	check("A icrc_bad", a.ICRCBad, 1)
	check("A outstanding reads", a.OutstandingReads, 1)
	check("A outstanding atomics", a.OutstandingAtomics, 1)
	check("B responses", b.Responses, 12)
	check("B dup ACKs", b.DupACKs, 1)
	check("B NAK seq", b.NAKs["NAK_PSN_SEQ_ERR"], 1)
	check("B NAK access", b.NAKs["NAK_REM_ACCESS"], 1)
	check("B RNR", b.NAKs["RNR"], 1)
	if b.RNRWaitAdvertised != 10*time.Microsecond || b.RNRWaitObserved != 5*time.Millisecond {
		t.Errorf("RNR waits: advertised %v observed %v", b.RNRWaitAdvertised, b.RNRWaitObserved)
	}
	if len(a.RKeys) != 3 {
		t.Fatalf("rkeys %+v", a.RKeys)
	}
	for i, want := range []struct {
		key  uint32
		uses int
		ops  string
	}{{0x1234, 4, "WRITE,ATOMIC"}, {0x5678, 2, "READ"}, {0x9999, 1, "INVALIDATE"}} {
		u := a.RKeys[i]
		ops := ""
		for j, o := range u.Ops {
			if j > 0 {
				ops += ","
			}
			ops += o
		}
		if u.RKey != want.key || u.Uses != want.uses || ops != want.ops {
			t.Errorf("rkey %d: %#x uses=%d ops=%s, want %#x %d %s", i, u.RKey, u.Uses, ops, want.key, want.uses, want.ops)
		}
		if !u.Last.After(u.First) && u.Uses > 1 {
			t.Errorf("rkey %#x: first %v last %v", u.RKey, u.First, u.Last)
		}
	}
	if lines := conns[0].Lines(); len(lines) < 3 || lines[0] != "conn 10.0.0.2 qp=0x000022 <-> 10.0.0.1 qp=0x000011" {
		t.Errorf("lines: %q", lines)
	}
}

func TestFlowsRestartAndPairing(t *testing.T) {
	// Two QPs between the same hosts, paired by rxe's source-port hash.
	fl := NewFlows()
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	var p wire.Parser
	var f wire.Frame
	buf := make([]byte, 256)
	now := time.Unix(0, 0)
	add := func(src, dst netip.Addr, ownQP, destQP uint32, h wire.Header) {
		h.DestQP = destQP
		fr, err := wire.NewBuilder(wire.Path{SrcIP: src, DstIP: dst, SrcPort: rxeSrcPort(ownQP, destQP)}).Build(buf, &h, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Parse(&f, fr); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Millisecond)
		fl.Add(&f, now, len(fr), true)
	}
	add(a, b, 0x11, 0x21, wire.Header{Opcode: wire.RCSendOnly, PSN: 5})
	add(a, b, 0x12, 0x22, wire.Header{Opcode: wire.RCSendOnly, PSN: 9})
	add(b, a, 0x22, 0x12, wire.Header{Opcode: wire.RCAcknowledge, PSN: 9, MSN: 1})
	add(b, a, 0x21, 0x11, wire.Header{Opcode: wire.RCAcknowledge, PSN: 5, MSN: 1})
	// The QP 0x21 conversation restarts far away in PSN space: a new QP with the same number.
	add(a, b, 0x11, 0x21, wire.Header{Opcode: wire.RCSendOnly, PSN: 0x800000})
	cs := fl.Conns()
	if len(cs) != 2 {
		t.Fatalf("%d connections", len(cs))
	}
	for _, c := range cs {
		if c.B == nil {
			t.Fatalf("unpaired %#x", c.A.DestQP)
		}
		if d := int(c.A.DestQP) - int(c.B.DestQP); d != 0x10 && d != -0x10 {
			t.Errorf("bad pairing %#x / %+v", c.A.DestQP, c.B)
		}
	}
	if cs[0].A.Restarts != 1 || cs[0].A.Retransmits != 0 || cs[0].A.Gaps != 0 {
		t.Errorf("restart: %+v", cs[0].A)
	}
}

func TestPSNArithmetic(t *testing.T) {
	for _, c := range []struct {
		a, b uint32
		d    int32
	}{{5, 3, 2}, {3, 5, -2}, {0, 0xFFFFFF, 1}, {0xFFFFFF, 0, -1}, {0x7FFFFF, 0, 0x7FFFFF}} {
		if got := psnDiff(c.a, c.b); got != c.d {
			t.Errorf("psnDiff(%#x, %#x) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
	// As captured from rxe: QPs 0x11 to 0x14 talking to QPs of the same number.
	for qp, want := range map[uint32]uint16{0x11: 49441, 0x12: 49476, 0x13: 49513, 0x14: 49552} {
		if got := rxeSrcPort(qp, qp); got != want {
			t.Errorf("rxe source port of QPs %#x: %d, want %d", qp, got, want)
		}
	}
}

// manyConns describes a capture of n RC connections between two hosts, each a SEND_ONLY from A
// and its ACK from B. Connection i joins QP qpA(i) on A with QP qpB(i) on B.
type manyConns struct {
	n int
	// rxePorts gives both directions rxe's source port (pairing by port); otherwise every
	// direction has its own port, connections come in interleaved twos and pair by PSN.
	rxePorts bool
	// badEvery, when not 0, follows every badEvery-th ACK with a copy whose destination QP is
	// garbled (bad ICRC, unknown QP) and a copy of the request with a flipped payload bit (bad
	// ICRC, known QP).
	badEvery int
}

func (m manyConns) qpA(i int) uint32  { return uint32(0x100 + i) }
func (m manyConns) qpB(i int) uint32  { return uint32(0x100 + m.n + i) }
func (m manyConns) psn(i int) uint32  { return uint32(i*7919) & wire.PSNMask }
func (m manyConns) bad(i int) bool    { return m.badEvery > 0 && i%m.badEvery == 0 }
func (m manyConns) port(i int) uint16 { return uint16(49152 + i%16384) }

// pcap writes the capture as classic pcap with Ethernet frames.
func (m manyConns) pcap(tb testing.TB, w io.Writer) {
	tb.Helper()
	cw := newCaptureWriter(tb, w, time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), time.Microsecond)
	a, b := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2")
	ab := wire.NewBuilder(wire.Path{SrcIP: a, DstIP: b})
	ba := wire.NewBuilder(wire.Path{SrcIP: b, DstIP: a})
	buf := make([]byte, 256)
	write := cw.add
	build := func(bl *wire.Builder, h wire.Header, payload []byte) []byte {
		fr, err := bl.Build(buf, &h, payload)
		if err != nil {
			tb.Fatal(err)
		}
		return fr
	}
	req := func(i int) {
		ab.Path.SrcPort = rxeSrcPort(m.qpA(i), m.qpB(i))
		if !m.rxePorts {
			ab.Path.SrcPort = m.port(2 * i)
		}
		fr := build(ab, wire.Header{Opcode: wire.RCSendOnly, DestQP: m.qpB(i), PSN: m.psn(i), AckReq: true}, []byte("ping"))
		write(fr)
		if m.bad(i) {
			fr[len(fr)-5] ^= 1
			write(fr)
		}
	}
	ack := func(i int) {
		ba.Path.SrcPort = rxeSrcPort(m.qpB(i), m.qpA(i))
		if !m.rxePorts {
			ba.Path.SrcPort = m.port(2*i + 1)
		}
		fr := build(ba, wire.Header{Opcode: wire.RCAcknowledge, DestQP: m.qpA(i), PSN: m.psn(i), Syndrome: wire.ACKUnlimited, MSN: 1}, nil)
		write(fr)
		if m.bad(i) {
			fr[len(fr)-wire.ICRCLen-wire.AETHLen-wire.BTHLen+6] ^= 0x40 // the BTH's destination QP
			write(fr)
		}
	}
	for i := 0; i < m.n; i++ {
		if m.rxePorts || i+1 == m.n {
			req(i)
			ack(i)
			continue
		}
		// Two connections at once between the same hosts: neither the port nor the count of
		// unpaired directions tells them apart, the PSNs do.
		req(i)
		req(i + 1)
		ack(i + 1)
		ack(i)
		i++
	}
}

func (m manyConns) capture(tb testing.TB) []byte {
	var b bytes.Buffer
	m.pcap(tb, &b)
	return b.Bytes()
}

// TestFlowsManyConns decodes captures of many connections with -flows: every connection is found
// and paired, whichever way it pairs, and frames with a bad ICRC add no connection.
func TestFlowsManyConns(t *testing.T) {
	for _, m := range []manyConns{
		{n: 3000, rxePorts: true, badEvery: 100},
		{n: 3000, rxePorts: false, badEvery: 100},
	} {
		t.Run(fmt.Sprintf("rxe=%v", m.rxePorts), func(t *testing.T) {
			var out bytes.Buffer
			sum, err := Run(bytes.NewReader(m.capture(t)), &out, Options{Flows: true, JSON: true})
			if err != nil {
				t.Fatal(err)
			}
			bad := 0
			for i := range m.n {
				if m.bad(i) {
					bad += 2
				}
			}
			if sum.RoCEv2 != 2*m.n+bad || sum.ICRCBad != bad || sum.ICRCOK != 2*m.n {
				t.Fatalf("summary %+v", sum)
			}
			if got := strings.Count(out.String(), `{"type":"flow"`); got != m.n {
				t.Errorf("%d flow objects, want %d", got, m.n)
			}
			fl := NewFlows()
			var (
				p wire.Parser
				f wire.Frame
			)
			pr, err := wire.NewPcapReader(bytes.NewReader(m.capture(t)))
			if err != nil {
				t.Fatal(err)
			}
			for {
				data, ci, err := pr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				perr := p.Parse(&f, data)
				fl.Add(&f, ci.Timestamp, ci.Length, perr == nil)
			}
			conns := fl.Conns()
			if len(conns) != m.n {
				t.Fatalf("%d connections, want %d", len(conns), m.n)
			}
			for i, c := range conns {
				if c.B == nil {
					t.Fatalf("connection %d not paired: %+v", i, c.A)
				}
				if c.A.DestQP != m.qpB(i) || c.B.DestQP != m.qpA(i) {
					t.Fatalf("connection %d pairs QP %#x with %#x, want %#x with %#x", i, c.A.DestQP, c.B.DestQP, m.qpB(i), m.qpA(i))
				}
				wantBad := 0
				if m.bad(i) {
					wantBad = 1
				}
				if c.A.Packets != 1+wantBad || c.A.ICRCBad != wantBad || c.A.Requests != 1 || c.B.Responses != 1 || c.B.ICRCBad != 0 {
					t.Fatalf("connection %d: %+v / %+v", i, c.A, c.B)
				}
			}
		})
	}
}

var connsOut = flag.String("conns.out", "", "TestWriteManyConns writes a capture of -conns.n RC connections to this file")
var connsN = flag.Int("conns.n", 120000, "connections for -conns.out")

// TestWriteManyConns writes the capture TestFlowsManyConns uses, at a size given on the command
// line, for timing `softirdma decode -flows` by hand:
//
//	go test ./wire/decode -run TestWriteManyConns -conns.out=/tmp/conns.pcap -conns.n=120000
func TestWriteManyConns(t *testing.T) {
	if *connsOut == "" {
		t.Skip("no -conns.out")
	}
	f, err := os.Create(*connsOut)
	if err != nil {
		t.Fatal(err)
	}
	manyConns{n: *connsN, rxePorts: true}.pcap(t, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkFlowsConns decodes a capture with -flows at several numbers of connections; ns/conn
// stays flat when the work is linear in the connections.
func BenchmarkFlowsConns(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		for _, rxe := range []bool{true, false} {
			m := manyConns{n: n, rxePorts: rxe}
			b.Run(fmt.Sprintf("conns=%d/rxe=%v", n, rxe), func(b *testing.B) {
				data := m.capture(b)
				b.SetBytes(int64(len(data)))
				b.ResetTimer()
				for b.Loop() {
					if _, err := Run(bytes.NewReader(data), io.Discard, Options{Flows: true}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/conn")
			})
		}
	}
}
