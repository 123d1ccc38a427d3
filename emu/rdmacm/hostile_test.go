package rdmacm

import (
	"bytes"
	mrand "math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/wire/cm"
	"github.com/softirdma/softirdma/wire/mad"
)

// The manager under attack keeps at most this many requests its consumer has not answered.
const hostileBacklog = 8

// hostileNet is a manager under test (A), a legitimate peer with a manager of its own (B), and a
// hostile peer (H): a device without one, whose GSI QP the test writes raw MADs on.
type hostileNet struct {
	t        tb
	sim      *sim.Sim
	fab      *sim.Fabric
	a, b     *Manager
	devA     *engine.Device
	devB     *engine.Device
	devH     *engine.Device
	pdA      *engine.PD
	cqA      *engine.CQ
	udA      *engine.QP
	h        *engine.QP // H's GSI QP
	hMR      *engine.MR
	hBuf     []byte
	hAH      *engine.AH // H to A
	bToA     *engine.AH // B's QP1 to A
	hNext    int
	flood    uint32 // communication IDs H floods with
	pcap     bytes.Buffer
	ids      []*ID           // every ID of A's the test saw, in order
	events   map[*ID][]Event // A's events by ID
	answered map[*ID]bool    // requests A's consumer rejected or answered by SIDR: no event follows
	waiting  []*ID           // requests A's consumer left unanswered
	given    int             // QPs A's consumer gave the manager, and its SIDR requests
	// policy answers a ConnectRequest of H's: 0 leave it, 1 accept, 2 reject.
	policy func() int
}

