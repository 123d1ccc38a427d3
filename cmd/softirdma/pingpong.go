package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"
	"github.com/softirdma/softirdma/wire/roce"

	"github.com/softirdma/softirdma/compat/pingpong"
	"github.com/softirdma/softirdma/wire/afpacket"
	"github.com/softirdma/softirdma/wire/neigh"
	"github.com/softirdma/softirdma/wire/qemu"
)

func init() {
	registerPeer("pingpong", "ibv_rc_pingpong's, ibv_uc_pingpong's and ibv_ud_pingpong's peer: either side can be rdma-core's tool", runPingpong)
}

// peerRun is what a run of a peer of rdma-core's tools takes besides its arguments; a command
// run from the command line takes the zero value.
type peerRun struct {
	// idle is how long a server gives a connection to send its first message; 0 is the
	// packages' default (10s).
	idle time.Duration
	// ran, if set, gets the attributes of the QP the run connected.
	ran func(engine.QPAttr)
}

// peerCommand is a peer of rdma-core's tools as a command.
type peerCommand func(args []string, stdout, stderr io.Writer, run peerRun) int

// peers are the peers of rdma-core's tools by name: the commands that take a peerRun.
var peers = map[string]peerCommand{}

// registerPeer registers a peer of rdma-core's tools, which runs from the command line with the
// zero peerRun.
func registerPeer(name, summary string, cmd peerCommand) {
	peers[name] = cmd
	register(name, summary, func(args []string, stdout, stderr io.Writer) int { return cmd(args, stdout, stderr, peerRun{}) })
}

func runPingpong(args []string, stdout, stderr io.Writer, run peerRun) int {
	fs := newFlagSet("pingpong", stderr)
	var o pingpong.Options
	var lc linkFlags
	var pf peerFlags
	lc.register(fs)
	var transport string
	fs.StringVar(&transport, "transport", "RC", "RC (ibv_rc_pingpong), UC (ibv_uc_pingpong) or UD (ibv_ud_pingpong)")
	fs.IntVar(&o.Port, "p", 18515, "TCP port of the address exchange")
	fs.IntVar(&o.Size, "s", 4096, fmt.Sprintf("message size, 1..%d (UD: 1024 unless given, at most the port's active MTU)", pingpong.MaxSize))
	fs.IntVar(&o.Iters, "n", 1000, "messages each way")
	fs.IntVar(&o.RxDepth, "r", 500, fmt.Sprintf("receives kept posted, 1..%d", pingpong.MaxRxDepth))
	fs.IntVar(&o.MTU, "m", 1024, "path MTU: 256, 512, 1024, 2048 or 4096 (not UD: it uses the port's active MTU)")
	fs.BoolVar(&o.Validate, "c", false, "validate the buffer (the server checks page starts)")
	pf.register(fs, "g", "GID index to advertise: 0 the IPv6 link-local GID, 1 the IPv4-mapped one (as rxe numbers them)",
		"(ibv_rc_pingpong has no limit; 0 for none)")
	setUsage(fs, stderr,
		"usage: softirdma pingpong [-server | HOST] -link KIND:ADDRS -ip ADDR [flags]",
		"Runs ibv_rc_pingpong's exchange and traffic (or with -transport UC or UD, ibv_uc_pingpong's or",
		"ibv_ud_pingpong's) over a link, e.g. to a QEMU guest:",
		"  softirdma pingpong -server -link dgram:127.0.0.1:9002,127.0.0.1:9001 -ip 192.168.77.1",
	)
	host, code, done := parseWithOneArg(fs, args)
	if done {
		return code
	}
	types := map[string]engine.QPType{"RC": engine.QPTypeRC, "UC": engine.QPTypeUC, "UD": engine.QPTypeUD}
	o.Type = types[strings.ToUpper(transport)]
	if o.Type == 0 {
		fmt.Fprintf(stderr, "softirdma pingpong: -transport %q is not RC, UC or UD\n", transport)
		return 2
	}
	sizeGiven := false
	fs.Visit(func(f *flag.Flag) { sizeGiven = sizeGiven || f.Name == "s" })
	if o.Type == engine.QPTypeUD && !sizeGiven {
		o.Size = 1024 // ibv_ud_pingpong's default
	}
	if code := checkFlags(stderr, "pingpong", append(pf.checks(),
		intRange("p", o.Port, 1, 65535),
		intRange("s", o.Size, 1, pingpong.MaxSize),
		intRange("n", o.Iters, 1, pingpong.MaxIters),
		intRange("r", o.RxDepth, 1, pingpong.MaxRxDepth),
		oneOf("m", o.MTU, 256, 512, 1024, 2048, 4096),
		floatRange("loss", lc.loss, 0, 0.5), lc.windowCheck())...); code != 0 {
		return code
	}
	if !pf.server {
		o.Host = host
	}
	o.Server, o.Wait, o.Idle, o.QPTimeout, o.RetryCount = pf.server, pf.wait, run.idle, &pf.qpTimeout, &pf.retry
	return runPeer("pingpong", host, &lc, &pf, run, stderr, func(ctx context.Context, h *realtime.Host, gid netip.Addr, log io.Writer) (engine.QPAttr, error) {
		o.GID, o.Log = gid, log
		if lc.loss > 0 {
			o.LastSend = func() { h.SetRxLoss(0) } // -loss spares the last exchange (pingpong.Options.LastSend)
		}
		res, err := pingpong.Run(ctx, h.Device(), o, stdout)
		return res.QP, err
	})
}

