package engine_test

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"
	"github.com/softirdma/softirdma/emu/sim"
)

// asyncLog records a device's asynchronous events as its handler receives them.
type asyncLog struct{ got []engine.AsyncEvent }

func recordAsync(d *engine.Device) *asyncLog {
	l := &asyncLog{}
	d.OnAsyncEvent(func(e engine.AsyncEvent) { l.got = append(l.got, e) })
	return l
}

// recordAsync records the asynchronous events of each of the pair's devices.
func (p *pair) recordAsync() (la, lb *asyncLog) {
	return recordAsync(p.a), recordAsync(p.b)
}

// wantNoneOnModifyToErr moves qp to ERR as its consumer would and asserts that l's device
// raised nothing for it.
func (l *asyncLog) wantNoneOnModifyToErr(t testing.TB, p *pair, qp *engine.QP, who string) {
	t.Helper()
	toErr(t, qp)
	p.run()
	l.want(t, who)
}

// want asserts the events received so far, exactly and in order, and forgets them.
func (l *asyncLog) want(t testing.TB, who string, want ...engine.AsyncEvent) {
	t.Helper()
	if fmt.Sprint(l.got) != fmt.Sprint(want) {
		t.Fatalf("%s: async events %v, want %v", who, l.got, want)
	}
	l.got = nil
}

func TestAsyncEventNumbersAreLibibverbs(t *testing.T) {
	// enum ibv_event_type in libibverbs/verbs.h.
	for typ, n := range map[engine.AsyncEventType]uint8{engine.AsyncCQErr: 0, engine.AsyncQPFatal: 1, engine.AsyncQPReqErr: 2, engine.AsyncQPAccessErr: 3,
		engine.AsyncCommEst: 4, engine.AsyncSQDrained: 5, engine.AsyncDeviceFatal: 8, engine.AsyncPortActive: 9, engine.AsyncPortErr: 10, engine.AsyncSRQErr: 14,
		engine.AsyncSRQLimitReached: 15, engine.AsyncQPLastWQEReached: 16} {
		if uint8(typ) != n {
			t.Errorf("%s is %d, libibverbs says %d", typ, uint8(typ), n)
		}
	}
}

// A QP the consumer moves to ERR raises nothing; one that goes there on its own raises
// QP_FATAL (requester failures), QP_REQ_ERR or QP_ACCESS_ERR (what its responder refused).
func TestAsyncQPErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   engine.ConnectOptions
		act    func(p *pair)
		wantWC *engine.WCStatus // nil: no completion
		a, b   func(p *pair) []engine.AsyncEvent
	}{
		{name: "modify_to_ERR", act: func(p *pair) { toErr(t, p.qa) },
			a: func(*pair) []engine.AsyncEvent { return nil }, b: func(*pair) []engine.AsyncEvent { return nil }},
		{name: "retry_exceeded", opts: engine.ConnectOptions{Timeout: 10, RetryCnt: 2},
			act: func(p *pair) {
				p.fab.LinkDown(p.b, time.Hour)
				must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
			},
			wantWC: ptr(engine.WCRetryExcErr),
			a:      func(p *pair) []engine.AsyncEvent { return []engine.AsyncEvent{{engine.AsyncQPFatal, p.qa.Num()}} },
			b:      func(*pair) []engine.AsyncEvent { return nil }},
		{name: "K10_rights_of_the_QP", opts: engine.ConnectOptions{Access: engine.AccessRemoteRead},
			act: func(p *pair) {
				must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
			},
			wantWC: ptr(engine.WCRemInvReqErr),
			a:      func(p *pair) []engine.AsyncEvent { return []engine.AsyncEvent{{engine.AsyncQPFatal, p.qa.Num()}} },
			b:      func(p *pair) []engine.AsyncEvent { return []engine.AsyncEvent{{engine.AsyncQPReqErr, p.qb.Num()}} }},
		{name: "bad_rkey",
			act: func(p *pair) {
				must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey() ^ 0x100}))
			},
			wantWC: ptr(engine.WCRemAccessErr),
			a:      func(p *pair) []engine.AsyncEvent { return []engine.AsyncEvent{{engine.AsyncQPFatal, p.qa.Num()}} },
			b:      func(p *pair) []engine.AsyncEvent { return []engine.AsyncEvent{{engine.AsyncQPAccessErr, p.qb.Num()}} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, 1, sim.LinkConfig{}, tc.opts)
			la, lb := p.recordAsync()
			tc.act(p)
			p.run()
			if tc.wantWC != nil {
				wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: *tc.wantWC, Opcode: engine.WCRDMAWrite})
			}
			if p.qa.State() != engine.QPSErr {
				t.Fatalf("QP A is %s, want ERR", p.qa.State())
			}
			la.want(t, "A", tc.a(p)...)
			lb.want(t, "B", tc.b(p)...)
			// Once in ERR, nothing raises it again, nor does the consumer's move to ERR.
			la.wantNoneOnModifyToErr(t, p, p.qa, "A again")
		})
	}
}

