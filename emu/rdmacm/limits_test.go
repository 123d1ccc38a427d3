package rdmacm

import (
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/wire/cm"
	"github.com/softirdma/softirdma/wire/mad"
)

// sentByA lists the CM messages A sent, as attribute names and, for a REJ, its reason.
func (n *hostileNet) sentByA() []string {
	var out []string
	for _, c := range CapturedMADs(n.t, n.pcap.Bytes()) {
		if c.Src != n.devA.IP() {
			continue
		}
		name := c.Hdr.AttrName()
		if c.Hdr.AttrID == cm.AttrREJ {
			rej, err := cm.ParseREJ(c.Body)
			hmust(n.t, err)
			name += "(" + strconv.Itoa(int(rej.Reason)) + ")"
		}
		out = append(out, name)
	}
	return out
}

// TestConformanceCMHostile holds C14 and C15: what a peer's requests may hold of the manager,
// and how long.
func TestConformanceCMHostile(t *testing.T) {
	t.Run("C14_backlog_full_REQ_refused_SIDR_REQ_dropped", func(t *testing.T) {
		n := newHostileNet(t)
		for i := range uint32(hostileBacklog + 1) {
			n.raw(cmMAD(uint64(i), cm.AttrREQ, request(cm.AttrREQ, cm.ServiceID(cm.PSTCP, 7174), 100+i)))
		}
		n.raw(cmMAD(99, cm.AttrSIDRREQ, request(cm.AttrSIDRREQ, cm.ServiceID(cm.PSUDP, 7175), 200)))
		n.sim.RunFor(time.Millisecond)
		if got := strings.Join(n.sentByA(), " "); got != "REJ(3)" || len(n.waiting) != hostileBacklog || n.a.Stats().Overflow != 2 {
			t.Fatalf("A sent %q, %d requests wait, stats %+v", got, len(n.waiting), n.a.Stats())
		}
		// Once the consumer answers one, a request is taken again.
		hmust(t, n.waiting[0].Reject(nil))
		n.raw(cmMAD(99, cm.AttrSIDRREQ, request(cm.AttrSIDRREQ, cm.ServiceID(cm.PSUDP, 7175), 200)))
		n.sim.RunFor(time.Millisecond)
		if len(n.waiting) != hostileBacklog+1 || n.waiting[hostileBacklog].ps != cm.PSUDP {
			t.Fatalf("%d requests wait", len(n.waiting))
		}
	})

	t.Run("C15_unanswered_REQ_expires_REJ_timeout", func(t *testing.T) {
		n := newHostileNet(t)
		n.raw(cmMAD(1, cm.AttrREQ, request(cm.AttrREQ, cm.ServiceID(cm.PSTCP, 7174), 100)))
		n.sim.RunFor(time.Millisecond)
		if len(n.waiting) != 1 {
			t.Fatalf("%d requests wait", len(n.waiting))
		}
		id := n.waiting[0]
		// The REQ asked for answers within 4.096 us x 2^12 (a round trip of 33 ms), 4 times:
		// 134 ms, longer than an MRA's 4.096 us x 2^14 and a round trip. Just before, the
		// request still waits.
		n.sim.RunFor(n.a.answerWait(&id.req) - 2*time.Millisecond)
		if id.State() != "REQ_RCVD" {
			t.Fatalf("ID in %s before its time", id.State())
		}
		n.sim.RunFor(10 * time.Millisecond)
		if got := strings.Join(n.types(id), " "); got != "CONNECT_REQUEST UNREACHABLE" || id.State() != "DONE" || n.a.Stats().Expired != 1 {
			t.Fatalf("events %q in %s, stats %+v", got, id.State(), n.a.Stats())
		}
		if got := strings.Join(n.sentByA(), " "); got != "REJ(4)" {
			t.Fatalf("A sent %q", got)
		}
		if err := id.Accept(n.rcQP(n.a), ConnParam{}); err == nil || !strings.Contains(err.Error(), "accept in DONE") {
			t.Fatalf("a late Accept: %v", err)
		}
	})

	t.Run("C15_unanswered_SIDR_REQ_expires", func(t *testing.T) {
		n := newHostileNet(t)
		n.raw(cmMAD(1, cm.AttrSIDRREQ, request(cm.AttrSIDRREQ, cm.ServiceID(cm.PSUDP, 7175), 100)))
		n.sim.RunFor(time.Millisecond)
		id := n.waiting[0]
		n.sim.RunFor(n.a.answerWait(nil) + time.Millisecond)
		if got := strings.Join(n.types(id), " "); got != "CONNECT_REQUEST UNREACHABLE" || id.State() != "DONE" || len(n.sentByA()) != 0 {
			t.Fatalf("events %q in %s, A sent %q", got, id.State(), n.sentByA())
		}
	})

	t.Run("C15_peer_REJ_timeout_ends_waiting_request", func(t *testing.T) {
		// The peer gave up before it heard of our communication ID: its REJ names its own.
		n := newHostileNet(t)
		n.raw(cmMAD(1, cm.AttrREQ, request(cm.AttrREQ, cm.ServiceID(cm.PSTCP, 7174), 100)))
		n.sim.RunFor(time.Millisecond)
		id := n.waiting[0]
		rej := cm.REJ{LocalCommID: 100, Reason: cm.RejTimeout}
		msg := make([]byte, cm.DataLen)
		hmust(t, rej.Put(msg))
		n.raw(cmMAD(1, cm.AttrREJ, msg))
		n.sim.RunFor(time.Millisecond)
		if got := strings.Join(n.types(id), " "); got != "CONNECT_REQUEST REJECTED" || id.State() != "DONE" || n.events[id][1].Reason != cm.RejTimeout {
			t.Fatalf("events %q in %s", got, id.State())
		}
		qp := n.rcQP(n.a)
		if err := id.Accept(qp, ConnParam{}); err == nil {
			t.Fatal("a rejected request accepted")
		}
	})

	t.Run("C15_accept_racing_the_end_refused", func(t *testing.T) {
		// The request ends while Accept readies the QP (outside the manager's lock): Accept
		// says so and leaves the QP in ERR, rather than answer a request no longer there.
		n := newHostileNet(t)
		n.raw(cmMAD(1, cm.AttrREQ, request(cm.AttrREQ, cm.ServiceID(cm.PSTCP, 7174), 100)))
		n.sim.RunFor(time.Millisecond)
		id := n.waiting[0]
		qp := n.rcQP(n.a)
		testHookAccept = func() {
			n.a.mu.Lock()
			n.a.fail(id, Unreachable)
			n.a.mu.Unlock()
		}
		defer func() { testHookAccept = nil }()
		err := id.Accept(qp, ConnParam{})
		if !errors.Is(err, syscall.ECONNABORTED) || qp.State() != engine.QPSErr || len(n.sentByA()) != 0 {
			t.Fatalf("Accept: %v, QP %s, A sent %q", err, qp.State(), n.sentByA())
		}
	})
}

