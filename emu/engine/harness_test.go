package engine_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
)

// pair is two devices on a simulated fabric with one RC connection between them, and a
// registered buffer on each side: the fixture most tests start from.
type pair struct {
	t        testing.TB
	sim      *sim.Sim
	fab      *sim.Fabric
	a, b     *engine.Device
	pdA, pdB *engine.PD
	cqA, cqB *engine.CQ
	qa, qb   *engine.QP
	bufA     []byte
	bufB     []byte
	mrA, mrB *engine.MR
	events   []engine.Event
}

func newPair(t testing.TB, seed uint64, link sim.LinkConfig, o engine.ConnectOptions) *pair {
	t.Helper()
	return newPairWith(t, seed, link, o, make([]byte, 4<<20), make([]byte, 4<<20))
}

// newPairWith is newPair with the buffers given.
func newPairWith(t testing.TB, seed uint64, link sim.LinkConfig, o engine.ConnectOptions, bufA, bufB []byte) *pair {
	t.Helper()
	p := &pair{t: t, sim: sim.NewSim()}
	p.fab = sim.NewFabric(p.sim, seed)
	p.fab.OnEvent(func(e engine.Event) { p.events = append(p.events, e) })
	p.a = p.fab.AddDevice("A", link)
	p.b = p.fab.AddDevice("B", link)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	p.pdA, err = p.a.AllocPD()
	must(err)
	p.pdB, err = p.b.AllocPD()
	must(err)
	p.cqA, err = p.a.CreateCQ(4096)
	must(err)
	p.cqB, err = p.b.CreateCQ(4096)
	must(err)
	caps := engine.QPCap{MaxSendWR: 512, MaxRecvWR: 512, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}
	p.qa, err = p.pdA.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: p.cqA, RecvCQ: p.cqA, Cap: caps})
	must(err)
	p.qb, err = p.pdB.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: p.cqB, RecvCQ: p.cqB, Cap: caps})
	must(err)
	must(engine.ConnectRC(p.qa, p.qb, o))
	all := engine.AccessLocalWrite | engine.AccessRemoteWrite | engine.AccessRemoteRead | engine.AccessRemoteAtomic | engine.AccessMWBind
	p.bufA, p.bufB = bufA, bufB
	p.mrA, err = p.pdA.RegMR(p.bufA, all)
	must(err)
	p.mrB, err = p.pdB.RegMR(p.bufB, all)
	must(err)
	return p
}

// run drives the simulator until nothing is left to do.
func (p *pair) run() {
	p.t.Helper()
	if n := p.sim.RunUntilIdle(5_000_000); n == 5_000_000 {
		p.t.Fatalf("simulation still busy after %d events", n)
	}
}

// poll returns every completion waiting on cq.
func poll(cq *engine.CQ) []engine.WC {
	var out []engine.WC
	buf := make([]engine.WC, 64)
	for {
		n := cq.Poll(buf)
		out = append(out, buf[:n]...)
		if n < len(buf) {
			return out
		}
	}
}

// sge names n bytes at offset off of mr.
func sge(mr *engine.MR, off uint64, n uint32) []engine.SGE {
	return []engine.SGE{{Addr: mr.Addr() + off, Length: n, LKey: mr.LKey()}}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed
	}
}

// wantWC asserts the completions, in order, by id, status and opcode.
func wantWC(t testing.TB, got []engine.WC, want ...engine.WC) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d completions %s, want %d %s", len(got), fmtWC(got), len(want), fmtWC(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.WRID != w.WRID || g.Status != w.Status || g.Opcode != w.Opcode || (w.ByteLen != 0 && g.ByteLen != w.ByteLen) ||
			g.Flags != w.Flags || (w.Imm != 0 && g.Imm != w.Imm) {
			t.Fatalf("completion %d: got %s, want %s", i, fmtWC(got[i:i+1]), fmtWC(want[i:i+1]))
		}
	}
}

func fmtWC(wcs []engine.WC) string {
	var s []string
	for _, w := range wcs {
		x := fmt.Sprintf("{id %d %s %s len %d", w.WRID, w.Opcode, w.Status, w.ByteLen)
		if w.Flags != 0 {
			x += fmt.Sprintf(" flags %d imm 0x%x", w.Flags, w.Imm)
		}
		if w.Err != nil {
			x += " err: " + w.Err.Error()
		}
		s = append(s, x+"}")
	}
	return "[" + strings.Join(s, " ") + "]"
}

// eventsLike returns the recorded events whose text contains s.
func (p *pair) eventsLike(kind engine.EventKind, s string) []engine.Event {
	var out []engine.Event
	for _, e := range p.events {
		if e.Kind == kind && (strings.Contains(e.Msg, s) || e.Err != nil && strings.Contains(e.Err.Error(), s)) {
			out = append(out, e)
		}
	}
	return out
}

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
