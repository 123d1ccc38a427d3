package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"
	"github.com/softirdma/softirdma/fabric"
	"github.com/softirdma/softirdma/hw/vfiouser"
	"github.com/softirdma/softirdma/internal/sockguard"
	"github.com/softirdma/softirdma/wire/afpacket"
	"github.com/softirdma/softirdma/wire/faultplan"
)

func init() {
	register("serve", "the device: softirdma as a PCI RDMA NIC for QEMU over a vfio-user socket", runServe)
}

// serveFlags are serve's flags as given.
type serveFlags struct {
	socket, cpuprofile, control, rate string
	debug                             bool
	link                              linkFlags
	functions                         functionFlags
	faults                            faultFlags
	hosts                             hostFlags
	hostDir                           string
	procs                             procsFlag
}

func (f *serveFlags) register(fs flagSet) {
	fs.StringVar(&f.socket, "socket", "", "one function (one VM): the vfio-user socket to listen on, at `PATH`; for several VMs, -function instead")
	fs.BoolVar(&f.debug, "debug", false, "log every vfio-user request")
	f.procs = procsFlag{auto: true}
	fs.Var(&f.procs, "procs", "run serve's goroutines on `N` CPUs at once (Go's GOMAXPROCS), 1 to 1024, or 0 for Go's own (one per CPU); auto, the default: one while serve uses less than most of a CPU, more as it fills them, so that its handoffs from goroutine to goroutine do not wake idle CPUs that busy VMs need (docs/performance.md)")
	fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile of serve to `FILE` when it ends (go tool pprof reads it): where the function's time goes")
	f.link.register(fs)
	fs.StringVar(&f.control, "control", "", "with -function: a control socket at `PATH` (mode 0600, its owner's user only) on which softirdma fault adds, lists and removes faults and reads the ports' counters while serve runs")
	fs.Var(&f.faults, "fault", "with -function, repeated: a `FAULT` in the fabric from the start, e.g. 'drop from=a opcode=RDMA_READ_RESPONSE_MIDDLE nth=3' (softirdma fault -h has the syntax)")
	fs.StringVar(&f.rate, "rate", "", "with -function and -link: the uplink's `RATE` toward its link in bits per second (e.g. 8M, 1.5G; none by default): frames wait for it rather than being lost, their senders with them; shape a fabric to its slowest peer (an rxe guest under TCG takes about 8M of UD)")
	fs.Var(&f.hosts, "host", "a device of the fabric for programs on this machine (softirdma run -socket DIR/sock), repeated, as `name=rxeNAME[,ip=ADDR[/BITS]][,mac=MAC]` (ip: 192.0.2.100+N/24 by default); it names no netdev, its GID 3 is ip's")
	fs.StringVar(&f.hostDir, "host-dir", "", "with -host: serve programs in `DIR` (DIR/sock, the sysfs tree DIR/sys; default: the folder softirdma run uses, $XDG_RUNTIME_DIR/softirdma or /tmp/softirdma-UID)")
	fs.Var(&f.functions, "function", "a function of its own for one more VM, repeated, as `name=NAME,socket=PATH[,ip=ADDR][,mac=MAC][,rate=RATE]` (instead of -socket); the functions share an in-process fabric, -link is its uplink, -pcap captures all of it; rate= paces what the fabric hands the function, as -rate the uplink's")
}

// serveUsage is serve's -h before its flags; FAULT_SYNTAX stands for faultplan.Syntax.
const serveUsage = `usage: softirdma serve -socket PATH [-link LINK -ip ADDR [-pcap FILE]] [-mac MAC] [-debug] [-cpuprofile FILE] [-procs N]
       softirdma serve -function name=a,socket=PATH[,ip=ADDR][,mac=MAC][,rate=RATE] -function ... [-link LINK [-rate RATE]] [-pcap FILE] [-loss F]
                       [-host name=rxe1[,ip=ADDR/BITS][,mac=MAC]]... [-host-dir DIR] [-fault FAULT]... [-control PATH] [-debug]

-socket serves one function (one VM): the softirdma PCI function (docs/device.md) to QEMU's
vfio-user-pci on PATH, one QEMU at a time, until SIGINT or SIGTERM, and prints a QEMU command
line that attaches it. With -link the device stands on that link (as pingpong and perf do);
without, on its embedded default: the guest's QPs reach each other over the device's loopback.
-ip and -mac are the device's until a guest driver programs its GID table and MAC. Should serve
die, a second process it starts, softirdma-sockguard, ends QEMU's connection cleanly so that
QEMU and its guest live on.

-function, once per VM, serves several (one serve, several VMs): each function has its own
socket, name, address and MAC, and all of them stand on one fabric inside serve: frames between
the VMs are handed over in memory. -link (dgram or stream) joins the fabric to a link, so the
VMs also reach what is there (an rxe guest, a host peer); -pcap captures every frame the fabric
forwards, with the time it did. e.g.
  softirdma serve -function name=a,socket=/tmp/a.sock,ip=192.168.77.1 -function name=b,socket=/tmp/b.sock,ip=192.168.77.2
-host, once per device, adds a device of the fabric for programs on this machine (softirdma run),
served in -host-dir (by default the folder softirdma run uses, so that a plain run joins this
serve): host programs, VMs and the uplink in one capture and one fault plan (docs/host-programs.md).
-rate RATE paces what goes out on the uplink to a slow peer's speed (an rxe guest under TCG: 12M),
holding its senders back rather than losing frames, which UD would never send again.
Faults break the fabric's frames on purpose, from the start (-fault) or while it runs
(-control PATH, then softirdma fault -socket PATH add|list|remove); each window counts from
when its fault was added. softirdma fault -socket PATH ports shows what each port carried and
what the fabric dropped for it. A fault:
  FAULT_SYNTAX

`

