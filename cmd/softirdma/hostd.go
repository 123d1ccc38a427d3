package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/fabric"
	"github.com/softirdma/softirdma/fabric/control"
	"github.com/softirdma/softirdma/host/daemon"
	"github.com/softirdma/softirdma/host/hostdev"
	"github.com/softirdma/softirdma/internal/pcapfile"
)

func init() {
	register("hostd", "the per-user softirdma that host programs under 'softirdma run' use (run starts it)", runHostd)
}

// hostAddrs are the addresses the host device answers for: lo's (127.0.0.1, ::1) first, then
// every address of the host's other netdevs, as a program may bind rdma_cm to any of them
// (libfabric's verbs provider tries each interface's). Link-local ones lose their zone: the
// device has one link.
func hostAddrs() []netip.Addr {
	addrs := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
	ifs, err := net.Interfaces()
	if err != nil {
		return addrs
	}
	for _, ifc := range ifs {
		as, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range as {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(n.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap().WithZone("")
			if !ip.IsLoopback() && !ip.IsMulticast() && !slices.Contains(addrs, ip) {
				addrs = append(addrs, ip)
			}
		}
	}
	return addrs
}

// hostDevice is the default device of the host path: rxe0, standing on lo as Linux rxe on lo
// would (its GUID from lo's MAC, its GIDs lo's addresses), on a port of a fabric of its own.
type hostDevice struct {
	capt   *capture
	fab    *fabric.Fabric
	set    *hostdev.Set
	kernel kernelDevices
}

// hostLink is the host device's link to other hosts or VMs (hostd -link): its address on the
// link, with the prefix of the link's subnet, and its MAC there.
type hostLink struct {
	spec string
	ip   netip.Prefix
	mac  [6]byte
}

// parseHostLink checks hostd's -link, -ip and -mac; no -link is no link.
func parseHostLink(link, ip, mac string) (*hostLink, error) {
	if link == "" {
		if ip != "" || mac != "" {
			return nil, errors.New("-ip and -mac are the device's on a link: give -link too")
		}
		return nil, nil
	}
	addr, bits, ok := splitPrefix(ip)
	if !ok {
		return nil, fmt.Errorf("-ip %s: the prefix length is 8 to 30", ip)
	}
	lf := linkFlags{link: link, ip: addr, mac: mac}
	if strings.HasPrefix(link, "afpacket:") {
		return nil, fmt.Errorf("-link %s: the host device's link is a socket to QEMU or another softirdma (dgram or stream)", link)
	}
	if err := lf.check(); err != nil {
		return nil, err
	}
	a, err := ipFlag(addr)
	if err != nil {
		return nil, err
	}
	m, err := lf.macAddr()
	if err != nil {
		return nil, err
	}
	return &hostLink{spec: link, ip: netip.PrefixFrom(a, bits), mac: m}, nil
}

func newHostDevice(log *slog.Logger, link *hostLink, window int) (*hostDevice, error) {
	fab, err := fabric.New(fabric.Config{Log: log, SendWindow: window})
	if err != nil {
		return nil, err
	}
	capt := &capture{log: log, writers: map[*pcapfile.Writer]*os.File{}}
	kd := findKernelDevices(log)
	spec := hostdev.Spec{Name: kd.freeName("rxe0"), MAC: [6]byte{0x02, 0, 0, 0, 0, 1}, Lo: true, Addrs: hostAddrs(), MTU: engine.MTU4096, Tap: capt.frame}
	if link != nil {
		l, err := openSocketLink(link.spec)
		if err == nil {
			err = fab.AddUplink("uplink", l, 0)
		}
		if err != nil {
			fab.Close()
			return nil, fmt.Errorf("-link %s: %w", link.spec, err)
		}
		// A 1500-byte Ethernet, as QEMU's NICs are: rxe on one has an active MTU of 1024.
		spec.MTU, spec.MAC, spec.IP = engine.MTU1024, link.mac, link.ip
		log.Info("link", "link", link.spec, "ip", link.ip, "mac", net.HardwareAddr(link.mac[:]).String())
	}
	var events engine.EventSink
	if log.Enabled(context.Background(), slog.LevelDebug) {
		events = engine.SlogSink(log) // SOFTIRDMA_DEBUG: the engine's events, a dropped datagram's reason among them
	}
	set, err := hostdev.New(fab, []hostdev.Spec{spec}, kd.config(hostdev.Config{Log: log, Events: events}))
	if err != nil {
		kd.close()
		fab.Close()
		return nil, err
	}
	capt.devs = set.Engines
	return &hostDevice{fab: fab, set: set, capt: capt, kernel: kd}, nil
}

// capture is the host device's captures: every frame its engine hands back to itself and
// every frame on its link, to each pcap a run asked for.
type capture struct {
	mu      sync.Mutex
	devs    []*engine.Device
	log     *slog.Logger
	writers map[*pcapfile.Writer]*os.File
}

// start writes a pcap of the device's frames into f until stop, which flushes and closes it.
func (c *capture) start(f *os.File) (func(), error) {
	w, err := pcapfile.New(f, c.log)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.writers) == 0 {
		for _, d := range c.devs {
			d.OnLoopback(c.frame)
		}
	}
	c.writers[w] = f
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(c.writers, w)
		if len(c.writers) == 0 {
			for _, d := range c.devs {
				d.OnLoopback(nil)
			}
		}
		c.mu.Unlock()
		w.Flush()
		f.Close()
	}, nil
}

func (c *capture) frame(b []byte) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for w := range c.writers {
		w.Write(now, b)
	}
}

