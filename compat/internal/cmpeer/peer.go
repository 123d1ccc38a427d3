package cmpeer

import (
	"context"
	"fmt"
	"io"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/emu/rdmacm"
)

// Peer is one run of a tool, set up alike for each: its options with the tool's defaults filled
// in and checked, a connection manager whose events are queued, a PD, and a channel the run's
// CQs signal.
type Peer struct {
	Tool Tool
	O    Options
	Ctx  context.Context
	Dev  *engine.Device
	// Out gets what the tool prints.
	Out    io.Writer
	PD     *engine.PD
	CM     *rdmacm.Manager
	Events *Events
	// Wake is signalled by the CQs given to Notify.
	Wake   chan struct{}
	Poller Poller
	qps    []*engine.QP
}

// Start fills in o's defaults, checks it, and sets up a run of the tool on dev that prints to out.
func (t Tool) Start(ctx context.Context, dev *engine.Device, o Options, out io.Writer) (*Peer, error) {
	t.Fill(&o)
	if err := t.Check(o, dev.ActiveMTU().Bytes()); err != nil {
		return nil, err
	}
	m, ev, err := New(ctx, dev, t.Name)
	if err != nil {
		return nil, err
	}
	p := &Peer{Tool: t, O: o, Ctx: ctx, Dev: dev, Out: out, CM: m, Events: ev, Wake: make(chan struct{}, 1)}
	p.Poller = Poller{Tool: t.Name, Ctx: ctx, Wake: p.Wake, Timeout: o.Timeout}
	if p.PD, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	return p, nil
}

// CreateQP makes a QP on the run's PD, which Close destroys.
func (p *Peer) CreateQP(attr engine.QPInitAttr) (*engine.QP, error) {
	qp, err := p.PD.CreateQP(attr)
	if err == nil {
		p.qps = append(p.qps, qp)
	}
	return qp, err
}

// Close destroys the run's QPs, in the order they were made.
func (p *Peer) Close() {
	for _, qp := range p.qps {
		_ = qp.Destroy()
	}
}

// Notify has cq signal the run's Wake on each completion.
func (p *Peer) Notify(cq *engine.CQ) { Signal(cq, p.Wake) }

// Signal has cq signal wake on each completion, without blocking: one signal waiting is enough
// for a poller that drains the CQ.
func Signal(cq *engine.CQ, wake chan<- struct{}) {
	cq.OnCompletion(func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
}

// Listen listens on the run's port with listen (the manager's Listen, or ListenUD for the UDP
// port space) and tells Listening.
func (p *Peer) Listen(listen func(port uint16) (*rdmacm.ID, error)) error {
	if _, err := listen(p.O.Port); err != nil {
		return fmt.Errorf("%s: listen on %d: %w", p.Tool.Name, p.O.Port, err)
	}
	if p.O.Listening != nil {
		p.O.Listening()
	}
	return nil
}

// Side is a run of ucmatose or udaddy: what its server does, and what its client does.
type Side interface {
	Server() error
	Client() error
}

// Run runs the tool on dev as its main does, printing to out: it starts a run (Start), has side
// make its Side from it, and prints "TOOL: starting server" (or client) first, then runs the
// Side's server or client, and after a run without error prints "test complete" and "return
// status 0". The run's QPs go when it ends.
func (t Tool) Run(ctx context.Context, dev *engine.Device, o Options, out io.Writer, side func(*Peer) Side) error {
	p, err := t.Start(ctx, dev, o, out)
	if err != nil {
		return err
	}
	defer p.Close()
	s := side(p)
	role, run := "client", s.Client
	if p.O.Server {
		role, run = "server", s.Server
	}
	fmt.Fprintf(out, "%s: starting %s\n", t.Name, role)
	if err := run(); err != nil {
		return err
	}
	fmt.Fprintln(out, "test complete")
	fmt.Fprintln(out, "return status 0")
	return nil
}

// Step is one step of ucmatose's or udaddy's data transfers: the line it prints, and what it
// then does on each connection.
type Step[N any] struct {
	Line string
	Do   func(N) error
}

// Transfers runs the steps, each on every node before the next, and then prints "data
// transfers complete", as ucmatose and udaddy do.
func Transfers[N any](out io.Writer, nodes []N, steps ...Step[N]) error {
	for _, s := range steps {
		fmt.Fprintln(out, s.Line)
		for _, n := range nodes {
			if err := s.Do(n); err != nil {
				return err
			}
		}
	}
	fmt.Fprintln(out, "data transfers complete")
	return nil
}
