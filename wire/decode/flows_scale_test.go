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