// peerFlags are the flags the peers of rdma-core's tools share besides the link's.
type peerFlags struct {
	server           bool
	gidFlag          string
	gidIndex         int
	timeout, wait    time.Duration
	qpTimeout, retry int
}

func (p *peerFlags) register(fs flagSet, gidFlag, gidUsage, timeoutNote string) {
	p.gidFlag = gidFlag
	fs.BoolVar(&p.server, "server", false, "wait for a client (the tool run without a host name)")
	fs.IntVar(&p.gidIndex, gidFlag, 1, gidUsage)
	fs.DurationVar(&p.timeout, "timeout", 0, "give up after this long "+timeoutNote)
	fs.DurationVar(&p.wait, "wait", 0, "as a client, keep trying this long while the server is not up yet (connection refused, or closed before the server answered, as QEMU's forward does); 0 tries once")
	fs.IntVar(&p.qpTimeout, "u", engine.DefaultTimeout, "QP timeout exponent: the local ACK timeout is 4.096 us x 2^u, 0..31 (0 waits forever)")
	fs.IntVar(&p.retry, "retry", engine.DefaultRetryCnt, "QP retry count: retransmissions after an ACK timeout before the QP fails, 0..7")
}

func (p *peerFlags) checks() []flagCheck {
	return []flagCheck{
		intRange(p.gidFlag, p.gidIndex, 0, 1),
		atLeast("timeout", p.timeout, 0),
		atLeast("wait", p.wait, 0),
		intRange("u", p.qpTimeout, 0, 31),
		intRange("retry", p.retry, 0, 7),
	}
}

// runPeer is what the peers of rdma-core's tools share once their numbers are checked: a server
// or a host to connect to, a host on the link, the GID to advertise by rxe's numbering (0 the IPv6 link-local one, 1 the
// IPv4-mapped one), a context that ends on an interrupt or after the timeout, and the notes of
// the exchange (connections dropped, waiting for the server) on stderr.
func runPeer(cmd, host string, lc *linkFlags, pf *peerFlags, pr peerRun, stderr io.Writer,
	run func(ctx context.Context, h *realtime.Host, gid netip.Addr, log io.Writer) (engine.QPAttr, error)) int {
	if !pf.server && host == "" {
		fmt.Fprintf(stderr, "softirdma %s: give a server's host name, or -server\n", cmd)
		return 2
	}
	if pf.server && host != "" {
		// rdma-core's tools have no -server: a host name makes a client, none a server that
		// listens on every address. Both at once is most likely a client's line with -server
		// added, so it is refused rather than taken as an address to listen on.
		fmt.Fprintf(stderr, "softirdma %s: -server and a host name (%q) both given: a server listens on every address and takes no host name; a client takes one and no -server\n", cmd, host)
		return 2
	}
	return onLink(cmd, lc, pf.timeout, stderr, func(ctx context.Context, h *realtime.Host) int {
		gid := h.Device().IP()
		if pf.gidIndex == 0 {
			gid = neigh.LinkLocal(h.Device().MAC())
		}
		qp, err := run(ctx, h, gid, prefixWriter{stderr, "softirdma " + cmd + ": "})
		if pr.ran != nil {
			pr.ran(qp)
		}
		return peerExit(cmd, pf, stderr, err)
	})
}

