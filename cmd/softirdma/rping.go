package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"

	"github.com/softirdma/softirdma/emu/realtime"

	"github.com/softirdma/softirdma/compat/rping"
)

func init() {
	register("rping", "librdmacm's rping peer: a connection through rdma_cm, then READ/WRITE ping-pong; either side can be rping", runRping)
}

// rpingSpec is what rping's shared flags say; its -c is the client's, not connections.
var rpingSpec = cmSpec{
	port:  portFlag,
	count: cmFlag{fmt.Sprintf("pings, 0..%d; 0 until the peer stops", rping.MaxCount), 0, rping.MaxCount},
	size:  cmFlag{fmt.Sprintf("ping buffer size, %d..%d", rping.MinSize, rping.MaxSize), rping.MinSize, rping.MaxSize},
	wait:  "client: keep trying this long while nobody listens at the server's port yet; 0 tries once, as rping does",
}

func runRping(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("rping", stderr)
	var f cmFlags
	f.register(fs, rping.Defaults().Options, rpingSpec)
	server := fs.Bool("s", false, "server: listen for a client")
	client := fs.Bool("c", false, "client: connect to the server at -a")
	addr := fs.String("a", "", "the server's address (a client's peer; a server's own, which must be -ip)")
	verbose := fs.Bool("v", false, "print each ping's data")
	validate := fs.Bool("V", false, "client: check that what came back is what was sent")
	setUsage(fs, stderr,
		"usage: softirdma rping -s|-c -a ADDR -link KIND:ADDRS -ip ADDR [flags]",
		"Connects through rdma_cm and runs rping's ping-pong, e.g. with rping in a QEMU guest:",
		"  softirdma rping -s -a 192.168.77.1 -v -C 10 -link dgram:127.0.0.1:9002,127.0.0.1:9001 -ip 192.168.77.1",
	)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if code := f.check(stderr, "rping"); code != 0 {
		return code
	}
	if *server == *client {
		fmt.Fprintln(stderr, "softirdma rping: give -s (server) or -c (client)")
		return 2
	}
	a, ok := addrFlag(stderr, "rping", "a", *addr)
	if !ok {
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
	if own, err := ipFlag(f.lc.ip); err == nil && notOwn(own, "-ip") {
		return 2
	}
	f.o.Server, f.o.Addr = *server, a
	return onLink("rping", &f.lc, f.timeout, stderr, func(ctx context.Context, h *realtime.Host) int {
		if notOwn(h.Device().IP(), "the adapter's address") { // -ip not given: the adapter's own
			return 2
		}
		f.o.Listening = f.listening("rping", stderr)
		_, err := rping.Run(ctx, h.Device(), rping.Options{Options: f.o, Verbose: *verbose, Validate: *validate}, stdout)
		return cmExit("rping", "rping", stderr, err)
	})
}