// withFaultSyntax is usage with FAULT_SYNTAX replaced by faultplan.Syntax, indented as the line
// it stands on.
func withFaultSyntax(usage string) string {
	return strings.Replace(usage, "FAULT_SYNTAX", strings.ReplaceAll(faultplan.Syntax, "\n", "\n  "), 1)
}

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", stderr)
	var f serveFlags
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, withFaultSyntax(serveUsage))
		fs.PrintDefaults()
	}
	if exit, done := parseFlags(fs, args); done {
		return exit
	}
	if fs.NArg() > 0 {
		return refuse(stderr, "unexpected argument %q", fs.Arg(0))
	}
	if code := checkFlags(stderr, "serve", floatRange("loss", f.link.loss, 0, 0.5), f.link.windowCheck(),
		procsCheck(f.procs)); code != 0 {
		return code
	}
	if f.cpuprofile != "" {
		stopProfile, err := startCPUProfile(f.cpuprofile)
		if err != nil {
			return refuse(stderr, "-cpuprofile: %v", err)
		}
		defer stopProfile()
	}
	if code := f.checkControlClash(stderr); code != 0 {
		return code
	}
	if len(f.functions) > 0 || len(f.hosts) > 0 {
		o, code := f.fabricOptions(stderr)
		if code != 0 {
			return code
		}
		return untilSignal(func(ctx context.Context) int { return serveFabric(ctx, o, stdout, stderr) })
	}
	o, code := f.serveOptions(stderr)
	if code != 0 {
		return code
	}
	return untilSignal(func(ctx context.Context) int { return serve(ctx, o, stdout, stderr) })
}

// untilSignal runs serve until SIGINT or SIGTERM ends its context.
func untilSignal(serve func(ctx context.Context) int) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return serve(ctx)
}

// refuse says on stderr, in one line, why serve does not start, and gives exit status 2.
func refuse(stderr io.Writer, format string, a ...any) int {
	fmt.Fprintf(stderr, "softirdma serve: "+format+"\n", a...)
	return 2
}

// checkControlClash refuses a -control that is a function's socket: serve would make the
// control socket, then fail on the function's as on another server's ("already listening"),
// and the clash is the flags'.
func (f *serveFlags) checkControlClash(stderr io.Writer) int {
	if f.control == "" {
		return 0
	}
	type named struct{ path, what string }
	sockets := []named{{f.socket, "-socket's too"}}
	for _, fn := range f.functions {
		sockets = append(sockets, named{fn.Socket, "function " + fn.Name + "'s socket"})
	}
	for _, s := range sockets {
		if s.path != "" && samePath(s.path, f.control) {
			return refuse(stderr, "-control %s is %s: the control socket and a function's socket must differ, e.g. -control %s",
				f.control, s.what, filepath.Join(filepath.Dir(f.control), "ctl.sock"))
		}
	}
	return 0
}

// serveOptions are serve's flags for one function (-socket), checked.
type serveOptions struct {
	socket string
	ip     netip.Addr
	mac    [6]byte
	debug  bool
	link   *linkFlags // nil: the embedded default, the device's loopback only
	window int        // the engine's send window (on a link, link's)
	procs  procsFlag
}