// onLink runs run with a host on the link lc names, running, and a context that ends on an
// interrupt or after timeout (0: none); a link that cannot be opened is exit status 2.
func onLink(cmd string, lc *linkFlags, timeout time.Duration, stderr io.Writer, run func(ctx context.Context, h *realtime.Host) int) int {
	if err := lc.check(); err != nil {
		fmt.Fprintf(stderr, "softirdma %s: %v\n", cmd, err)
		return 2
	}
	h, err := lc.host(cmd)
	if err != nil {
		fmt.Fprintf(stderr, "softirdma %s: %v\n", cmd, err)
		return 2
	}
	defer h.Close()
	go h.Run()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return run(ctx, h)
}

// peerExit is the exit status of a peer of rdma-core's tools that returned err, which it reports.
func peerExit(cmd string, pf *peerFlags, stderr io.Writer, err error) int {
	if err != nil {
		msg := err.Error()
		for _, p := range []string{"pingpong: ", "perftest: "} {
			msg = strings.TrimPrefix(msg, p)
		}
		if errors.Is(err, syscall.ECONNREFUSED) && pf.wait == 0 {
			msg += " (start the server first, or keep trying with -wait 30s)"
		}
		fmt.Fprintf(stderr, "softirdma %s: %s\n", cmd, msg)
		return 1
	}
	return 0
}

// prefixWriter puts a prefix before every Write, which the compat packages make one line each.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.prefix+string(b)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// setUsage makes fs's usage, on w, the lines given and then its flags.
func setUsage(fs flagSet, w io.Writer, lines ...string) {
	fs.Usage = func() {
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
		fs.PrintDefaults()
	}
}

// parseNoArgs parses flags, and refuses an argument besides them (exit status 2).
func parseNoArgs(fs flagSet, args []string) (code int, done bool) {
	if code, done := parseFlags(fs, args); done {
		return code, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, true
	}
	return 0, false
}

// parseWithOneArg parses flags before and after at most one positional argument.
func parseWithOneArg(fs flagSet, args []string) (arg string, code int, done bool) {
	words, code, done := parseWithArgs(fs, args)
	switch {
	case done:
		return "", code, true
	case len(words) > 1:
		fmt.Fprintf(fs.Output(), "%s: more than one argument: %q and %q\n", fs.Name(), words[0], words[1])
		return "", 2, true
	case len(words) == 1:
		return words[0], 0, false
	}
	return "", 0, false
}

// parseWithArgs parses flags before, between and after the positional arguments, which it
// returns in order.
func parseWithArgs(fs flagSet, args []string) (words []string, code int, done bool) {
	for {
		if c, d := parseFlags(fs, args); d {
			return nil, c, true
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return words, 0, false
		}
		words, args = append(words, rest[0]), rest[1:]
	}
}

// linkFlags are the flags that put a device on a link.
type linkFlags struct {
	link, ip, mac, pcap string
	loss                float64
	window              int // -send-window; 0 (a linkFlags not from flags) is the engine's default
}

func (l *linkFlags) register(fs flagSet) {
	fs.StringVar(&l.link, "link", "", "the `LINK`: dgram:LOCAL,REMOTE (QEMU -netdev dgram: receive on LOCAL, send to REMOTE), stream:tcp:ADDR or stream:unix:PATH (QEMU -netdev stream, server=on), afpacket:IFNAME (a real adapter; root or CAP_NET_RAW)")
	fs.StringVar(&l.ip, "ip", "", "`ADDR`, softirdma's IPv4 address on the link (its RoCE GID); on a socket link it answers ARP for it; on an adapter the default is the adapter's")
	fs.StringVar(&l.mac, "mac", "", "`MAC`, softirdma's MAC address on the link (default 02:00 and the four bytes of -ip, e.g. 02:00:c0:a8:4d:01 for 192.168.77.1)")
	fs.Float64Var(&l.loss, "loss", 0, "drop this fraction of the RoCE frames received (to meet the peer's retransmissions; pingpong: up to its last SEND)")
	fs.StringVar(&l.pcap, "pcap", "", "write both directions of the link to `FILE`, a pcap")
	registerSendWindow(fs, &l.window)
}

// windowCheck is -send-window's range.
func (l *linkFlags) windowCheck() flagCheck { return sendWindowCheck(l.window) }

