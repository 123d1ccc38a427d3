package rdmacm_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/rdmacm"
)

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
