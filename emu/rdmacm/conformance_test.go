package rdmacm_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/rdmacm"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/wire"
	"github.com/softirdma/softirdma/wire/cm"
)

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
		n := connectLosing(t, "A", 1)
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
		n := connectLosing(t, "B", 1)
		if n.a.types() != "ESTABLISHED" || n.b.types() != "CONNECT_REQUEST ESTABLISHED" || n.b.m.Stats().Resent != 1 {
			t.Fatalf("events A %q, B %q, B resent %d", n.a.types(), n.b.types(), n.b.m.Stats().Resent)
		}
		n.exchange()
	})

	t.Run("C5_lost_RTU_REP_again_RTU_again", func(t *testing.T) {
		n := connectLosing(t, "A", 2)
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
		idA := n.connected(rdmacm.ConnParam{})
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

// connectLosing connects A to B, which accepts, on a response timeout of 4.096 us x 2^14, with
// the nth CM message that side src sends lost.
func connectLosing(t *testing.T, src string, nth int) *net2 {
	n := newNet(t, rdmacm.Config{ResponseTimeout: 14})
	n.fab.AddFault(sim.Fault{Src: src, Opcodes: []wire.Opcode{wire.UDSendOnly}, Nth: nth, Action: sim.FaultDrop})
	n.connected(rdmacm.ConnParam{})
	return n
}

// TestConformanceCMWait holds C9: MRA.
func TestConformanceCMWait(t *testing.T) {
	t.Run("C9_MRA_consumer_slow_peer_waits", func(t *testing.T) {
		// Two retries of 134 ms would give up at 402 ms; the MRA asks for 4.3 s more.
		n := newNet(t, rdmacm.Config{ResponseTimeout: 14, MaxRetries: 2, ServiceTimeout: 20})
		_, err := n.b.m.Listen(7174)
		must(t, err)
		idA, err := n.a.m.Connect(n.a.qp, n.b.dev.IP(), 7174, rdmacm.ConnParam{})
		must(t, err)
		n.sim.RunFor(3 * time.Second)
		if got := strings.Join(n.cmFrames(), " "); got != "1:REQ 1:REQ 2:MRA" {
			t.Fatalf("CM messages %s", got)
		}
		if n.a.types() != "" || idA.State() != "MRA_REQ_RCVD" || n.b.types() != "CONNECT_REQUEST" || n.b.m.Stats().MRAs != 1 {
			t.Fatalf("A %q in %s, B %q, MRAs %d", n.a.types(), idA.State(), n.b.types(), n.b.m.Stats().MRAs)
		}
		mra, err := cm.ParseMRA(n.cmMessage(cm.AttrMRA, 1))
		req := n.firstREQ()
		if err != nil || mra.MessageMRAed != 0 || mra.ServiceTimeout != 20 || mra.RemoteCommID != req.LocalCommID || mra.LocalCommID == 0 {
			t.Fatalf("MRA %+v %v", mra, err)
		}
		// The consumer answers late: the connection is made, the MRA's communication ID the REP's.
		must(t, n.b.events[0].ID.Accept(n.b.qp, rdmacm.ConnParam{}))
		n.run()
		if got := strings.Join(n.cmFrames(), " "); got != "1:REQ 1:REQ 2:MRA 2:REP 1:RTU" {
			t.Fatalf("CM messages %s", got)
		}
		if n.a.types() != "ESTABLISHED" || n.b.types() != "CONNECT_REQUEST ESTABLISHED" {
			t.Fatalf("events A %q, B %q", n.a.types(), n.b.types())
		}
		if rep, _ := cm.ParseREP(n.cmMessage(cm.AttrREP, 1)); rep.LocalCommID != mra.LocalCommID {
			t.Fatalf("REP from 0x%x, MRA from 0x%x", rep.LocalCommID, mra.LocalCommID)
		}
		n.exchange()
	})

	t.Run("C9_MRA_service_timeout_over_then_unreachable", func(t *testing.T) {
		// A consumer that never answers: each REQ sent again after the service timeout is
		// answered by an MRA again; the retries are spent only by REQs, and then it gives up.
		n := newNet(t, rdmacm.Config{ResponseTimeout: 12, MaxRetries: 3, ServiceTimeout: 14})
		_, err := n.b.m.Listen(7174)
		must(t, err)
		_, err = n.a.m.Connect(n.a.qp, n.b.dev.IP(), 7174, rdmacm.ConnParam{})
		must(t, err)
		n.run()
		if got := strings.Join(n.cmFrames(), " "); got != "1:REQ 1:REQ 2:MRA 1:REQ 2:MRA 1:REQ 2:MRA 1:REJ" {
			t.Fatalf("CM messages %s", got)
		}
		if n.a.types() != "UNREACHABLE" || n.a.qp.State() != engine.QPSErr {
			t.Fatalf("A's events %q, QP %s", n.a.types(), n.a.qp.State())
		}
	})
}

// TestConformanceSIDR holds C10 on: rdma_cm's UD services, resolved by SIDR.
func TestConformanceSIDR(t *testing.T) {
	t.Run("C10_SIDR_resolves_UD_service", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{})
		udA, udB := n.a.udQP(t), n.b.udQP(t)
		_, err := n.b.m.ListenUD(7174)
		must(t, err)
		n.b.onRequest = func(e rdmacm.Event) { must(t, e.ID.Accept(udB, rdmacm.ConnParam{Private: []byte("served")})) }
		_, err = n.a.m.ConnectUD(udA, n.b.dev.IP(), 7174, []byte("hello"))
		must(t, err)
		n.run()
		if got := strings.Join(n.cmFrames(), " "); got != "1:SIDR_REQ 2:SIDR_REP" {
			t.Fatalf("CM messages %s", got)
		}
		// No ESTABLISHED on the side that answers, as rdma_cm has none.
		if n.a.types() != "ESTABLISHED" || n.b.types() != "CONNECT_REQUEST" || !bytes.HasPrefix(n.b.events[0].Private, []byte("hello")) {
			t.Fatalf("events A %q, B %q", n.a.types(), n.b.types())
		}
		ud := n.a.events[0].UD
		if ud.QPN != udB.Num() || ud.QKey != rdmacm.UDPQKey || ud.AH == nil || !bytes.HasPrefix(n.a.events[0].Private, []byte("served")) {
			t.Fatalf("UD param %+v, private %q", ud, n.a.events[0].Private)
		}
		// The SIDR_REQ as Linux's rdma_cm sends it: the UDP port space, P_Key 0xFFFF, its header.
		q, err := cm.ParseSIDRREQ(n.cmMessage(cm.AttrSIDRREQ, 1))
		must(t, err)
		h, herr := cm.ParseHeader(q.Private[:])
		if q.ServiceID != 0x1111c06 || q.PKey != 0xffff || herr != nil || h.Src != n.a.dev.IP() || h.Dst != n.b.dev.IP() ||
			string(q.Private[cm.HeaderLen:cm.HeaderLen+5]) != "hello" {
			t.Fatalf("SIDR_REQ %+v header %+v %v", q, h, herr)
		}
		// Both QPs are ready with rdma_cm's Q_Key, and a datagram crosses.
		if a, b := udA.Query(), udB.Query(); a.State != engine.QPSRTS || b.State != engine.QPSRTS || a.QKey != rdmacm.UDPQKey || b.QKey != rdmacm.UDPQKey {
			t.Fatalf("UD QPs %+v %+v", a, b)
		}
		must(t, udB.PostRecv(engine.RecvWR{ID: 1, SGL: []engine.SGE{{Addr: n.b.mr.Addr(), Length: 128, LKey: n.b.mr.LKey()}}}))
		copy(n.a.buf, "datagram")
		must(t, udA.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: []engine.SGE{{Addr: n.a.mr.Addr(), Length: 8, LKey: n.a.mr.LKey()}},
			AH: ud.AH, RemoteQPN: ud.QPN, RemoteQKey: ud.QKey}))
		n.run()
		var wc [2]engine.WC
		if got := n.b.cq.Poll(wc[:]); got != 1 || wc[0].Status != engine.WCSuccess || wc[0].SrcQP != udA.Num() ||
			string(n.b.buf[engine.GRHLen:engine.GRHLen+8]) != "datagram" {
			t.Fatalf("B's completions %+v", wc[:got])
		}
	})

	t.Run("C11_SIDR_no_listener_unsupported", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{})
		_, err := n.b.m.Listen(7174) // the TCP port space's: not a UD service
		must(t, err)
		_, err = n.a.m.ConnectUD(n.a.udQP(t), n.b.dev.IP(), 7174, nil)
		must(t, err)
		n.run()
		if n.a.types() != "UNREACHABLE" || n.a.events[0].Status != cm.SIDRUnsupported || n.b.types() != "" {
			t.Fatalf("events A %q %+v, B %q", n.a.types(), n.a.events, n.b.types())
		}
	})

	t.Run("C12_SIDR_reject_with_private_data", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{})
		_, err := n.b.m.ListenUD(7174)
		must(t, err)
		n.b.onRequest = func(e rdmacm.Event) { must(t, e.ID.Reject([]byte("full"))) }
		udA := n.a.udQP(t)
		_, err = n.a.m.ConnectUD(udA, n.b.dev.IP(), 7174, nil)
		must(t, err)
		n.run()
		if n.a.types() != "UNREACHABLE" || n.a.events[0].Status != cm.SIDRReject || !bytes.HasPrefix(n.a.events[0].Private, []byte("full")) {
			t.Fatalf("A's events %q %+v", n.a.types(), n.a.events)
		}
		if udA.State() != engine.QPSRTS {
			t.Fatalf("A's UD QP %s: a refused request leaves it serving others", udA.State())
		}
	})

	t.Run("C13_SIDR_lost_REP_answered_again", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{ResponseTimeout: 14})
		udB := n.b.udQP(t)
		_, err := n.b.m.ListenUD(7174)
		must(t, err)
		n.b.onRequest = func(e rdmacm.Event) { must(t, e.ID.Accept(udB, rdmacm.ConnParam{})) }
		n.fab.AddFault(sim.Fault{Src: "B", Opcodes: []wire.Opcode{wire.UDSendOnly}, Nth: 1, Action: sim.FaultDrop})
		_, err = n.a.m.ConnectUD(n.a.udQP(t), n.b.dev.IP(), 7174, nil)
		must(t, err)
		n.run()
		if got := strings.Join(n.cmFrames(), " "); got != "1:SIDR_REQ 2:SIDR_REP 1:SIDR_REQ 2:SIDR_REP" {
			t.Fatalf("CM messages %s", got)
		}
		// The request came twice and the consumer heard of it once.
		if n.a.types() != "ESTABLISHED" || n.b.types() != "CONNECT_REQUEST" || n.a.events[0].UD.QPN != udB.Num() {
			t.Fatalf("events A %q %+v, B %q", n.a.types(), n.a.events, n.b.types())
		}
	})

	t.Run("C13_SIDR_unanswered_unreachable", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{ResponseTimeout: 12, MaxRetries: 2})
		n.fab.LinkDown(n.b.dev, time.Hour)
		_, err := n.a.m.ConnectUD(n.a.udQP(t), n.b.dev.IP(), 7174, nil)
		must(t, err)
		n.run()
		if n.a.types() != "UNREACHABLE" || n.a.m.Stats().Resent != 2 {
			t.Fatalf("A's events %q, resent %d", n.a.types(), n.a.m.Stats().Resent)
		}
	})
}

