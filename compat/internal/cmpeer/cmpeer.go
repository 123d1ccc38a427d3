// Package cmpeer is what softirdma's peers of the rdma_cm tools (rping, ucmatose, udaddy) share:
// a connection manager whose events a tool takes in order, without losing one however many
// connections it runs, and a client's connection attempt that, when asked, keeps trying while
// its server is not listening yet.
package cmpeer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/emu/rdmacm"
	"github.com/softirdma/softirdma/wire/cm"
	"github.com/softirdma/softirdma/wire/neigh"
)

// Events is a connection manager's event stream, queued as they come.
type Events struct {
	tool string
	dev  *engine.Device
	ctx  context.Context
	mu   sync.Mutex
	q    []rdmacm.Event
	wake chan struct{}
}

// New gives dev a connection manager whose events are queued for tool (its name starts errors).
func New(ctx context.Context, dev *engine.Device, tool string) (*rdmacm.Manager, *Events, error) {
	ev := &Events{tool: tool, dev: dev, ctx: ctx, wake: make(chan struct{}, 1)}
	m, err := rdmacm.New(dev, rdmacm.Config{Events: ev.push})
	return m, ev, err
}

func (ev *Events) push(e rdmacm.Event) {
	ev.mu.Lock()
	ev.q = append(ev.q, e)
	ev.mu.Unlock()
	select {
	case ev.wake <- struct{}{}:
	default:
	}
}

// Wake is signalled when an event is queued: a tool waiting for completions waits on it too.
func (ev *Events) Wake() <-chan struct{} { return ev.wake }

// Take is the next queued event, if any.
func (ev *Events) Take() (rdmacm.Event, bool) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if len(ev.q) == 0 {
		return rdmacm.Event{}, false
	}
	e := ev.q[0]
	ev.q = ev.q[1:]
	return e, true
}

// Next waits for the next event; d > 0 bounds the wait.
func (ev *Events) Next(d time.Duration) (rdmacm.Event, error) {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	for {
		if e, ok := ev.Take(); ok {
			return e, nil
		}
		select {
		case <-ev.wake:
		case <-timeout:
			return rdmacm.Event{}, fmt.Errorf("%s: no connection event for %v", ev.tool, d)
		case <-ev.ctx.Done():
			return rdmacm.Event{}, ev.ctx.Err()
		}
	}
}

// own says whether addr is one of the device's addresses: its IP, or the link-local address its
// MAC gives (its IPv6 GID).
func (ev *Events) own(addr netip.Addr) bool {
	return addr.Unmap() == ev.dev.IP().Unmap() || addr == neigh.LinkLocal(ev.dev.MAC())
}

// worded is err said in words of the tool's own, err still underneath (errors.Is finds it).
type worded struct {
	msg string
	err error
}

func (w worded) Error() string { return w.msg }
func (w worded) Unwrap() error { return w.err }

// ErrDisconnected is a wait ended by the peer's disconnection.
var ErrDisconnected = errors.New("the peer disconnected")

// Wait waits for an event of type t, skipping others; a refusal, silence or disconnection (when
// t is not that) ends it with an error.
func (ev *Events) Wait(t rdmacm.EventType, d time.Duration) (rdmacm.Event, error) {
	var deadline time.Time
	if d > 0 {
		deadline = time.Now().Add(d)
	}
	for {
		left := time.Duration(0)
		if d > 0 {
			if left = time.Until(deadline); left <= 0 {
				return rdmacm.Event{}, fmt.Errorf("%s: no %s for %v", ev.tool, t, d)
			}
		}
		e, err := ev.Next(left)
		if err != nil {
			return e, err
		}
		switch {
		case e.Type == t:
			return e, nil
		case e.Type == rdmacm.Rejected:
			return e, fmt.Errorf("%s: the peer rejected the connection: %s", ev.tool, e.Reason)
		case e.Type == rdmacm.Unreachable && e.Status != cm.SIDRSuccess:
			return e, fmt.Errorf("%s: the peer refused the UD service: %s", ev.tool, e.Status)
		case e.Type == rdmacm.Unreachable:
			return e, fmt.Errorf("%s: the peer does not answer (no connection manager at that address?)", ev.tool)
		case e.Type == rdmacm.Disconnected:
			return e, fmt.Errorf("%s: %w", ev.tool, ErrDisconnected)
		}
	}
}