func newHostileNet(t tb) *hostileNet {
	s := sim.NewSim()
	n := &hostileNet{t: t, sim: s, fab: sim.NewFabric(s, 5), events: map[*ID][]Event{}, answered: map[*ID]bool{},
		policy: func() int { return 0 }}
	hmust(t, n.fab.CapturePcap(&n.pcap))
	n.devA = n.fab.AddDevice("A", sim.LinkConfig{})
	n.devB = n.fab.AddDevice("B", sim.LinkConfig{})
	n.devH = n.fab.AddDevice("H", sim.LinkConfig{})
	cfg := Config{ResponseTimeout: 12, MaxRetries: 3, ServiceTimeout: 14, Backlog: hostileBacklog}
	var err error
	cfg.Rand = mrand.NewPCG(1, 2)
	cfg.Events = n.onEvent
	n.a, err = New(n.devA, cfg)
	hmust(t, err)
	cfg.Rand, cfg.Events = mrand.NewPCG(3, 4), nil
	n.b, err = New(n.devB, cfg)
	hmust(t, err)
	n.pdA, err = n.devA.AllocPD()
	hmust(t, err)
	n.cqA, err = n.devA.CreateCQ(4096)
	hmust(t, err)
	n.udA, err = n.pdA.CreateQP(engine.QPInitAttr{Type: engine.QPTypeUD, SendCQ: n.cqA, RecvCQ: n.cqA,
		Cap: engine.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	hmust(t, err)
	_, err = n.a.Listen(7174)
	hmust(t, err)
	_, err = n.a.ListenUD(7175)
	hmust(t, err)

	pdH, err := n.devH.AllocPD()
	hmust(t, err)
	cqH, err := n.devH.CreateCQ(4096)
	hmust(t, err)
	n.h, err = pdH.CreateQP(engine.QPInitAttr{Type: engine.QPTypeGSI, SendCQ: cqH, RecvCQ: cqH,
		Cap: engine.QPCap{MaxSendWR: 1024, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	hmust(t, err)
	hmust(t, n.h.Modify(engine.QPAttr{State: engine.QPSInit, QKey: mad.GSIQKey}, engine.AttrState|engine.AttrPKeyIndex|engine.AttrQKey))
	hmust(t, n.h.Modify(engine.QPAttr{State: engine.QPSRTR}, engine.AttrState))
	hmust(t, n.h.Modify(engine.QPAttr{State: engine.QPSRTS}, engine.AttrState|engine.AttrSQPSN))
	n.hBuf = make([]byte, 1024*512)
	n.hMR, err = pdH.RegMR(n.hBuf, engine.AccessLocalWrite)
	hmust(t, err)
	n.hAH, err = pdH.CreateAH(engine.AHAttr{DGID: n.devA.IP(), HopLimit: 64})
	hmust(t, err)
	n.bToA, err = n.b.agent.ah(n.devA.IP())
	hmust(t, err)
	// H's send completions are taken as they come, so that its queue never fills.
	cqH.OnCompletion(func() {
		s.Post(0, func() {
			var wc [64]engine.WC
			for cqH.Poll(wc[:]) > 0 {
			}
		})
	})
	return n
}

// tb is what the setup needs of a test: testing.T's and rapid.T's.
type tb interface {
	Helper()
	Fatal(args ...any)
}

func hmust(t tb, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (n *hostileNet) see(id *ID) {
	if _, ok := n.events[id]; !ok {
		n.events[id] = nil
		n.ids = append(n.ids, id)
	}
}

// onEvent is A's consumer: B's requests are accepted, H's as policy says.
func (n *hostileNet) onEvent(e Event) {
	n.see(e.ID)
	n.events[e.ID] = append(n.events[e.ID], e)
	if e.Type != ConnectRequest {
		return
	}
	if e.ID.Peer() == n.devB.IP() {
		n.accept(e.ID)
		return
	}
	switch n.policy() {
	case 0:
		n.waiting = append(n.waiting, e.ID)
	case 1:
		n.accept(e.ID)
	default:
		if e.ID.Reject([]byte("no")) == nil {
			n.answered[e.ID] = true
		}
	}
}

// accept answers a request with a fresh RC QP, or with A's UD QP for a SIDR request. A request
// that ended meanwhile refuses.
func (n *hostileNet) accept(id *ID) {
	if id.ps == cm.PSUDP {
		if id.Accept(n.udA, ConnParam{}) == nil {
			n.answered[id] = true
		}
		return
	}
	qp, err := n.pdA.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: n.cqA, RecvCQ: n.cqA,
		Cap: engine.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	hmust(n.t, err)
	n.given++
	_ = id.Accept(qp, ConnParam{ResponderResources: 1, InitiatorDepth: 1})
}

// connectOut has A connect to H, which never answers but by what the test makes it send.
func (n *hostileNet) connectOut(ud bool) {
	if ud {
		id, err := n.a.ConnectUD(n.udA, n.devH.IP(), 7175, nil)
		hmust(n.t, err)
		n.given++
		n.see(id)
		return
	}
	qp, err := n.pdA.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: n.cqA, RecvCQ: n.cqA,
		Cap: engine.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	hmust(n.t, err)
	n.given++
	id, err := n.a.Connect(qp, n.devH.IP(), 7174, ConnParam{})
	hmust(n.t, err)
	n.see(id)
}

// raw sends b, any bytes, from H's GSI QP to A's.
func (n *hostileNet) raw(b []byte) {
	off := n.hNext * 512
	n.hNext = (n.hNext + 1) % 1024
	copy(n.hBuf[off:off+512], b)
	hmust(n.t, n.h.PostSend(engine.SendWR{Opcode: engine.WRSend, SGL: []engine.SGE{{Addr: n.hMR.Addr() + uint64(off), Length: uint32(len(b)), LKey: n.hMR.LKey()}},
		AH: n.hAH, RemoteQPN: 1, RemoteQKey: mad.GSIQKey}))
}

// cmMAD is a CM MAD of attr with msg, as a peer's CM sends it.
func cmMAD(tid uint64, attr uint16, msg []byte) []byte {
	b := make([]byte, mad.Len)
	if err := cm.MADHeader(tid, attr).Put(b); err != nil {
		panic(err) // a MAD's length always holds the header
	}
	copy(b[mad.HeaderLen:], msg)
	return b
}

// request is a well-formed REQ or SIDR_REQ (attr) for svc from communication ID local.
func request(attr uint16, svc uint64, local uint32) []byte {
	msg := make([]byte, cm.DataLen)
	hdr := cm.Header{SrcPort: 1, Src: netip.MustParseAddr("192.0.2.3"), Dst: netip.MustParseAddr("192.0.2.1")}
	if attr == cm.AttrSIDRREQ {
		q := cm.SIDRREQ{RequestID: local, PKey: 0xffff, ServiceID: svc}
		_ = hdr.Put(q.Private[:])
		_ = q.Put(msg)
		return msg
	}
	q := cm.REQ{LocalCommID: local, ServiceID: svc, LocalQPN: 0x100 + local, StartingPSN: local, RemoteCMResponseTimeout: 12,
		LocalCMResponseTimeout: 12, MaxCMRetries: 3, PathMTU: 3, RetryCount: 7, RNRRetryCount: 7}
	_ = hdr.Put(q.Private[:])
	_ = q.Put(msg)
	return msg
}

// live counts what the manager holds for its peers.
type live struct {
	conns    int // IDs in the table
	waiting  int // requests the consumer has not answered
	answers  int // SIDR answers kept to send again
	ahs      int
	timewait int
}

func (m *Manager) liveCount() live {
	m.agent.mu.Lock()
	ahs := len(m.agent.ahs)
	m.agent.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	l := live{conns: len(m.conns), ahs: ahs}
	for _, id := range m.conns {
		switch {
		case id.state.owesAnswer() || id.state == stSIDRReqRcvd:
			l.waiting++
		case id.state == stSIDRRepSent:
			l.answers++
		case id.state == stTimewait:
			l.timewait++
		}
	}
	return l
}

// liveIDs are the manager's communication IDs, for a hostile peer to name.
func (m *Manager) liveIDs() []uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []uint32
	for k, id := range m.conns {
		out = append(out, k, id.remote)
	}
	slices.Sort(out)
	return out
}

// hostileMessage draws a CM message of attr from a peer whose communication ID is local,
// naming remote as the manager's.
func hostileMessage(t *rapid.T, attr uint16, local, remote uint32) []byte {
	msg := make([]byte, cm.DataLen)
	u8 := func(name string, hi int) uint8 { return uint8(rapid.IntRange(0, hi).Draw(t, name)) }
	u32 := rapid.Uint32()
	svc := rapid.SampledFrom([]uint64{cm.ServiceID(cm.PSTCP, 7174), cm.ServiceID(cm.PSUDP, 7175), cm.ServiceID(cm.PSTCP, 1), 0})
	hdr := cm.Header{SrcPort: 1, Src: netip.MustParseAddr("192.0.2.3"), Dst: netip.MustParseAddr("192.0.2.1")}
	switch attr {
	case cm.AttrREQ:
		q := cm.REQ{LocalCommID: local, ServiceID: svc.Draw(t, "service"), LocalQPN: u32.Draw(t, "qpn") & 0xffffff,
			StartingPSN: u32.Draw(t, "psn") & 0xffffff, RemoteCMResponseTimeout: u8("rto", 31), LocalCMResponseTimeout: u8("lto", 31),
			MaxCMRetries: u8("retries", 15), PathMTU: u8("mtu", 7), RetryCount: u8("retry", 7), RNRRetryCount: u8("rnr", 7),
			ResponderResources: u8("rr", 255), InitiatorDepth: u8("id", 255), TransportServiceType: rapid.SampledFrom([]uint8{0, 0, 0, 1, 3}).Draw(t, "ts")}
		_ = hdr.Put(q.Private[:])
		_ = q.Put(msg)
	case cm.AttrREP:
		r := cm.REP{LocalCommID: local, RemoteCommID: remote, LocalQPN: u32.Draw(t, "qpn") & 0xffffff, StartingPSN: u32.Draw(t, "psn") & 0xffffff,
			ResponderResources: u8("rr", 255), InitiatorDepth: u8("id", 255), RNRRetryCount: u8("rnr", 7)}
		_ = r.Put(msg)
	case cm.AttrRTU:
		p := cm.Pair{LocalCommID: local, RemoteCommID: remote}
		_ = p.PutRTU(msg)
	case cm.AttrDREP:
		p := cm.Pair{LocalCommID: local, RemoteCommID: remote}
		_ = p.PutDREP(msg)
	case cm.AttrDREQ:
		p := cm.Pair{LocalCommID: local, RemoteCommID: remote, RemoteQPN: u32.Draw(t, "qpn") & 0xffffff}
		_ = p.PutDREQ(msg)
	case cm.AttrREJ:
		r := cm.REJ{LocalCommID: local, RemoteCommID: remote, Reason: cm.RejectReason(rapid.IntRange(0, 40).Draw(t, "reason")), MessageRejected: u8("rejected", 3)}
		_ = r.Put(msg)
	case cm.AttrMRA:
		r := cm.MRA{LocalCommID: local, RemoteCommID: remote, MessageMRAed: u8("mraed", 3), ServiceTimeout: u8("service", 31)}
		_ = r.Put(msg)
	case cm.AttrSIDRREQ:
		q := cm.SIDRREQ{RequestID: local, PKey: 0xffff, ServiceID: svc.Draw(t, "service")}
		_ = hdr.Put(q.Private[:])
		_ = q.Put(msg)
	case cm.AttrSIDRREP:
		r := cm.SIDRREP{RequestID: remote, Status: cm.SIDRStatus(u8("status", 6)), QPN: u32.Draw(t, "qpn") & 0xffffff, QKey: u32.Draw(t, "qkey")}
		_ = r.Put(msg)
	default:
		copy(msg, rapid.SliceOfN(rapid.Byte(), cm.DataLen, cm.DataLen).Draw(t, "body"))
	}
	if rapid.IntRange(0, 9).Draw(t, "scribble") == 0 {
		msg[rapid.IntRange(0, cm.DataLen-1).Draw(t, "at")] = rapid.Byte().Draw(t, "byte")
	}
	return msg
}

// The longest any timer of the manager's runs: a peer's MRA of service timeout 31 (2.4 hours)
// and the retries after it, and a time wait.
const pastEveryTimeout = 4 * time.Hour

// TestHostilePeer has a hostile peer send random CM messages, with communication IDs of its own
// and the manager's, from its own address and from a legitimate peer's, and garbage, while the
// consumer answers some requests, leaves others, and connects out. The manager holds no more
// than its backlog for its peers at any time, and once every timeout has passed every ID has
// ended and the listeners still serve.
func TestHostilePeer(t *testing.T) {
	var seen Stats // over every run: the bounds and the expiry were reached
	rapid.Check(t, func(rt *rapid.T) {
		n := newHostileNet(t)
		n.policy = func() int { return rapid.IntRange(0, 2).Draw(rt, "policy") }
		// B's connection, made before the storm.
		qpB := n.rcQP(n.b)
		legit, err := n.b.Connect(qpB, n.devA.IP(), 7174, ConnParam{})
		hmust(t, err)
		n.sim.RunFor(time.Second)
		if legit.State() != "ESTABLISHED" {
			rt.Fatalf("B's connection %s", legit.State())
		}
		attrs := []uint16{cm.AttrREQ, cm.AttrMRA, cm.AttrREJ, cm.AttrREP, cm.AttrRTU, cm.AttrDREQ, cm.AttrDREP, cm.AttrSIDRREQ, cm.AttrSIDRREP, 0x0019, 0}
		steps := rapid.IntRange(1, 120).Draw(rt, "steps")
		for range steps {
			switch rapid.IntRange(0, 10).Draw(rt, "step") {
			case 0:
				n.sim.RunFor(rapid.SampledFrom([]time.Duration{0, time.Millisecond, 30 * time.Millisecond, time.Second, 100 * time.Second}).Draw(rt, "advance"))
			case 1:
				n.connectOut(rapid.Bool().Draw(rt, "ud"))
			case 2:
				// A request left waiting answered late: it may have ended meanwhile.
				if len(n.waiting) > 0 {
					i := rapid.IntRange(0, len(n.waiting)-1).Draw(rt, "late")
					id := n.waiting[i]
					n.waiting = slices.Delete(n.waiting, i, i+1)
					if rapid.Bool().Draw(rt, "late accept") {
						n.accept(id)
					} else if id.Reject(nil) == nil {
						n.answered[id] = true
					}
				}
			case 3:
				// A flood of requests with new communication IDs, valid but for the IDs.
				attr := rapid.SampledFrom([]uint16{cm.AttrREQ, cm.AttrSIDRREQ}).Draw(rt, "flood attr")
				svc := cm.ServiceID(cm.PSTCP, 7174)
				if attr == cm.AttrSIDRREQ {
					svc = cm.ServiceID(cm.PSUDP, 7175)
				}
				for range rapid.IntRange(1, 3*hostileBacklog).Draw(rt, "flood") {
					n.flood++
					n.raw(cmMAD(uint64(n.flood), attr, request(attr, svc, n.flood)))
				}
			case 9:
				// Garbage: any length, any header.
				b := rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(rt, "garbage")
				n.raw(b)
			default:
				attr := rapid.SampledFrom(attrs).Draw(rt, "attr")
				ids := n.a.liveIDs()
				pick := func(name string) uint32 {
					if len(ids) > 0 && rapid.Bool().Draw(rt, name+" reused") {
						return rapid.SampledFrom(ids).Draw(rt, name)
					}
					return rapid.SampledFrom([]uint32{0, 1, 2, 3, rapid.Uint32().Draw(rt, name+" any")}).Draw(rt, name)
				}
				local, remote := pick("local"), pick("remote")
				b := cmMAD(rapid.Uint64().Draw(rt, "tid"), attr, hostileMessage(rt, attr, local, remote))
				if rapid.IntRange(0, 4).Draw(rt, "from") == 0 {
					// From the legitimate peer's address: B's manager sends it.
					h, err := mad.Parse(b)
					hmust(t, err)
					n.b.mu.Lock()
					n.b.sendMAD(n.bToA, h.TID, attr, b[mad.HeaderLen:])
					n.b.mu.Unlock()
				} else {
					n.raw(b)
				}
			}
			n.sim.RunFor(0)
			n.checkBounded(rt)
		}

		// The storm is over, its last frames landed: A disconnects whatever it still has, and
		// every timeout runs out.
		n.sim.RunFor(time.Second)
		for _, id := range n.ids {
			if id.State() == "ESTABLISHED" {
				_ = id.Disconnect()
			}
		}
		n.sim.RunFor(pastEveryTimeout)
		n.checkBounded(rt)
		st := n.a.Stats()
		seen.Overflow += st.Overflow
		seen.Expired += st.Expired
		for _, id := range n.ids {
			if st := id.State(); st != "DONE" {
				rt.Fatalf("ID %#x (peer %s) in %s after every timeout, events %v", id.local, id.peer, st, n.types(id))
			}
			if n.answered[id] {
				continue
			}
			ev := n.events[id]
			if len(ev) == 0 {
				rt.Fatalf("ID %#x (peer %s) ended without an event", id.local, id.peer)
			}
			switch last := ev[len(ev)-1].Type; {
			case last == Rejected, last == Unreachable, last == TimewaitExit:
			case last == Established && id.ps == cm.PSUDP: // a SIDR request answered
			default:
				rt.Fatalf("ID %#x (peer %s) ended with %s, events %v", id.local, id.peer, last, n.types(id))
			}
		}
		if l := n.a.liveCount(); l.conns != 0 {
			rt.Fatalf("A still holds %+v", l)
		}
		// The listeners still serve: B connects again.
		n.policy = func() int { return 1 }
		again, err := n.b.Connect(n.rcQP(n.b), n.devA.IP(), 7174, ConnParam{})
		hmust(t, err)
		n.sim.RunFor(time.Second)
		if again.State() != "ESTABLISHED" {
			rt.Fatalf("B's new connection %s", again.State())
		}
	})
	if seen.Overflow == 0 || seen.Expired == 0 {
		t.Fatalf("no run reached the backlog or let a request expire: %+v", seen)
	}
}

// checkBounded holds the manager to its bounds: its backlog of requests nobody answered, its
// SIDR answers, and no more connections than those and the QPs its consumer gave it.
func (n *hostileNet) checkBounded(t *rapid.T) {
	l := n.a.liveCount()
	if l.waiting > hostileBacklog || l.answers > hostileBacklog || l.conns > l.waiting+l.answers+n.given || l.ahs > maxAHs {
		t.Fatalf("A holds %+v with a backlog of %d and %d QPs and requests of its consumer's", l, hostileBacklog, n.given)
	}
}

func (n *hostileNet) types(id *ID) []string {
	var out []string
	for _, e := range n.events[id] {
		out = append(out, e.Type.String())
	}
	return out
}

// rcQP is a fresh RC QP on m's device.
func (n *hostileNet) rcQP(m *Manager) *engine.QP {
	pd, err := m.dev.AllocPD()
	hmust(n.t, err)
	cq, err := m.dev.CreateCQ(8)
	hmust(n.t, err)
	qp, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: engine.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	hmust(n.t, err)
	return qp
}