// registerSendWindow is -send-window, the device's engine.DeviceConfig.SendWindow, for the
// commands on a link and for hostd.
func registerSendWindow(fs flagSet, p *int) {
	fs.IntVar(p, "send-window", engine.DefaultSendWindow, fmt.Sprintf("how many packets an RC QP sends past the oldest one not yet acknowledged, 1..%d (the default is rxe's): a larger `N` keeps a link whose round trip is long busy, at the cost of more to send again when a frame is lost", engine.MaxSendWindow))
}

// sendWindowCheck is -send-window's range.
func sendWindowCheck(n int) flagCheck { return intRange("send-window", n, 1, engine.MaxSendWindow) }

// linkExample is what a missing or wrong -link is answered with.
const linkExample = "e.g. -link dgram:127.0.0.1:9002,127.0.0.1:9001 -ip 192.168.77.1 (a QEMU guest's -netdev dgram), or -link afpacket:eth0 (an adapter)"

// check says what is missing or malformed in the link flags, before anything is opened.
func (l *linkFlags) check() error {
	kind, addrs, _ := strings.Cut(l.link, ":")
	switch {
	case l.link == "":
		return fmt.Errorf("no link: give -link, %s", linkExample)
	case kind != "dgram" && kind != "stream" && kind != "afpacket":
		return fmt.Errorf("-link %q: the kinds are dgram, stream and afpacket, %s", l.link, linkExample)
	case kind == "dgram" && !strings.Contains(addrs, ","):
		return fmt.Errorf("-link dgram:LOCAL,REMOTE, got %q", l.link)
	case kind == "stream" && !strings.Contains(addrs, ":"):
		return fmt.Errorf("-link stream:tcp:ADDR or stream:unix:PATH, got %q", l.link)
	case l.ip == "" && kind != "afpacket":
		return errors.New("no -ip: give softirdma's IPv4 address on the link, its RoCE GID, e.g. -ip 192.168.77.1")
	}
	if l.ip != "" {
		if _, err := ipFlag(l.ip); err != nil {
			return err
		}
	}
	if _, err := l.macAddr(); err != nil {
		return err
	}
	if l.pcap != "" {
		// Refused here, with the flag's name, rather than found when the link opens and
		// reported as the link's failure.
		if fi, err := os.Stat(l.pcap); err == nil && fi.IsDir() {
			return fmt.Errorf("-pcap %s is a directory: give the file to write the capture to, e.g. -pcap %s", l.pcap, filepath.Join(l.pcap, "link.pcap"))
		}
	}
	return nil
}

// pcapError is a -pcap that could not be created, told apart from the link's own failures.
type pcapError struct{ err error }

func (e pcapError) Error() string { return "-pcap: " + e.err.Error() }
func (e pcapError) Unwrap() error { return e.err }

// macAddr is -mac, or without it a MAC derived from -ip. A fixed default gave two processes on
// one machine the same MAC, hence the same IPv6 link-local GID (-g 0 / -x 0), and neither could
// reach the other; distinct -ip addresses now give distinct MACs. 02 in the first byte marks the
// address locally administered and unicast, as a NIC's own must be.
func (l *linkFlags) macAddr() ([6]byte, error) {
	if l.mac == "" {
		ip, err := netip.ParseAddr(l.ip)
		if err != nil {
			return [6]byte{2, 0, 0, 0, 0, 1}, nil // no -ip: an adapter's link, which uses the adapter's MAC
		}
		b := ip.Unmap().As16()
		return [6]byte{2, 0, b[12], b[13], b[14], b[15]}, nil
	}
	hw, err := net.ParseMAC(l.mac)
	if err != nil || len(hw) != 6 {
		return [6]byte{}, fmt.Errorf("-mac %q is not a MAC address, e.g. -mac 02:00:00:00:00:01", l.mac)
	}
	// A NIC's own address is unicast: frames to a group address (the low bit of the first byte,
	// broadcast included) reach every station, and the peer's replies would too.
	switch mac := [6]byte(hw); {
	case mac[0]&1 != 0:
		return mac, fmt.Errorf("-mac %s is a multicast or broadcast address: a NIC's own MAC is unicast (an even first byte), e.g. -mac 02:00:00:00:00:01", l.mac)
	case mac == [6]byte{}:
		return mac, fmt.Errorf("-mac %s is the zero address, which no NIC has: e.g. -mac 02:00:00:00:00:01", l.mac)
	default:
		return mac, nil
	}
}

