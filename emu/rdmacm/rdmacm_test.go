package rdmacm_test

import (
	"bytes"
	"io"
	mrand "math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/rdmacm"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/wire"
	"github.com/softirdma/softirdma/wire/cm"
	"github.com/softirdma/softirdma/wire/mad"
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

// accept makes b accept every request with its QP and private data "world".
func (n *net2) accept() {
	n.b.onRequest = func(e rdmacm.Event) { must(n.t, e.ID.Accept(n.b.qp, rdmacm.ConnParam{Private: []byte("world")})) }
}

// cmFrames are the CM messages on the wire, by attribute name, in order.
func (n *net2) cmFrames() []string {
	r, err := wire.NewPcapReader(bytes.NewReader(n.pcap.Bytes()))
	must(n.t, err)
	var out []string
	var p wire.Parser
	var f wire.Frame
	for {
		data, _, err := r.Next()
		if err == io.EOF {
			return out
		}
		must(n.t, err)
		if p.Parse(&f, data) != nil || f.DETH == nil || f.BTH.DestQP() != 1 {
			continue
		}
		h, err := mad.Parse(f.Payload)
		must(n.t, err)
		out = append(out, f.SrcIP().String()[len("192.0.2."):]+":"+h.AttrName())
	}
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

// TestConformanceCM holds the connection manager's checks, C1 on.
func TestConformanceCM(t *testing.T) {
	t.Run("C1_connect_accept_established", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{})
		_, err := n.b.m.Listen(7174)
		must(t, err)
		n.accept()
		_, err = n.a.m.Connect(n.a.qp, n.b.dev.IP(), 7174, rdmacm.ConnParam{Private: []byte("hello")})
		must(t, err)
		n.run()
		if n.a.types() != "ESTABLISHED" || n.b.types() != "CONNECT_REQUEST ESTABLISHED" {
			t.Fatalf("events A %q, B %q", n.a.types(), n.b.types())
		}
		if !bytes.HasPrefix(n.b.events[0].Private, []byte("hello")) || !bytes.HasPrefix(n.a.events[0].Private, []byte("world")) {
			t.Fatal("private data did not arrive")
		}
		if got := strings.Join(n.cmFrames(), " "); got != "1:REQ 2:REP 1:RTU" {
			t.Fatalf("CM messages %s", got)
		}
		qa, qb := n.a.qp.Query(), n.b.qp.Query()
		if qa.State != engine.QPSRTS || qb.State != engine.QPSRTS || qa.DestQPN != n.b.qp.Num() || qb.DestQPN != n.a.qp.Num() ||
			qa.SQPSN != qb.RQPSN || qb.SQPSN != qa.RQPSN {
			t.Fatalf("QPs A %+v B %+v", qa, qb)
		}
		n.exchange()
		// The REQ as rdma_cm writes it: the TCP port space's service ID, rdma_cm's header, and as
		// starting PSN the one the connecting side receives from (Linux's rq_psn; Linux sends
		// from the REP's).
		req := n.firstREQ()
		if req.ServiceID != 0x1061c06 || req.LocalQPN != n.a.qp.Num() || req.StartingPSN != qa.RQPSN || req.TransportServiceType != 0 {
			t.Fatalf("REQ %+v", req)
		}
		h, err := cm.ParseHeader(req.Private[:])
		if err != nil || h.Src != n.a.dev.IP() || h.Dst != n.b.dev.IP() || string(req.Private[cm.HeaderLen:cm.HeaderLen+5]) != "hello" {
			t.Fatalf("rdma_cm header %+v %v", h, err)
		}
	})

	t.Run("C2_reject_with_reason_and_private_data", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{})
		_, err := n.b.m.Listen(7174)
		must(t, err)
		n.b.onRequest = func(e rdmacm.Event) { must(t, e.ID.Reject([]byte("go away"))) }
		_, err = n.a.m.Connect(n.a.qp, n.b.dev.IP(), 7174, rdmacm.ConnParam{})
		must(t, err)
		n.run()
		if n.a.types() != "REJECTED" || n.a.events[0].Reason != cm.RejConsumerDefined || !bytes.HasPrefix(n.a.events[0].Private, []byte("go away")) {
			t.Fatalf("A's events %q %+v", n.a.types(), n.a.events)
		}
		if n.a.qp.State() != engine.QPSErr {
			t.Fatalf("A's QP %s", n.a.qp.State())
		}
	})

	t.Run("C3_lost_REQ_sent_again", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{ResponseTimeout: 14})
		_, err := n.b.m.Listen(7174)
		must(t, err)
		n.accept()
		n.fab.AddFault(sim.Fault{Src: "A", Opcodes: []wire.Opcode{wire.UDSendOnly}, Nth: 1, Action: sim.FaultDrop})
		_, err = n.a.m.Connect(n.a.qp, n.b.dev.IP(), 7174, rdmacm.ConnParam{})
		must(t, err)
		n.run()
		if n.a.types() != "ESTABLISHED" || n.b.types() != "CONNECT_REQUEST ESTABLISHED" || n.a.m.Stats().Resent != 1 {
			t.Fatalf("events A %q, B %q, A resent %d", n.a.types(), n.b.types(), n.a.m.Stats().Resent)
		}
		// Sent again after the response timeout: 2 x 4.096 us x 2^14.
		if now := n.sim.Now(); now < 134*time.Millisecond {
			t.Fatalf("established at %v", now)
		}
		n.exchange()
	})

	t.Run("C4_lost_REP_sent_again", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{ResponseTimeout: 14})
		_, err := n.b.m.Listen(7174)
		must(t, err)
		n.accept()
		n.fab.AddFault(sim.Fault{Src: "B", Opcodes: []wire.Opcode{wire.UDSendOnly}, Nth: 1, Action: sim.FaultDrop})
		_, err = n.a.m.Connect(n.a.qp, n.b.dev.IP(), 7174, rdmacm.ConnParam{})
		must(t, err)
		n.run()
		if n.a.types() != "ESTABLISHED" || n.b.types() != "CONNECT_REQUEST ESTABLISHED" || n.b.m.Stats().Resent != 1 {
			t.Fatalf("events A %q, B %q, B resent %d", n.a.types(), n.b.types(), n.b.m.Stats().Resent)
		}
		n.exchange()
	})

	t.Run("C5_lost_RTU_REP_again_RTU_again", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{ResponseTimeout: 14})
		_, err := n.b.m.Listen(7174)
		must(t, err)
		n.accept()
		n.fab.AddFault(sim.Fault{Src: "A", Opcodes: []wire.Opcode{wire.UDSendOnly}, Nth: 2, Action: sim.FaultDrop})
		_, err = n.a.m.Connect(n.a.qp, n.b.dev.IP(), 7174, rdmacm.ConnParam{})
		must(t, err)
		n.run()
		if got := strings.Join(n.cmFrames(), " "); got != "1:REQ 2:REP 1:RTU 2:REP 1:RTU" {
			t.Fatalf("CM messages %s", got)
		}
		if n.a.types() != "ESTABLISHED" || n.b.types() != "CONNECT_REQUEST ESTABLISHED" {
			t.Fatalf("events A %q, B %q", n.a.types(), n.b.types())
		}
		n.exchange()
	})

	t.Run("C6_disconnect_DREQ_DREP_timewait", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{})
		_, err := n.b.m.Listen(7174)
		must(t, err)
		n.accept()
		idA, err := n.a.m.Connect(n.a.qp, n.b.dev.IP(), 7174, rdmacm.ConnParam{})
		must(t, err)
		n.run()
		must(t, idA.Disconnect())
		n.run()
		if n.a.types() != "ESTABLISHED DISCONNECTED TIMEWAIT_EXIT" || n.b.types() != "CONNECT_REQUEST ESTABLISHED DISCONNECTED TIMEWAIT_EXIT" {
			t.Fatalf("events A %q, B %q", n.a.types(), n.b.types())
		}
		if got := strings.Join(n.cmFrames(), " "); got != "1:REQ 2:REP 1:RTU 1:DREQ 2:DREP" {
			t.Fatalf("CM messages %s", got)
		}
		if n.a.qp.State() != engine.QPSErr || n.b.qp.State() != engine.QPSErr {
			t.Fatalf("QPs %s %s", n.a.qp.State(), n.b.qp.State())
		}
		if err := idA.Disconnect(); err == nil {
			t.Fatal("disconnected twice")
		}
	})

	t.Run("C7_no_listener_rejected", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{})
		_, err := n.a.m.Connect(n.a.qp, n.b.dev.IP(), 9999, rdmacm.ConnParam{})
		must(t, err)
		n.run()
		if n.a.types() != "REJECTED" || n.a.events[0].Reason != cm.RejInvalidServiceID {
			t.Fatalf("A's events %q %+v", n.a.types(), n.a.events)
		}
	})

	t.Run("C8_unreachable_after_retries", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{ResponseTimeout: 12, MaxRetries: 3})
		n.fab.LinkDown(n.b.dev, time.Hour)
		_, err := n.a.m.Connect(n.a.qp, n.b.dev.IP(), 7174, rdmacm.ConnParam{})
		must(t, err)
		n.run()
		if n.a.types() != "UNREACHABLE" || n.a.m.Stats().Resent != 3 || n.a.qp.State() != engine.QPSErr {
			t.Fatalf("A's events %q, resent %d, QP %s", n.a.types(), n.a.m.Stats().Resent, n.a.qp.State())
		}
	})
}

func (n *net2) firstREQ() cm.REQ {
	r, err := wire.NewPcapReader(bytes.NewReader(n.pcap.Bytes()))
	must(n.t, err)
	var p wire.Parser
	var f wire.Frame
	for {
		data, _, err := r.Next()
		must(n.t, err)
		if p.Parse(&f, data) == nil && f.DETH != nil && f.BTH.DestQP() == 1 {
			q, err := cm.ParseREQ(f.Payload[mad.HeaderLen:])
			must(n.t, err)
			return q
		}
	}
}
