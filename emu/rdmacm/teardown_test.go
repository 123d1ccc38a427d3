package rdmacm_test

import (
	"bytes"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/rdmacm"
	"github.com/softirdma/softirdma/wire/cm"
)

// holdsNothing fails unless m's tables are empty: no ID, no listener.
func holdsNothing(t *testing.T, name string, m *rdmacm.Manager) {
	t.Helper()
	if h := rdmacm.HeldBy(m); h.Conns != 0 || h.Listeners != 0 {
		t.Fatalf("%s still holds %+v", name, h)
	}
}

// TestConformanceCMDestroy holds C16: rdma_destroy_id, by the state the ID is in. It says so to
// the peer as Linux's ib_cm does, leaves the tables at once, and no event of its follows.
func TestConformanceCMDestroy(t *testing.T) {
	t.Run("C16_destroy_established_disconnects_once", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{})
		idA := n.connected(rdmacm.ConnParam{})
		must(t, idA.Destroy())
		holdsNothing(t, "A", n.a.m)
		n.run()
		if got := strings.Join(n.cmFrames(), " "); got != "1:REQ 2:REP 1:RTU 1:DREQ 2:DREP" {
			t.Fatalf("CM messages %s", got)
		}
		if n.a.types() != "ESTABLISHED" || n.b.types() != "CONNECT_REQUEST ESTABLISHED DISCONNECTED TIMEWAIT_EXIT" {
			t.Fatalf("events A %q, B %q", n.a.types(), n.b.types())
		}
		if n.a.qp.State() != engine.QPSErr || idA.State() != "DONE" {
			t.Fatalf("A's QP %s, ID %s", n.a.qp.State(), idA.State())
		}
		if err := idA.Destroy(); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "destroyed already") {
			t.Fatalf("destroyed twice: %v", err)
		}
		if err := idA.Disconnect(); err == nil {
			t.Fatal("a destroyed ID disconnected")
		}
	})

	t.Run("C16_destroy_request_sent_withdrawn_REJ_timeout", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{})
		_, err := n.b.m.Listen(7174) // B's consumer leaves the request unanswered
		must(t, err)
		idA, err := n.a.m.Connect(n.a.qp, n.b.dev.IP(), 7174, rdmacm.ConnParam{})
		must(t, err)
		n.sim.RunFor(time.Millisecond)
		must(t, idA.Destroy())
		n.sim.RunFor(time.Millisecond)
		if got := strings.Join(n.cmFrames(), " "); got != "1:REQ 1:REJ" {
			t.Fatalf("CM messages %s", got)
		}
		if n.a.types() != "" || n.b.types() != "CONNECT_REQUEST REJECTED" || n.b.events[1].Reason != cm.RejTimeout {
			t.Fatalf("events A %q, B %q %+v", n.a.types(), n.b.types(), n.b.events)
		}
		if n.a.qp.State() != engine.QPSErr {
			t.Fatalf("A's QP %s", n.a.qp.State())
		}
		holdsNothing(t, "A", n.a.m)
		// Nothing is sent again: the REQ's timer went with the ID.
		n.run()
		if got := strings.Join(n.cmFrames(), " "); got != "1:REQ 1:REJ" || n.a.m.Stats().Resent != 0 {
			t.Fatalf("CM messages %s, resent %d", got, n.a.m.Stats().Resent)
		}
	})

	t.Run("C16_destroy_request_received_REJ_consumer_defined", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{})
		_, err := n.b.m.Listen(7174)
		must(t, err)
		n.b.onRequest = func(e rdmacm.Event) { must(t, e.ID.Destroy()) }
		_, err = n.a.m.Connect(n.a.qp, n.b.dev.IP(), 7174, rdmacm.ConnParam{})
		must(t, err)
		n.run()
		if got := strings.Join(n.cmFrames(), " "); got != "1:REQ 2:REJ" {
			t.Fatalf("CM messages %s", got)
		}
		if n.a.types() != "REJECTED" || n.a.events[0].Reason != cm.RejConsumerDefined || n.b.types() != "CONNECT_REQUEST" {
			t.Fatalf("events A %q %+v, B %q", n.a.types(), n.a.events, n.b.types())
		}
		holdsNothing(t, "A", n.a.m)
		if h := rdmacm.HeldBy(n.b.m); h.Conns != 0 || h.Listeners != 1 {
			t.Fatalf("B holds %+v", h)
		}
	})

	t.Run("C16_destroy_SIDR_request_received_SIDR_REJECT", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{})
		_, err := n.b.m.ListenUD(7174)
		must(t, err)
		n.b.onRequest = func(e rdmacm.Event) { must(t, e.ID.Destroy()) }
		udA := n.a.udQP(t)
		_, err = n.a.m.ConnectUD(udA, n.b.dev.IP(), 7174, nil)
		must(t, err)
		n.run()
		if n.a.types() != "UNREACHABLE" || n.a.events[0].Status != cm.SIDRReject || udA.State() != engine.QPSRTS {
			t.Fatalf("A's events %q %+v, UD QP %s", n.a.types(), n.a.events, udA.State())
		}
		holdsNothing(t, "A", n.a.m)
	})

	t.Run("C16_destroy_listener_frees_the_port", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{})
		l, err := n.b.m.Listen(7174)
		must(t, err)
		must(t, l.Destroy())
		holdsNothing(t, "B", n.b.m)
		_, err = n.a.m.Connect(n.a.qp, n.b.dev.IP(), 7174, rdmacm.ConnParam{})
		must(t, err)
		n.run()
		if n.a.types() != "REJECTED" || n.a.events[0].Reason != cm.RejInvalidServiceID {
			t.Fatalf("A's events %q %+v", n.a.types(), n.a.events)
		}
		if _, err := n.b.m.Listen(7174); err != nil {
			t.Fatalf("the port is still taken: %v", err)
		}
	})

	t.Run("C16_destroy_in_timewait_no_exit", func(t *testing.T) {
		n := newNet(t, rdmacm.Config{})
		idA := n.connected(rdmacm.ConnParam{Private: []byte("x")})
		must(t, idA.Disconnect())
		n.sim.RunFor(time.Millisecond)
		if idA.State() != "TIMEWAIT" {
			t.Fatalf("A's ID in %s", idA.State())
		}
		must(t, idA.Destroy())
		n.run()
		if n.a.types() != "ESTABLISHED DISCONNECTED" || !bytes.HasPrefix(n.a.events[0].Private, []byte("world")) {
			t.Fatalf("A's events %q", n.a.types())
		}
		holdsNothing(t, "A", n.a.m)
	})
}