// A full CQ raises CQ_ERR for the CQ (once) and QP_FATAL for the QP whose completion was lost,
// in that order.
func TestAsyncCQOverflow(t *testing.T) {
	p := plainPair(t)
	la, lb := p.recordAsync()
	cq, err := p.a.CreateCQ(1)
	must(t, err)
	caps := engine.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
	qa, qb := connectedRC(t, rcEnd{pd: p.pdA, cq: cq, cap: caps}, rcEnd{pd: p.pdB, cq: p.cqB, cap: caps}, engine.ConnectOptions{})
	for id := uint64(1); id <= 3; id++ {
		must(t, qa.PostSend(engine.SendWR{ID: id, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
	}
	p.run()
	if !cq.Overflowed() || qa.State() != engine.QPSErr {
		t.Fatalf("overflowed %v, QP %s; want true, ERR", cq.Overflowed(), qa.State())
	}
	la.want(t, "A", engine.AsyncEvent{engine.AsyncCQErr, cq.Num()}, engine.AsyncEvent{engine.AsyncQPFatal, qa.Num()})
	lb.want(t, "B")

	// The QP reset and connected again forgets the overflow: a second one fails it again
	// (QP_FATAL; CQ_ERR is once per CQ).
	for cq.Poll(make([]engine.WC, 8)) > 0 {
	}
	must(t, qa.Modify(engine.QPAttr{State: engine.QPSReset}, engine.AttrState))
	must(t, qb.Modify(engine.QPAttr{State: engine.QPSReset}, engine.AttrState))
	must(t, engine.ConnectRC(qa, qb, engine.ConnectOptions{}))
	for id := uint64(4); id <= 6; id++ {
		must(t, qa.PostSend(engine.SendWR{ID: id, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
	}
	p.run()
	if qa.State() != engine.QPSErr {
		t.Fatalf("after a second overflow the QP is %s, want ERR", qa.State())
	}
	la.want(t, "A after a second overflow", engine.AsyncEvent{engine.AsyncQPFatal, qa.Num()})
}

// COMM_EST: the first packet a QP in RTR receives, once, and never for a QP in RTS.
func TestAsyncCommEst(t *testing.T) {
	p := plainPair(t)
	la, lb := p.recordAsync()
	// B goes back to RTR, expecting the PSN A sends next; A stays in RTS.
	must(t, p.qb.Modify(engine.QPAttr{State: engine.QPSReset}, engine.AttrState))
	must(t, p.qb.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1, AccessFlags: engine.AccessRemoteWrite}, engine.AttrState|engine.AttrPKeyIndex|engine.AttrPort|engine.AttrAccessFlags))
	rtr := engine.QPAttr{State: engine.QPSRTR, AH: engine.AHAttr{DGID: p.a.IP(), HopLimit: 64}, PathMTU: engine.MTU1024, DestQPN: p.qa.Num(), MaxDestRdAtomic: 16, MinRNRTimer: 12}
	must(t, p.qb.Modify(rtr, engine.AttrState|engine.AttrAV|engine.AttrPathMTU|engine.AttrDestQPN|engine.AttrRQPSN|engine.AttrMaxDestRdAtomic|engine.AttrMinRNRTimer))
	p.run()
	lb.want(t, "B in RTR before any packet")
	write := engine.SendWR{Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}
	write.ID = 1
	must(t, p.qa.PostSend(write))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite})
	lb.want(t, "B", engine.AsyncEvent{engine.AsyncCommEst, p.qb.Num()})
	write.ID = 2
	must(t, p.qa.PostSend(write))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 2, Opcode: engine.WCRDMAWrite})
	lb.want(t, "B after a second packet")
	must(t, p.qb.Modify(engine.QPAttr{State: engine.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}, engine.AttrState|engine.AttrSQPSN|engine.AttrTimeout|engine.AttrRetryCnt|engine.AttrRNRRetry|engine.AttrMaxQPRdAtomic))
	write.ID = 3
	must(t, p.qa.PostSend(write))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 3, Opcode: engine.WCRDMAWrite})
	lb.want(t, "B in RTS")
	la.want(t, "A (in RTS throughout, receiving ACKs)")
}

