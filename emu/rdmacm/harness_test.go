package rdmacm_test

import (
	"bytes"
	mrand "math/rand/v2"
	"strings"
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/rdmacm"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/wire/cm"
)

// side is a device with a connection manager, an RC QP, its CQ and a buffer, and the events it saw.
type side struct {
	dev    *engine.Device
	m      *rdmacm.Manager
	pd     *engine.PD
	cq     *engine.CQ
	qp     *engine.QP
	mr     *engine.MR
	buf    []byte
	events []rdmacm.Event
	// onRequest answers a ConnectRequest (Accept or Reject); nil leaves it waiting.
	onRequest func(rdmacm.Event)
	// onResponse answers a ConnectResponse (moves the QP, Establish); nil leaves it waiting.
	onResponse func(rdmacm.Event)
}

type net2 struct {
	t    *testing.T
	sim  *sim.Sim
	fab  *sim.Fabric
	a, b *side
	pcap bytes.Buffer
}

func newNet(t *testing.T, cfg rdmacm.Config) *net2 {
	t.Helper()
	s := sim.NewSim()
	n := &net2{t: t, sim: s, fab: sim.NewFabric(s, 3)}
	must(t, n.fab.CapturePcap(&n.pcap))
	for i, name := range []string{"A", "B"} {
		sd := &side{dev: n.fab.AddDevice(name, sim.LinkConfig{}), buf: make([]byte, 4096)}
		c := cfg
		c.Rand = mrand.NewPCG(uint64(i+1), 7)
		c.Events = func(e rdmacm.Event) {
			sd.events = append(sd.events, e)
			if e.Type == rdmacm.ConnectRequest && sd.onRequest != nil {
				sd.onRequest(e)
			}
			if e.Type == rdmacm.ConnectResponse && sd.onResponse != nil {
				sd.onResponse(e)
			}
		}
		var err error
		sd.m, err = rdmacm.New(sd.dev, c)
		must(t, err)
		sd.pd, _ = sd.dev.AllocPD()
		sd.cq, _ = sd.dev.CreateCQ(64)
		sd.qp, err = sd.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: sd.cq, RecvCQ: sd.cq,
			Cap: engine.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(t, err)
		sd.mr, err = sd.pd.RegMR(sd.buf, engine.AccessLocalWrite)
		must(t, err)
		if i == 0 {
			n.a = sd
		} else {
			n.b = sd
		}
	}
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (n *net2) run() {
	n.t.Helper()
	if steps := n.sim.RunUntilIdle(1_000_000); steps == 1_000_000 {
		n.t.Fatal("simulation still busy")
	}
}

// types lists a side's event types.
func (s *side) types() string {
	var out []string
	for _, e := range s.events {
		out = append(out, e.Type.String())
	}
	return strings.Join(out, " ")
}

// connected has B listen on port 7174 and accept, and A connect with p, and runs until both
// ends are established; it returns A's ID.
func (n *net2) connected(p rdmacm.ConnParam) *rdmacm.ID {
	n.t.Helper()
	_, err := n.b.m.Listen(7174)
	must(n.t, err)
	n.accept()
	idA, err := n.a.m.Connect(n.a.qp, n.b.dev.IP(), 7174, p)
	must(n.t, err)
	n.run()
	return idA
}

// accept makes b accept every request with its QP and private data "world".
func (n *net2) accept() {
	n.b.onRequest = func(e rdmacm.Event) { must(n.t, e.ID.Accept(n.b.qp, rdmacm.ConnParam{Private: []byte("world")})) }
}

// cmFrames are the CM messages on the wire, by attribute name, in order.
func (n *net2) cmFrames() []string {
	var out []string
	for _, c := range rdmacm.CapturedMADs(n.t, n.pcap.Bytes()) {
		out = append(out, c.Src.String()[len("192.0.2."):]+":"+c.Hdr.AttrName())
	}
	return out
}

// exchange checks the connection carries a SEND from A to B.
func (n *net2) exchange() {
	n.t.Helper()
	must(n.t, n.b.qp.PostRecv(engine.RecvWR{ID: 1, SGL: []engine.SGE{{Addr: n.b.mr.Addr(), Length: 64, LKey: n.b.mr.LKey()}}}))
	copy(n.a.buf, "over the connection")
	must(n.t, n.a.qp.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: []engine.SGE{{Addr: n.a.mr.Addr(), Length: 19, LKey: n.a.mr.LKey()}}}))
	n.run()
	var wc [2]engine.WC
	if got := n.b.cq.Poll(wc[:]); got != 1 || wc[0].Status != engine.WCSuccess || string(n.b.buf[:19]) != "over the connection" {
		n.n(wc[:got])
	}
}

func (n *net2) n(wc []engine.WC) { n.t.Fatalf("receive completions %+v", wc) }

func (n *net2) firstREQ() cm.REQ {
	mads := rdmacm.CapturedMADs(n.t, n.pcap.Bytes())
	if len(mads) == 0 {
		n.t.Fatal("no MAD on the wire")
	}
	q, err := cm.ParseREQ(mads[0].Body)
	must(n.t, err)
	return q
}

// udQP gives a side a UD QP on its CQ, left in RESET for the connection manager to ready.
func (s *side) udQP(t *testing.T) *engine.QP {
	t.Helper()
	qp, err := s.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeUD, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: engine.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	return qp
}

// cmMessage is the body of the nth CM MAD of attribute attr on the wire.
func (n *net2) cmMessage(attr uint16, nth int) []byte {
	left := nth
	for _, c := range rdmacm.CapturedMADs(n.t, n.pcap.Bytes()) {
		if c.Hdr.AttrID == attr {
			if left--; left == 0 {
				return c.Body
			}
		}
	}
	n.t.Fatalf("no %s number %d on the wire", cm.MADHeader(0, attr).AttrName(), nth)
	return nil
}