// TestConformanceCMClose holds C17: a manager closed ends what it holds as Destroy would, each
// ID saying so to its peer, releases QP1 once that is sent, and answers every call after with
// ErrClosed.
func TestConformanceCMClose(t *testing.T) {
	t.Run("C17_close_disconnects_releases_refuses", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{})
		idA := n.connected(rdmacm.ConnParam{})
		_, err := n.a.m.Listen(7175)
		must(t, err)
		must(t, n.a.m.Close())
		if h := rdmacm.HeldBy(n.a.m); h.Conns != 0 || h.Listeners != 0 || h.Released {
			t.Fatalf("A holds %+v before its DREQ left", h)
		}
		n.run()
		if got := strings.Join(n.cmFrames(), " "); got != "1:REQ 2:REP 1:RTU 1:DREQ 2:DREP" {
			t.Fatalf("CM messages %s", got)
		}
		if n.a.types() != "ESTABLISHED" || n.b.types() != "CONNECT_REQUEST ESTABLISHED DISCONNECTED TIMEWAIT_EXIT" {
			t.Fatalf("events A %q, B %q", n.a.types(), n.b.types())
		}
		if h := rdmacm.HeldBy(n.a.m); h != (rdmacm.Held{Released: true}) || n.a.qp.State() != engine.QPSErr {
			t.Fatalf("A holds %+v, its QP in %s", h, n.a.qp.State())
		}
		for name, err := range map[string]error{
			"Close":     n.a.m.Close(),
			"Listen":    second(n.a.m.Listen(7176)),
			"ListenUD":  second(n.a.m.ListenUD(7176)),
			"Connect":   second(n.a.m.Connect(n.a.qp, n.b.dev.IP(), 7174, rdmacm.ConnParam{})),
			"ConnectUD": second(n.a.m.ConnectUD(n.a.udQP(t), n.b.dev.IP(), 7174, nil)),
			"Destroy":   idA.Destroy(),
		} {
			if !errors.Is(err, rdmacm.ErrClosed) || err.Error() != "rdmacm: the connection manager is closed" {
				t.Errorf("%s after Close: %v", name, err)
			}
		}
	})

	t.Run("C17_close_stops_timers", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{ResponseTimeout: 14})
		n.fab.LinkDown(n.b.dev, time.Hour)
		_, err := n.a.m.Connect(n.a.qp, n.b.dev.IP(), 7174, rdmacm.ConnParam{})
		must(t, err)
		n.sim.RunFor(time.Millisecond)
		must(t, n.a.m.Close())
		n.run()
		// The REQ's retries would have gone on for seconds; its REJ TIMEOUT is all that went.
		if st := n.a.m.Stats(); st.Resent != 0 || st.Sent != 2 || n.a.types() != "" || n.sim.Now() > time.Second {
			t.Fatalf("stats %+v, events %q, ran until %v", st, n.a.types(), n.sim.Now())
		}
		if !rdmacm.HeldBy(n.a.m).Released {
			t.Fatal("QP1 not released")
		}
	})
}

func second[T any](_ T, err error) error { return err }
