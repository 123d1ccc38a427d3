package rdmacm_test

import (
	"bytes"
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
