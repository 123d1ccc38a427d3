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
	Tool   Tool
	O      Options
	Ctx    context.Context
	Dev    *engine.Device
	PD     *engine.PD
	CM     *rdmacm.Manager
	Events *Events
	// Wake is signalled by the CQs given to Notify.
	Wake   chan struct{}
	Poller Poller
}

// Start fills in o's defaults, checks it, and sets up a run of the tool on dev.
func (t Tool) Start(ctx context.Context, dev *engine.Device, o Options) (*Peer, error) {
	t.Fill(&o)
	if err := t.Check(o, dev.ActiveMTU().Bytes()); err != nil {
		return nil, err
	}
	m, ev, err := New(ctx, dev, t.Name)
	if err != nil {
		return nil, err
	}
	p := &Peer{Tool: t, O: o, Ctx: ctx, Dev: dev, CM: m, Events: ev, Wake: make(chan struct{}, 1)}
	p.Poller = Poller{Tool: t.Name, Ctx: ctx, Wake: p.Wake, Timeout: o.Timeout}
	if p.PD, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	return p, nil
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

// Main runs the body of ucmatose's or udaddy's main as they print it: "TOOL: starting server"
// (or client) first, then server or client, and after a run without error "test complete" and
// "return status 0".
func (p *Peer) Main(out io.Writer, server, client func() error) error {
	role, run := "client", client
	if p.O.Server {
		role, run = "server", server
	}
	fmt.Fprintf(out, "%s: starting %s\n", p.Tool.Name, role)
	if err := run(); err != nil {
		return err
	}
	fmt.Fprintln(out, "test complete")
	fmt.Fprintln(out, "return status 0")
	return nil
}
