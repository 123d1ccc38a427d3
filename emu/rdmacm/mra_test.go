package rdmacm_test

import (
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/rdmacm"
	"github.com/softirdma/softirdma/wire/cm"
)

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
