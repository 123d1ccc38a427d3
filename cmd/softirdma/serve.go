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

	"github.com/softirdma/softirdma/hw"
	"github.com/softirdma/softirdma/hw/vfioserve"
	"github.com/softirdma/softirdma/hw/vfiouser"
	"github.com/softirdma/softirdma/internal/sockguard"
	"github.com/softirdma/softirdma/wire/afpacket"
	"github.com/softirdma/softirdma/wire/faultplan"
)

func init() {
	register("serve", "the device: softirdma as a PCI RDMA NIC for QEMU over a vfio-user socket", runServe)
}

// serveOptions are serve's flags, checked.
type serveOptions struct {
	socket string
	ip     netip.Addr
	mac    [6]byte
	debug  bool
	link   *linkFlags // nil: the embedded default, the device's loopback only
}

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", stderr)
	socket := fs.String("socket", "", "one function (one VM): the vfio-user socket to listen on, at `PATH`; for several VMs, -function instead")
	debug := fs.Bool("debug", false, "log every vfio-user request")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of serve to `FILE` when it ends (go tool pprof reads it): where the function's time goes")
	var lc linkFlags
	lc.register(fs)
	var functions functionFlags
	var faults faultFlags
	control := fs.String("control", "", "with -function: a control socket at `PATH` (mode 0600, its owner's user only) on which softirdma fault adds, lists and removes faults and reads the ports' counters while serve runs")
	fs.Var(&faults, "fault", "with -function, repeated: a `FAULT` in the fabric from the start, e.g. 'drop from=a opcode=RDMA_READ_RESPONSE_MIDDLE nth=3' (softirdma fault -h has the syntax)")
	rate := fs.String("rate", "", "with -function and -link: the uplink's `RATE` toward its link in bits per second (e.g. 8M, 1.5G; none by default): frames wait for it rather than being lost, their senders with them; shape a fabric to its slowest peer (an rxe guest under TCG takes about 8M of UD)")
	fs.Var(&functions, "function", "a function of its own for one more VM, repeated, as `name=NAME,socket=PATH[,ip=ADDR][,mac=MAC][,rate=RATE]` (instead of -socket); the functions share an in-process fabric, -link is its uplink, -pcap captures all of it; rate= paces what the fabric hands the function, as -rate the uplink's")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma serve -socket PATH [-link LINK -ip ADDR [-pcap FILE]] [-mac MAC] [-debug] [-cpuprofile FILE]")
		fmt.Fprintln(stderr, "       softirdma serve -function name=a,socket=PATH[,ip=ADDR][,mac=MAC][,rate=RATE] -function ... [-link LINK [-rate RATE]] [-pcap FILE] [-loss F]")
		fmt.Fprintln(stderr, "                       [-fault FAULT]... [-control PATH] [-debug]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "-socket serves one function (one VM): the softirdma PCI function (docs/device.md) to QEMU's")
		fmt.Fprintln(stderr, "vfio-user-pci on PATH, one QEMU at a time, until SIGINT or SIGTERM, and prints a QEMU command")
		fmt.Fprintln(stderr, "line that attaches it. With -link the device stands on that link (as pingpong and perf do);")
		fmt.Fprintln(stderr, "without, on its embedded default: the guest's QPs reach each other over the device's loopback.")
		fmt.Fprintln(stderr, "-ip and -mac are the device's until a guest driver programs its GID table and MAC. Should serve")
		fmt.Fprintln(stderr, "die, a second process it starts, softirdma-sockguard, ends QEMU's connection cleanly so that")
		fmt.Fprintln(stderr, "QEMU and its guest live on.")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "-function, once per VM, serves several (one serve, several VMs): each function has its own")
		fmt.Fprintln(stderr, "socket, name, address and MAC, and all of them stand on one fabric inside serve: frames between")
		fmt.Fprintln(stderr, "the VMs are handed over in memory. -link (dgram or stream) joins the fabric to a link, so the")
		fmt.Fprintln(stderr, "VMs also reach what is there (an rxe guest, a host peer); -pcap captures every frame the fabric")
		fmt.Fprintln(stderr, "forwards, with the time it did. e.g.")
		fmt.Fprintln(stderr, "  softirdma serve -function name=a,socket=/tmp/a.sock,ip=192.168.77.1 -function name=b,socket=/tmp/b.sock,ip=192.168.77.2")
		fmt.Fprintln(stderr, "-rate RATE paces what goes out on the uplink to a slow peer's speed (an rxe guest under TCG: 12M),")
		fmt.Fprintln(stderr, "holding its senders back rather than losing frames, which UD would never send again.")
		fmt.Fprintln(stderr, "Faults break the fabric's frames on purpose, from the start (-fault) or while it runs")
		fmt.Fprintln(stderr, "(-control PATH, then softirdma fault -socket PATH add|list|remove); each window counts from")
		fmt.Fprintln(stderr, "when its fault was added. softirdma fault -socket PATH ports shows what each port carried and")
		fmt.Fprintln(stderr, "what the fabric dropped for it. A fault:")
		fmt.Fprintln(stderr, "  "+strings.ReplaceAll(faultplan.Syntax, "\n", "\n  "))
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if exit, done := parseFlags(fs, args); done {
		return exit
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "softirdma serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if code := checkFlags(stderr, "serve", floatRange("loss", lc.loss, 0, 0.5)); code != 0 {
		return code
	}
	if *cpuprofile != "" {
		stopProfile, err := startCPUProfile(*cpuprofile)
		if err != nil {
			fmt.Fprintf(stderr, "softirdma serve: -cpuprofile: %v\n", err)
			return 2
		}
		defer stopProfile()
	}
	if *control != "" {
		// serve would make the control socket, then fail on the function's as on another
		// server's ("already listening"): the clash is the flags'.
		type named struct{ path, what string }
		sockets := []named{{*socket, "-socket's too"}}
		for _, f := range functions {
			sockets = append(sockets, named{f.socket, "function " + f.name + "'s socket"})
		}
		for _, s := range sockets {
			if s.path != "" && samePath(s.path, *control) {
				fmt.Fprintf(stderr, "softirdma serve: -control %s is %s: the control socket and a function's socket must differ, e.g. -control %s\n",
					*control, s.what, filepath.Join(filepath.Dir(*control), "ctl.sock"))
				return 2
			}
		}
	}
	if len(functions) > 0 {
		o := fabricOptions{functions: functions, faults: faults, control: *control, debug: *debug}
		if *rate != "" {
			var err error
			if o.uplinkRate, err = parseRate(*rate); err != nil {
				fmt.Fprintf(stderr, "softirdma serve: -rate: %v\n", err)
				return 2
			}
			if lc.link == "" {
				fmt.Fprintln(stderr, "softirdma serve: -rate is the uplink's: give the uplink with -link dgram:... or stream:...")
				return 2
			}
		}
		return runServeFabric(o, *socket, lc, stdout, stderr)
	}
	if *rate != "" {
		fmt.Fprintln(stderr, "softirdma serve: -rate shapes the uplink of -function's fabric: give the functions with -function name=NAME,socket=PATH and the uplink with -link")
		return 2
	}
	if len(faults) > 0 || *control != "" {
		fmt.Fprintln(stderr, "softirdma serve: -fault and -control break the fabric of -function's: give the functions with -function name=NAME,socket=PATH")
		return 2
	}
	o := serveOptions{socket: *socket, debug: *debug}
	if o.socket == "" {
		fmt.Fprintln(stderr, "softirdma serve: -socket PATH is required")
		return 2
	}
	if lc.pcap != "" && lc.link == "" {
		// Without a link the guest's QPs reach each other over the engine's loopback, whose
		// frames never reach a link (as rxe's never reach its netdev), and neither hw.Config nor
		// the engine has a tap for them: a pcap would stay empty.
		fmt.Fprintln(stderr, "softirdma serve: -pcap needs -link: without a link the device's frames go over its loopback, which is not captured")
		return 2
	}
	if lc.link != "" {
		if err := lc.check(); err != nil {
			fmt.Fprintf(stderr, "softirdma serve: %v\n", err)
			return 2
		}
		o.link = &lc
	}
	ip := lc.ip
	if ip == "" {
		ip = "192.0.2.1"
	}
	var err error
	if o.ip, err = ipFlag(ip); err != nil {
		fmt.Fprintf(stderr, "softirdma serve: %v\n", err)
		return 2
	}
	lc.ip = ip // the default MAC comes from the address
	if o.mac, err = lc.macAddr(); err != nil {
		fmt.Fprintf(stderr, "softirdma serve: %v\n", err)
		return 2
	}
	if err := checkSocketPath(o.socket); err != nil {
		fmt.Fprintf(stderr, "softirdma serve: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return serve(ctx, o, stdout, stderr)
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

// serveLog is serve's logger on stderr (debug: with every vfio-user request) and fail, which
// logs what stopped serve and gives its exit status: from here on errors are log records too,
// for whoever reads serve's log, and the exit status still says serve failed.
func serveLog(debug bool, stderr io.Writer) (log *slog.Logger, fail func(msg string, err error, attrs ...any) int) {
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	return log, func(msg string, err error, attrs ...any) int {
		log.Error(msg, append(attrs, "err", err)...)
		return 1
	}
}

// serve runs the device until ctx ends.
func serve(ctx context.Context, o serveOptions, stdout, stderr io.Writer) int {
	log, fail := serveLog(o.debug, stderr)
	fcfg := hw.Config{Name: "softirdma0", Clock: realtime.NewWallClock(), MAC: o.mac, IP: o.ip, Log: log}
	if o.link != nil {
		h, err := o.link.host("softirdma0")
		var perr pcapError
		if errors.As(err, &perr) {
			return fail("cannot create the pcap", perr.err, "pcap", o.link.pcap)
		}
		if err != nil {
			return fail("cannot open the link", err, "link", o.link.link)
		}
		go h.Run()
		defer h.Close()
		// The host carries the engine the function makes when its driver enables it.
		fcfg.Engine = func(mac [6]byte, ip netip.Addr, ips []netip.Addr) *engine.Device { return h.Rebind(mac, ip, ips) }
		fcfg.Readdress = h.SetAddresses
		if ifname, ok := strings.CutPrefix(o.link.link, "afpacket:"); ok {
			ad, err := afpacket.Lookup(ifname)
			if err != nil {
				return fail("cannot find the adapter", err, "adapter", ifname)
			}
			fcfg.ActiveMTU, _ = engine.MTUOf(pathMTU(ad.MTU))
		}
		log.Info("link", "link", o.link.link, "active_mtu", cmp.Or(fcfg.ActiveMTU, engine.MTU4096).Bytes())
	}
	// Each client that goes (a QEMU that quit or was killed) leaves a line with what the process
	// holds once its release is done: figures that stay level from one client to the next say
	// nothing leaks.
	gone := func(err error) {
		log.Info("client gone", "err", err, "goroutines", runtime.NumGoroutine(), "fds", openFDs())
	}
	vcfg := vfiouser.Config{SocketPath: o.socket, Logger: log, ClientGone: gone}
	// A second process keeps each client's connection, to end it cleanly should serve die:
	// QEMU 11.1 aborts, guest and all, on the reset a dead server's connection would give it.
	// The guard's line waits until serve listens, so that a serve that cannot start says
	// only why.
	guard, guardErr := sockguard.Start()
	if guardErr == nil {
		defer guard.Close()
		vcfg.Guard = guard
	}
	srv, _, err := vfioserve.New(vcfg, fcfg)
	if err != nil {
		return fail("cannot make the function", err)
	}
	if err := srv.Listen(); err != nil {
		return fail("cannot listen", err, "socket", o.socket)
	}
	if guardErr != nil {
		log.Warn("no socket guard: should serve die with a request unread, QEMU 11.1 aborts", "err", guardErr)
	} else {
		log.Info("socket guard", "pid", guard.Pid())
	}
	log.Info("listening", "socket", o.socket, "ip", o.ip, "mac", net.HardwareAddr(o.mac[:]).String())
	fmt.Fprintf(stdout, "softirdma serve: listening on %s; attach it to QEMU with:\n", o.socket)
	fmt.Fprintf(stdout, "  %s\n", qemuCommandLine(o.socket))
	fmt.Fprintln(stdout, "  # then add the guest's own options to that line: its disk, or -kernel/-initrd/-append, its console")
	err = srv.Serve(ctx)
	_ = srv.Close()
	if err != nil && ctx.Err() == nil {
		return fail("serving failed", err, "socket", o.socket)
	}
	log.Info("stopped")
	return 0
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
