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