// FuzzCMInput sends what the fuzzer makes, cut into MADs of 256 bytes (the last one shorter), from
// a peer to a manager with a listener of each port space whose consumer answers nothing: no
// panic, the backlog holds, and once every timeout has passed the manager holds nothing.
func FuzzCMInput(f *testing.F) {
	svc := cm.ServiceID(cm.PSTCP, 7174)
	f.Add(cmMAD(1, cm.AttrREQ, request(cm.AttrREQ, svc, 5)))
	f.Add(cmMAD(1, cm.AttrSIDRREQ, request(cm.AttrSIDRREQ, cm.ServiceID(cm.PSUDP, 7175), 5)))
	two := append(cmMAD(1, cm.AttrREQ, request(cm.AttrREQ, svc, 5)), cmMAD(1, cm.AttrREQ, request(cm.AttrREQ, svc, 5))...)
	f.Add(two) // a duplicate: an MRA
	rej := cm.REJ{LocalCommID: 5, Reason: cm.RejTimeout}
	msg := make([]byte, cm.DataLen)
	_ = rej.Put(msg)
	f.Add(append(cmMAD(1, cm.AttrREQ, request(cm.AttrREQ, svc, 5)), cmMAD(2, cm.AttrREJ, msg)...))
	for _, attr := range []uint16{cm.AttrREP, cm.AttrRTU, cm.AttrDREQ, cm.AttrDREP, cm.AttrMRA, cm.AttrSIDRREP} {
		f.Add(cmMAD(1, attr, make([]byte, cm.DataLen)))
	}
	f.Add([]byte{1, 7, 2, 3})
	var flood []byte // past the backlog: the last one refused
	for i := range uint32(hostileBacklog + 2) {
		flood = append(flood, cmMAD(uint64(i), cm.AttrREQ, request(cm.AttrREQ, svc, 10+i))...)
	}
	f.Add(flood)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64*mad.Len {
			return
		}
		n := newHostileNet(t)
		for len(data) > 0 {
			k := min(len(data), mad.Len)
			n.raw(data[:k])
			data = data[k:]
		}
		n.sim.RunFor(time.Millisecond)
		if l := n.a.liveCount(); l.waiting > hostileBacklog || l.conns != l.waiting {
			t.Fatalf("A holds %+v", l)
		}
		n.sim.RunFor(pastEveryTimeout)
		if l := n.a.liveCount(); l.conns != 0 {
			t.Fatalf("A holds %+v after every timeout", l)
		}
		for _, id := range n.ids {
			if id.State() != "DONE" {
				t.Fatalf("ID %#x in %s", id.local, id.State())
			}
		}
	})
}
