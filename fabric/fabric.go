// Package fabric is the fabric `softirdma serve -function` runs, for any Go program: PCI
// functions (hw/vfioserve), each on a vfio-user socket of its own for a QEMU, each with its
// engine on a wall-clock host (emu/realtime) that stands on a port of one in-process Ethernet
// switch (wire/ethswitch), so that frames between them are handed over in memory; an optional
// uplink joins the switch to a real link. The fabric runs a fault plan (wire/faultplan) on
// every frame, counts what each port carried, and writes one pcap of all of it. Its control
// socket, which adds and removes faults and reads the counters from outside, is
// fabric/control.
//
// It stands above hw: the device model links no wall-clock host, fault plan or packet library,
// and the fabric is more than PCI functions (any wire link can stand on a port, AddPort).
package fabric

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"
	"github.com/softirdma/softirdma/hw/vfiouser"
	"github.com/softirdma/softirdma/wire/ethswitch"
	"github.com/softirdma/softirdma/wire/faultplan"
	"github.com/softirdma/softirdma/wire/roce"
)

// Config sets up a fabric.
type Config struct {
	// Log receives what the fabric does: faults added and removed, an uplink that stops, a
	// capture it cannot write, and each function's own record (with function=NAME). nil:
	// slog's default logger.
	Log *slog.Logger
	// Pcap, if set, is a file the fabric creates and writes every frame it forwards to, with
	// the time it did, in the order the fault plan numbers them: a fault list's frame numbers
	// are this capture's.
	Pcap string
	// Faults shows every frame to the fault plan from the start, so that faults added at any
	// time number frames as the capture does. Without it the switch forwards frames untouched
	// until the first fault is added, and that fault's frame numbers count from there.
	Faults bool
	// Loss drops this fraction of the RoCE frames each function receives (its host's RxLoss).
	Loss float64
	// Guard, if set, is lent each function's connections (vfiouser.Config.Guard): a process
	// that ends them cleanly should this one die.
	Guard vfiouser.ConnGuard
	// SendWindow is the send window of each function's engine and each host device's
	// (engine.DeviceConfig.SendWindow; 0: rxe's).
	SendWindow int
}

// Fabric is a running fabric. Its methods are safe for concurrent use.
type Fabric struct {
	cfg     Config
	log     *slog.Logger
	sw      *ethswitch.Switch
	plan    *faultplan.Live
	capture *capture // nil without Config.Pcap
	closing atomic.Bool

	mu        sync.Mutex
	planOn    bool       // the plan is on the switch
	mtu       engine.MTU // the functions' active MTU: 0 (4096), or an uplink's
	uplinks   []*ethswitch.Port
	functions []*Function
	hosts     []*realtime.Host
}

// New makes a fabric without ports, its capture file created and started. Its errors are
// *Error.
func New(cfg Config) (*Fabric, error) {
	f := &Fabric{cfg: cfg, log: cfg.Log, sw: ethswitch.New(), plan: &faultplan.Live{}}
	if f.log == nil {
		f.log = slog.Default()
	}
	if cfg.Pcap != "" {
		c, err := startCapture(cfg.Pcap, f.log)
		if err != nil {
			return nil, err
		}
		f.capture = c
		f.sw.SetTap(c.tap)
	}
	if cfg.Faults {
		f.sw.SetFaults(f.plan)
		f.planOn = true
	}
	return f, nil
}

// Error is what kept a fabric, a port or a function from starting: Msg says what could not be
// done, Attrs what it is about (key and value pairs, as slog takes them), Err why.
type Error struct {
	Msg   string
	Attrs []any
	Err   error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Msg)
	for i := 0; i+1 < len(e.Attrs); i += 2 {
		fmt.Fprintf(&b, " %v=%v", e.Attrs[i], e.Attrs[i+1])
	}
	return b.String() + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// about puts key and value before e's attributes, when err is an *Error: what it is about is
// part of something bigger.
func about(err error, key string, value any) error {
	var e *Error
	if errors.As(err, &e) {
		e.Attrs = append([]any{key, value}, e.Attrs...)
	}
	return err
}