// serveOptions checks the flags of -socket's one function.
func (f *serveFlags) serveOptions(stderr io.Writer) (serveOptions, int) {
	switch {
	case f.rate != "":
		return serveOptions{}, refuse(stderr, "-rate shapes the uplink of -function's fabric: give the functions with -function name=NAME,socket=PATH and the uplink with -link")
	case len(f.faults) > 0 || f.control != "":
		return serveOptions{}, refuse(stderr, "-fault and -control break the fabric of -function's: give the functions with -function name=NAME,socket=PATH")
	case f.socket == "":
		return serveOptions{}, refuse(stderr, "-socket PATH is required")
	case f.link.pcap != "" && f.link.link == "":
		// Without a link the guest's QPs reach each other over the engine's loopback, whose
		// frames never reach a link (as rxe's never reach its netdev), and neither hw.Config
		// nor the engine has a tap for them: a pcap would stay empty.
		return serveOptions{}, refuse(stderr, "-pcap needs -link: without a link the device's frames go over its loopback, which is not captured")
	}
	o := serveOptions{socket: f.socket, debug: f.debug, window: f.link.window, procs: f.procs}
	lc := f.link
	if lc.link != "" {
		if err := lc.check(); err != nil {
			return o, refuse(stderr, "%v", err)
		}
		o.link = &lc
	}
	lc.ip = cmp.Or(lc.ip, "192.0.2.1") // the default MAC comes from the address
	var err error
	if o.ip, err = ipFlag(lc.ip); err == nil {
		if o.mac, err = lc.macAddr(); err == nil {
			err = checkSocketPath(o.socket)
		}
	}
	if err != nil {
		return o, refuse(stderr, "%v", err)
	}
	return o, 0
}

// samePath says whether a and b name one file, whether or not it exists yet: the same path
// once cleaned, absolute and with its directory's symbolic links resolved.
func samePath(a, b string) bool {
	canon := func(p string) string {
		p, err := filepath.Abs(p)
		if err != nil {
			return filepath.Clean(p)
		}
		if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
			return filepath.Join(dir, filepath.Base(p))
		}
		return p
	}
	return canon(a) == canon(b)
}

// startCPUProfile profiles the process into path until the returned stop runs.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// sunPathMax is the size of sockaddr_un's sun_path on Linux: a socket path is at most this long
// with its terminating NUL.
const sunPathMax = 108

// checkSocketPath refuses, before anything starts, a -socket that cannot be listened on, with
// the reason: bind reports these as "address already in use" (a directory, a file) or "invalid
// argument" (too long), which name neither the path nor what to do. A socket file is left to
// the listener, which replaces it when nobody listens on it any more.
func checkSocketPath(path string) error {
	if len(path)+1 > sunPathMax {
		return fmt.Errorf("-socket %s is %d bytes; a Unix socket path is at most %d (the kernel's %d with its NUL): choose a shorter path, e.g. /tmp/softirdma.sock",
			path, len(path), sunPathMax-1, sunPathMax)
	}
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("-socket %s is a directory: give the path of a socket file to make, e.g. -socket %s", path, filepath.Join(path, "softirdma.sock"))
	case err == nil && fi.Mode()&os.ModeSocket == 0:
		return fmt.Errorf("-socket %s exists and is not a socket: serve replaces only a socket; remove the file or choose another path", path)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("-socket %s: %v", path, err)
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil {
		return fmt.Errorf("-socket %s: its directory %s: %v", path, dir, errors.Unwrap(err))
	} else if !fi.IsDir() {
		return fmt.Errorf("-socket %s: %s is not a directory", path, dir)
	}
	return nil
}

// qemuCommandLine is a QEMU command line, ready to paste into a shell, that attaches the
// function served on socket: guest RAM in a shared memfd (the device reaches it through the
// descriptor QEMU passes over the socket) and vfio-user-pci on the socket.
func qemuCommandLine(socket string) string {
	type sock struct {
		Path string `json:"path"`
		Type string `json:"type"`
	}
	dev, _ := json.Marshal(struct {
		Driver string `json:"driver"`
		Socket sock   `json:"socket"`
	}{"vfio-user-pci", sock{socket, "unix"}})
	return "qemu-system-x86_64 -machine q35,memory-backend=mem -object memory-backend-memfd,id=mem,size=512M,share=on -device " +
		shellQuote(string(dev))
}

// serveLog is serve's logger on stderr (debug: with every vfio-user request). From here on
// errors are log records too, for whoever reads serve's log (failed), and the exit status still
// says serve failed.
func serveLog(debug bool, stderr io.Writer) *slog.Logger {
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
}

// failed logs what stopped serve, with what it is about when it is a *fabric.Error, and gives
// exit status 1.
func failed(log *slog.Logger, err error) int {
	var fe *fabric.Error
	if errors.As(err, &fe) {
		log.Error(fe.Msg, append(fe.Attrs, "err", fe.Err)...)
	} else {
		log.Error("cannot serve", "err", err)
	}
	return 1
}

// socketGuard is serve's second process, which keeps each client's connection to end it
// cleanly should serve die (QEMU 11.1 aborts, guest and all, on the reset a dead server's
// connection would give it), or why serve has none.
type socketGuard struct {
	g   *sockguard.Guard
	err error
}

