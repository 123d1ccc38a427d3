package fabric

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"
	"github.com/softirdma/softirdma/hw"
	"github.com/softirdma/softirdma/hw/vfioserve"
	"github.com/softirdma/softirdma/hw/vfiouser"
	"github.com/softirdma/softirdma/wire/neigh"
)

// FunctionConfig sets up one function (ListenFunction): serve -socket's, or one of a fabric's.
type FunctionConfig struct {
	Name   string // its engine's name
	Socket string // the vfio-user socket it listens on
	// IP and MAC are the function's until its guest's driver programs its GID table and MAC.
	IP  netip.Addr
	MAC [6]byte
	// Host carries the engine the function makes when its driver enables it, and takes the
	// addresses the driver programs. It is the caller's, to run and to close. nil: the
	// function's embedded default, whose QPs reach each other over its loopback only.
	Host *realtime.Host
	// ActiveMTU is the function's port MTU (0: 4096).
	ActiveMTU engine.MTU
	// SendWindow is the send window of the engine the function makes without a Host
	// (engine.DeviceConfig.SendWindow; 0: rxe's). A Host's engine has the Host's.
	SendWindow int
	// Log receives the function's record: its vfio-user requests at debug level, its clients,
	// and a failure to serve. nil: slog's default logger.
	Log *slog.Logger
	// Guard, if set, is lent each connection while it is served (vfiouser.Config.Guard).
	Guard vfiouser.ConnGuard
	// ClientGone, if set, is called for each client that goes, in place of the "client gone"
	// line the function logs.
	ClientGone func(err error)
	// DoorbellRuns runs what a guest's send-queue doorbell posted on the goroutine that read
	// the doorbell rather than on the device's clock (hw.Config.DoorbellRuns): one goroutine
	// wakeup fewer per post. Set it only where sending never waits long: no paced port on the
	// way (a sender waits for a rate) and no stream link (a sender waits for its peer), or
	// QEMU's register reads, served on the same goroutine, would wait too.
	DoorbellRuns bool
}

// Function is a PCI function listening on its vfio-user socket, for one QEMU at a time.
type Function struct {
	socket string
	log    *slog.Logger
	srv    *vfiouser.Server
}

// ListenFunction makes the function and listens on its socket, replacing a socket file nobody
// listens on. Its errors are *Error.
func ListenFunction(cfg FunctionConfig) (*Function, error) {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	fcfg := hw.Config{Name: cfg.Name, Clock: realtime.NewWallClock(), MAC: cfg.MAC, IP: cfg.IP, Log: log, ActiveMTU: cfg.ActiveMTU,
		SendWindow: cfg.SendWindow, DoorbellRuns: cfg.DoorbellRuns}
	if h := cfg.Host; h != nil {
		fcfg.Engine = func(mac [6]byte, ip netip.Addr, ips []netip.Addr) *engine.Device { return h.Rebind(mac, ip, ips) }
		fcfg.Readdress = h.SetAddresses
	}
	gone := cfg.ClientGone
	if gone == nil {
		gone = func(err error) { log.Info("client gone", "err", err) }
	}
	vcfg := vfiouser.Config{SocketPath: cfg.Socket, Logger: log, ClientGone: gone, Guard: cfg.Guard}
	srv, _, err := vfioserve.New(vcfg, fcfg)
	if err != nil {
		return nil, &Error{Msg: "cannot make the function", Err: err}
	}
	if err := srv.Listen(); err != nil {
		srv.Close()
		return nil, &Error{Msg: "cannot listen", Attrs: []any{"socket", cfg.Socket}, Err: err}
	}
	return &Function{socket: cfg.Socket, log: log, srv: srv}, nil
}

// Serve answers the function's clients, one after another, until ctx ends, then closes the
// function. A failure before ctx ends closes it too, is logged ("serving failed") and returned.
func (fn *Function) Serve(ctx context.Context) error {
	err := fn.srv.Serve(ctx)
	_ = fn.srv.Close()
	if err != nil && ctx.Err() == nil {
		fn.log.Error("serving failed", "socket", fn.socket, "err", err)
		return err
	}
	return nil
}

// Close stops the function: its client is released and cut off, its socket removed.
func (fn *Function) Close() error { return fn.srv.Close() }

// Serve serves the functions, each on its own: one that fails takes only itself down. It
// returns once every one has (ctx ended), with their failures.
func Serve(ctx context.Context, fns ...*Function) error {
	var wg sync.WaitGroup
	errs := make([]error, len(fns))
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn.Serve(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// FunctionSpec is a function of a fabric's.
type FunctionSpec struct {
	// Name is the function's engine's, its port's (a fault's from=) and its log's (function=).
	Name   string
	Socket string
	IP     netip.Addr
	MAC    [6]byte
	// Rate paces what the fabric hands the function, in bits per second (0: no pacing).
	Rate float64
	// DoorbellRuns is FunctionConfig.DoorbellRuns: only on a fabric with no paced port.
	DoorbellRuns bool
}

// AddFunction adds a function on a port of its own: a host for its engine stands on the port,
// answering ARP and neighbour solicitations for its addresses (nobody else on the fabric
// does), and the function listens on its socket. Its errors are *Error, about function=NAME.
func (f *Fabric) AddFunction(s FunctionSpec) (*Function, error) {
	port, err := f.AddPort(s.Name, s.Rate)
	if err != nil {
		return nil, &Error{Msg: "cannot shape the function's port", Attrs: []any{"function", s.Name}, Err: err}
	}
	f.mu.Lock()
	mtu := f.mtu
	f.mu.Unlock()
	h, err := realtime.NewHost(realtime.HostConfig{Name: s.Name, Link: port, MAC: s.MAC, IP: s.IP,
		IPs: []netip.Addr{neigh.LinkLocal(s.MAC)}, Answer: true, RxLoss: f.cfg.Loss, ActiveMTU: mtu, SendWindow: f.cfg.SendWindow})
	if err != nil {
		port.Close()
		return nil, &Error{Msg: "cannot make the function's host", Attrs: []any{"function", s.Name}, Err: err}
	}
	go h.Run()
	fn, err := ListenFunction(FunctionConfig{Name: s.Name, Socket: s.Socket, IP: s.IP, MAC: s.MAC, Host: h, ActiveMTU: mtu,
		Log: f.log.With("function", s.Name), Guard: f.cfg.Guard, DoorbellRuns: s.DoorbellRuns})
	if err != nil {
		h.Close()
		return nil, about(err, "function", s.Name)
	}
	f.mu.Lock()
	f.functions, f.hosts = append(f.functions, fn), append(f.hosts, h)
	f.mu.Unlock()
	return fn, nil
}