// SQ_DRAINED: asked for with the move to SQD, raised once what was started has completed (the
// handler sees the completion already queued); a request posted in SQD does not hold it back;
// not asked for, never.
func TestAsyncSQDrained(t *testing.T) {
	p := newPair(t, 1, sim.LinkConfig{Latency: 10 * time.Microsecond}, engine.ConnectOptions{})
	var queuedAtEvent []int
	p.a.OnAsyncEvent(func(e engine.AsyncEvent) {
		if e != (engine.AsyncEvent{engine.AsyncSQDrained, p.qa.Num()}) {
			t.Errorf("async event %v", e)
		}
		queuedAtEvent = append(queuedAtEvent, p.cqA.Len())
	})
	write := func(id uint64) engine.SendWR {
		return engine.SendWR{ID: id, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}
	}
	sqd := engine.QPAttr{State: engine.QPSSQD, EnSQDAsyncNotify: true}
	must(t, p.qa.PostSend(write(1)))
	p.sim.Step() // the WRITE is on the wire
	must(t, p.qa.Modify(sqd, engine.AttrState|engine.AttrEnSQDAsyncNotify))
	must(t, p.qa.PostSend(write(2)))
	p.sim.RunFor(5 * time.Microsecond)
	if len(queuedAtEvent) != 0 {
		t.Fatalf("SQ_DRAINED with the WRITE unacknowledged")
	}
	p.run()
	if fmt.Sprint(queuedAtEvent) != "[1]" {
		t.Fatalf("SQ_DRAINED raised with %v completions queued, want once with 1", queuedAtEvent)
	}
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite})
	must(t, p.qa.Modify(engine.QPAttr{State: engine.QPSRTS}, engine.AttrState))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 2, Opcode: engine.WCRDMAWrite})

	// Not asked for: nothing, though the queue drains.
	queuedAtEvent = nil
	must(t, p.qa.PostSend(write(3)))
	p.sim.Step()
	must(t, p.qa.Modify(engine.QPAttr{State: engine.QPSSQD}, engine.AttrState))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 3, Opcode: engine.WCRDMAWrite})
	if len(queuedAtEvent) != 0 {
		t.Fatal("SQ_DRAINED raised without being asked for")
	}
	// Asked for with nothing outstanding: at once.
	must(t, p.qa.Modify(engine.QPAttr{State: engine.QPSRTS}, engine.AttrState))
	must(t, p.qa.Modify(sqd, engine.AttrState|engine.AttrEnSQDAsyncNotify))
	p.run()
	if fmt.Sprint(queuedAtEvent) != "[0]" {
		t.Fatalf("SQ_DRAINED on an idle QP: %v, want once", queuedAtEvent)
	}
}

