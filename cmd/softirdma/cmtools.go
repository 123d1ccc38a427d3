package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"

	"github.com/softirdma/softirdma/compat/cmatose"
	"github.com/softirdma/softirdma/compat/udaddy"
)

func init() {
	register("ucmatose", "librdmacm's ucmatose peer: RC connections through rdma_cm, SENDs both ways; either side can be ucmatose", ucmatoseCommand.main)
	register("udaddy", "librdmacm's udaddy peer: UD QPs found through rdma_cm (SIDR), datagrams both ways; either side can be udaddy", udaddyCommand.main)
}

// cmOptions is the one options base of the peers of librdmacm's tools: cmatose.Options and
// udaddy.Options are this type, and rping.Options embeds it.
type cmOptions = cmatose.Options

// cmFlag is how a tool offers one of the flags the rdma_cm tools share: its usage, "" for a
// flag the tool has not, and the range it accepts.
type cmFlag struct {
	usage  string
	lo, hi int
}

// cmSpec is what a tool's shared flags say: -p, -c, -C and -S, and -wait's usage.
type cmSpec struct {
	port, conns, count, size cmFlag
	wait                     string
}

// cmFlags are the flags the peers of rping, ucmatose and udaddy share (the link's, -p, -c, -C,
// -S, -timeout and -wait), onto their options base.
type cmFlags struct {
	spec    cmSpec
	lc      linkFlags
	o       cmOptions
	port    int
	timeout time.Duration
}

// register registers the flags spec offers on fs, with the tool's defaults d.
func (f *cmFlags) register(fs flagSet, d cmOptions, spec cmSpec) {
	f.spec = spec
	f.lc.register(fs)
	f.port = int(d.Port)
	if spec.port.usage != "" {
		fs.IntVar(&f.port, "p", f.port, spec.port.usage)
	}
	if spec.conns.usage != "" {
		fs.IntVar(&f.o.Connections, "c", d.Connections, spec.conns.usage)
	}
	fs.IntVar(&f.o.Count, "C", d.Count, spec.count.usage)
	fs.IntVar(&f.o.Size, "S", d.Size, spec.size.usage)
	fs.DurationVar(&f.timeout, "timeout", 0, "give up after this long (0 for never)")
	fs.DurationVar(&f.o.Wait, "wait", 0, spec.wait)
}

// check checks the numbers given, in the flags' order; 0 when they are all in range.
func (f *cmFlags) check(stderr io.Writer, cmd string) int {
	var checks []flagCheck
	if s := f.spec.port; s.usage != "" {
		checks = append(checks, intRange("p", f.port, s.lo, s.hi))
	}
	if s := f.spec.conns; s.usage != "" {
		checks = append(checks, intRange("c", f.o.Connections, s.lo, s.hi))
	}
	checks = append(checks,
		intRange("C", f.o.Count, f.spec.count.lo, f.spec.count.hi),
		intRange("S", f.o.Size, f.spec.size.lo, f.spec.size.hi),
		atLeast("timeout", f.timeout, 0),
		atLeast("wait", f.o.Wait, 0),
		floatRange("loss", f.lc.loss, 0, 0.5), f.lc.windowCheck())
	if code := checkFlags(stderr, cmd, checks...); code != 0 {
		return code
	}
	f.o.Port = uint16(f.port)
	return 0
}

// listening is the line a server prints once it listens.
func (f *cmFlags) listening(cmd string, stderr io.Writer) func() {
	return func() { fmt.Fprintf(stderr, "softirdma %s: listening on %s port %d\n", cmd, f.o.Addr, f.o.Port) }
}

// portFlag is -p as the tools that have it offer it.
var portFlag = cmFlag{"port, 1..65535", 1, 65535}

// addrFlag reads the address flag -name; one that is not an IP address is reported, and ok is
// false.
func addrFlag(stderr io.Writer, cmd, name, value string) (a netip.Addr, ok bool) {
	a, err := netip.ParseAddr(value)
	if err != nil {
		fmt.Fprintf(stderr, "softirdma %s: -%s %q: an IP address is needed\n", cmd, name, value)
		return a, false
	}
	return a, true
}