// AddPort adds a port named name (a fault's from=, the counters' name) for whatever stands on
// it, paced at rate bits per second (0: no pacing; ethswitch.Port.SetRate): a wire link.
func (f *Fabric) AddPort(name string, rate float64) (*ethswitch.Port, error) {
	p := f.sw.NewPort(name)
	if err := p.SetRate(rate); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// AddUplink joins the fabric to link as a port named name, what goes out on it paced at rate
// bits per second (0: no pacing): frames from the link enter the fabric, and frames for the
// MACs behind it, and floods, go out on it. The fabric closes the link. A guest's netdev on
// the link is a 1500-byte Ethernet, as QEMU's NICs are: functions added after an uplink have
// the active MTU that fits one (1024), those on a fabric without one 4096.
func (f *Fabric) AddUplink(name string, link roce.Link, rate float64) error {
	up := f.sw.Uplink(name, link)
	if err := up.SetRate(rate); err != nil {
		up.Close()
		return &Error{Msg: "cannot shape the uplink", Attrs: []any{"rate", rate}, Err: err}
	}
	f.mu.Lock()
	f.uplinks = append(f.uplinks, up)
	f.mtu = engine.MTU1024 // 1500 bytes less RoCEv2's 80 of headers and ICRC, rounded down
	f.mu.Unlock()
	go func() {
		if err := up.Run(); err != nil && !errors.Is(err, ethswitch.ErrClosed) && !f.closing.Load() {
			f.log.Warn("uplink stopped", "err", err)
		}
	}()
	return nil
}

// Record writes a frame that never crossed the switch into the capture, numbered among the
// frames it forwards: one a device on the port named port handed back to itself (two programs
// on one host device), which no fault touches.
func (f *Fabric) Record(port string, frame []byte) { f.sw.Record(port, frame) }

// Captures says whether the fabric writes a pcap or numbers frames for faults: whether a
// device's loopback is worth Record.
func (f *Fabric) Captures() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.capture != nil || f.planOn
}

// SendWindow is Config.SendWindow: what the fabric's devices are made with.
func (f *Fabric) SendWindow() int { return f.cfg.SendWindow }

// ActiveMTU is the active MTU of a device that joins the fabric now: 4096, or 1024 once an
// uplink joined it (AddUplink).
func (f *Fabric) ActiveMTU() engine.MTU {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mtu == 0 {
		return engine.MTU4096
	}
	return f.mtu
}

// AddFault adds a fault to the fabric's plan and returns its number; its window starts now.
func (f *Fabric) AddFault(ft faultplan.Fault) int {
	f.mu.Lock()
	if !f.planOn {
		f.sw.SetFaults(f.plan)
		f.planOn = true
	}
	f.mu.Unlock()
	id := f.plan.Add(ft)
	f.log.Info("fault added", "id", id, "fault", ft.Spec())
	return id
}

// RemoveFault removes fault id, reporting whether there was one.
func (f *Fabric) RemoveFault(id int) bool {
	if !f.plan.Remove(id) {
		return false
	}
	f.log.Info("fault removed", "id", id)
	return true
}

// Faults are the faults in the order they were added, with how often each matched and fired.
func (f *Fabric) Faults() []faultplan.Entry { return f.plan.List() }

// CheckFault refuses a fault whose from= names a sender the fabric does not have (senders are
// its ports' names): a typo would otherwise match nothing, silently.
func CheckFault(ft faultplan.Fault, senders []string) error {
	if ft.Src != "" && !slices.Contains(senders, ft.Src) {
		return fmt.Errorf("from=%s: the fabric has %s", ft.Src, strings.Join(senders, ", "))
	}
	return nil
}

// PortCounters are what crossed one port, as the switch counted.
type PortCounters struct {
	Name string
	ethswitch.Counters
}

// Ports are the counters of the fabric's ports, by name.
func (f *Fabric) Ports() []PortCounters {
	var out []PortCounters
	for _, p := range f.sw.Ports() {
		out = append(out, PortCounters{p.Name(), p.Counters()})
	}
	return out
}

// CaptureErr is nil while the pcap holds every frame forwarded (or there is none); otherwise it
// says from which frame on and how many are missing, and why the first is.
func (f *Fabric) CaptureErr() error {
	if f.capture == nil {
		return nil
	}
	return f.capture.err()
}

// Close closes the functions, their hosts, the uplinks and the capture, whose file then holds
// every frame forwarded.
func (f *Fabric) Close() error {
	f.closing.Store(true)
	f.mu.Lock()
	functions, hosts, uplinks := f.functions, f.hosts, f.uplinks
	f.functions, f.hosts, f.uplinks = nil, nil, nil
	f.mu.Unlock()
	var errs []error
	for i := len(functions) - 1; i >= 0; i-- {
		errs = append(errs, functions[i].Close(), hosts[i].Close())
	}
	for _, up := range uplinks {
		errs = append(errs, up.Close())
	}
	if f.capture != nil {
		f.sw.SetTap(nil) // no tap runs once it returns: the queue is complete
		errs = append(errs, f.capture.close())
	}
	return errors.Join(errs...)
}