// SRQ_LIMIT_REACHED as rdma-core's test_modify_srq_limit drives it: ten receives, limit 7, four
// SENDs; it fires once, at the fourth, and disarms.
func TestAsyncSRQLimit(t *testing.T) {
	p := plainPair(t)
	_, lb := p.recordAsync()
	srq := newSRQ(t, p.pdB, 16, 1)
	qa, _ := p.connectToSRQ(srq, engine.QPCap{MaxSendWR: 16, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, engine.ConnectOptions{})
	for i := range 10 {
		must(t, srq.PostRecv(engine.RecvWR{ID: uint64(100 + i), SGL: sge(p.mrB, uint64(i)*64, 64)}))
	}
	if err := srq.Modify(engine.SRQAttr{Limit: 17}, engine.SRQAttrLimit); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("limit above the SRQ's size: %v, want EINVAL", err)
	}
	if err := srq.Modify(engine.SRQAttr{MaxWR: 32}, engine.SRQAttrMaxWR); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("resize: %v, want EOPNOTSUPP", err)
	}
	must(t, srq.Modify(engine.SRQAttr{Limit: 7}, engine.SRQAttrLimit))
	if a := srq.Query(); a != (engine.SRQAttr{MaxWR: 16, MaxSGE: 1, Limit: 7}) {
		t.Fatalf("query_srq %+v", a)
	}
	send := func(n int) {
		for range n {
			must(t, qa.PostSend(engine.SendWR{Opcode: engine.WRSend, SGL: sge(p.mrA, 0, 8)}))
		}
		p.run()
	}
	send(3) // 7 left: not below the limit
	lb.want(t, "B with 7 receives left")
	send(1)
	lb.want(t, "B with 6 receives left", engine.AsyncEvent{engine.AsyncSRQLimitReached, srq.Num()})
	if a := srq.Query(); a.Limit != 0 {
		t.Fatalf("limit %d after the event, want 0 (disarmed)", a.Limit)
	}
	send(3)
	lb.want(t, "B, disarmed")
	// Armed again with fewer posted than the limit already: the next receive taken fires it.
	must(t, srq.Modify(engine.SRQAttr{Limit: 5}, engine.SRQAttrLimit))
	send(1)
	lb.want(t, "B re-armed", engine.AsyncEvent{engine.AsyncSRQLimitReached, srq.Num()})
	if n := len(poll(p.cqB)); n != 8 {
		t.Fatalf("%d receive completions, want 8", n)
	}
}

// LAST_WQE_REACHED: a QP on an SRQ that goes to ERR, by the consumer's modify or on its own
// (after the event saying why).
func TestAsyncLastWQEReached(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fatal bool
	}{{"modify_to_ERR", false}, {"access_error", true}} {
		t.Run(tc.name, func(t *testing.T) {
			p := plainPair(t)
			_, lb := p.recordAsync()
			srq := newSRQ(t, p.pdB, 4, 1)
			qa, qb := p.connectToSRQ(srq, engine.QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, engine.ConnectOptions{})
			want := []engine.AsyncEvent{{engine.AsyncQPLastWQEReached, qb.Num()}}
			if tc.fatal {
				must(t, qa.PostSend(engine.SendWR{Opcode: engine.WRRDMAWrite, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: 0x1234}))
				want = append([]engine.AsyncEvent{{engine.AsyncQPAccessErr, qb.Num()}}, want...)
			} else {
				toErr(t, qb)
			}
			p.run()
			lb.want(t, "B", want...)
			// The plain QP of the pair, on no SRQ, raises no LAST_WQE_REACHED.
			lb.wantNoneOnModifyToErr(t, p, p.qb, "B, QP without SRQ")
		})
	}
}

// A port down sends and receives nothing, its loopback frames included; PORT_ERR and
// PORT_ACTIVE mark the changes, and the requests held up complete once it is back.
func TestAsyncPortDownUp(t *testing.T) {
	p := plainPair(t)
	la, lb := p.recordAsync()
	p.a.SetPortActive(false)
	p.a.SetPortActive(false) // no change, no event
	if p.a.PortActive() {
		t.Fatal("port still active")
	}
	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
	p.sim.RunFor(time.Millisecond)
	if p.a.Stats().TxFrames != 0 || p.b.Stats().RxFrames != 0 {
		t.Fatalf("a down port sent %d frames, peer received %d", p.a.Stats().TxFrames, p.b.Stats().RxFrames)
	}
	la.want(t, "A down", engine.AsyncEvent{engine.AsyncPortErr, engine.PortNum})
	p.a.SetPortActive(true)
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite})
	la.want(t, "A up", engine.AsyncEvent{engine.AsyncPortActive, engine.PortNum})
	lb.want(t, "B")

	// The receiving side down: B takes in nothing.
	p.b.SetPortActive(false)
	rx := p.b.Stats().RxFrames
	must(t, p.qa.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
	p.sim.RunFor(time.Millisecond)
	if p.b.Stats().RxFrames != rx || p.a.Stats().TxFrames == 0 {
		t.Fatalf("a down port received %d frames", p.b.Stats().RxFrames-rx)
	}
	p.b.SetPortActive(true)
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 2, Opcode: engine.WCRDMAWrite})
	lb.want(t, "B", engine.AsyncEvent{engine.AsyncPortErr, engine.PortNum}, engine.AsyncEvent{engine.AsyncPortActive, engine.PortNum})

	s := newSolo(t, 1, sim.LinkConfig{}, engine.ConnectOptions{})
	s.dev.SetPortActive(false)
	must(t, s.qa.PostSend(engine.SendWR{ID: 3, Opcode: engine.WRRDMAWrite, SGL: sge(s.mr, 0, 8), RemoteAddr: s.mr.Addr() + 64, RKey: s.mr.RKey()}))
	s.sim.RunFor(time.Millisecond)
	if s.dev.Stats().TxFrames != 0 || s.dev.Stats().Loopback != 0 {
		t.Fatalf("a down port looped back %d of %d frames", s.dev.Stats().Loopback, s.dev.Stats().TxFrames)
	}
}