// cmExit is the exit status of a run of a tool that returned err, which it reports without the
// package's name (pkg) that starts it.
func cmExit(cmd, pkg string, stderr io.Writer, err error) int {
	if err != nil {
		fmt.Fprintf(stderr, "softirdma %s: %s\n", cmd, strings.TrimPrefix(err.Error(), pkg+": "))
		return 1
	}
	return 0
}

// cmTool is ucmatose or udaddy as a command: a client given -s SERVER, a server without it.
type cmTool struct {
	name, pkg   string // the command's name, and the package's, which starts its errors
	defaults    cmOptions
	serverUsage string   // -s's
	usage       []string // the lines before the flags
	spec        cmSpec
	run         func(context.Context, *engine.Device, cmOptions, io.Writer) error
}

var ucmatoseCommand = cmTool{
	name: "ucmatose", pkg: "cmatose", defaults: cmatose.Defaults(),
	serverUsage: "client: the server's address (without it, a server)",
	usage: []string{
		"usage: softirdma ucmatose [-s SERVER] -link KIND:ADDRS -ip ADDR [flags]",
		"Runs ucmatose's test through rdma_cm, e.g. as the server for ucmatose -s 192.168.77.1 -c 4 in a QEMU guest:",
		"  softirdma ucmatose -c 4 -link dgram:127.0.0.1:9002,127.0.0.1:9001 -ip 192.168.77.1",
	},
	spec: cmSpec{
		port:  portFlag,
		conns: cmFlag{fmt.Sprintf("connections, 1..%d", cmatose.MaxConnections), 1, cmatose.MaxConnections},
		count: cmFlag{fmt.Sprintf("messages each way on each connection, 0..%d", cmatose.MaxCount), 0, cmatose.MaxCount},
		size:  cmFlag{fmt.Sprintf("message size, 0..%d (0 sends none)", cmatose.MaxSize), 0, cmatose.MaxSize},
		wait:  "client: keep trying this long while nobody listens at the server's port yet; 0 tries once, as ucmatose does",
	},
	run: cmatose.Run,
}

var udaddyCommand = cmTool{
	name: "udaddy", pkg: "udaddy", defaults: udaddy.Defaults(),
	serverUsage: "client: the server's address (without it, a server on port 7174, as udaddy)",
	usage: []string{
		"usage: softirdma udaddy [-s SERVER] -link KIND:ADDRS -ip ADDR [flags]",
		"Runs udaddy's test through rdma_cm's UDP port space, e.g. as the client of udaddy in a QEMU guest:",
		"  softirdma udaddy -s 192.168.77.2 -link dgram:127.0.0.1:9002,127.0.0.1:9001 -ip 192.168.77.1",
	},
	spec: cmSpec{
		conns: cmFlag{fmt.Sprintf("clients' QPs, 1..%d", udaddy.MaxConnections), 1, udaddy.MaxConnections},
		count: cmFlag{fmt.Sprintf("messages each way, 0..%d", udaddy.MaxCount), 0, udaddy.MaxCount},
		size:  cmFlag{"message size, 0 (none) up to the port's active MTU", 0, udaddy.MaxSize},
		wait:  "client: keep asking this long while nobody serves the port yet; 0 asks once, as udaddy does",
	},
	run: udaddy.Run,
}

func (c cmTool) main(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet(c.name, stderr)
	var f cmFlags
	f.register(fs, c.defaults, c.spec)
	server := fs.String("s", "", c.serverUsage)
	setUsage(fs, stderr, c.usage...)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if code := f.check(stderr, c.name); code != 0 {
		return code
	}
	if *server != "" {
		a, ok := addrFlag(stderr, c.name, "s", *server)
		if !ok {
			return 2
		}
		f.o.Addr = a
	}
	return onLink(c.name, &f.lc, f.timeout, stderr, func(ctx context.Context, h *realtime.Host) int {
		if !f.o.Addr.IsValid() {
			f.o.Server, f.o.Addr = true, h.Device().IP()
			f.o.Listening = f.listening(c.name, stderr)
		}
		return cmExit(c.name, c.pkg, stderr, c.run(ctx, h.Device(), f.o, stdout))
	})
}