func startSocketGuard() socketGuard {
	g, err := sockguard.Start()
	return socketGuard{g, err}
}

// conns is what the functions lend their connections to: nil without a guard.
func (s socketGuard) conns() vfiouser.ConnGuard {
	if s.err != nil {
		return nil
	}
	return s.g
}

// report logs the guard, or that there is none.
func (s socketGuard) report(log *slog.Logger) {
	if s.err != nil {
		log.Warn("no socket guard: should serve die with a request unread, QEMU 11.1 aborts", "err", s.err)
	} else {
		log.Info("socket guard", "pid", s.g.Pid())
	}
}

func (s socketGuard) close() {
	if s.err == nil {
		s.g.Close()
	}
}

// announce says that a function listens: in the log, and on stdout with a QEMU command line
// that attaches it. who is "" for serve's one function, "function NAME (ADDR) " for a fabric's.
func announce(log *slog.Logger, stdout io.Writer, who, socket string, ip netip.Addr, mac [6]byte) {
	log.Info("listening", "socket", socket, "ip", ip, "mac", net.HardwareAddr(mac[:]).String())
	fmt.Fprintf(stdout, "softirdma serve: %slistening on %s; attach it to QEMU with:\n", who, socket)
	fmt.Fprintf(stdout, "  %s\n", qemuCommandLine(socket))
}

// serveFunctions serves the functions until ctx ends: exit status 0, or 1 when one failed.
func serveFunctions(ctx context.Context, log *slog.Logger, fns ...*fabric.Function) int {
	if fabric.Serve(ctx, fns...) != nil {
		return 1 // each failure is logged as it happens
	}
	log.Info("stopped")
	return 0
}

// serve runs one function until ctx ends, on its link or its embedded default.
func serve(ctx context.Context, o serveOptions, stdout, stderr io.Writer) int {
	log := serveLog(o.debug, stderr)
	// Each client that goes (a QEMU that quit or was killed) leaves a line with what the process
	// holds once its release is done: figures that stay level from one client to the next say
	// nothing leaks.
	cfg := fabric.FunctionConfig{Name: "softirdma0", Socket: o.socket, IP: o.ip, MAC: o.mac, Log: log, SendWindow: o.window,
		ClientGone: func(err error) {
			log.Info("client gone", "err", err, "goroutines", runtime.NumGoroutine(), "fds", openFDs())
		}}
	// A doorbell's work runs on the goroutine that read it, unless the link's peer could keep
	// its sends (and QEMU's register reads behind them) waiting.
	cfg.DoorbellRuns = o.link == nil || !sendsWaitForPeer(o.link.link)
	if o.link != nil {
		h, err := standOnLink(log, o.link, &cfg)
		if err != nil {
			return failed(log, err)
		}
		defer h.Close()
	}
	// The guard's line waits until serve listens, so that a serve that cannot start says only
	// why.
	guard := startSocketGuard()
	defer guard.close()
	cfg.Guard = guard.conns()
	fn, err := fabric.ListenFunction(cfg)
	if err != nil {
		return failed(log, err)
	}
	guard.report(log)
	defer governProcs(ctx, log, o.procs)()
	announce(log, stdout, "", o.socket, o.ip, o.mac)
	fmt.Fprintln(stdout, "  # then add the guest's own options to that line: its disk, or -kernel/-initrd/-append, its console")
	return serveFunctions(ctx, log, fn)
}

// standOnLink opens the function's link: a host on it that carries the engine the function
// makes when its driver enables it, running, and on an adapter the path MTU its netdev allows.
func standOnLink(log *slog.Logger, l *linkFlags, cfg *fabric.FunctionConfig) (*realtime.Host, error) {
	h, err := l.host("softirdma0")
	var perr pcapError
	if errors.As(err, &perr) {
		return nil, &fabric.Error{Msg: "cannot create the pcap", Attrs: []any{"pcap", l.pcap}, Err: perr.err}
	}
	if err != nil {
		return nil, &fabric.Error{Msg: "cannot open the link", Attrs: []any{"link", l.link}, Err: err}
	}
	go h.Run()
	cfg.Host = h
	if ifname, ok := strings.CutPrefix(l.link, "afpacket:"); ok {
		ad, err := afpacket.Lookup(ifname)
		if err != nil {
			h.Close()
			return nil, &fabric.Error{Msg: "cannot find the adapter", Attrs: []any{"adapter", ifname}, Err: err}
		}
		cfg.ActiveMTU, _ = engine.MTUOf(pathMTU(ad.MTU))
	}
	log.Info("link", "link", l.link, "active_mtu", cmp.Or(cfg.ActiveMTU, engine.MTU4096).Bytes())
	return h, nil
}

// openFDs counts the process's open descriptors (the one that reads them included), -1 where
// /proc does not list them.
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}