// The handler runs without the device lock: it can query and modify the device, and the events
// its calls cause come after the one it is handling. Under a wall clock, events raised in a
// burst still arrive in order.
func TestAsyncHandlerCallsIntoDevice(t *testing.T) {
	p := plainPair(t)
	var got []string
	p.a.OnAsyncEvent(func(e engine.AsyncEvent) {
		qp, ok := p.a.QP(e.Num)
		got = append(got, fmt.Sprintf("%v found=%v", e, ok))
		if e.Type == engine.AsyncQPFatal {
			got = append(got, qp.Query().State.String())
			p.a.SetPortActive(false) // raises PORT_ERR from inside the handler
		}
	})
	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: 0x1234}))
	done := make(chan struct{})
	go func() { defer close(done); p.run() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler deadlocked calling into the device")
	}
	want := fmt.Sprintf("[QP_FATAL 0x%x found=true ERR PORT_ERR 0x1 found=false]", p.qa.Num())
	if fmt.Sprint(got) != want {
		t.Fatalf("handler saw %v, want %v", got, want)
	}

	d := engine.NewDevice(engine.DeviceConfig{Name: "wall", Clock: realtime.NewWallClock()})
	events := make(chan engine.AsyncEvent, 64)
	d.OnAsyncEvent(func(e engine.AsyncEvent) {
		_ = d.PortActive()
		events <- e
	})
	for range 20 {
		d.SetPortActive(false)
		d.SetPortActive(true)
	}
	for i := range 40 {
		want := engine.AsyncEvent{engine.AsyncPortErr, engine.PortNum}
		if i%2 == 1 {
			want.Type = engine.AsyncPortActive
		}
		select {
		case e := <-events:
			if e != want {
				t.Fatalf("event %d: %v, want %v", i, e, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d never came", i)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// failingLink is a wire.Link that receives nothing until it fails.
type failingLink struct{ fail chan struct{} }

func (l failingLink) SendBatch(frames [][]byte) (int, error) { return len(frames), nil }
func (l failingLink) RecvBatch([][]byte, []int) (int, error) {
	<-l.fail
	return 0, io.ErrUnexpectedEOF
}
func (l failingLink) Close() error { return nil }

// A Host whose link fails takes its device's port down: PORT_ERR, and nothing more is sent.
func TestAsyncHostLinkFailureIsPortErr(t *testing.T) {
	link := failingLink{fail: make(chan struct{})}
	h, err := realtime.NewHost(realtime.HostConfig{Name: "H", Link: link, MAC: [6]byte{2, 0, 0, 0, 0, 1}, IP: mustAddr("192.0.2.1")})
	must(t, err)
	events := make(chan engine.AsyncEvent, 4)
	h.Device().OnAsyncEvent(func(e engine.AsyncEvent) { events <- e })
	ran := make(chan error, 1)
	go func() { ran <- h.Run() }()
	close(link.fail)
	if err := <-ran; !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Run returned %v", err)
	}
	select {
	case e := <-events:
		if e != (engine.AsyncEvent{engine.AsyncPortErr, engine.PortNum}) {
			t.Fatalf("event %v, want PORT_ERR", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no PORT_ERR after the link failed")
	}
	if h.Device().PortActive() {
		t.Fatal("port active after the link failed")
	}
}
