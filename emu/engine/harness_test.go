package engine_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/keys"
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

// plainPair is newPair with seed 1, a perfect link and default connection options: what a
// test wants that is not about the link or the connection.
func plainPair(t testing.TB) *pair {
	t.Helper()
	return newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{})
}

func newPair(t testing.TB, seed uint64, link sim.LinkConfig, o engine.ConnectOptions) *pair {
	t.Helper()
	return newPairWith(t, seed, link, o, make([]byte, 4<<20), make([]byte, 4<<20))
}

// newPairWith is newPair with the buffers given.
func newPairWith(t testing.TB, seed uint64, link sim.LinkConfig, o engine.ConnectOptions, bufA, bufB []byte) *pair {
	t.Helper()
	return newPairOn(t, seed, link, o, bufA, bufB, nil)
}

// newPairOn is newPairWith on a fabric that setup, if not nil, has set up before the devices
// are added.
func newPairOn(t testing.TB, seed uint64, link sim.LinkConfig, o engine.ConnectOptions, bufA, bufB []byte, setup func(*sim.Fabric)) *pair {
	t.Helper()
	p := &pair{t: t, sim: sim.NewSim()}
	p.fab = sim.NewFabric(p.sim, seed)
	if setup != nil {
		setup(p.fab)
	}
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

// postRead5000 fills B's first 5000 bytes from seed and posts work request 1, a signalled READ
// of them into the start of A's buffer: five responses at MTU 1024.
func (p *pair) postRead5000(seed byte) {
	p.t.Helper()
	fill(p.bufB[:5000], seed)
	must(p.t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 5000), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
}

// rcEnd is one end of an RC connection a test makes beside its fixture's own: the PD, the CQ
// for both queues, an SRQ if any, the capabilities, and whether every send is signalled.
type rcEnd struct {
	pd     *engine.PD
	cq     *engine.CQ
	srq    *engine.SRQ
	cap    engine.QPCap
	sigAll bool
}

// connectedRC makes an RC QP for each of a and b and connects them with o.
func connectedRC(t testing.TB, a, b rcEnd, o engine.ConnectOptions) (qa, qb *engine.QP) {
	t.Helper()
	mk := func(e rcEnd) *engine.QP {
		qp, err := e.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq, SRQ: e.srq, SigAll: e.sigAll, Cap: e.cap})
		must(t, err)
		return qp
	}
	qa, qb = mk(a), mk(b)
	must(t, engine.ConnectRC(qa, qb, o))
	return qa, qb
}

// toErr moves qp to ERR as its consumer would.
func toErr(t testing.TB, qp *engine.QP) {
	t.Helper()
	must(t, qp.Modify(engine.QPAttr{State: engine.QPSErr}, engine.AttrState))
}

// windowOnB allocates a type 2 memory window on B and binds it with an unsignalled work
// request id, under the next key8, over the first length bytes of B's buffer with access; it
// returns the window once the bind has run, holding its new rkey.
func (p *pair) windowOnB(id uint64, length uint64, access engine.Access) *engine.MW {
	p.t.Helper()
	mw, err := p.pdB.AllocMW(engine.MWType2)
	must(p.t, err)
	must(p.t, p.qb.PostSend(engine.SendWR{ID: id, Opcode: engine.WRBindMW, Bind: engine.BindInfo{MW: mw, RKey: uint32(keys.Key(mw.RKey()).Inc()), MR: p.mrB,
		Addr: p.mrB.Addr(), Length: length, Access: access}}))
	p.run()
	return mw
}

// unbindable is an MR of pd without the right to bind windows to it, and a window of type typ
// on pd to fail to bind there.
func unbindable(t testing.TB, pd *engine.PD, typ engine.MWType) (*engine.MR, *engine.MW) {
	t.Helper()
	noBind, err := pd.RegMR(make([]byte, 4096), engine.AccessLocalWrite)
	must(t, err)
	mw, err := pd.AllocMW(typ)
	must(t, err)
	return noBind, mw
}

// newSRQ makes an SRQ on pd of maxWR receives of maxSGE entries each.
func newSRQ(t testing.TB, pd *engine.PD, maxWR, maxSGE int) *engine.SRQ {
	t.Helper()
	srq, err := pd.CreateSRQ(maxWR, maxSGE)
	must(t, err)
	return srq
}

// connectToSRQ connects with o a new QP on A of capA to a new QP on B, four sends deep, that
// takes its receives from srq.
func (p *pair) connectToSRQ(srq *engine.SRQ, capA engine.QPCap, o engine.ConnectOptions) (qa, qb *engine.QP) {
	p.t.Helper()
	return connectedRC(p.t, rcEnd{pd: p.pdA, cq: p.cqA, cap: capA},
		rcEnd{pd: p.pdB, cq: p.cqB, srq: srq, cap: engine.QPCap{MaxSendWR: 4, MaxSendSGE: 1}}, o)
}
