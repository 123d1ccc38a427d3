package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/softirdma/softirdma/emu/realtime"

	"github.com/softirdma/softirdma/compat/rping"
)

func init() {
	register("rping", "librdmacm's rping peer: a connection through rdma_cm, then READ/WRITE ping-pong; either side can be rping", runRping)
}

func runRping(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("rping", stderr)
	var o rping.Options
	var lc linkFlags
	lc.register(fs)
	server := fs.Bool("s", false, "server: listen for a client")
	client := fs.Bool("c", false, "client: connect to the server at -a")
	addr := fs.String("a", "", "the server's address (a client's peer; a server's own, which must be -ip)")
	port := fs.Int("p", 7174, "port, 1..65535")
	fs.IntVar(&o.Count, "C", 0, fmt.Sprintf("pings, 0..%d; 0 until the peer stops", rping.MaxCount))
	fs.IntVar(&o.Size, "S", 64, fmt.Sprintf("ping buffer size, %d..%d", rping.MinSize, rping.MaxSize))
	fs.BoolVar(&o.Verbose, "v", false, "print each ping's data")
	fs.BoolVar(&o.Validate, "V", false, "client: check that what came back is what was sent")
	timeout := fs.Duration("timeout", 0, "give up after this long (0 for never)")
	fs.DurationVar(&o.Wait, "wait", 0, "client: keep trying this long while nobody listens at the server's port yet; 0 tries once, as rping does")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma rping -s|-c -a ADDR -link KIND:ADDRS -ip ADDR [flags]")
		fmt.Fprintln(stderr, "Connects through rdma_cm and runs rping's ping-pong, e.g. with rping in a QEMU guest:")
		fmt.Fprintln(stderr, "  softirdma rping -s -a 192.168.77.1 -v -C 10 -link dgram:127.0.0.1:9002,127.0.0.1:9001 -ip 192.168.77.1")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if code := checkFlags(stderr, "rping",
		intRange("p", *port, 1, 65535),
		intRange("C", o.Count, 0, rping.MaxCount),
		intRange("S", o.Size, rping.MinSize, rping.MaxSize),
		atLeast("timeout", *timeout, 0),
		atLeast("wait", o.Wait, 0),
		floatRange("loss", lc.loss, 0, 0.5)); code != 0 {
		return code
	}
	if *server == *client {
		fmt.Fprintln(stderr, "softirdma rping: give -s (server) or -c (client)")
		return 2
	}
	a, err := netip.ParseAddr(*addr)
	if err != nil {
		fmt.Fprintf(stderr, "softirdma rping: -a %q: an IP address is needed\n", *addr)
		return 2
	}
	// rping's server binds -a: softirdma's is the device's own address, and peers that connect
	// to another one would find nobody.
	notOwn := func(own netip.Addr, whose string) bool {
		if !*server || a.Unmap() == own.Unmap() {
			return false
		}
		or := ""
		if _, err := ipFlag(a.String()); err == nil {
			or = fmt.Sprintf(" (or -ip %s)", a)
		}
		fmt.Fprintf(stderr, "softirdma rping: -s -a %s: a server listens on its own address, and %s is %s: give -a %s%s\n", a, whose, own, own, or)
		return true
	}
	if own, err := ipFlag(lc.ip); err == nil && notOwn(own, "-ip") {
		return 2
	}
	o.Server, o.Addr, o.Port = *server, a, uint16(*port)
	return onLink("rping", &lc, *timeout, stderr, func(ctx context.Context, h *realtime.Host) int {
		if notOwn(h.Device().IP(), "the adapter's address") { // -ip not given: the adapter's own
			return 2
		}
		o.Listening = func() { fmt.Fprintf(stderr, "softirdma rping: listening on %s port %d\n", o.Addr, o.Port) }
		if _, err := rping.Run(ctx, h.Device(), o, stdout); err != nil {
			fmt.Fprintf(stderr, "softirdma rping: %s\n", strings.TrimPrefix(err.Error(), "rping: "))
			return 1
		}
		return 0
	})
}