func (l *linkFlags) host(name string) (*realtime.Host, error) {
	if ifname, ok := strings.CutPrefix(l.link, "afpacket:"); ok {
		return l.adapterHost(name, ifname)
	}
	ip, err := netip.ParseAddr(l.ip)
	if err != nil {
		return nil, fmt.Errorf("-ip: %v", err)
	}
	mac, err := l.macAddr()
	if err != nil {
		return nil, err
	}
	link, err := openSocketLink(l.link)
	if err != nil {
		return nil, err
	}
	// The guest's end of the socket is an Ethernet of 1500 bytes, as QEMU's NICs are.
	cfg := realtime.HostConfig{Name: name, Link: link, MAC: mac, IP: ip, IPs: []netip.Addr{neigh.LinkLocal(mac)}, Answer: true, RxLoss: l.loss,
		ActiveMTU: activeMTU(1500)}
	return l.newHost(cfg)
}

// sendsWaitForPeer says a -link's sends can wait on its peer for as long as it likes: a stream's,
// which a peer that stops reading holds. A datagram's or an adapter's go or are dropped.
func sendsWaitForPeer(link string) bool {
	kind, _, _ := strings.Cut(link, ":")
	return kind == "stream"
}

// openSocketLink opens a -link of kind dgram or stream: QEMU's socket netdevs.
func openSocketLink(spec string) (roce.Link, error) {
	kind, addrs, _ := strings.Cut(spec, ":")
	switch kind {
	case "dgram":
		local, remote, ok := strings.Cut(addrs, ",")
		if !ok {
			return nil, fmt.Errorf("-link dgram:LOCAL,REMOTE, got %q", spec)
		}
		return qemu.ListenDgram(local, remote)
	case "stream":
		network, addr, ok := strings.Cut(addrs, ":")
		if !ok {
			return nil, fmt.Errorf("-link stream:tcp:ADDR or stream:unix:PATH, got %q", spec)
		}
		return qemu.DialStream(network, addr)
	default:
		return nil, fmt.Errorf("-link %q: use dgram:LOCAL,REMOTE or stream:NETWORK:ADDR", spec)
	}
}

// activeMTU is the port MTU rxe gives a netdev of Ethernet MTU eth (eth_mtu_int_to_enum): the
// largest IB MTU that fits with 80 bytes of headers; 1024 for 1500, 4096 for 9000.
func activeMTU(eth int) engine.MTU {
	best := engine.MTU256
	for _, m := range []engine.MTU{engine.MTU256, engine.MTU512, engine.MTU1024, engine.MTU2048, engine.MTU4096} {
		if m.Bytes() <= eth-80 {
			best = m
		}
	}
	return best
}

func (l *linkFlags) newHost(cfg realtime.HostConfig) (*realtime.Host, error) {
	if l.pcap != "" {
		f, err := os.Create(l.pcap)
		if err != nil {
			return nil, pcapError{err}
		}
		cfg.Pcap = f // closed when the process exits
	}
	cfg.SendWindow = l.window
	return realtime.NewHost(cfg)
}

// adapterHost stands the device on a real adapter: the kernel keeps the address and answers
// ARP/ND, softirdma uses its MAC and address and asks the kernel's neighbour table for peers.
func (l *linkFlags) adapterHost(name, ifname string) (*realtime.Host, error) {
	ad, err := afpacket.Lookup(ifname)
	if err != nil {
		return nil, err
	}
	ip, ok := ad.IPv4()
	if l.ip != "" {
		if ip, err = netip.ParseAddr(l.ip); err != nil {
			return nil, fmt.Errorf("-ip: %v", err)
		}
	} else if !ok {
		return nil, fmt.Errorf("%s has no IPv4 address, softirdma's GID: %s, or give softirdma one with -ip", ifname, addIPv4(ifname))
	}
	var more []netip.Addr
	for _, a := range ad.Addrs {
		if a.Is6() && a.IsLinkLocalUnicast() {
			more = append(more, a)
		}
	}
	link, err := afpacket.Open(ad, ip)
	if err != nil {
		return nil, err
	}
	cfg := realtime.HostConfig{Name: name, Link: link, MAC: ad.MAC, IP: ip, IPs: more, RxLoss: l.loss, ActiveMTU: activeMTU(ad.MTU),
		Resolve: func(peer netip.Addr) ([6]byte, bool) { return afpacket.Neighbor(ad, peer, 3*time.Second) }}
	return l.newHost(cfg)
}