// Accept waits for a connection request, d > 0 bounding the wait, and accepts it on qp. The
// request's ID comes back even when accepting it failed.
func (ev *Events) Accept(qp *engine.QP, param rdmacm.ConnParam, d time.Duration) (*rdmacm.ID, error) {
	e, err := ev.Wait(rdmacm.ConnectRequest, d)
	if err != nil {
		return nil, err
	}
	if err := e.ID.Accept(qp, param); err != nil {
		return e.ID, fmt.Errorf("%s: accept: %w", ev.tool, err)
	}
	return e.ID, nil
}

// Dial makes one connection to the server at addr: connect sends the request, fresh readies the
// QP again after a refused attempt. While nobody listens at the server's port yet (REJ invalid
// service ID, SIDR UNSUPPORTED, or no answer) it tries again until wait has passed; wait 0 tries
// once, as the tools do. It returns the Established event. addr being the device's own, or one
// nothing on the link answers for, is an error that says so: the device's loopback would answer
// the first with "invalid service ID" (nothing of its own listens), create_ah the second with
// "no link address".
func (ev *Events) Dial(addr netip.Addr, wait, timeout time.Duration, connect func() (*rdmacm.ID, error), fresh func() error) (rdmacm.Event, error) {
	if ev.own(addr) {
		return rdmacm.Event{}, fmt.Errorf("%s: %s is this device's own address: a client connects to a server elsewhere on the link (the server's -ip), not to itself", ev.tool, addr)
	}
	deadline := time.Now().Add(wait)
	for {
		var e rdmacm.Event
		_, err := connect()
		if err != nil {
			if errors.Is(err, syscall.EHOSTUNREACH) && time.Now().After(deadline) {
				return e, worded{fmt.Sprintf("%s: no route/neighbour to %s on the link: nothing on it answers for that address (is the peer up, is -link right?)", ev.tool, addr), err}
			}
			if !errors.Is(err, syscall.EHOSTUNREACH) {
				return e, fmt.Errorf("%s: connect: %w", ev.tool, err)
			}
			e.Type = rdmacm.Unreachable // nobody answers for the address yet
		} else if e, err = ev.Wait(rdmacm.Established, timeout); err == nil {
			return e, nil
		}
		notYet := e.Type == rdmacm.Unreachable && (e.Status == cm.SIDRSuccess || e.Status == cm.SIDRUnsupported) ||
			e.Type == rdmacm.Rejected && e.Reason == cm.RejInvalidServiceID
		if !notYet || time.Now().After(deadline) {
			return e, err
		}
		select { // nobody listens yet: a moment, and again with the QP as new
		case <-time.After(200 * time.Millisecond):
		case <-ev.ctx.Done():
			return e, ev.ctx.Err()
		}
		if err := fresh(); err != nil {
			return e, err
		}
	}
}

// Poller waits for completions as the tools' poll_cqs do, with a bound on each wait.
type Poller struct {
	Tool    string
	Ctx     context.Context
	Wake    <-chan struct{} // signalled by the CQs' completion callbacks
	Timeout time.Duration
}

// Poll waits for want successful completions on cq, handing each to each (if not nil); a
// completion in error, or none for the timeout, ends it.
func (p Poller) Poll(cq *engine.CQ, want int, each func(engine.WC) error) error {
	var wcs [8]engine.WC
	deadline := time.NewTimer(p.Timeout)
	defer deadline.Stop()
	for want > 0 {
		got := cq.Poll(wcs[:min(want, len(wcs))])
		for _, wc := range wcs[:got] {
			if wc.Status != engine.WCSuccess {
				return fmt.Errorf("%s: completion with status %s: %v", p.Tool, wc.Status, wc.Err)
			}
			if each != nil {
				if err := each(wc); err != nil {
					return err
				}
			}
		}
		want -= got
		if got > 0 {
			continue
		}
		select {
		case <-p.Wake: // a disconnection flushes the QP: its completions end the wait
		case <-deadline.C:
			return fmt.Errorf("%s: failed polling CQ", p.Tool)
		case <-p.Ctx.Done():
			return p.Ctx.Err()
		}
	}
	return nil
}

// Renew readies qp for a connection as rdma_create_qp leaves one, again after a refused attempt:
// to RESET and INIT on port 1, the completions a refused attempt left in cqs (its flushed
// receives) taken away, then post puts its receives back.
func Renew(qp *engine.QP, post func() error, cqs ...*engine.CQ) error {
	if err := qp.Modify(engine.QPAttr{State: engine.QPSReset}, engine.AttrState); err != nil {
		return err
	}
	wcs := make([]engine.WC, 16)
	for _, cq := range cqs {
		for cq.Poll(wcs) > 0 {
		}
	}
	if err := qp.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1}, engine.AttrState|engine.AttrPKeyIndex|engine.AttrPort|engine.AttrAccessFlags); err != nil {
		return err
	}
	return post()
}