func (d *hostDevice) close() {
	d.set.Close()
	d.fab.Close()
	d.kernel.close()
}

// runHostd is `softirdma hostd -dir DIR`: serves the host path on DIR/sock, with the sysfs tree
// in DIR/sys, until signalled or idle for -idle.
func runHostd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("hostd", stderr)
	dir := fs.String("dir", "", "the folder to serve in: DIR/sock, DIR/sys (default: the one 'softirdma run' uses, $XDG_RUNTIME_DIR/softirdma or /tmp/softirdma-UID)")
	idle := fs.Duration("idle", 10*time.Minute, "stop after this long with no program connected (0: never)")
	link := fs.String("link", "", "join rxe0 to other hosts or VMs over `LINK`: dgram:LOCAL,REMOTE (QEMU -netdev dgram) or stream:tcp:ADDR|stream:unix:PATH")
	ip := fs.String("ip", "", "`ADDR[/BITS]`, rxe0's IPv4 address on the link and its subnet (default /24): its GID 2 and 3, the address rdma_cm reaches the subnet from")
	mac := fs.String("mac", "", "`MAC`, rxe0's MAC on the link (default 02:00 and the four bytes of -ip)")
	var window int
	registerSendWindow(fs, &window)
	memory := fs.String("memory", daemon.MemoryAuto, "how programs' registered memory is reached: auto (process_vm_readv where it works, else the program's copy service), service (always the copy service) or process_vm (never)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma hostd [-dir DIR] [-idle DURATION] [-memory auto|service|process_vm] [-send-window N] [-link LINK -ip ADDR[/BITS] [-mac MAC]]")
		fmt.Fprintln(stderr, "Serves host programs (the preload library) on DIR/sock with the sysfs tree in DIR/sys;")
		fmt.Fprintln(stderr, "'softirdma run' starts it. Its device is rxe0 on lo; with -link it also reaches a link's subnet.")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	if *idle < 0 {
		fmt.Fprintln(stderr, "softirdma hostd: -idle must not be negative")
		return 2
	}
	if code := checkFlags(stderr, "hostd", sendWindowCheck(window)); code != 0 {
		return code
	}
	switch *memory {
	case daemon.MemoryAuto, daemon.MemoryService, daemon.MemoryProcessVM:
	default:
		fmt.Fprintf(stderr, "softirdma hostd: -memory %q: auto, service or process_vm\n", *memory)
		return 2
	}
	hl, err := parseHostLink(*link, *ip, *mac)
	if err != nil {
		fmt.Fprintf(stderr, "softirdma hostd: %v\n", err)
		return 2
	}
	if *dir == "" {
		hp, err := findHostPath("")
		if err != nil {
			fmt.Fprintf(stderr, "softirdma hostd: %v\n", err)
			return 1
		}
		*dir = hp.dir
	}
	level := slog.LevelInfo
	if os.Getenv("SOFTIRDMA_DEBUG") != "" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if err := serveHost(*dir, *idle, hl, *memory, window, log); err != nil {
		fmt.Fprintf(stderr, "softirdma hostd: %v\n", err)
		return 1
	}
	return 0
}

func serveHost(dir string, idle time.Duration, link *hostLink, memory string, window int, log *slog.Logger) error {
	d, err := newHostDevice(log, link, window)
	if err != nil {
		return err
	}
	defer d.close()
	sys := filepath.Join(dir, "sys")
	if err := writeHostDir(dir, d.set, d.kernel); err != nil {
		return err
	}
	sock := filepath.Join(dir, "sock")
	_ = os.Remove(sock)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	timer := idleTimer(idle, stop)
	// Faults on demand (softirdma fault -socket DIR/control) on what rxe0 sends to its fabric
	// and what comes in on the link; frames between two programs on rxe0 never cross it, as
	// rxe's loopback never reaches its netdev.
	senders := []string{d.set.Netlink.Devices[0].Name}
	if link != nil {
		senders = append(senders, "uplink")
	}
	dm, err := daemon.Listen(daemon.Config{Socket: sock, Devices: d.set.Devices, UverbsBase: d.set.UverbsBase, Netlink: d.set.Netlink, RdmaCM: d.set.RdmaCM, Log: log, Memory: memory,
		Capture: d.capt.start,
		OnIdle:  timer})
	if err != nil {
		return err
	}
	defer os.Remove(sock)
	// Closed before the socket goes (defers run last first): a run that saw this hostd stop
	// by its socket's going finds the control socket free for the hostd it starts.
	// A hostd that was told to stop may still be closing its connections: its control socket
	// goes a moment later; wait for it a while.
	ctl, err := control.Listen(filepath.Join(dir, "control"), d.fab, senders, log)
	for i := 0; errors.Is(err, control.ErrInUse) && i < 100; i++ {
		time.Sleep(50 * time.Millisecond)
		ctl, err = control.Listen(filepath.Join(dir, "control"), d.fab, senders, log)
	}
	if err != nil {
		dm.Close()
		return fmt.Errorf("control socket: %w", err)
	}
	defer ctl.Close()
	go ctl.Serve()
	timer(0)
	log.Info("serving host programs", "socket", sock, "sysfs", sys, "control", filepath.Join(dir, "control"), "memory", memory, "version", version)
	return dm.Serve(ctx)
}

// idleTimer stops the daemon after d with no connection.
func idleTimer(d time.Duration, stop func()) func(int) {
	var mu sync.Mutex
	var t *time.Timer
	return func(open int) {
		if d == 0 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if t != nil {
			t.Stop()
			t = nil
		}
		if open == 0 {
			t = time.AfterFunc(d, stop)
		}
	}
}
