package rdmacm_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/rdmacm"
)

// moveTo moves a QP where QPAttr says, as librdmacm moves a program's QP with
// rdma_init_qp_attr and ibv_modify_qp.
func moveTo(t *testing.T, id *rdmacm.ID, qp *engine.QP, states ...engine.QPState) {
	t.Helper()
	for _, s := range states {
		a, mask, err := id.QPAttr(s)
		must(t, err)
		must(t, qp.Modify(a, mask))
	}
}

// TestConformanceCMUserMovesQP: a connection whose consumers move their QPs themselves, as the
// kernel's rdma_cm leaves a program's QP to librdmacm. The manager never modifies them; the
// active side gets CONNECT_RESPONSE and sends the RTU only when told (Establish); the QPs end
// connected to each other with each side's send PSN the other's receive PSN. B asks before it
// accepts, so its READs are the request's (librdmacm sets its own over them).
func TestConformanceCMUserMovesQP(t *testing.T) {
	n := newNet(t, rdmacm.Config{})
	_, err := n.b.m.Listen(7174)
	must(t, err)
	n.b.onRequest = func(e rdmacm.Event) {
		if qpn, p := e.ID.PeerParam(); qpn != n.a.qp.Num() || p.ResponderResources != 2 || p.InitiatorDepth != 1 {
			t.Errorf("the request's QP 0x%x and READs %+v; want A's QP 0x%x, responder resources 2 (A's initiator depth), initiator depth 1", qpn, p, n.a.qp.Num())
		}
		moveTo(t, e.ID, n.b.qp, engine.QPSInit, engine.QPSRTR, engine.QPSRTS)
		must(t, e.ID.AcceptUser(n.b.qp, rdmacm.ConnParam{Private: []byte("world"), ResponderResources: 1, InitiatorDepth: 2}))
	}
	var frames string
	n.a.onResponse = func(e rdmacm.Event) {
		frames = strings.Join(n.cmFrames(), " ")
		moveTo(t, e.ID, n.a.qp, engine.QPSInit, engine.QPSRTR, engine.QPSRTS)
		must(t, e.ID.Establish())
		if err := e.ID.Establish(); err == nil {
			t.Error("a second Establish was taken")
		}
	}
	_, err = n.a.m.ConnectUser(n.a.qp, n.b.dev.IP(), 7174, rdmacm.ConnParam{Private: []byte("hello"), ResponderResources: 1, InitiatorDepth: 2})
	must(t, err)
	if n.a.qp.State() != engine.QPSReset {
		t.Fatalf("ConnectUser moved A's QP to %s", n.a.qp.State())
	}
	n.run()
	if n.a.types() != "CONNECT_RESPONSE" || !bytes.HasPrefix(n.a.events[0].Private, []byte("world")) || n.b.types() != "CONNECT_REQUEST ESTABLISHED" {
		t.Fatalf("events A %q, B %q; want CONNECT_RESPONSE with B's private data, and B established", n.a.types(), n.b.types())
	}
	if frames != "1:REQ 2:REP" {
		t.Fatalf("CM messages at the response %q, want no RTU before Establish", frames)
	}
	if got := strings.Join(n.cmFrames(), " "); got != "1:REQ 2:REP 1:RTU" {
		t.Fatalf("CM messages %s", got)
	}
	qa, qb := n.a.qp.Query(), n.b.qp.Query()
	if qa.State != engine.QPSRTS || qb.State != engine.QPSRTS || qa.DestQPN != n.b.qp.Num() || qb.DestQPN != n.a.qp.Num() ||
		qa.SQPSN != qb.RQPSN || qb.SQPSN != qa.RQPSN || qa.MaxRdAtomic != 1 || qb.MaxDestRdAtomic != 2 {
		t.Fatalf("QPs A %+v B %+v", qa, qb)
	}
	n.exchange()
}
