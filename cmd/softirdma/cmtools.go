package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/softirdma/softirdma/emu/realtime"

	"github.com/softirdma/softirdma/compat/cmatose"
	"github.com/softirdma/softirdma/compat/udaddy"
)

func init() {
	register("ucmatose", "librdmacm's ucmatose peer: RC connections through rdma_cm, SENDs both ways; either side can be ucmatose", runCmatose)
	register("udaddy", "librdmacm's udaddy peer: UD QPs found through rdma_cm (SIDR), datagrams both ways; either side can be udaddy", runUdaddy)
}

func runCmatose(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("ucmatose", stderr)
	var lc linkFlags
	lc.register(fs)
	d := cmatose.Defaults()
	server := fs.String("s", "", "client: the server's address (without it, a server)")
	port := fs.Int("p", int(d.Port), "port, 1..65535")
	conns := fs.Int("c", d.Connections, fmt.Sprintf("connections, 1..%d", cmatose.MaxConnections))
	count := fs.Int("C", d.Count, fmt.Sprintf("messages each way on each connection, 0..%d", cmatose.MaxCount))
	size := fs.Int("S", d.Size, fmt.Sprintf("message size, 0..%d (0 sends none)", cmatose.MaxSize))
	timeout := fs.Duration("timeout", 0, "give up after this long (0 for never)")
	wait := fs.Duration("wait", 0, "client: keep trying this long while nobody listens at the server's port yet; 0 tries once, as ucmatose does")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma ucmatose [-s SERVER] -link KIND:ADDRS -ip ADDR [flags]")
		fmt.Fprintln(stderr, "Runs ucmatose's test through rdma_cm, e.g. as the server for ucmatose -s 192.168.77.1 -c 4 in a QEMU guest:")
		fmt.Fprintln(stderr, "  softirdma ucmatose -c 4 -link dgram:127.0.0.1:9002,127.0.0.1:9001 -ip 192.168.77.1")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if code := checkFlags(stderr, "ucmatose",
		intRange("p", *port, 1, 65535),
		intRange("c", *conns, 1, cmatose.MaxConnections),
		intRange("C", *count, 0, cmatose.MaxCount),
		intRange("S", *size, 0, cmatose.MaxSize),
		atLeast("timeout", *timeout, 0),
		atLeast("wait", *wait, 0),
		floatRange("loss", lc.loss, 0, 0.5)); code != 0 {
		return code
	}
	o := cmatose.Options{Port: uint16(*port), Connections: *conns, Count: *count, Size: *size, Wait: *wait}
	if *server != "" {
		a, err := netip.ParseAddr(*server)
		if err != nil {
			fmt.Fprintf(stderr, "softirdma ucmatose: -s %q: an IP address is needed\n", *server)
			return 2
		}
		o.Addr = a
	}
	return onLink("ucmatose", &lc, *timeout, stderr, func(ctx context.Context, h *realtime.Host) int {
		if !o.Addr.IsValid() {
			o.Server, o.Addr = true, h.Device().IP()
			o.Listening = func() { fmt.Fprintf(stderr, "softirdma ucmatose: listening on %s port %d\n", o.Addr, o.Port) }
		}
		if err := cmatose.Run(ctx, h.Device(), o, stdout); err != nil {
			fmt.Fprintf(stderr, "softirdma ucmatose: %s\n", strings.TrimPrefix(err.Error(), "cmatose: "))
			return 1
		}
		return 0
	})
}

func runUdaddy(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("udaddy", stderr)
	var lc linkFlags
	lc.register(fs)
	d := udaddy.Defaults()
	server := fs.String("s", "", "client: the server's address (without it, a server on port 7174, as udaddy)")
	conns := fs.Int("c", d.Connections, fmt.Sprintf("clients' QPs, 1..%d", udaddy.MaxConnections))
	count := fs.Int("C", d.Count, fmt.Sprintf("messages each way, 0..%d", udaddy.MaxCount))
	size := fs.Int("S", d.Size, "message size, 0 (none) up to the port's active MTU")
	timeout := fs.Duration("timeout", 0, "give up after this long (0 for never)")
	wait := fs.Duration("wait", 0, "client: keep asking this long while nobody serves the port yet; 0 asks once, as udaddy does")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma udaddy [-s SERVER] -link KIND:ADDRS -ip ADDR [flags]")
		fmt.Fprintln(stderr, "Runs udaddy's test through rdma_cm's UDP port space, e.g. as the client of udaddy in a QEMU guest:")
		fmt.Fprintln(stderr, "  softirdma udaddy -s 192.168.77.2 -link dgram:127.0.0.1:9002,127.0.0.1:9001 -ip 192.168.77.1")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if code := checkFlags(stderr, "udaddy",
		intRange("c", *conns, 1, udaddy.MaxConnections),
		intRange("C", *count, 0, udaddy.MaxCount),
		intRange("S", *size, 0, 4096),
		atLeast("timeout", *timeout, 0),
		atLeast("wait", *wait, 0),
		floatRange("loss", lc.loss, 0, 0.5)); code != 0 {
		return code
	}
	o := udaddy.Options{Connections: *conns, Count: *count, Size: *size, Wait: *wait}
	if *server != "" {
		a, err := netip.ParseAddr(*server)
		if err != nil {
			fmt.Fprintf(stderr, "softirdma udaddy: -s %q: an IP address is needed\n", *server)
			return 2
		}
		o.Addr = a
	}
	return onLink("udaddy", &lc, *timeout, stderr, func(ctx context.Context, h *realtime.Host) int {
		if !o.Addr.IsValid() {
			o.Server, o.Addr = true, h.Device().IP()
			o.Listening = func() { fmt.Fprintf(stderr, "softirdma udaddy: listening on %s port %d\n", o.Addr, d.Port) }
		}
		if err := udaddy.Run(ctx, h.Device(), o, stdout); err != nil {
			fmt.Fprintf(stderr, "softirdma udaddy: %s\n", strings.TrimPrefix(err.Error(), "udaddy: "))
			return 1
		}
		return 0
	})
}
